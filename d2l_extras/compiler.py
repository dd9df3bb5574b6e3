"""torch.compile here: whether it can build code, a fallback to eager, a cold compile cache."""
from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import os
import sys
import tempfile
from typing import Callable, Iterator, TypeVar

import torch

from .hwbench import TENSOR_CORE_DTYPES

F = TypeVar("F", bound=Callable)

# The false alarm 'No CUDA runtime is found' is silenced in timing.py, which this module
# imports (through hwbench) and which is the first to import torch.utils.cpp_extension.


# --- can torch.compile build code here?

# On a CUDA GPU Inductor writes Triton kernels. Where Triton cannot serve the GPU the first
# compiled call raises (torch/_inductor/scheduler.py, create_backend: GPUTooOldForTriton below
# compute capability 7.0, TritonMissing without the package, as on Windows). bfloat16 needs 8.0:
# Inductor skips a frame with bfloat16 inputs or outputs there, warning and running it eagerly
# (compile_fx.py, _check_triton_bf16_support), and bfloat16 inside a graph fails in ptxas
# ("Feature '.bf16' requires .target sm_80", pytorch/pytorch#118122). All known up front.
_TRITON_MIN = (7, 0)  # compute capability
# Native bfloat16 (what Triton checks: is_bf16_supported(including_emulation=False)) came with
# the Tensor Cores of Ampere: one rule, hwbench's table.
_BF16_MIN = TENSOR_CORE_DTYPES["bfloat16"]
_PLATFORMS = ("linux", "windows")


def gpu_compile_rule(capability: tuple[int, int], platform: str = "linux",
                     dtype: torch.dtype | None = None,
                     triton: bool | None = None) -> tuple[bool, str]:
    """Whether torch.compile can build code for an NVIDIA GPU of this compute capability; why not.

    `triton`: whether the package is installed; by default as torch's CUDA wheels ship it:
    with Triton on Linux, without on Windows.
    """
    if not (isinstance(capability, tuple) and len(capability) == 2
            and all(type(v) is int and v >= 0 for v in capability)):
        raise ValueError(f"gpu_compile_rule(): capability is (major, minor), such as (7, 5) "
                         f"for a T4, got {capability!r}")
    if platform not in _PLATFORMS:
        raise ValueError(f"gpu_compile_rule(): platform is one of {_PLATFORMS}, got {platform!r}")
    have, need, bf16 = ("{}.{}".format(*c) for c in (capability, _TRITON_MIN, _BF16_MIN))
    if capability < _TRITON_MIN:
        return False, f"Triton needs compute capability {need}+, this GPU has {have}"
    if not (platform == "linux" if triton is None else triton):
        where = "pip install triton-windows" if platform == "windows" else "pip install triton"
        return False, f"Triton is not installed ({where})"
    if dtype == torch.bfloat16 and capability < _BF16_MIN:
        return False, f"Triton's bfloat16 needs compute capability {bf16}+, this GPU has {have}"
    return True, "Triton builds kernels for this GPU"


def _on_windows() -> bool:
    return sys.platform == "win32"


def _triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def _probe_device(device: torch.device | str | None) -> torch.device:
    """The device to probe, with its index (cuda means the current GPU); the CPU by default."""
    try:
        device = torch.device("cpu" if device is None else device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"compile_support(): {err}; pass a device such as 'cpu' or "
                         "'cuda:0'") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"compile_support(): no CUDA GPU is visible, so nothing runs on "
                             f"{device}; pass the device the tensors live on")
        return torch.device("cuda", torch.cuda.current_device() if device.index is None
                            else device.index)
    return torch.device("cpu") if device.type == "cpu" else device


def _compile_probe(device: torch.device, dtype: torch.dtype) -> tuple[bool, str]:
    """Compile a tiny function for `device` and `dtype` and check its answer."""
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
        works, reason = gpu_compile_rule((props.major, props.minor),
                                         "windows" if _on_windows() else "linux", dtype,
                                         _triton_installed())
        if not works:  # known without compiling: the first compiled call would raise
            return False, f"{props.name}: {reason}"
    return _compile_probe(device, dtype)


def compile_support(device: torch.device | str | None = None,
                    dtype: torch.dtype | None = None) -> tuple[bool, str]:
    """(works, reason): can torch.compile build code for `device` (the CPU by default), `dtype`?

    Known rules first (gpu_compile_rule), then a tiny compile; once per device and dtype.
    """
    dtype = torch.float32 if dtype is None else dtype
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise ValueError(f"compile_support(): dtype is a floating-point torch.dtype, such as "
                         f"torch.bfloat16, got {dtype!r}")
    return _support(_probe_device(device), dtype)


def maybe_compile(fn: F, device: torch.device | str | None = None,
                  dtype: torch.dtype | None = None, **options) -> F:
    """torch.compile(fn, **options) for `device` and `dtype`, or fn itself (with a notice)."""
    works, reason = compile_support(device, dtype)
    if works:
        return torch.compile(fn, **options)
    from .report import notice  # once per process and reason, however many models fall back

    where = _probe_device(device)
    advice = (" On Windows install the MSVC build tools, on macOS the Xcode command line "
              "tools." if where.type == "cpu" else "")
    notice(f"torch.compile is not usable on {where} ({reason[:120]}); running eagerly "
           f"instead.{advice}")
    return fn


# --- reading the measurements

def _clear_inductor_memory() -> None:
    # Inductor keeps compiled code in memory too; the function that forgets it was renamed.
    from torch._inductor import utils
    clear = getattr(utils, "clear_caches", None) or getattr(utils, "clear_inductor_caches", None)
    if clear is not None:
        clear()


@contextlib.contextmanager
def fresh_compile_cache() -> Iterator[str]:
    """Compile into a new, empty cache folder (removed afterwards): the first compile is cold.

    Inductor keeps what it compiled in a folder of the temporary directory, so a rerun of a
    notebook compiles from that cache and its "first call" takes a fraction of a cold one.
    Inside this block the cache starts empty: the first compilation is cold, later ones find
    the cache that it filled. Yields the folder.
    """
    keys = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
    before = {key: os.environ.get(key) for key in keys}
    with tempfile.TemporaryDirectory(prefix="d2l-inductor-") as folder:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder
        os.environ["TRITON_CACHE_DIR"] = os.path.join(folder, "triton")
        _clear_inductor_memory()
        try:
            yield folder
        finally:
            for key, value in before.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            _clear_inductor_memory()


def last_level_cache(device: torch.device | str = "cpu") -> tuple[str, int] | None:
    """(name, bytes) of the largest cache in front of `device`'s memory, or None if unknown."""
    device = torch.device(device)
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        size = getattr(props, "L2_cache_size", 0)  # in torch since 2.1; absent on some builds
        return (f"L2 of the {props.name}", int(size)) if size else None
    if device.type == "cpu":
        from .hwbench import cache_sizes  # imported here: hwbench is large and rarely needed
        sizes = cache_sizes()
        if not sizes:
            return None
        name = max(sizes, key=sizes.get)
        return (f"{name} of the CPU", sizes[name])
    return None  # MPS and others do not report their caches to torch
