"""torch.compile here: whether it can build code, a fallback to eager; the last-level cache."""
import functools
import importlib.util
import sys
from typing import Callable

import torch

from . import hwbench
from .report import notice

# Inductor's Triton kernels need compute capability 7.0, and bfloat16 Ampere's (8.0): else the
# first compiled call raises or runs eagerly (pytorch/pytorch#118122). All known up front.
_TRITON_MIN, _BF16_MIN = (7, 0), hwbench.TENSOR_CORE_DTYPES["bfloat16"]
_PLATFORM = "windows" if sys.platform == "win32" else "linux"
_TRITON = importlib.util.find_spec("triton") is not None


def gpu_compile_rule(capability: tuple[int, int], platform: str = "linux",
                     dtype: torch.dtype | None = None,
                     triton: bool | None = None) -> tuple[bool, str]:
    """(works, why): can torch.compile build for this NVIDIA compute capability (and Triton)?"""
    have, need, bf16 = ("{}.{}".format(*c) for c in (capability, _TRITON_MIN, _BF16_MIN))
    if capability < _TRITON_MIN:
        return False, f"Triton needs compute capability {need}+, this GPU has {have}"
    if not (platform == "linux" if triton is None else triton):  # as torch's CUDA wheels ship
        where = "pip install triton-windows" if platform == "windows" else "pip install triton"
        return False, f"Triton is not installed ({where})"
    if dtype == torch.bfloat16 and capability < _BF16_MIN:
        return False, f"Triton's bfloat16 needs compute capability {bf16}+, this GPU has {have}"
    return True, "Triton builds kernels for this GPU"


def _probe_device(device: torch.device | str | None) -> torch.device:
    device = torch.device("cpu" if device is None else device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu") if device.type == "cpu" else device  # cpu:0 is probed as cpu


def _compile_probe(device: torch.device, dtype: torch.dtype) -> tuple[bool, str]:
    try:
        fn = torch.compile(lambda x: torch.relu(x) * 2 + 1)
        x = torch.randn(8, device=device, dtype=dtype)
        torch.testing.assert_close(fn(x), torch.relu(x) * 2 + 1)
        return True, f"torch.compile works on {device}"
    except Exception as err:  # a missing C++ compiler shows up only here, at the first call
        return False, f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"


@functools.cache
def _support(device: torch.device, dtype: torch.dtype) -> tuple[bool, str]:
    if device.type == "cuda" and not torch.version.hip:  # ROCm's Triton serves every AMD GPU
        props = torch.cuda.get_device_properties(device)
        works, reason = gpu_compile_rule((props.major, props.minor), _PLATFORM, dtype, _TRITON)
        if not works:
            return False, f"{props.name}: {reason}"
    return _compile_probe(device, dtype)


def compile_support(device: torch.device | str | None = None,
                    dtype: torch.dtype | None = None) -> tuple[bool, str]:
    """(works, reason): can torch.compile build code for `device` (the CPU by default), `dtype`?"""
    return _support(_probe_device(device), dtype or torch.float32)


def maybe_compile(fn: Callable, device: torch.device | str | None = None,
                  dtype: torch.dtype | None = None, **options) -> Callable:
    """torch.compile(fn, **options) for `device` and `dtype`, or fn itself (with a notice)."""
    works, reason = compile_support(device, dtype)
    if works:
        return torch.compile(fn, **options)
    where = _probe_device(device)
    advice = " On Windows install the MSVC build tools, on macOS the Xcode command line tools."
    notice(f"torch.compile is not usable on {where} ({reason[:120]}); running eagerly instead."
           + (advice if where.type == "cpu" else ""))  # once, however many models fall back
    return fn


def last_level_cache(device: torch.device | str = "cpu") -> tuple[str, int] | None:
    """(name, bytes) of the largest cache in front of `device`'s memory, or None if unknown."""
    device = torch.device(device)
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        size = getattr(props, "L2_cache_size", 0)  # absent on some builds
        return (f"L2 of the {props.name}", int(size)) if size else None
    sizes = hwbench.cache_sizes() if device.type == "cpu" else None  # MPS reports none
    name = max(sizes, key=sizes.get) if sizes else None
    return (f"{name} of the CPU", sizes[name]) if name else None
