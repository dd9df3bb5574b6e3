"""A notebook runs from its own file on a hosted platform (issue 17): tools/hosted.py, noxfile.py.

The last test does what a student on Colab does: a notebook alone in an empty folder, in an
environment with torch, torchvision, ipykernel and nbclient only, its set-up cell installing the
project with %pip (from this checkout, through D2L_EXTRAS_SOURCE). make compat's hosted session
runs it on every notebook (D2L_HOSTED_NOTEBOOKS=all; or numbers: "00 06").
"""
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from IPython.core.inputtransformer2 import TransformerManager

from d2l_extras import bootstrap
import nbval_plugin
from tools import hosted, nbmeta

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
INFO = {"url": "https://github.com/me/proj", "repo": "me/proj", "tag": "v9.1"}


def source(cell):
    return "".join(cell["source"])


# ---------------------------------------------------------------- one address

def test_address_and_tag_come_from_pyproject():
    import tomllib
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    info = hosted.project()
    assert info["url"] == meta["urls"]["Repository"] and info["tag"] == "v" + meta["version"]


def test_an_address_that_is_not_github_is_refused(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nversion = "1.0"\n[project.urls]\nRepository = "https://gitlab.com/a/b"\n')
    monkeypatch.setattr(hosted, "ROOT", tmp_path)
    with pytest.raises(ValueError, match="must be https://github.com/OWNER/NAME"):
        hosted.project()


def test_badges_open_the_notebook_at_the_release_tag():
    md = hosted.badges("notebooks/05-x.ipynb", INFO)
    links = re.findall(r"\]\((https://[^)]+)\)\]\((https://[^)]+)\)", md)
    assert len(links) == 3
    for (image, target), host in zip(links, ("colab", "kaggle", "studiolab")):
        assert host in image and host in target
        assert target.endswith("me/proj/blob/v9.1/notebooks/05-x.ipynb"), target


# ---------------------------------------------------------------- the notebooks carry it all

@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_notebook_carries_badges_setup_metadata_and_its_figures(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    cells = nb["cells"]
    assert source(cells[1]) == hosted.badges(f"notebooks/{path.name}"), "badges under the title"
    setup = next(c for c in cells if c["cell_type"] == "code")
    assert source(setup) == hosted.setup_source(), "the set-up cell is the first code cell"
    for key, value in hosted.PLATFORM_METADATA.items():
        assert nb["metadata"][key] == value
    for i, cell in enumerate(cells):
        if cell["cell_type"] == "markdown":
            for link in re.findall(r"!\[[^\]]*\]\(([^)\s]+)", source(cell)):
                assert link.startswith(("data:image/png;base64,", "https://")), \
                    f"cell {i} links {link[:40]}: a lone notebook would not show it"


def test_embedded_figures_are_the_files_in_images():
    import base64
    seen = set()
    for path in NOTEBOOKS:
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            names = cell.get("metadata", {}).get("figures", [])
            datas = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", source(cell))
            assert len(names) == len(datas)
            for name, data in zip(names, datas):
                assert base64.b64decode(data) == (hosted.IMAGES / name).read_bytes(), \
                    f"{path.name}: {name} is stale (run: python tools/nbmeta.py {path})"
                seen.add(name)
    assert seen == {p.name for p in hosted.IMAGES.glob("*.png")}, "every figure is shown"


def test_embed_figures_converts_a_link_then_refreshes_from_the_file(tmp_path):
    (tmp_path / "a.png").write_bytes(b"first")
    cell = {"cell_type": "markdown", "metadata": {}, "source": "Text\n\n![A](../images/a.png)"}
    hosted.embed_figures(cell, tmp_path)
    assert cell["metadata"]["figures"] == ["a.png"]
    assert source(cell) == "Text\n\n![A](data:image/png;base64,Zmlyc3Q=)"
    (tmp_path / "a.png").write_bytes(b"second")
    hosted.embed_figures(cell, tmp_path)
    assert source(cell).endswith("(data:image/png;base64,c2Vjb25k)")


def test_embed_figures_names_a_missing_file(tmp_path):
    cell = {"cell_type": "markdown", "metadata": {}, "source": "![A](../images/nope.png)"}
    with pytest.raises(ValueError, match="figure nope.png is not in"):
        hosted.embed_figures(cell, tmp_path)


def test_embed_figures_keeps_the_source_type_and_leaves_other_links(tmp_path):
    (tmp_path / "x.png").write_bytes(b"first")
    stored = {"cell_type": "markdown", "metadata": {}, "source": ["![A](../images/x.png)\n"]}
    node = {"cell_type": "markdown", "metadata": {}, "source": "![A](../images/x.png)\n"}
    for cell in (stored, node):
        hosted.embed_figures(cell, tmp_path)
    assert stored["source"] == ["![A](data:image/png;base64,Zmlyc3Q=)\n"]
    assert node["source"] == "![A](data:image/png;base64,Zmlyc3Q=)\n"
    other = "![x](../../../../etc/hostname) ![y](https://a/b.png)"
    cell = {"cell_type": "markdown", "metadata": {}, "source": other}
    hosted.embed_figures(cell, tmp_path)
    assert cell["source"] == other and "figures" not in cell["metadata"]


def test_source_text_joins_stored_lines_and_keeps_text():
    assert hosted.source_text({"source": ["a\n", "b"]}) == "a\nb"
    assert hosted.source_text({"source": "a\nb"}) == "a\nb"
    assert hosted.source_text({}) == ""


def test_title_of_takes_the_first_markdown_heading():
    stored = {"cells": [{"cell_type": "code", "source": ["# a comment"]},
                        {"cell_type": "markdown", "source": ["Intro\n", "# The title\n"]}]}
    assert hosted.title_of(stored) == "The title"
    assert hosted.title_of({"cells": [{"cell_type": "markdown", "source": "## Sub\n"}]}) == "Sub"
    assert hosted.title_of({"cells": [{"cell_type": "markdown", "source": "no heading"}]}) == ""


def test_apply_adds_the_cells_once_and_keeps_the_rest():
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": {"name": "k"}},
          "cells": [{"cell_type": "markdown", "id": "t", "metadata": {}, "source": ["# Title"]},
                    {"cell_type": "code", "id": "c", "metadata": {}, "source": ["1 + 1"],
                     "outputs": [], "execution_count": None}]}
    once = json.loads(json.dumps(hosted.apply(nb, "notebooks/x.ipynb", INFO)))
    assert [c["id"] for c in once["cells"]] == ["t", "launch", "setup", "c"]
    assert once["metadata"]["kernelspec"] == {"name": "k"}
    assert hosted.apply(json.loads(json.dumps(once)), "notebooks/x.ipynb", INFO) == once


def test_only_the_repositorys_notebooks_get_badges(tmp_path):
    assert nbmeta.repo_path(tmp_path / "x.ipynb") is None
    assert nbmeta.repo_path(NOTEBOOKS[0]) == f"notebooks/{NOTEBOOKS[0].name}"


# ---------------------------------------------------------------- the set-up cell, offline

class FakeShell:
    """get_ipython() for the set-up cell: records %pip lines; 'installs' by making specs appear."""

    def __init__(self, installed):
        self.installed, self.lines = installed, []

    def run_line_magic(self, name, line, _stack_depth=1):
        assert name == "pip"
        frame = sys._getframe(_stack_depth)
        namespace = {**frame.f_globals, **frame.f_locals}
        self.lines.append(line.format(**namespace))  # IPython expands {name} the same way
        self.installed.add("d2l_extras")


def run_setup(monkeypatch, installed, env=None):
    """Run the set-up cell; dx.setup() is recorded, not run (tests/test_bootstrap.py tests it)."""
    import d2l_extras as dx
    real_find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: (
        (importlib.machinery.ModuleSpec(name, None) if name in installed else None)
        if name == "d2l_extras" else real_find(name, *args)))
    calls = []
    monkeypatch.setattr(dx, "setup", lambda: calls.append("setup"), raising=False)
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    shell = FakeShell(installed)
    code = TransformerManager().transform_cell(hosted.setup_source())
    exec(compile(code, "<setup>", "exec"), {"get_ipython": lambda: shell})
    return shell, calls


def test_setup_installs_nothing_where_the_project_imports(monkeypatch, capsys):
    shell, calls = run_setup(monkeypatch, {"d2l_extras"})
    assert shell.lines == [] and calls == ["setup"] and capsys.readouterr().out == ""


def test_setup_installs_the_project_alone_so_torch_stays(monkeypatch):
    shell, calls = run_setup(monkeypatch, set(), env={"D2L_EXTRAS_SOURCE": "/src/checkout"})
    assert shell.lines == ['install -q --no-deps --ignore-requires-python "/src/checkout"']
    assert calls == ["setup"], "then dx.setup() checks versions and installs the rest"


def test_setup_installs_the_release_by_default(monkeypatch):
    monkeypatch.delenv("D2L_EXTRAS_SOURCE", raising=False)
    shell, _ = run_setup(monkeypatch, set())
    info = hosted.project()
    assert shell.lines[0].endswith(f'"{info["url"]}/archive/{info["tag"]}.zip"')


def test_setup_cell_fits_six_lines_of_a_slide():
    lines = hosted.setup_source().splitlines()
    assert len(lines) <= 6 and max(map(len, lines)) <= 80


def test_readme_badges_are_generated_from_the_same_address():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert hosted.update_readme(text, NOTEBOOKS) == text, \
        "run: python tools/nbmeta.py notebooks/*.ipynb"
    with pytest.raises(ValueError, match="has no <!-- launch badges: start -->"):
        hosted.update_readme("# no block", NOTEBOOKS)


# ---------------------------------------------------------------- make compat (noxfile.py)

@pytest.fixture
def noxfile():
    pytest.importorskip("nox", reason="make compat runs nox (requirements.txt)")
    import noxfile
    return noxfile


def test_nox_sessions_cover_each_torch_and_the_hosted_stack(noxfile):
    from tools.check_env import MIN_TORCH
    found = noxfile.sessions({"TESTS": "tests/test_timing.py"})
    assert list(found) == ["torch-2.6", "torch-2.11", "torch-newest", "hosted"]
    assert "torch-%d.%d" % MIN_TORCH in found, "test the oldest torch we claim"
    assert found["torch-2.6"][1] == {"TESTS": "tests/test_timing.py"}, "TESTS reaches make test"
    assert found["hosted"][1] == {"D2L_HOSTED_NOTEBOOKS": "all",
                                  "TESTS": "tests/test_hosted.py -k lone_notebook_runs"}
    picked = noxfile.sessions({"COMPAT_TORCH": "2.8", "D2L_HOSTED_NOTEBOOKS": "00 06"})
    assert list(picked) == ["torch-2.8", "hosted"] and picked["torch-2.8"][0][0] == "torch==2.8.*"
    assert picked["torch-2.8"][1] == {"TESTS": None}, "None: nox unsets it, make takes its own"
    assert picked["hosted"][1]["D2L_HOSTED_NOTEBOOKS"] == "00 06"
    assert {"PYTHONPATH", "MAKEFLAGS", "MAKEOVERRIDES"} <= set(noxfile.OUTER)


def test_find_python_takes_a_runnable_interpreter_else_pyenvs(noxfile, tmp_path):
    assert noxfile.find_python(sys.executable, tmp_path) == sys.executable
    # A name on PATH that does not run (a pyenv shim) loses to pyenv's own copy, which runs.
    shim = tmp_path / "shims" / "python9.9"
    copy = tmp_path / "pyenv" / "versions" / "9.9.1" / "bin" / "python9.9"
    for path, body in ((shim, "exit 127"), (copy, f'exec "{sys.executable}" "$@"')):
        path.parent.mkdir(parents=True)
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", f"{shim.parent}{os.pathsep}{os.environ['PATH']}")
        assert noxfile.find_python("python9.9", tmp_path / "pyenv") == str(copy)
        copy.unlink()
        assert noxfile.find_python("python9.9", tmp_path / "pyenv") == "python9.9"


def test_torch_requirements_pin_torch_and_keep_the_rest(noxfile):
    reqs = noxfile.torch_requirements("2.6")
    assert reqs[:3] == ["torch==2.6.*", "torchvision", "uv"]
    assert not any(r.startswith(("torch==2.14", "torchvision==")) for r in reqs)
    assert any(r.startswith("nbval==") for r in reqs)
    assert noxfile.torch_requirements("newest")[:2] == ["torch", "torchvision"]
    assert noxfile.torch_requirements("2.11.0")[0] == "torch==2.11.0"
    with pytest.raises(ValueError, match="give a release such as 2.6"):
        noxfile.torch_requirements("latest; rm -rf /")


# ---------------------------------------------------------------- a lone notebook, for real

# Part of what Colab and Kaggle ship beside torch. The set-up cell installs d2l_extras, d2l
# and requests (which they have too: left out so that one requirement goes through pip for
# real). make compat's hosted session (D2L_HOSTED_NOTEBOOKS) uses the bare stack instead,
# where the set-up cell installs them all.
COLAB = ("matplotlib", "pandas", "scipy", "scikit-learn")
PIP_NOTE = "Note: you may need to restart the kernel"  # what %pip prints after an install
# What uv and pip print when no package index can be reached (no network, no DNS, no proxy).
_OFFLINE = re.compile(r"dns error|Temporary failure in name resolution|Network is unreachable|"
                      r"tcp connect error|Connection refused|No route to host|"
                      r"Failed to establish a new connection", re.IGNORECASE)


def hosted_notebooks() -> list[Path]:
    """D2L_HOSTED_NOTEBOOKS: 'all' or numbers ('00 06'); by default the one nbval runs first."""
    chosen = os.environ.get("D2L_HOSTED_NOTEBOOKS", "").split()
    if not chosen:
        return [ROOT / "notebooks" / nbval_plugin.LONE_NOTEBOOK]
    return [p for p in NOTEBOOKS if chosen == ["all"] or p.name[:2] in chosen]


def hosted_requirements(shipped: tuple[str, ...] = ()) -> list[str]:
    """A hosted platform's stack: this interpreter's torch, torchvision and `shipped` packages."""
    return [f"{name}=={importlib.metadata.version(name).split('+')[0]}"
            for name in ("torch", "torchvision", *shipped)] + ["ipykernel", "nbclient"]


def package_copy(dest: Path) -> Path:
    """A copy of what pip needs to install d2l_extras, so the install writes nothing here."""
    shutil.copytree(ROOT / "d2l_extras", dest / "d2l_extras",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def hosted_environ(source: Path) -> dict:
    """The environment of a hosted run: the ci profile, nothing of this checkout on the path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "D2L_PROFILE": "ci", "D2L_EXTRAS_SOURCE": str(source),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def run_alone(python: Path, notebook: Path, work: Path, env: dict) -> Path:
    """Copy `notebook` alone into the empty folder `work`, execute it there; return the copy."""
    work.mkdir(parents=True, exist_ok=True)
    if any(work.iterdir()):
        raise ValueError(f"{work} is not empty: a lone notebook runs in an empty folder")
    lone = Path(shutil.copy2(notebook, work / notebook.name))
    # nbclient's jupyter-execute, in a kernel of the hosted environment's own Python
    run = subprocess.run([str(python), "-c", "from nbclient.cli import main; main()", "--inplace",
                          "--allow-errors", "--timeout=900", lone.name], cwd=work, env=env,
                         capture_output=True, text=True, timeout=1200)
    if run.returncode:
        raise RuntimeError(f"running {notebook.name} alone failed:\n{run.stdout}\n{run.stderr}")
    return lone


def outputs_text(cell: dict) -> str:
    """Everything a cell printed (streams, text results, errors)."""
    parts = []
    for out in cell.get("outputs", []):
        text = out.get("text") or out.get("data", {}).get("text/plain", "")
        parts.append("".join(text) if isinstance(text, list) else text)
        if out.get("output_type") == "error":
            parts.append(f"{out.get('ename')}: {out.get('evalue')}")
    return "".join(parts)


def picture_cells(executed: Path) -> set[int]:
    """The indices of the cells of an executed notebook that show a picture."""
    nb = json.loads(executed.read_text(encoding="utf-8"))
    return {i for i, cell in enumerate(nb["cells"]) for out in cell.get("outputs", [])
            if any(key.startswith("image/") for key in out.get("data", {}))}


def lone_run_problems(executed: Path, reference: Path, installs: int = 1) -> list[str]:
    """What is wrong with a notebook run alone: errors, the install line printed other than
    `installs` times (1 in a new environment, 0 once it is installed), anything else the set-up
    cell prints (a warning of pip or setuptools), a picture that the `reference` run (the same
    notebook run in the checkout) shows and this one does not, and a Markdown figure that a lone
    notebook lacks."""
    nb = json.loads(executed.read_text(encoding="utf-8"))
    problems, printed = [], 0
    setup = next((c for c in nb["cells"] if c["cell_type"] == "code"), {})
    noise = [line for line in outputs_text(setup).splitlines() if line.strip()
             and bootstrap.DONE not in line and not line.startswith(PIP_NOTE)]
    if noise:
        problems.append(f"the set-up cell printed more than its line: {noise[0].strip()[:200]}")
    for i, cell in enumerate(nb["cells"]):
        text = outputs_text(cell)
        printed += text.count(bootstrap.DONE)
        if any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
            problems.append(f"cell {i} failed: {text.strip().splitlines()[-1][:300]}")
        if cell["cell_type"] == "markdown":
            for link in re.findall(r"!\[[^\]]*\]\(([^)\s]+)", hosted.source_text(cell)):
                if not link.startswith(("data:image/", "https://")):
                    problems.append(f"cell {i} shows {link}, which a lone notebook lacks")
    for i in sorted(picture_cells(reference) - picture_cells(executed)):
        problems.append(f"cell {i} shows no picture (it does in the checkout)")
    if printed != installs:
        problems.append(f"the install line was printed {printed} times, not {installs}")
    return problems


def executed(cells):
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def out(text):
    return {"output_type": "stream", "name": "stdout", "text": text}


def test_lone_run_problems_finds_errors_missing_pictures_and_links(tmp_path):
    picture = {"output_type": "display_data", "data": {"image/svg+xml": "<svg/>"}}
    ref = tmp_path / "ref.ipynb"
    ref.write_text(json.dumps(executed([
        {"cell_type": "code", "source": "setup", "outputs": []},
        {"cell_type": "code", "source": "plt.plot([1])", "outputs": [picture]}])))
    path = tmp_path / "nb.ipynb"
    said = [out(PIP_NOTE + " to use updated packages.\n"), out(bootstrap.DONE)]
    good = [{"cell_type": "code", "source": "setup", "outputs": said},
            {"cell_type": "code", "source": "plt.plot([1])", "outputs": [picture]}]
    path.write_text(json.dumps(executed(good)))
    assert lone_run_problems(path, ref) == []
    assert lone_run_problems(path, ref, installs=0) == \
        ["the install line was printed 1 times, not 0"]
    warning = "  setuptools: BuildBackendWarning: Package 'x.y' is absent\n"
    good[0]["outputs"].insert(0, out(warning))
    path.write_text(json.dumps(executed(good)))
    assert lone_run_problems(path, ref) == [
        "the set-up cell printed more than its line: setuptools: BuildBackendWarning: Package "
        "'x.y' is absent"]
    bad = [{"cell_type": "code", "source": "setup", "outputs": []},
           {"cell_type": "code", "source": "plt.plot([1])", "outputs": []},
           {"cell_type": "markdown", "source": "![x](../images/x.png)"},
           {"cell_type": "code", "source": "1/0", "outputs": [
               {"output_type": "error", "ename": "ZeroDivisionError", "evalue": "division"}]}]
    path.write_text(json.dumps(executed(bad)))
    assert lone_run_problems(path, ref) == [
        "cell 2 shows ../images/x.png, which a lone notebook lacks",
        "cell 3 failed: ZeroDivisionError: division",
        "cell 1 shows no picture (it does in the checkout)",
        "the install line was printed 0 times, not 1"]


def test_run_alone_wants_an_empty_folder(tmp_path):
    (tmp_path / "other.txt").write_text("x")
    with pytest.raises(ValueError, match="is not empty"):
        run_alone(Path(sys.executable), NOTEBOOKS[0], tmp_path, {})


def test_hosted_stack_pins_this_torch_and_what_the_platform_ships(tmp_path):
    reqs = hosted_requirements(("pandas",))
    assert reqs[0].startswith("torch==") and "+" not in reqs[0]
    assert reqs[1:3] == [f"{n}=={importlib.metadata.version(n).split('+')[0]}"
                         for n in ("torchvision", "pandas")]
    assert reqs[3:] == ["ipykernel", "nbclient"]
    copy = package_copy(tmp_path / "src")
    assert (copy / "pyproject.toml").is_file() and (copy / "d2l_extras" / "__init__.py").is_file()
    assert not list(copy.rglob("__pycache__"))


@pytest.fixture(scope="module")
def hosted_python(tmp_path_factory) -> Path:
    """A new environment with the hosted stack (and pip, as hosted platforms have), or a skip."""
    uv = ([shutil.which("uv")] if shutil.which("uv") else
          [sys.executable, "-m", "uv"] if importlib.util.find_spec("uv") else None)
    if uv is None:
        pytest.skip("uv is not installed (make installs it in .venv)")
    env = tmp_path_factory.mktemp("hosted") / "env"
    python = env / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    shipped = () if os.environ.get("D2L_HOSTED_NOTEBOOKS") else COLAB
    for args in (["venv", "--seed", "--quiet", "--python", sys.executable, str(env)],
                 ["pip", "install", "--quiet", "--python", str(python),
                  *hosted_requirements(shipped)]):
        run = subprocess.run([*uv, *args], capture_output=True, text=True, timeout=1800)
        log = run.stdout + run.stderr
        why = next((line.strip() for line in log.splitlines() if _OFFLINE.search(line)), None)
        if run.returncode and why:  # a GPU machine or a laptop offline: nothing to install from
            pytest.skip(f"no package index answers ({why}): a hosted stack cannot be built")
        assert run.returncode == 0, f"could not build the hosted environment:\n{log[-3000:]}"
    return python


@pytest.mark.parametrize("notebook", hosted_notebooks(), ids=lambda p: p.name)
def test_a_lone_notebook_runs_on_a_hosted_stack(notebook, hosted_python, tmp_path):
    env = hosted_environ(package_copy(tmp_path / "source"))
    # One environment for all: the first notebook installs the project, the others find it.
    found = subprocess.run([str(hosted_python), "-c", "import d2l_extras"], cwd=tmp_path, env=env,
                           capture_output=True).returncode == 0
    installs = 0 if found else 1
    lone = run_alone(hosted_python, notebook, tmp_path / "alone", env)
    # The checkout's run: nbval's (make test runs this notebook first), else its own.
    kept = nbval_plugin.executed_folder([notebook])
    reference = kept / notebook.name if kept else tmp_path / "checkout" / notebook.name
    if not kept:
        from tools.report import execute_notebook
        error = execute_notebook(notebook, reference, {**os.environ, "D2L_PROFILE": "ci"}, 900)
        assert error is None, f"{notebook.name} fails in the checkout too: {error}"
    if notebook.name == nbval_plugin.LONE_NOTEBOOK:
        assert picture_cells(reference), "the reference run shows pictures"
    assert lone_run_problems(lone, reference, installs) == []
    # Every picture is in the page rendered from the lone notebook.
    import nbformat
    from nbconvert import HTMLExporter
    page, _ = HTMLExporter().from_notebook_node(nbformat.read(lone, as_version=4))
    sources = re.findall(r"<img[^>]*\ssrc=\"([^\"]+)\"", page)
    assert sum(s.startswith("data:image/") for s in sources) >= len(picture_cells(lone))
    assert {s for s in sources if not s.startswith("data:")} == \
        {image for _, image, _ in hosted.PLATFORMS}
    # A second run installs nothing and prints nothing.
    setup = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(hosted.setup_source())])
    nbformat.write(setup, tmp_path / "setup.ipynb")
    rerun = run_alone(hosted_python, tmp_path / "setup.ipynb", tmp_path / "again", env)
    assert json.loads(rerun.read_text())["cells"][0]["outputs"] == []
