"""torch.compile here: whether it can build code, a fallback to eager, and reading its timings."""
from __future__ import annotations

import contextlib
import functools
import importlib
import io
import logging
import sys
from typing import Callable, TypeVar

import torch

F = TypeVar("F", bound=Callable)

# --- a false alarm, silenced at its source

# The CUDA build of torch, on a machine without a GPU but with a CUDA toolkit installed (nvcc on
# the PATH), logs "No CUDA runtime is found, using CUDA_HOME=..." when Inductor first imports
# torch.utils.cpp_extension to build CPU code. Nothing is wrong: CPU code needs no CUDA runtime,
# and hardware_report() already says that no GPU is visible. Students read it as an error, so we
# drop exactly this record, and only while CUDA is unavailable; every other message of that
# logger (compiler errors included) still appears.
_FALSE_ALARM = "No CUDA runtime is found"


class _NoFalseCudaAlarm(logging.Filter):
    """Drop the CPU-only 'No CUDA runtime is found' notice of torch.utils.cpp_extension."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (str(record.msg).startswith(_FALSE_ALARM) and not torch.cuda.is_available())


def _install_filter() -> None:
    log = logging.getLogger("torch.utils.cpp_extension")
    if not any(isinstance(f, _NoFalseCudaAlarm) for f in log.filters):
        log.addFilter(_NoFalseCudaAlarm())


def _quiet_import(name: str) -> None:
    """Import module `name`, keeping from stderr only the lines that are not the false alarm."""
    with contextlib.redirect_stderr(io.StringIO()) as caught:
        importlib.import_module(name)
    sys.stderr.write("".join(line for line in caught.getvalue().splitlines(keepends=True)
                             if not line.startswith(_FALSE_ALARM)))


# Installed on import: the notice is logged once, at the first compile, which in the notebooks
# comes after dx.compile_support() or dx.maybe_compile() has imported this module. Older releases
# (2.6, 2.7) print it instead, when that module is imported: import it here, quietly (0.2 s,
# which newer releases do not pay).
_install_filter()
if torch.__version__ < "2.8" and "torch.utils.cpp_extension" not in sys.modules \
        and not torch.cuda.is_available():
    _quiet_import("torch.utils.cpp_extension")


# --- can torch.compile build code here?

@functools.cache
def compile_support() -> tuple[bool, str]:
    """Compile a tiny function once; return (works, reason) so notebooks can explain a failure."""
    try:
        fn = torch.compile(lambda x: torch.relu(x) * 2 + 1)
        x = torch.randn(8)
        torch.testing.assert_close(fn(x), torch.relu(x) * 2 + 1)
        return True, "torch.compile works on this machine"
    except Exception as err:  # a missing C++ compiler shows up only here, at the first call
        return False, f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"


def maybe_compile(fn: F, **options) -> F:
    """Return torch.compile(fn, **options), or fn itself (with a notice) where compiling fails."""
    works, reason = compile_support()
    if works:
        return torch.compile(fn, **options)
    from .report import notice  # once per process, however many models fall back

    notice(f"torch.compile is not usable here ({reason[:120]}); running eagerly instead. "
           "On Windows install the MSVC build tools, on macOS the Xcode command line tools.")
    return fn


# --- reading the measurements

def speed_verdict(baseline_s: float, other_s: float, tolerance: float = 0.05) -> str:
    """'faster', 'slower' or 'as fast': other_s against baseline_s, ties within `tolerance`."""
    from .hardware import positive_number

    for name, value in (("baseline_s", baseline_s), ("other_s", other_s)):
        positive_number(value, f"speed_verdict(): {name} (a measured time in seconds)")
    if not 0 <= tolerance < 1:
        raise ValueError(f"speed_verdict(): tolerance is a fraction in [0, 1), got {tolerance!r}")
    ratio = baseline_s / other_s  # > 1: other is faster
    if ratio > 1 + tolerance:
        return "faster"
    if ratio < 1 / (1 + tolerance):
        return "slower"
    return "as fast"


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


def memory_regime(operand_bytes: int, cache_bytes: int | None, live: int = 3) -> str:
    """Where an elementwise chain's passes go: 'memory', 'cache', 'mixed' or 'unknown'.

    One eager operator reads one or two operands and writes a third, so about `live` operands
    of `operand_bytes` must stay in the cache for the passes to be served from it.
    """
    from .hardware import whole_number

    operand_bytes = whole_number(operand_bytes, "memory_regime(): operand_bytes")
    live = whole_number(live, "memory_regime(): live")
    if cache_bytes is None:
        return "unknown"
    cache_bytes = whole_number(cache_bytes, "memory_regime(): cache_bytes (None when unknown)")
    if operand_bytes > cache_bytes:
        return "memory"   # not even one operand fits: every pass streams from main memory
    if live * operand_bytes <= cache_bytes:
        return "cache"    # input, temporary and result fit: passes are served by the cache
    return "mixed"
