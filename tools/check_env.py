"""Check that the current Python has what a make target needs (make ... USE_CURRENT_ENV=1).

GPU runners and conda users bring their own environment (often offline): list all that is missing
at once, with the pip command and the pins of requirements.txt, before a notebook fails halfway.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIN_PYTHON = (3, 11)
MIN_TORCH = (2, 6)  # the oldest torch the notebooks' CUDA paths are written for

# What each target imports: "module" or "module:distribution". The notebooks' own needs first.
RUN = ("torch torchvision numpy matplotlib matplotlib_inline:matplotlib-inline pandas scipy "
       "requests psutil sklearn:scikit-learn d2l ipykernel").split()
TEST = RUN + ["pytest", "nbval", "pytest_timeout:pytest-timeout"]
REPORT = RUN + ["nbclient", "nbformat"]
NEEDS = {"run": RUN, "test": TEST, "report": REPORT,
         "lab": RUN + ["jupyterlab", "jupyterlab_rise:jupyterlab-rise"],
         "gpu-check": TEST + REPORT[len(RUN):] + ["xdist:pytest-xdist"],
         "compat": TEST + ["nox", "uv"],
         "site": REPORT + ["nbconvert", "sphinx_revealjs:sphinx-revealjs",
                           "jupyter_server_mathjax:jupyter-server-mathjax"]}


def pins() -> dict[str, str]:
    """Return {distribution name (lower case): 'name==version'} from the requirement files."""
    lines = [line.split("#", 1)[0].strip() for name in ("requirements.txt",
             "requirements-nodeps.txt") for line in (ROOT / name).read_text().splitlines()]
    return {line.split("==")[0].strip().lower(): line for line in lines if "==" in line}


def version_tuple(text: str) -> tuple[int, ...]:
    """Return the leading numbers of a version string: '2.11.0+cu128' -> (2, 11, 0)."""
    match = re.match(r"(\d+(?:\.\d+)*)", text)
    return tuple(int(x) for x in match.group(1).split(".")) if match else ()


def problems(target: str, find=importlib.util.find_spec,
             version=importlib.metadata.version, python=sys.version_info) -> tuple[list, list]:
    """Return (missing distributions, other problems) for a make target in this interpreter."""
    if target not in NEEDS:
        raise ValueError(f"unknown target {target!r}; choose one of {sorted(NEEDS)}")
    other = []
    if tuple(python[:2]) < MIN_PYTHON:
        other.append(f"Python {python[0]}.{python[1]} is too old: the notebooks need "
                     f"{MIN_PYTHON[0]}.{MIN_PYTHON[1]} or later")
    missing = []
    for module, _, dist in (need.partition(":") for need in NEEDS[target]):
        try:
            present = find(module) is not None
        except (ImportError, ValueError):
            present = False
        if not present:
            missing.append(dist or module)
    if "torch" not in missing:
        try:
            torch_version = version("torch")
        except importlib.metadata.PackageNotFoundError:
            torch_version = ""
        if torch_version and version_tuple(torch_version)[:2] < MIN_TORCH:
            other.append(f"torch {torch_version} is too old: the notebooks need "
                         f"{MIN_TORCH[0]}.{MIN_TORCH[1]} or later")
    return missing, other


def advice(missing: list[str], python: str = sys.executable) -> str:
    """Return the pip commands that install the missing distributions with the project's pins."""
    pinned = pins()
    normal = [pinned.get(d, d) for d in missing if d != "d2l"]
    lines = [f"  {python} -m pip install " + " ".join(normal)] if normal else []
    if "d2l" in missing:  # d2l's own pins (numpy 1.23.5) cannot install on Python 3.12+
        lines.append(f"  {python} -m pip install --no-deps {pinned.get('d2l', 'd2l')}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", choices=sorted(NEEDS), help="the make target about to run")
    target = parser.parse_args(argv).target
    missing, other = problems(target)
    where = f"{sys.executable} (Python {sys.version.split()[0]})"
    if not missing and not other:
        print(f"USE_CURRENT_ENV=1: `make {target}` uses {where} as it is; nothing is installed, "
              f"d2l_extras comes from {ROOT} (PYTHONPATH).")
        return 0
    message = [f"USE_CURRENT_ENV=1: {where} cannot run `make {target}`:",
               *(f"  - {p}" for p in other)]
    if missing:
        message += ["  - missing: " + ", ".join(missing), "Install them into that environment "
                    "(offline: carry the wheels and add --no-index --find-links DIR):",
                    advice(missing)]
    message.append("Or leave out USE_CURRENT_ENV=1: make then builds .venv from requirements.txt.")
    print("\n".join(message), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
