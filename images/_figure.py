"""What every figure script shares: where its PNG goes, and saving it there."""
from __future__ import annotations

import pathlib
import sys

import matplotlib.pyplot as plt


def out_dir_arg() -> pathlib.Path:
    """The folder named on the command line, else images/ itself (as `make figures` runs it)."""
    return pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).parent


def save(fig: plt.Figure, script: str, out_dir: str | pathlib.Path, **savefig) -> pathlib.Path:
    """Save fig as SCRIPT_NAME.png in out_dir, close it, and return the path."""
    path = pathlib.Path(out_dir) / (pathlib.Path(script).stem + ".png")
    fig.savefig(path, **savefig)
    plt.close(fig)
    return path
