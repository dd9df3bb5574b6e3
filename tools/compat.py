"""make compat: the notebooks on the stacks students and runners have, not only on our pins.

    python -m tools.compat [--python python3.12] [--torch 2.6 2.11 newest] [--out build/compat]

Two kinds of run, each in an environment of its own under OUT (made with uv, which shares one
download cache, so a second run costs seconds):
- torch-V: torch V (and the torchvision made for it) with the rest of requirements.txt, then
  `make test USE_CURRENT_ENV=1` in it: every unit test and every notebook. V is a release
  ("2.6") or "newest", the newest on the package index.
- hosted: what a hosted platform has (torch, torchvision, ipykernel, nbclient, nothing else):
  every notebook copied alone into an empty folder and run in the `ci` profile, its set-up cell
  installing this checkout (D2L_EXTRAS_SOURCE) and the book's d2l with %pip, as on Colab.
OUT/summary.md says what passed; the exit status is 1 if anything failed.

`python tools/compat.py execute NOTEBOOK TARGET` is the part that runs inside a hosted
environment: it executes one notebook in a kernel of that environment's Python.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
DEFAULT_OUT = ROOT / "build" / "compat"
# What the set-up cell prints once: bootstrap.DONE (a literal: this file also runs as a script
# in a hosted environment before d2l_extras is installed; tests/test_bootstrap.py compares).
INSTALL_LINE = "for d2l_extras; kept torch"
PIP_NOTE = "Note: you may need to restart the kernel"  # what %pip prints after an install
HOSTED_PACKAGES = ["ipykernel", "nbclient"]  # beside torch and torchvision; nothing else
TORCH_VERSIONS = ["2.6", "2.11", "newest"]   # the oldest claimed, a GPU image's, the newest


def uv() -> list[str]:
    """The uv command (installed in .venv by make), or an error that says how to get it."""
    found = shutil.which("uv")
    if found:
        return [found]
    probe = subprocess.run([sys.executable, "-m", "uv", "--version"], capture_output=True)
    if probe.returncode == 0:
        return [sys.executable, "-m", "uv"]
    raise RuntimeError(f"uv is not installed: run {sys.executable} -m pip install uv")


def env_python(env: Path) -> Path:
    """The interpreter of the environment at `env`."""
    return env / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def torch_requirements(version: str) -> list[str]:
    """The requirements of a torch-V environment: torch V and its torchvision first."""
    if version == "newest":
        torch = ["torch", "torchvision"]
    elif re.fullmatch(r"\d+\.\d+(\.\d+)?", version):
        torch = [f"torch=={version}" + ("" if version.count(".") == 2 else ".*"), "torchvision"]
    else:
        raise ValueError(f"torch version {version!r}: give a release such as 2.6 or 'newest'")
    rest = [line.split("#")[0].strip() for line in
            (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()]
    # uv too: tests/test_hosted.py builds its hosted stack with it, from this torch.
    return torch + [r for r in rest if r and not re.match(r"(torch|torchvision)\b", r)] + ["uv"]


def hosted_requirements(preinstalled: tuple[str, ...] = ()) -> list[str]:
    """A hosted platform's stack: this interpreter's torch and torchvision, ipykernel, nbclient,
    and the `preinstalled` packages (at this interpreter's versions) that the platform ships."""
    from importlib.metadata import version

    return [f"{name}=={version(name).split('+')[0]}"
            for name in ("torch", "torchvision", *preinstalled)] + HOSTED_PACKAGES


def find_python(name: str, pyenv_root: Path | None = None) -> str:
    """An interpreter called `name` that runs: on PATH, else pyenv's; else `name`, for uv."""
    root = pyenv_root or Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    # A pyenv shim on PATH fails unless that version is selected, so we try pyenv's own copies.
    for candidate in [shutil.which(name), *sorted(root.glob(f"versions/*/bin/{name}"))]:
        if candidate and subprocess.run([str(candidate), "-c", ""],
                                        capture_output=True).returncode == 0:
            return str(candidate)
    return name  # uv looks further, or downloads it where it may


def make_env(env: Path, python: str, requirements: list[str], log) -> Path:
    """A new environment at `env` (with pip, as hosted platforms have) holding `requirements`."""
    shutil.rmtree(env, ignore_errors=True)
    for cmd in (uv() + ["venv", "--seed", "--quiet", "--python", python, str(env)],
                uv() + ["pip", "install", "--quiet", "--python", str(env_python(env)),
                        *requirements]):
        subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT, timeout=1800)
    return env_python(env)


def package_copy(dest: Path) -> Path:
    """A copy of what pip needs to install d2l_extras, so the install writes nothing here."""
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(ROOT / "d2l_extras", dest / "d2l_extras",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def plain_environ() -> dict:
    """os.environ without what points into another environment or an outer make."""
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES",
            "USE_CURRENT_ENV", "TESTS")
    return {k: v for k, v in os.environ.items() if k not in drop}


def hosted_environ(source: Path | str, profile: str = "ci") -> dict:
    """The environment of a hosted run: nothing of this checkout on the path."""
    env = plain_environ()
    env.update(D2L_PROFILE=profile, D2L_EXTRAS_SOURCE=str(source), PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def run_alone(python: Path, notebook: Path, work: Path, env: dict, timeout: float = 1200) -> Path:
    """Copy `notebook` alone into the empty folder `work`, execute it there; return the copy."""
    work.mkdir(parents=True, exist_ok=True)
    if any(work.iterdir()):
        raise ValueError(f"{work} is not empty: a lone notebook runs in an empty folder")
    lone = work / notebook.name
    shutil.copy2(notebook, lone)
    run = subprocess.run([str(python), str(Path(__file__).resolve()), "execute", str(lone),
                          str(lone)], cwd=work, env=env, capture_output=True, text=True,
                         timeout=timeout)
    if run.returncode not in (0, 1):
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


def lone_run_problems(executed: Path, reference: Path | None = None,
                      installs: int = 1) -> list[str]:
    """What is wrong with a notebook run alone: errors, the install line printed other than
    `installs` times (1 in a new environment, 0 once it is installed), anything else the set-up
    cell prints (a warning of pip or setuptools), a picture that the `reference` run (the same
    notebook run in the checkout) shows and this one does not, and a Markdown figure that a lone
    notebook lacks."""
    nb = json.loads(executed.read_text(encoding="utf-8"))
    problems, printed = [], 0
    setup = next((c for c in nb["cells"] if c["cell_type"] == "code"), {})
    noise = [line for line in outputs_text(setup).splitlines() if line.strip()
             and INSTALL_LINE not in line and not line.startswith(PIP_NOTE)]
    if noise:
        problems.append(f"the set-up cell printed more than its line: {noise[0].strip()[:200]}")
    for i, cell in enumerate(nb["cells"]):
        text = outputs_text(cell)
        printed += text.count(INSTALL_LINE)
        if any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
            problems.append(f"cell {i} failed: {text.strip().splitlines()[-1][:300]}")
        if cell["cell_type"] == "markdown":
            src = "".join(cell["source"])
            for link in re.findall(r"!\[[^\]]*\]\(([^)\s]+)", src):
                if not link.startswith(("data:image/", "https://")):
                    problems.append(f"cell {i} shows {link}, which a lone notebook lacks")
    if reference is not None:
        for i in sorted(picture_cells(reference) - picture_cells(executed)):
            problems.append(f"cell {i} shows no picture (it does in the checkout)")
    if printed != installs:
        problems.append(f"the install line was printed {printed} times, not {installs}")
    return problems


def execute(notebook: Path, target: Path, **env: str) -> str | None:
    """Run `notebook` in a kernel of this Python (in a hosted environment: its own), with
    os.environ and `env`; save it as `target`; return the error or None."""
    try:
        from tools.report import execute_notebook
    except ImportError:  # run as a script: tools/ is on the path, this checkout is not
        from report import execute_notebook
    # os.environ as it is: under USE_CURRENT_ENV=1 its PYTHONPATH is how d2l_extras imports.
    return execute_notebook(notebook, target, {**os.environ, **env}, cell_timeout=900)


def reference_run(notebook: Path, target: Path) -> Path:
    """`notebook` run in this interpreter, from the checkout, in the ci profile."""
    error = execute(notebook, target, D2L_PROFILE="ci")
    if error:
        raise RuntimeError(f"{notebook.name} fails in the checkout too: {error}")
    return target


def compat(python: str, versions: list[str], out: Path, hosted: bool = True) -> int:
    """Build every environment, run everything; write OUT/summary.md; 1 if anything failed."""
    import torch

    out.mkdir(parents=True, exist_ok=True)
    python = find_python(python)
    rows = []
    for version in versions:
        env = out / f"torch-{version}"
        with open(out / f"torch-{version}.log", "w") as log:
            start = time.perf_counter()
            py = make_env(env, python, torch_requirements(version), log)
            subprocess.run(uv() + ["pip", "install", "--quiet", "--python", str(py), "--no-deps",
                                   "-r", str(ROOT / "requirements-nodeps.txt")],
                           check=True, stdout=log, stderr=subprocess.STDOUT)
            got = subprocess.run([str(py), "-c", "import torch; print(torch.__version__)"],
                                 capture_output=True, text=True).stdout.strip()
            log.flush()
            test = subprocess.run(["make", "--no-print-directory", "test", "USE_CURRENT_ENV=1",
                                   f"PYTHON={py}"], cwd=ROOT, stdout=log,
                                  stderr=subprocess.STDOUT, env=plain_environ())
        tail = (out / f"torch-{version}.log").read_text().strip().splitlines()[-1:]
        rows.append((f"torch {got} (asked {version}): make test USE_CURRENT_ENV=1",
                     test.returncode == 0, f"{tail[0] if tail else ''} "
                     f"({time.perf_counter() - start:.0f} s)"))
    base = torch.__version__.split("+")[0]
    if hosted:
        with open(out / "hosted.log", "w") as log:
            py = make_env(out / "hosted", python, hosted_requirements(), log)
        source = package_copy(out / "source")
    # One environment for all: the first notebook installs the project, the others find it.
    for n, notebook in enumerate(sorted(NOTEBOOKS.glob("*.ipynb")) if hosted else []):
        work = out / "alone" / notebook.stem
        shutil.rmtree(work, ignore_errors=True)
        start = time.perf_counter()
        lone = run_alone(py, notebook, work, hosted_environ(source))
        seconds = time.perf_counter() - start
        reference = reference_run(notebook, out / "checkout" / notebook.name)
        problems = lone_run_problems(lone, reference, installs=1 if n == 0 else 0)
        rows.append((f"{notebook.name} alone, hosted stack (torch {base})", not problems,
                     "; ".join(problems) or f"{seconds:.0f} s"))
    lines = ["| run | result | detail |", "| --- | --- | --- |"]
    lines += [f"| {what} | {'passed' if ok else 'FAILED'} | {detail} |" for what, ok, detail in rows]
    (out / "summary.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0 if all(ok for _, ok, _ in rows) else 1


def main(argv: list[str] | None = None) -> int:
    """Command line: `compat` (default) or `execute NOTEBOOK TARGET` (see the docstring)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["execute"]:
        if len(argv) != 3:
            raise SystemExit("usage: python tools/compat.py execute NOTEBOOK TARGET")
        error = execute(Path(argv[1]), Path(argv[2]))
        print(error or "ok")
        return 1 if error else 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--python", default="python3.12",
                        help="the Python of every environment (default: python3.12)")
    parser.add_argument("--torch", nargs="*", default=TORCH_VERSIONS,
                        help="torch releases to test, or 'newest' (default: %(default)s)")
    parser.add_argument("--no-hosted", dest="hosted", action="store_false",
                        help="skip the lone notebooks on a hosted platform's stack")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    return compat(args.python, args.torch, args.out.resolve(), args.hosted)


if __name__ == "__main__":
    sys.exit(main())
