"""Where training's memory goes: the most bytes a call allocates, on a CPU or a GPU."""
import itertools
from typing import Callable

import torch

from .profiling import profile_trace
from .timing import synchronize


def peak_memory(fn: Callable[[], object], device: torch.device | str = "cpu") -> int:
    """Most bytes allocated on device during one call of fn, above what was allocated before."""
    if not callable(fn):
        raise TypeError(f"peak_memory() needs a function to call, got {type(fn).__name__}")
    device = torch.device(device)
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"memory is measured on 'cpu' or 'cuda' devices, not {device.type!r} "
                         "(on a Mac, measure on the CPU)")
    if device.type == "cuda":  # the caching allocator counts its peak
        synchronize([device])
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
        fn()
        synchronize([device])
        return torch.cuda.max_memory_allocated(device) - start
    # No counter on the CPU: the profiler sees every allocation and free (Device Type 0). Freeing
    # a block allocated before the call does not lower the count: the profiler knows no size.
    events = profile_trace(fn, [device], memory=True)["traceEvents"]
    changes = sorted((e["ts"], e["args"]["Bytes"]) for e in events if e.get("name") == "[memory]"
                     and e.get("args", {}).get("Device Type") == 0)
    return max(itertools.accumulate((n_bytes for _, n_bytes in changes), initial=0))
