"""Where training's memory goes: predicted, counted (allocator, profiler, autograd), followed."""
import itertools
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
    if isinstance(n_params, float) and n_params.is_integer():  # 7.5e9 parameters: accepted
        n_params = int(n_params)
    n_params = whole_number(n_params, "n_params", minimum=0)
    if optimizer not in OPTIMIZER_STATES:
        raise ValueError(f"optimizer must be one of {list(OPTIMIZER_STATES)}, got {optimizer!r}")
    # Mixed precision as ZeRO counts it: fp16 weights and gradients, an fp32 master copy beside
    # the moments: 2 + 2 + 12 = 16 bytes per parameter with Adam, as in float32 (4 + 4 + 8).
    width = 2 if mixed else 4
    return {"parameters": width * n_params, "gradients": width * n_params,
            "optimizer state": 4 * (OPTIMIZER_STATES[optimizer] + int(mixed)) * n_params}


def _storage_key(t: torch.Tensor) -> tuple:
    # Views share their base's storage: key by the storage, so that memory is counted once.
    return (t.device, t.untyped_storage().data_ptr())


def _tensor_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    return sum({_storage_key(t): t.untyped_storage().nbytes()
                for t in tensors if t is not None}.values())


def model_state_bytes(model: torch.nn.Module,
                      optimizer: torch.optim.Optimizer | None = None) -> dict[str, int]:
    """Bytes alive now in a model's parameters, their gradients and its optimizer's state."""
    if not isinstance(optimizer, (torch.optim.Optimizer, type(None))):
        raise TypeError("model_state_bytes(): optimizer must be a torch.optim.Optimizer or None, "
                        f"got {type(optimizer).__name__}")
    params, states = list(model.parameters()), optimizer.state.values() if optimizer else []
    # Per-parameter state only: Adam's step counters are scalars.
    return {"parameters": _tensor_bytes(params),
            "gradients": _tensor_bytes(p.grad for p in params),
            "optimizer state": _tensor_bytes(v for state in states for v in state.values()
                                             if isinstance(v, torch.Tensor) and v.dim() > 0)}


@dataclass(slots=True, weakref_slot=True)
class _Saved:  # what autograd keeps instead of the tensor: its finalizer tells the counter
    tensor: torch.Tensor


class SavedTensors(torch.autograd.graph.saved_tensors_hooks):
    """`with SavedTensors(exclude=model.parameters()) as saved:` counts the bytes autograd keeps."""

    def __init__(self, exclude: Iterable[torch.Tensor] = ()):
        super().__init__(self._pack, lambda s: s.tensor if isinstance(s, _Saved) else s)
        self._exclude = {_storage_key(t) for t in exclude}  # parameters: alive anyway
        self._held: dict[tuple, tuple[int, int]] = {}  # storage -> (holders, bytes)
        self._lock = threading.Lock()  # the backward pass may release from its own thread
        self.bytes = self.peak = 0
        self.timeline: list[int] = [0]  # the bytes kept after every save or release
        self.marks: list[tuple[int, str]] = []  # (timeline index, label) of each mark()

    def mark(self, label: str) -> None:
        """Label the point of the timeline reached now (for example 'backward')."""
        self.marks.append((len(self.timeline) - 1, label))

    def _pack(self, t: torch.Tensor) -> object:
        key = _storage_key(t)
        if key in self._exclude:
            return t
        saved = _Saved(t)
        self._hold(key, 1, t.untyped_storage().nbytes())
        weakref.finalize(saved, self._hold, key, -1)  # when autograd drops what it saved
        return saved

    def _hold(self, key: tuple, change: int, n_bytes: int = 0) -> None:
        with self._lock:
            holders, n_bytes = self._held.pop(key, (0, n_bytes))
            if holders + change:
                self._held[key] = (holders + change, n_bytes)
            if 0 in (holders, holders + change):  # the first save or the last release
                self.bytes += change * n_bytes
                self.peak = max(self.peak, self.bytes)
                self.timeline.append(self.bytes)

    def __enter__(self) -> "SavedTensors":
        super().__enter__()
        return self


@dataclass
class MemoryTimeline:
    """Bytes allocated (and on CUDA reserved) above the start, over one profiled call."""
    times: list[float]              # seconds since the start of the call
    allocated: list[int]
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


def memory_timeline(fn: Callable[[], object], device: torch.device | str = "cpu",
                    phases: Iterable[str] = ("forward", "backward", "optimizer")
                    ) -> MemoryTimeline:
    """Profile one call of fn; return the bytes allocated on device over time, and its phases."""
    # Phases are the record_function(name) blocks inside fn. Freeing a tensor made before the
    # call does not lower the curve: the profiler knows no size for such a block.
    device = _memory_device(device)
    before = torch.cuda.memory_reserved(device) if device.type == "cuda" else 0
    trace = profile_trace(fn, [device], memory=True)
    # Kineto's device types: 0 is the CPU (device id -1), 1 is CUDA.
    kind, phases = int(device.type == "cuda"), set(phases)
    mem, spans = [], []
    for ev in trace["traceEvents"]:
        args = ev.get("args", {})
        if ev.get("name") == "[memory]" and args.get("Device Type") == kind and (
                not kind or args.get("Device Id") == device.index):
            mem.append((ev["ts"], args["Bytes"], args.get("Total Reserved")))
        elif ev.get("cat") == "user_annotation" and ev.get("name") in phases:
            spans.append((ev["ts"], ev["ts"] + ev.get("dur", 0), ev["name"]))
    mem.sort()
    spans.sort(key=lambda s: s[0])
    t0 = min([m[0] for m in mem] + [s[0] for s in spans], default=0.0)
    return MemoryTimeline([0.0] + [(ts - t0) * 1e-6 for ts, _, _ in mem],
                          [0, *itertools.accumulate(n for _, n, _ in mem)],
                          [0] + [held - before for _, _, held in mem] if kind else None,
                          [(name, (s - t0) * 1e-6, (e - t0) * 1e-6) for s, e, name in spans])


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
    # device_traces holds each GPU's recorded actions; "alloc" and "free_completed" change bytes.
    traces = snapshot.get("device_traces") if isinstance(snapshot, dict) else None
    if not isinstance(traces, list) or not 0 <= device_index < len(traces):
        raise ValueError(f"snapshot_series() needs torch.cuda.memory._snapshot() with a trace for "
                         f"device {device_index}: call _record_memory_history() first")
    sign = {"alloc": 1, "free_completed": -1}
    return [0, *itertools.accumulate(sign[ev["action"]] * ev["size"] for ev in traces[device_index]
                                     if ev.get("action") in sign)]


class CachingAllocatorModel:
    """A toy of PyTorch's CUDA caching allocator: allocated vs reserved, on any machine."""
    # A freed block stays reserved and serves the best-fitting later request, whole (the real
    # allocator splits large blocks); a request no free block fits reserves a new segment.
    ROUND, SEGMENT = 512, 2 * MiB

    def __init__(self):
        self._free: list[int] = []  # sizes of reserved blocks not in use
        self._used: dict[int, tuple[int, int]] = {}  # handle -> (rounded request, block)
        self._handles = itertools.count(1)
        self.allocated = self.reserved = 0

    def malloc(self, n_bytes: int) -> int:
        """Allocate n_bytes; return a handle for free()."""
        size = -(-whole_number(n_bytes, "malloc(): n_bytes") // self.ROUND) * self.ROUND
        block = min((b for b in self._free if b >= size), default=None)
        if block is None:
            block = -(-size // self.SEGMENT) * self.SEGMENT
            self.reserved += block
        else:
            self._free.remove(block)
        self._used[handle := next(self._handles)] = (size, block)
        self.allocated += size
        return handle


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
