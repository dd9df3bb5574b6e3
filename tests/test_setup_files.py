"""The set-up files agree with each other: one list of pins, used everywhere."""
import os
import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).parents[1]


def pins(name):
    lines = (ROOT / name).read_text().splitlines()
    return [l.strip() for l in lines if l.strip() and not l.lstrip().startswith("#")]


def test_every_requirement_is_pinned():
    for req in pins("requirements.txt") + pins("requirements-nodeps.txt"):
        assert re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[\w.+]+", req), f"not pinned: {req}"


def test_every_folder_of_the_package_is_listed_for_setuptools():
    # A folder left out ships nothing (or only with a page of warnings at every install).
    import tomllib
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {".".join(p.relative_to(ROOT).parts) for p in (ROOT / "d2l_extras").rglob("*")
               if p.is_dir() and p.name != "__pycache__"}
    assert set(listed["packages"]) == {"d2l_extras"} | folders
    for name in folders:
        assert listed["package-data"][name], f"{name}: which files does it ship?"


def test_conda_environment_uses_the_same_pins():
    env = (ROOT / "environment.yml").read_text()
    assert "-r requirements.txt" in env and "requirements-nodeps.txt" in env


def test_readme_and_ci_use_the_same_test_command():
    readme, ci = (ROOT / "README.md").read_text(), (ROOT / ".ci" / "run").read_text()
    assert "make test" in readme.split("\n## ")[0], "the README's top names `make test`"
    assert "make lab" in readme.split("\n## ")[0], "the README's top names `make lab`"
    assert re.search(r"^make test$", ci, re.M) and "D2L_PROFILE=ci" in ci


def make_dry_run(*args):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    # Under `make test` this runs inside make: drop what the outer make passes down.
    inherited = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "USE_CURRENT_ENV", "TESTS")
    env = {k: v for k, v in os.environ.items() if k not in inherited}
    run = subprocess.run(["make", "--no-print-directory", "-n", *args], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout


@pytest.mark.parametrize("target", ["test", "lab", "report", "unit", "notebooks"])
def test_current_env_option_uses_that_python_and_creates_no_venv(target):
    plan = make_dry_run(target, "USE_CURRENT_ENV=1", "PYTHON=/opt/env/bin/python")
    assert ".venv" not in plan and "pip install" not in plan, plan
    check = "test" if target in ("unit", "notebooks") else target
    assert plan.startswith(f"/opt/env/bin/python -m tools.check_env {check}\n"), plan
    assert "/opt/env/bin/python -m " + ("jupyter lab" if target == "lab" else
                                         "tools.report" if target == "report" else "pytest") in plan


def test_make_compat_runs_nox_with_its_python_and_arguments():
    plan = make_dry_run("compat", "USE_CURRENT_ENV=1", "PYTHON=/opt/env/bin/python",
                        "COMPAT_PYTHON=python3.13", "COMPAT_ARGS=-s torch-2.6")
    command = 'COMPAT_PYTHON="python3.13" /opt/env/bin/python -m nox -s torch-2.6'
    assert plan.splitlines()[-1] == command, plan


def test_the_current_env_option_is_documented():
    readme = (ROOT / "README.md").read_text()
    assert "make test USE_CURRENT_ENV=1" in readme and "USE_CURRENT_ENV ?=" in \
        (ROOT / "Makefile").read_text()
    assert "make report" in readme.split("\n## ")[0] and "build/report/" in readme


def test_check_env_lists_everything_missing_with_the_pinned_install():
    from tools import check_env
    absent = {"nbval", "d2l"}
    missing, other = check_env.problems("test", find=lambda m: None if m in absent else object(),
                                        version=lambda d: "2.11.0+cu128", python=(3, 12))
    assert missing == ["d2l", "nbval"] and other == []
    advice = check_env.advice(missing, python="/env/bin/python")
    assert "/env/bin/python -m pip install nbval==" in advice
    assert "/env/bin/python -m pip install --no-deps d2l==1.0.3" in advice  # d2l's own pins break


def test_check_env_refuses_old_torch_and_old_python():
    from tools import check_env
    missing, other = check_env.problems("run", find=lambda m: object(),
                                        version=lambda d: "2.5.1", python=(3, 10))
    assert missing == [] and len(other) == 2
    assert "Python 3.10 is too old" in other[0] and "torch 2.5.1 is too old" in other[1]
    assert check_env.problems("lab", find=lambda m: object(), version=lambda d: "2.6.0",
                              python=(3, 11)) == ([], [])
    assert check_env.version_tuple("2.11.0+cu128") == (2, 11, 0)
    with pytest.raises(ValueError, match="unknown target 'bench'"):
        check_env.problems("bench")
