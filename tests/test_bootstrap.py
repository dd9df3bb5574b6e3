"""dx.setup(): the set-up cell's second half (d2l_extras/bootstrap.py), with pip faked."""
import importlib.metadata
import re
import subprocess
import sys

import pytest

from d2l_extras import bootstrap

VERSIONS = {"torch": "2.14.1+cu130", "torchvision": "0.29.1", "numpy": "2.3.0",
            "d2l": "1.0.3", "pandas": "2.2.0", "scipy": "1.15.0"}
REQUIRES = ["torch>=2.6", "numpy>=1.26", "pandas>=2.0", "scipy>=1.11",
            'pytest; extra == "test"']


@pytest.fixture
def platform(monkeypatch):
    """A platform whose packages are VERSIONS; delete a key to make it missing."""
    versions = dict(VERSIONS)

    def version(name):
        if name not in versions:
            raise importlib.metadata.PackageNotFoundError(name)
        return versions[name]

    monkeypatch.setattr(bootstrap.metadata, "version", version)
    monkeypatch.setattr(bootstrap.metadata, "requires", lambda name: REQUIRES)
    return versions


class FakePip:
    """Records each pip call and the constraint file it was given."""

    def __init__(self, returncode=0):
        self.calls, self.kept, self.returncode = [], None, returncode

    def __call__(self, args):
        self.calls.append(list(args))
        if "-c" in args:
            with open(args[args.index("-c") + 1]) as f:
                self.kept = f.read().splitlines()
        return subprocess.CompletedProcess(args, self.returncode, "pip out", "no network")


def test_setup_installs_nothing_when_all_is_there(platform, capsys):
    pip = FakePip()
    bootstrap.setup(pip)
    assert pip.calls == []
    assert capsys.readouterr().out == ""


def test_setup_installs_what_is_missing_keeping_the_platforms_torch(platform, capsys):
    del platform["pandas"], platform["d2l"]
    pip = FakePip()
    bootstrap.setup(pip)
    assert pip.calls[0][-1] == "pandas>=2.0" and pip.calls[1] == \
        ["install", "-q", "--no-deps", "d2l==1.0.3"]
    assert pip.kept == ["torch==2.14.1+cu130", "torchvision==0.29.1", "numpy==2.3.0"]
    assert capsys.readouterr().out == \
        "Installed d2l 1.0.3, pandas for d2l_extras; kept torch 2.14.1+cu130\n"


def test_setup_says_what_to_do_when_pip_fails(platform, capsys):
    del platform["scipy"]
    with pytest.raises(RuntimeError, match=r"is the internet on\? \(Kaggle: Settings > Internet"):
        bootstrap.setup(FakePip(returncode=1))
    assert "no network" in capsys.readouterr().out


@pytest.mark.parametrize("version", ["2.5.1", "1.13.0+cu117", None])
def test_setup_says_what_to_do_with_an_old_or_no_torch(platform, version):
    platform.pop("torch")
    if version:
        platform["torch"] = version
    wanted = re.escape(f"torch {version or 'none'}: we need 3.11+ and 2.6+ (%pip install -U")
    with pytest.raises(RuntimeError, match=wanted):
        bootstrap.setup(FakePip())


def test_setup_says_what_to_do_with_an_old_python(platform, monkeypatch):
    monkeypatch.setattr(sys, "version_info", (3, 9, 18, "final", 0))
    monkeypatch.setattr(sys, "version", "3.9.18 (main)")
    with pytest.raises(RuntimeError, match=r"Python 3.9.18, torch 2.14.1\+cu130: we need 3.11\+"):
        bootstrap.setup(FakePip())


def test_a_checkout_on_the_path_leaves_requirements_to_check_env(platform, monkeypatch):
    def requires(name):
        raise importlib.metadata.PackageNotFoundError(name)
    monkeypatch.setattr(bootstrap.metadata, "requires", requires)
    assert bootstrap.missing_requirements() == []
