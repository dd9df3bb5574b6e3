"""The package re-exports every public name, and its worker modules run without warnings."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import d2l_extras as dx

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from tools import save  # noqa: E402

from d2l_extras import _saved  # noqa: E402


def test_every_export_resolves():
    missing = [name for name in dx.__all__ if getattr(dx, name, None) is None]
    assert not missing, f"exported but not defined: {missing}"


def _callers() -> dict[str, str]:
    """Source of what uses the package: notebooks' code cells, images, benchmarks, tools."""
    files = {p: p.read_text(encoding="utf-8") for folder in ("images", "benchmarks", "tools")
             for p in (ROOT / folder).glob("*.py")}
    for path in (ROOT / "notebooks").glob("*.ipynb"):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        files[path] = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return files


def test_the_exports_are_what_notebooks_and_tools_call():
    used = {name for text in _callers().values() for name in re.findall(r"\bdx\.(\w+)", text)}
    modules = set(dx.__dir__()) - set(dx.__all__)
    assert used - set(dx.__all__) - modules == set(), "used but not exported: export them"
    # a notebook's #@save names are exported as the book's d2l exports them, used or not
    unused = set(dx.__all__) - used - set(_saved.NAMES)
    assert unused == set(), "exported but used by no notebook or tool: keep " \
        "them in their module (tests reach them as dx.MODULE.NAME)"


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
    assert dx.ring.bus_bandwidth is dx.bus_bandwidth and "kvstore" in dir(dx)


def test_contributing_maps_every_module_and_its_names():
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text.split("## Where things live", 1)[1].split("\n## ", 1)[0]
    entries = re.findall(r"^- `(\w+)\.py`: (.*(?:\n  .*)*)", section, flags=re.M)
    listed = [module for module, _ in entries]
    generated = {p.stem for p in save.generated()}  # their source is the notebooks (make lib)
    modules = sorted(p.stem for p in (ROOT / "d2l_extras").glob("*.py")
                     if not p.stem.startswith("_") and p.stem not in generated)
    assert sorted(listed) == modules, "list each hand-written module of d2l_extras once in CONTRIBUTING.md"
    for module, line in entries:
        names = re.findall(r"`(\w+)`", line.split(":", 1)[1])
        assert names, f"{module}.py: name what to look for there"
        source = (ROOT / "d2l_extras" / f"{module}.py").read_text(encoding="utf-8")
        for name in names:
            assert re.search(rf"^(def|class) {name}\b|^{name}\b.*=", source, flags=re.M), \
                f"CONTRIBUTING.md says {module}.py defines {name}; it does not"
