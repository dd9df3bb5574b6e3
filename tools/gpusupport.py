"""The README's "GPU support" table, written from the rules the code itself applies.

`python tools/nbmeta.py notebooks/*.ipynb` rewrites it; tests/test_gpusupport.py fails when it is
stale. Rules: hwbench.tensor_core_dtypes, compiler.gpu_compile_rule, distributed.worker_device and
hardware.cuda_arch_supported, the functions the notebooks call before using a GPU feature.
"""
from __future__ import annotations

import torch

from d2l_extras.compiler import gpu_compile_rule
from d2l_extras.hardware import cuda_arch_supported
from d2l_extras.hwbench import tensor_core_dtypes

from tools.hosted import replace_block

START, END = "<!-- gpu support: start -->", "<!-- gpu support: end -->"

# (the GPUs, their compute capability, where a student meets them)
GPUS = [
    ("P100, GTX 10xx", (6, 0), "Kaggle (P100), older laptops"),
    ("V100", (7, 0), "clouds"),
    ("T4, RTX 20xx", (7, 5), "Colab, Kaggle (T4 x2), Studio Lab"),
    ("A100", (8, 0), "Colab (paid), clouds"),
    ("A10G, RTX 30xx", (8, 6), "clouds, laptops"),
    ("L4, L40S, RTX 40xx", (8, 9), "Colab (L4), laptops"),
    ("H100, H200", (9, 0), "clouds"),
    ("B200", (10, 0), "clouds"),
    ("RTX 50xx", (12, 0), "desktops, laptops"),
]
# The wheel requirements.txt pins, and its torch.cuda.get_arch_list() (torch 2.14.1+cu130 on
# Linux): the GPUs it has kernels for. tests/test_gpusupport.py checks both against the installed
# torch when that is this wheel; update them together with the pin.
PINNED_TORCH = "2.14.1+cu130"
PINNED_ARCHS = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
# What dx.distributed.worker_device finds: NCCL is in the Linux CUDA wheels only; elsewhere, gloo.
PLATFORMS = [("Linux", "linux", "NCCL, one GPU per process; gloo on the CPU"),
             ("Windows", "windows", "gloo on the CPU (torch's Windows builds have no NCCL)")]


def _compile(capability: tuple[int, int], platform: str = "linux",
             dtype: torch.dtype | None = None) -> str:
    works, reason = gpu_compile_rule(capability, platform, dtype)
    return "yes" if works else f"no: {reason.split(', this GPU')[0]}"


def table() -> str:
    """The Markdown tables: what runs on each GPU generation, then on each platform."""
    rows = [f"| GPU | compute capability | where | torch {PINNED_TORCH} uses it "
            "| Tensor-Core dtypes | torch.compile | compiled bfloat16 |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for names, cap, where in GPUS:
        dtypes = ", ".join(tensor_core_dtypes(cap)) or "none (float32 on CUDA cores)"
        pinned = ("yes" if cuda_arch_supported(cap, PINNED_ARCHS)
                  else "no: the notebooks run on the CPU")
        rows.append(f"| {names} | {cap[0]}.{cap[1]} | {where} | {pinned} | {dtypes} "
                    f"| {_compile(cap)} | {_compile(cap, dtype=torch.bfloat16)} |")
    rows += ["", "| platform | several processes | torch.compile on a GPU (from 7.0) |",
             "| --- | --- | --- |"]
    for name, key, processes in PLATFORMS:
        rows.append(f"| {name} | {processes} | {_compile((8, 0), key)} |")
    return "\n".join(rows)


def update_readme(text: str) -> str:
    """`text` (the README) with the table between the GPU-support markers regenerated."""
    return replace_block(text, START, END, table())
