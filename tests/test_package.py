"""The package re-exports every public name, and its worker modules run without warnings."""
import subprocess
import sys

import pytest

import d2l_extras as dx


@pytest.mark.parametrize("name", dx.__all__)
def test_every_export_resolves(name):
    assert getattr(dx, name) is not None


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        dx.nope


def test_dir_lists_the_exports():
    assert set(dx.__all__) <= set(dir(dx))


def test_worker_module_runs_without_runpy_warning():
    out = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", "d2l_extras.ring",
                          "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "usage" in out.stdout, out.stderr


def test_modules_are_reachable_as_attributes():
    assert dx.kvstore.KVStore is dx.KVStore and "ring" in dir(dx)
