"""Where training's memory goes: predicted per kind of tensor, counted, and followed over a step.

Three ways to see memory, from the most to the least device-specific:
- CUDA's caching allocator counts every byte (`torch.cuda.max_memory_allocated`, snapshots);
- torch.profiler(profile_memory=True) reports every allocation and free, on the CPU too;
- saved-tensor hooks show what autograd keeps for the backward pass, on any device.
"""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch

from .checks import whole_number
from .hardware import MiB
from .profiling import profile_trace
from .timing import synchronize

# fp32 tensors each optimizer keeps per parameter: momentum (SGD), first and second moment (Adam).
OPTIMIZER_STATES = {"sgd": 0, "momentum": 1, "adam": 2}


def training_state_bytes(n_params: int, optimizer: str = "adam",
                         mixed: bool = False) -> dict[str, int]:
    """Predicted bytes of parameters, gradients and optimizer state for n_params parameters."""
    # 7.5e9 parameters is a whole number written as a float: accepted.
    if isinstance(n_params, float) and n_params.is_integer():
        n_params = int(n_params)
    n_params = whole_number(n_params, "n_params", minimum=0)
    if optimizer not in OPTIMIZER_STATES:
        raise ValueError(f"unknown optimizer {optimizer!r}; use one of "
                         f"{', '.join(OPTIMIZER_STATES)}")
    states = 4 * OPTIMIZER_STATES[optimizer] * n_params
    if not mixed:  # everything in float32: 4 + 4 + 8 = 16 bytes per parameter with Adam
        return {"parameters": 4 * n_params, "gradients": 4 * n_params,
                "optimizer state": states}
    # Mixed precision as the ZeRO paper counts it: fp16 weights and gradients for the passes,
    # and the optimizer keeps an fp32 master copy beside its moments: 2 + 2 + 12 = 16 with Adam.
    return {"parameters": 2 * n_params, "gradients": 2 * n_params,
            "optimizer state": 4 * n_params + states}


def _storage_key(t: torch.Tensor) -> tuple:
    # Views share their base's storage: key by the storage, so that memory is counted once.
    return (t.device, t.untyped_storage().data_ptr())


def tensor_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    """Bytes held by tensors (None skipped), each storage counted once, views included."""
    sizes: dict[tuple, int] = {}
    for t in tensors:
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"tensor_bytes() counts tensors, got {type(t).__name__}")
        sizes[_storage_key(t)] = t.untyped_storage().nbytes()
    return sum(sizes.values())


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of an optimizer's per-parameter state; scalars (Adam's step count) left out."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer_state_bytes() needs a torch.optim.Optimizer, "
                        f"got {type(optimizer).__name__}")
    return tensor_bytes(v for state in optimizer.state.values() for v in state.values()
                        if isinstance(v, torch.Tensor) and v.dim() > 0)


def model_state_bytes(model: torch.nn.Module,
                      optimizer: torch.optim.Optimizer | None = None) -> dict[str, int]:
    """Bytes alive now in a model's parameters, their gradients and its optimizer's state."""
    params = list(model.parameters())
    return {"parameters": tensor_bytes(params),
            "gradients": tensor_bytes(p.grad for p in params),
            "optimizer state": 0 if optimizer is None else optimizer_state_bytes(optimizer)}


class _Saved:
    # What a pack hook hands autograd instead of the tensor: when autograd drops it (after the
    # backward pass used it, or with the graph), a finalizer tells the counter.
    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor


class SavedTensors:
    """Count the bytes autograd keeps for the backward pass while they are saved and released.

    Use as `with dx.SavedTensors(exclude=model.parameters()) as saved:` around a forward (and
    backward) pass. Parameters are alive anyway, so they are left out. Each storage counts once,
    however many operations saved it. `timeline` holds the bytes kept after every save or
    release, `marks` the (index, label) where `mark(label)` was called.
    """

    def __init__(self, exclude: Iterable[torch.Tensor] = ()):
        self._exclude = {_storage_key(t) for t in exclude}
        self._held: dict[tuple, list[int]] = {}  # storage -> [holders, bytes]
        self._lock = threading.Lock()  # the backward pass may release from its own thread
        self.bytes = 0
        self.peak = 0
        self.timeline: list[int] = [0]
        self.marks: list[tuple[int, str]] = []

    def mark(self, label: str) -> None:
        """Label the point of the timeline reached now (for example 'backward')."""
        self.marks.append((len(self.timeline) - 1, label))

    def _change(self, delta: int) -> None:
        self.bytes += delta
        self.peak = max(self.peak, self.bytes)
        self.timeline.append(self.bytes)

    def _pack(self, t: torch.Tensor) -> object:
        key = _storage_key(t)
        if key in self._exclude:
            return t
        saved = _Saved(t)
        with self._lock:
            entry = self._held.setdefault(key, [0, t.untyped_storage().nbytes()])
            entry[0] += 1
            if entry[0] == 1:
                self._change(entry[1])
        weakref.finalize(saved, self._release, key)
        return saved

    def _release(self, key: tuple) -> None:
        with self._lock:
            entry = self._held[key]
            entry[0] -= 1
            if entry[0] == 0:
                del self._held[key]
                self._change(-entry[1])

    @staticmethod
    def _unpack(saved: object) -> torch.Tensor:
        return saved.tensor if isinstance(saved, _Saved) else saved

    def __enter__(self) -> "SavedTensors":
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)


@dataclass
class MemoryTimeline:
    """Bytes allocated (and on CUDA reserved) above the start, over one profiled call."""

    times: list[float]              # seconds since the start of the call
    allocated: list[int]            # bytes allocated above what was allocated at the start
    reserved: list[int] | None      # CUDA only: bytes the caching allocator holds
    phases: list[tuple[str, float, float]] = field(default_factory=list)  # name, start, end

    @property
    def peak(self) -> int:
        """Most bytes allocated above the start at any point of the call."""
        return max(self.allocated, default=0)


def _memory_device(device: torch.device | str) -> torch.device:
    device = torch.device(device)
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"memory is measured on 'cpu' or 'cuda' devices, not {device.type!r} "
                         "(on a Mac, measure on the CPU)")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def memory_events(trace: dict, device: torch.device | str = "cpu", phases: Iterable[str] = (),
                  reserved_before: int | None = None) -> MemoryTimeline:
    """The allocations and frees on `device` in a trace from profile_trace(..., memory=True).

    On CUDA, `reserved_before` (bytes reserved when the call began) makes reserved a figure
    above the start, as allocated is; without it, the reserve of the first event is the start.
    """
    device = _memory_device(device)
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise ValueError("memory_events() needs a Chrome trace dict with a 'traceEvents' list")
    # Kineto's device types: 0 is the CPU, 1 is CUDA.
    kind, index = (0, -1) if device.type == "cpu" else (1, device.index)
    wanted = set(phases)
    mem, spans = [], []
    for ev in trace["traceEvents"]:
        args = ev.get("args", {})
        if ev.get("name") == "[memory]" and args.get("Device Type") == kind and (
                kind == 0 or args.get("Device Id") == index):
            mem.append((ev["ts"], args["Bytes"], args.get("Total Reserved")))
        elif ev.get("cat") == "user_annotation" and ev.get("name") in wanted:
            spans.append((ev["name"], ev["ts"], ev["ts"] + ev.get("dur", 0)))
    mem.sort()
    starts = [m[0] for m in mem] + [s[1] for s in spans]
    t0 = min(starts, default=0.0)
    times, allocated, total = [0.0], [0], 0
    for ts, n_bytes, _ in mem:
        total += n_bytes
        times.append((ts - t0) * 1e-6)
        allocated.append(total)
    reserved = None
    if kind == 1:  # the caching allocator's reserve, above the start as allocated
        if reserved_before is not None:
            start = reserved_before
        else:
            start = mem[0][2] if mem else 0
        reserved = [0] + [held - start for _, _, held in mem]
    return MemoryTimeline(times, allocated, reserved,
                          [(n, (s - t0) * 1e-6, (e - t0) * 1e-6) for n, s, e in sorted(
                              spans, key=lambda s: s[1])])


def memory_timeline(fn: Callable[[], object], device: torch.device | str = "cpu",
                    phases: Iterable[str] = ("forward", "backward", "optimizer")
                    ) -> MemoryTimeline:
    """Profile one call of fn; return the bytes allocated on device over time, and its phases.

    Phases are the `torch.profiler.record_function(name)` blocks inside fn with those names.
    The curve counts what the call allocates and frees: freeing a tensor made before the call
    does not lower it (the profiler knows no size for such a block).
    """
    device = _memory_device(device)
    before = torch.cuda.memory_reserved(device) if device.type == "cuda" else None
    return memory_events(profile_trace(fn, [device], memory=True), device, phases, before)


def peak_memory(fn: Callable[[], object], device: torch.device | str = "cpu") -> int:
    """Most bytes allocated on device during one call of fn, above what was allocated before."""
    if not callable(fn):
        raise TypeError(f"peak_memory() needs a function to call, got {type(fn).__name__}")
    device = _memory_device(device)
    if device.type == "cpu":  # no counter on the CPU: the profiler sees every allocation
        return memory_timeline(fn, device, phases=()).peak
    synchronize([device])
    torch.cuda.reset_peak_memory_stats(device)
    start = torch.cuda.memory_allocated(device)
    fn()
    synchronize([device])
    return torch.cuda.max_memory_allocated(device) - start


def snapshot_series(snapshot: dict, device_index: int = 0) -> list[int]:
    """Bytes allocated after each event of a CUDA memory snapshot, from its first event on."""
    # torch.cuda.memory._snapshot() after _record_memory_history(): device_traces holds, per GPU,
    # the recorded actions; "alloc" and "free_completed" change what tensors hold.
    traces = snapshot.get("device_traces") if isinstance(snapshot, dict) else None
    if not isinstance(traces, list) or not 0 <= device_index < len(traces):
        raise ValueError("snapshot_series() needs torch.cuda.memory._snapshot()'s dict, with a "
                         f"trace for device {device_index}: record with "
                         "torch.cuda.memory._record_memory_history() first")
    total, series = 0, [0]
    for event in traces[device_index]:
        step = {"alloc": 1, "free_completed": -1}.get(event.get("action"))
        if step is not None:
            total += step * event["size"]
            series.append(total)
    return series


class CachingAllocatorModel:
    """A toy of PyTorch's CUDA caching allocator: allocated vs reserved, on any machine.

    Requests are rounded up to 512 bytes; a freed block stays reserved and serves any later
    request that fits it (the best fit; the toy gives each tensor a whole block, where the
    real allocator splits large ones); a request no free block fits reserves a new segment,
    rounded up to 2 MiB. `empty_cache()` returns the free blocks to the device.
    """

    ROUND, SEGMENT = 512, 2 * MiB

    def __init__(self):
        self._free: list[int] = []            # sizes of reserved blocks not in use
        self._used: dict[int, tuple[int, int]] = {}  # handle -> (rounded request, block)
        self._next = 0
        self.allocated = 0
        self.reserved = 0

    def malloc(self, n_bytes: int) -> int:
        """Allocate n_bytes; return a handle for free()."""
        n_bytes = whole_number(n_bytes, "malloc(): n_bytes")
        size = -(-n_bytes // self.ROUND) * self.ROUND
        fits = [b for b in self._free if b >= size]
        if fits:
            block = min(fits)
            self._free.remove(block)
        else:
            block = -(-size // self.SEGMENT) * self.SEGMENT
            self.reserved += block
        self._next += 1
        self._used[self._next] = (size, block)
        self.allocated += size
        return self._next

    def free(self, handle: int) -> None:
        """Give a block back to the cache (it stays reserved)."""
        if handle not in self._used:
            raise ValueError(f"free(): no allocated block has handle {handle!r}")
        size, block = self._used.pop(handle)
        self.allocated -= size
        self._free.append(block)

    def empty_cache(self) -> None:
        """Return every free block to the device, as torch.cuda.empty_cache() does."""
        self.reserved -= sum(self._free)
        self._free.clear()
