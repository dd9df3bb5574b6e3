"""make compat: the tests on other stacks than our pins, each in an environment of its own under
build/compat/ (uv builds them from its shared cache). torch-V: torch V with the rest of
requirements.txt, then `make test USE_CURRENT_ENV=1`; hosted: each notebook alone on a hosted stack.
    make compat [COMPAT_PYTHON=python3.12] [COMPAT_TORCH="2.6 newest"] [COMPAT_ARGS="-s hosted"]"""
import os
import re
import shutil
import subprocess
from pathlib import Path

import nox

nox.options.envdir = "build/compat"
nox.options.error_on_missing_interpreters = True
# The outer make's variables (and USE_CURRENT_ENV's path): the inner make gets only its own.
OUTER = dict.fromkeys(["PYTHONPATH", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"])


def find_python(name: str, pyenv_root: Path | None = None) -> str:
    """An interpreter called `name` that runs: on PATH, else pyenv's; else `name`, for uv."""
    root = pyenv_root or Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    # A pyenv shim on PATH fails unless that version is selected (uv and nox give up there).
    for candidate in [shutil.which(name), *sorted(root.glob(f"versions/*/bin/{name}"))]:
        if candidate and subprocess.run([candidate, "-c", ""], capture_output=True).returncode == 0:
            return str(candidate)
    return name


def torch_requirements(version: str) -> list[str]:
    """torch V and its torchvision, then the rest of requirements.txt (and uv, for the tests)."""
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?|newest", version):
        raise ValueError(f"torch version {version!r}: give a release such as 2.6 or 'newest'")
    pin = "" if version == "newest" else "==" + version + ("" if version.count(".") == 2 else ".*")
    lines = Path(__file__).with_name("requirements.txt").read_text(encoding="utf-8").splitlines()
    rest = [r for r in (line.split("#")[0].strip() for line in lines)
            if r and not re.match(r"(torch|torchvision)\b", r)]
    return [f"torch{pin}", "torchvision", "uv", *rest]


def sessions(environ: dict) -> dict[str, tuple[list[str], dict]]:
    """{name: (what to install, then requirements-nodeps.txt; the environment of make test)}."""
    tests = {"TESTS": environ.get("TESTS")}
    found = {f"torch-{v}": (torch_requirements(v), tests)  # oldest claimed, a GPU image's, newest
             for v in environ.get("COMPAT_TORCH", "2.6 2.11 newest").split()}
    found["hosted"] = (["-r", "requirements.txt", "uv"],  # each notebook alone, as on Colab
                       {"D2L_HOSTED_NOTEBOOKS": environ.get("D2L_HOSTED_NOTEBOOKS", "all"),
                        "TESTS": "tests/test_hosted.py -k lone_notebook_runs"})
    return found


PYTHON = find_python(os.environ.get("COMPAT_PYTHON", "python3.12"))
for name, (requirements, env) in sessions(os.environ).items():
    # --seed: pip, as real environments have (torch 2.6's collect_env fails without it)
    @nox.session(name=name, python=PYTHON, venv_backend="uv", venv_params=["--seed"])
    def run(session: nox.Session, requirements=requirements, env=env) -> None:
        """Its requirements, then `make test USE_CURRENT_ENV=1` (TESTS: None, make's default)."""
        session.install(*requirements)
        session.install("--no-deps", "-r", "requirements-nodeps.txt")
        session.run("python", "-c", "import torch; print('torch', torch.__version__)")
        session.run("make", "--no-print-directory", "test", "USE_CURRENT_ENV=1",
                    f"PYTHON={Path(session.bin) / 'python'}", external=True, env={**OUTER, **env})
