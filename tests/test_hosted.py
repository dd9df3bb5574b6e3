"""A notebook runs from its own file on a hosted platform (issue 17): tools/hosted.py, tools/compat.py.

The last test does what a student on Colab does: a notebook alone in an empty folder, in an
environment with torch, torchvision, ipykernel and nbclient only, its set-up cell installing the
project with %pip (from this checkout, through D2L_EXTRAS_SOURCE).
"""
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from IPython.core.inputtransformer2 import TransformerManager

import nbval_plugin
from tools import compat, hosted, nbmeta

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


# ---------------------------------------------------------------- make compat's pieces

def test_find_python_takes_a_runnable_interpreter_else_pyenvs(tmp_path):
    assert compat.find_python(sys.executable, tmp_path) == sys.executable
    # A name on PATH that does not run (a pyenv shim) loses to pyenv's own copy, which runs.
    shim = tmp_path / "shims" / "python9.9"
    copy = tmp_path / "pyenv" / "versions" / "9.9.1" / "bin" / "python9.9"
    for path, body in ((shim, "exit 127"), (copy, f'exec "{sys.executable}" "$@"')):
        path.parent.mkdir(parents=True)
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", f"{shim.parent}{os.pathsep}{os.environ['PATH']}")
        assert compat.find_python("python9.9", tmp_path / "pyenv") == str(copy)
        copy.unlink()
        assert compat.find_python("python9.9", tmp_path / "pyenv") == "python9.9"


def test_torch_requirements_pin_torch_and_keep_the_rest():
    reqs = compat.torch_requirements("2.6")
    assert reqs[:2] == ["torch==2.6.*", "torchvision"]
    assert not any(r.startswith(("torch==2.14", "torchvision==")) for r in reqs)
    assert any(r.startswith("nbval==") for r in reqs)
    assert compat.torch_requirements("newest")[:2] == ["torch", "torchvision"]
    assert compat.torch_requirements("2.11.0")[0] == "torch==2.11.0"
    with pytest.raises(ValueError, match="give a release such as 2.6"):
        compat.torch_requirements("latest; rm -rf /")


def test_hosted_requirements_pin_this_torch_and_what_the_platform_ships():
    from importlib.metadata import version
    reqs = compat.hosted_requirements(("pandas",))
    assert reqs[0].startswith("torch==") and "+" not in reqs[0]
    assert reqs[1:3] == [f"{n}=={version(n).split('+')[0]}" for n in ("torchvision", "pandas")]
    assert reqs[3:] == compat.HOSTED_PACKAGES
    assert len(compat.hosted_requirements()) == 2 + len(compat.HOSTED_PACKAGES)


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
    said = [out(compat.PIP_NOTE + " to use updated packages.\n"), out(compat.INSTALL_LINE)]
    good = [{"cell_type": "code", "source": "setup", "outputs": said},
            {"cell_type": "code", "source": "plt.plot([1])", "outputs": [picture]}]
    path.write_text(json.dumps(executed(good)))
    assert compat.lone_run_problems(path, ref) == []
    assert compat.lone_run_problems(path, ref, installs=0) == \
        ["the install line was printed 1 times, not 0"]
    good[0]["outputs"].insert(0, out("  setuptools: BuildBackendWarning: Package 'x.y' is absent\n"))
    path.write_text(json.dumps(executed(good)))
    assert compat.lone_run_problems(path, ref) == [
        "the set-up cell printed more than its line: setuptools: BuildBackendWarning: Package "
        "'x.y' is absent"]
    bad = [{"cell_type": "code", "source": "setup", "outputs": []},
           {"cell_type": "code", "source": "plt.plot([1])", "outputs": []},
           {"cell_type": "markdown", "source": "![x](../images/x.png)"},
           {"cell_type": "code", "source": "1/0", "outputs": [
               {"output_type": "error", "ename": "ZeroDivisionError", "evalue": "division"}]}]
    path.write_text(json.dumps(executed(bad)))
    assert compat.lone_run_problems(path, ref) == [
        "cell 2 shows ../images/x.png, which a lone notebook lacks",
        "cell 3 failed: ZeroDivisionError: division",
        "cell 1 shows no picture (it does in the checkout)",
        "the install line was printed 0 times, not 1"]


def test_run_alone_wants_an_empty_folder(tmp_path):
    (tmp_path / "other.txt").write_text("x")
    with pytest.raises(ValueError, match="is not empty"):
        compat.run_alone(Path(sys.executable), NOTEBOOKS[0], tmp_path, {})


def test_package_copy_holds_what_pip_needs(tmp_path):
    copy = compat.package_copy(tmp_path / "src")
    assert (copy / "pyproject.toml").is_file() and (copy / "d2l_extras" / "__init__.py").is_file()
    assert not list(copy.rglob("__pycache__"))


# ---------------------------------------------------------------- a lone notebook, for real

# Part of what Colab and Kaggle ship beside torch. The set-up cell installs d2l_extras, d2l
# and requests (which they have too: left out so that one requirement goes through pip for
# real). make compat runs every notebook on the bare stack, where it installs them all.
COLAB = ("matplotlib", "pandas", "scipy", "scikit-learn")
# What uv and pip print when no package index can be reached (no network, no DNS, no proxy).
_OFFLINE = re.compile(r"dns error|Temporary failure in name resolution|Network is unreachable|"
                      r"tcp connect error|Connection refused|No route to host|"
                      r"Failed to establish a new connection", re.IGNORECASE)


def offline_reason(log: str) -> str | None:
    """The line of an install's log that says no package index answered, or None."""
    return next((line.strip() for line in log.splitlines() if _OFFLINE.search(line)), None)


def test_a_lone_notebook_runs_on_a_hosted_stack(tmp_path):
    try:
        compat.uv()
    except RuntimeError as err:
        pytest.skip(f"{err} (make installs it in .venv)")
    notebook = ROOT / "notebooks" / nbval_plugin.LONE_NOTEBOOK
    with open(tmp_path / "env.log", "w") as log:
        try:
            python = compat.make_env(tmp_path / "env", sys.executable,
                                     compat.hosted_requirements(COLAB), log)
        except subprocess.CalledProcessError:
            why = offline_reason((tmp_path / "env.log").read_text())
            if why:  # a GPU machine or a laptop offline: nothing to install from
                pytest.skip(f"no package index answers ({why}): a hosted stack cannot be built")
            pytest.fail("could not build the hosted environment:\n"
                        + (tmp_path / "env.log").read_text()[-3000:])
    env = compat.hosted_environ(compat.package_copy(tmp_path / "source"))
    lone = compat.run_alone(python, notebook, tmp_path / "alone", env)
    # The checkout's run: nbval's (make test runs this notebook first), else its own.
    kept = nbval_plugin.executed_folder([notebook])
    reference = (kept / notebook.name if kept else
                 compat.reference_run(notebook, tmp_path / "checkout" / notebook.name))
    assert compat.picture_cells(reference), "the reference run shows pictures"
    assert compat.lone_run_problems(lone, reference) == []
    # Every picture is in the page rendered from the lone notebook.
    import nbformat
    from nbconvert import HTMLExporter
    page, _ = HTMLExporter().from_notebook_node(nbformat.read(lone, as_version=4))
    sources = re.findall(r"<img[^>]*\ssrc=\"([^\"]+)\"", page)
    local = [s for s in sources if not s.startswith(("data:image/", "https://"))]
    assert local == [] and sum(s.startswith("data:image/") for s in sources) >= 2
    assert set(sources) - {s for s in sources if s.startswith("data:")} == \
        {image for _, image, _ in hosted.PLATFORMS}
    # A second run installs nothing and prints nothing.
    setup = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(hosted.setup_source())])
    nbformat.write(setup, tmp_path / "setup.ipynb")
    rerun = compat.run_alone(python, tmp_path / "setup.ipynb", tmp_path / "again", env)
    cell = json.loads(rerun.read_text())["cells"][0]
    assert cell["outputs"] == [], cell["outputs"]


def test_readme_badges_are_generated_from_the_same_address():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert hosted.update_readme(text, NOTEBOOKS) == text, \
        "run: python tools/nbmeta.py notebooks/*.ipynb"
    with pytest.raises(ValueError, match="has no <!-- launch badges: start -->"):
        hosted.update_readme("# no block", NOTEBOOKS)
