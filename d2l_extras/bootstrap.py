"""The set-up cell's second half: check Python and torch, install what is missing (the book's d2l
without its pins, this package's other requirements), the platform's torch, torchvision and numpy
held. Standard library only, Python 3.8 syntax: it runs before anything else is installed."""
import importlib
import importlib.metadata as metadata
import os
import re
import subprocess
import sys
import tempfile
from typing import Callable, Sequence

PYTHON, TORCH = (3, 11), (2, 6)
D2L = "d2l==1.0.3"  # its numpy 1.23.5 pin cannot install on Python 3.12+: installed --no-deps
KEEP = ("torch", "torchvision", "numpy")  # the platform's own builds, never replaced
DONE = "for d2l_extras; kept torch"  # the end of the line setup() prints (make compat counts it)


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _name(requirement: str) -> str:
    """The distribution a requirement names: 'pandas' of 'pandas>=2.0'."""
    return re.match(r"[A-Za-z0-9_.-]+", requirement).group(0)


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version.split("+")[0])[:2])


def check_versions() -> str:
    """Return torch's version, or a RuntimeError saying what to install for Python and torch."""
    torch = _version("torch") or "none"
    if tuple(sys.version_info[:2]) < PYTHON or torch == "none" or _release(torch) < TORCH:
        raise RuntimeError(f"Python {sys.version.split()[0]}, torch {torch}: we need "
                           "3.11+ and 2.6+ (%pip install -U torch torchvision)")
    return torch


def missing_requirements() -> list[str]:
    """This package's requirements that are not installed, then the book's d2l if it is not."""
    try:
        wanted = [r for r in metadata.requires("d2l-extras") or [] if "extra ==" not in r]
    except metadata.PackageNotFoundError:  # a checkout on PYTHONPATH: check_env's job
        wanted = []
    missing = [r for r in wanted if _version(_name(r)) is None]
    return missing + ([D2L] if _version("d2l") is None else [])


def _pip(args: Sequence[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)


def setup(run: Callable[[Sequence[str]], subprocess.CompletedProcess] = _pip) -> None:
    """Check Python and torch; install what is missing, keeping the platform's torch."""
    torch = check_versions()
    missing = missing_requirements()
    if not missing:
        return
    with tempfile.TemporaryDirectory() as folder:
        keep = os.path.join(folder, "platform.txt")
        with open(keep, "w") as f:
            f.writelines(f"{p}=={_version(p)}\n" for p in KEEP if _version(p))
        for extra, names in ((["-c", keep], [r for r in missing if r != D2L]),
                             (["--no-deps"], [r for r in missing if r == D2L])):
            if names and (done := run(["install", "-q", *extra, *names])).returncode != 0:
                print(done.stdout[-3000:], done.stderr[-3000:])
                raise RuntimeError("The install failed (pip's output above): is the "
                                   "internet on? (Kaggle: Settings > Internet)")
    importlib.invalidate_caches()
    names = (["d2l 1.0.3"] if D2L in missing else []) + [_name(r) for r in missing if r != D2L]
    print(f"Installed {', '.join(names)} {DONE} {torch}")
