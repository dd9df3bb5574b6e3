"""Every figure in images/ is drawn by the script beside it, and that script still runs."""
import os
import pathlib
import subprocess
import sys

import pytest

IMAGES = pathlib.Path(__file__).parents[1] / "images"
SCRIPTS = sorted(IMAGES.glob("[!_]*.py"))  # _figure.py is their shared saving code


def test_every_png_has_its_script():
    for png in IMAGES.glob("*.png"):
        assert png.with_suffix(".py").exists(), f"{png.name} has no script that draws it"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_draws_its_figure(script, tmp_path):
    subprocess.run([sys.executable, str(script), str(tmp_path)], check=True, timeout=120,
                   capture_output=True, env={**os.environ, "MPLBACKEND": "Agg"})
    drawn = tmp_path / script.with_suffix(".png").name
    assert drawn.stat().st_size > 1000
    assert (IMAGES / drawn.name).exists(), f"commit {drawn.name} (run: make figures)"
