"""The README's GPU-support table: generated from the code's own rules, and up to date."""
from pathlib import Path

import pytest

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
    _, cap, _, dtypes, compiled, bf16 = row(table, "P100, GTX 10xx")
    assert cap == "6.0" and dtypes.startswith("none") and compiled.startswith("no: Triton")
    # A T4 (Colab): float16 on Tensor Cores; bfloat16 is emulated and does not compile.
    _, cap, _, dtypes, compiled, bf16 = row(table, "T4, RTX 20xx")
    assert (cap, dtypes, compiled) == ("7.5", "float16", "yes") and bf16.startswith("no:")
    _, _, _, dtypes, compiled, bf16 = row(table, "H100, H200")
    assert "bfloat16" in dtypes and "float8" in dtypes and compiled == bf16 == "yes"
    assert "no NCCL" in row(table, "Windows")[1] and row(table, "Windows")[2].startswith("no:")
    assert row(table, "Linux")[1].startswith("NCCL") and row(table, "Linux")[2] == "yes"
