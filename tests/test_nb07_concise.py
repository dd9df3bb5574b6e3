"""Notebook 07 shows excerpts of d2l_extras/ddp.py as text, and its workers stay quiet about data.

The notebook prints no source (no inspect.getsource): its Markdown quotes the training loop and
the no_sync check instead. These tests keep the quotes true to the module, and check that a
worker told which data set to use (the notebook passes --data with what load_images chose)
prints no second data notice.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from nbcells import notebook_path

ROOT = Path(__file__).resolve().parents[1]
DDP = ROOT / "d2l_extras" / "ddp.py"
FENCE = re.compile(r"```python\n(.*?)```", re.S)


def quoted_code():
    cells = json.loads(notebook_path("07").read_text(encoding="utf-8"))["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return FENCE.findall(text)


def test_the_quoted_code_is_the_modules():
    blocks = quoted_code()
    assert len(blocks) >= 2, "the training loop and the no_sync check"
    module = {line.strip() for line in DDP.read_text(encoding="utf-8").splitlines()}
    for block in blocks:
        missing = [line for line in block.splitlines()
                   if line.strip() and line.strip() not in module]
        assert not missing, f"lines quoted in notebook 07 but not in ddp.py: {missing}"


def test_the_loop_quote_holds_the_ddp_step():
    loop = next(b for b in quoted_code() if "for X, y in loader" in b)
    for needed in ("DistributedDataParallel(", "sampler.set_epoch(epoch)", "loss.backward()",
                   "optimizer.step()"):
        assert needed in loop


def test_a_worker_given_the_data_set_prints_no_notice():
    out = subprocess.run([sys.executable, "-m", "d2l_extras.ddp", "--epochs", "1",
                          "--n-train", "64", "--n-test", "32", "--width", "4",
                          "--threads", "1", "--data", "digits"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={**os.environ, "D2L_BACKEND": "gloo", "CUDA_VISIBLE_DEVICES": "",
                              "D2L_PROFILE": "ci"})
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [line for line in out.stdout.splitlines() if not line.startswith("{")]
    assert not any("notice" in line or "Data:" in line for line in lines), lines
    header, epoch = lines[:2]
    assert header.startswith("1 process (gloo on cpu, 1 thread each)") and "digits" in header
    assert epoch.startswith("epoch 1/1")
