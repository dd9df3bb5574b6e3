"""Notebook 07's workers stay quiet about data.

A worker told which data set to use (the notebook passes --data with what load_images chose)
prints no second data notice.
"""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_worker_given_the_data_set_prints_no_notice():
    out = subprocess.run([sys.executable, "-m", "d2l_extras.ddp_job", "--epochs", "1",
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
