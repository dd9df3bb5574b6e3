"""The README's GPU-support table: generated from the code's own rules, and up to date."""
import re
from pathlib import Path

import pytest
import torch

from tools import gpusupport

ROOT = Path(__file__).parents[1]


def row(table: str, first: str) -> list[str]:
    line = next(l for l in table.splitlines() if l.startswith(f"| {first} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_the_readme_table_is_generated_from_the_code():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert gpusupport.update_readme(text) == text, "run: python tools/nbmeta.py notebooks/*.ipynb"
    with pytest.raises(ValueError, match="has no <!-- gpu support: start -->"):
        gpusupport.update_readme("# no block")


def test_the_rows_students_meet_say_what_runs():
    table = gpusupport.table()
    # A P100 (Kaggle): no Tensor Cores, no Triton, so no torch.compile on the GPU.
    _, cap, _, _, dtypes, compiled, bf16 = row(table, "P100, GTX 10xx")
    assert cap == "6.0" and dtypes.startswith("none") and compiled.startswith("no: Triton")
    # A T4 (Colab): float16 on Tensor Cores; bfloat16 is emulated and does not compile.
    _, cap, _, _, dtypes, compiled, bf16 = row(table, "T4, RTX 20xx")
    assert (cap, dtypes, compiled) == ("7.5", "float16", "yes") and bf16.startswith("no:")
    _, _, _, _, dtypes, compiled, bf16 = row(table, "H100, H200")
    assert "bfloat16" in dtypes and "float8" in dtypes and compiled == bf16 == "yes"
    assert "no NCCL" in row(table, "Windows")[1] and row(table, "Windows")[2].startswith("no:")
    assert row(table, "Linux")[1].startswith("NCCL") and row(table, "Linux")[2] == "yes"


def test_the_pinned_wheel_column_says_which_gpus_fall_back_to_the_cpu():
    table = gpusupport.table()
    header = table.splitlines()[0]
    assert f"torch {gpusupport.PINNED_TORCH} uses it" in header
    # P100 (Kaggle) and V100: no sm_60 or sm_70 kernels in the cu130 wheel.
    for gpu in ("P100, GTX 10xx", "V100"):
        assert row(table, gpu)[3] == "no: the notebooks run on the CPU", gpu
    for gpu in ("T4, RTX 20xx", "A100", "H100, H200", "B200", "RTX 50xx"):
        assert row(table, gpu)[3] == "yes", gpu


def test_the_pinned_version_is_the_one_requirements_txt_installs():
    pins = (ROOT / "requirements.txt").read_text(encoding="utf-8")
    pinned = re.search(r"^torch==(\S+)$", pins, re.M).group(1)
    assert gpusupport.PINNED_TORCH.split("+")[0] == pinned


@pytest.mark.skipif(torch.__version__ != gpusupport.PINNED_TORCH or not torch.version.cuda,
                    reason="the installed torch is not the pinned wheel")
def test_the_pinned_arch_list_is_the_installed_wheels(monkeypatch):
    # get_arch_list() answers [] while no GPU is visible; the build's own list is still there.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert torch.cuda.get_arch_list() == gpusupport.PINNED_ARCHS
