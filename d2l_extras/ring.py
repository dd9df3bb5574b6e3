"""Ring allreduce, chunked: reduce-scatter then all-gather (d2l section 12.7.2).

`ring_allreduce` runs the algorithm step by step on a list of tensors, one per device (real or
simulated, see `dx.devices`), and counts the bytes every link of the ring carries.
`ring_allreduce_dist` is the same algorithm between torch.distributed processes (send/recv).

Run this module as a benchmark of `ring_allreduce_dist` against `dist.all_reduce`.
One machine, 2 processes (gloo on CPU; NCCL when every process has its own GPU):
    python -m d2l_extras.distributed --nproc-per-node=2 -m d2l_extras.ring --sizes-mb 1 4 16 64
Two machines with 4 processes each: run on both, --node-rank=0 on the first and 1 on the other,
with the first machine's address (reachable from the second):
    python -m torch.distributed.run --nnodes=2 --node-rank=0 --nproc-per-node=4 \
        --master-addr=10.0.0.1 --master-port=29500 -m d2l_extras.ring --sizes-mb 1 4 16 64
"""
from __future__ import annotations

import argparse
import datetime
from dataclasses import dataclass, field
from typing import Sequence

import torch

from .timing import measure_interleaved

OPS = ("sum", "prod", "max", "min")


def _combine_(target: torch.Tensor, incoming: torch.Tensor, op: str) -> None:
    # In place, so that `target` (a view into the node's buffer) is updated where it lives.
    if op == "sum":
        target.add_(incoming)
    elif op == "prod":
        target.mul_(incoming)
    elif op == "max":
        torch.maximum(target, incoming, out=target)
    else:
        torch.minimum(target, incoming, out=target)


def _check_op(op: str) -> str:
    if op not in OPS:
        raise ValueError(f"op must be one of {', '.join(OPS)} (a commutative, associative "
                         f"reduction), got {op!r}")
    return op


@dataclass
class RingStats:
    """What a simulated ring allreduce did: bytes per link (src, dst) and the steps it took."""

    n: int
    size_bytes: int
    link_bytes: dict[tuple[int, int], int] = field(default_factory=dict)
    steps: list[tuple[str, list[tuple[int, int, int]]]] = field(default_factory=list)

    @property
    def expected_link_bytes(self) -> float:
        """What theory says each link carries: 2 (n-1)/n of the data."""
        return 2 * (self.n - 1) / self.n * self.size_bytes

    def schedule(self) -> str:
        """The steps as text: in each, node src sends chunk c to node dst."""
        lines = []
        for i, (phase, moves) in enumerate(self.steps, 1):
            sends = ", ".join(f"{s}->{d}:c{c}" for s, d, c in moves)
            lines.append(f"step {i} ({phase}): {sends}")
        return "\n".join(lines)


def ring_allreduce(tensors: Sequence[torch.Tensor], op: str = "sum"
                   ) -> tuple[list[torch.Tensor], RingStats]:
    """Reduce a list of same-shaped tensors (one per node) around a ring; results and stats.

    Node i's data is cut into n chunks. Reduce-scatter: in step s node i sends chunk (i-s)
    to node i+1, which combines it into its own copy; after n-1 steps node i holds the full
    result of chunk i+1. All-gather: n-1 more steps pass the finished chunks around.
    """
    _check_op(op)
    if isinstance(tensors, torch.Tensor) or not isinstance(tensors, Sequence) or not tensors:
        raise TypeError("ring_allreduce needs a non-empty list of tensors, one per device")
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        raise TypeError("every element of the list must be a torch.Tensor")
    shape, dtype = tensors[0].shape, tensors[0].dtype
    for i, t in enumerate(tensors):
        if t.shape != shape or t.dtype != dtype:
            raise ValueError(f"all tensors need the same shape and dtype: tensor 0 is "
                             f"{tuple(shape)} {dtype}, tensor {i} is {tuple(t.shape)} {t.dtype}")
    n = len(tensors)
    flat = [t.detach().reshape(-1).clone() for t in tensors]  # never modify the inputs
    # tensor_split also works when n does not divide the size: chunks differ by one element.
    chunks = [torch.tensor_split(f, n) for f in flat]
    stats = RingStats(n, flat[0].numel() * flat[0].element_size())
    stats.link_bytes = {(i, (i + 1) % n): 0 for i in range(n)} if n > 1 else {}

    def step(phase: str, chunk_of, combine: bool) -> None:
        # All n sends of a step happen at once: copy every message before anyone updates.
        moves = [(i, (i + 1) % n, chunk_of(i)) for i in range(n)]
        messages = [chunks[src][c].to(flat[dst].device, copy=True) for src, dst, c in moves]
        for (src, dst, c), data in zip(moves, messages):
            if combine:
                _combine_(chunks[dst][c], data, op)
            else:
                chunks[dst][c].copy_(data)
            stats.link_bytes[(src, dst)] += data.numel() * data.element_size()
        stats.steps.append((phase, moves))

    for s in range(n - 1):
        step("reduce-scatter", lambda i, s=s: (i - s) % n, combine=True)
    for s in range(n - 1):
        step("all-gather", lambda i, s=s: (i + 1 - s) % n, combine=False)
    return [f.view(shape) for f in flat], stats


def _reference(tensors: Sequence[torch.Tensor], op: str) -> torch.Tensor:
    # The one-device answer the ring must match (on the first tensor's device).
    stacked = torch.stack([t.to(tensors[0].device) for t in tensors])
    return {"sum": lambda: stacked.sum(0), "prod": lambda: stacked.prod(0),
            "max": lambda: stacked.amax(0), "min": lambda: stacked.amin(0)}[op]()


def reduce_reference(tensors: Sequence[torch.Tensor], op: str = "sum") -> torch.Tensor:
    """The plain reduction of the tensors on one device: what every ring node must end with."""
    return _reference(tensors, _check_op(op))


# ---------------------------------------------------------------------------------------------
# The same ring between torch.distributed processes.

def ring_allreduce_dist(tensor: torch.Tensor, timeout_s: float = 60.0) -> torch.Tensor:
    """Sum `tensor` over all processes in place with a ring of send/recv; returns it.

    A dead neighbour raises instead of hanging: on gloo every wait is bounded by timeout_s; on
    NCCL the waits only order the GPU's stream, and the group's timeout ends a hang.
    """
    import torch.distributed as dist

    from .distributed import wait_for

    if not dist.is_initialized():
        raise RuntimeError("ring_allreduce_dist needs torch.distributed: call dx.init_worker() "
                           "in a process started by torchrun (dx.launch)")
    if not tensor.is_contiguous():
        raise ValueError("ring_allreduce_dist works in place on a contiguous tensor; "
                         "pass tensor.contiguous() and use the result")
    rank, n = dist.get_rank(), dist.get_world_size()
    if n == 1:
        return tensor
    timeout = datetime.timedelta(seconds=timeout_s)
    chunks = torch.tensor_split(tensor.view(-1), n)
    right, left = (rank + 1) % n, (rank - 1) % n
    inbox = torch.empty(chunks[0].numel(), dtype=tensor.dtype, device=tensor.device)

    def exchange(send: torch.Tensor, recv: torch.Tensor) -> None:
        # Post the send and the receive together: with NCCL, two blocking sends would deadlock.
        ops = [dist.P2POp(dist.isend, send, right), dist.P2POp(dist.irecv, recv, left)]
        for work in dist.batch_isend_irecv(ops):
            wait_for(work, timeout)

    for s in range(n - 1):  # reduce-scatter: add what the left neighbour sends
        target = chunks[(rank - s - 1) % n]
        exchange(chunks[(rank - s) % n], inbox[:target.numel()])
        target.add_(inbox[:target.numel()])
    for s in range(n - 1):  # all-gather: receive finished chunks straight into place
        exchange(chunks[(rank + 1 - s) % n], chunks[(rank - s) % n])
    return tensor


def process_counts(gpus: int) -> list[int]:
    """How many processes to run the ring with, given the number of GPUs here (0 to 8, or more).

    Every count runs on one backend, so that their bus bandwidths compare like with like: NCCL,
    one GPU per process, wherever there are 2 GPUs or more (2, then up to 4, then all of them);
    else gloo on the CPU with 2 and 4. Two counts tell the cost models apart (a link per
    neighbour keeps the bus bandwidth level; one shared machine divides it by the count), and
    every count is a job that takes seconds to start. With exactly 2 GPUs there is one count.
    """
    from .checks import whole_number

    gpus = whole_number(gpus, "gpus (0 on a CPU-only machine)", minimum=0)
    if gpus < 2:
        return [2, 4]
    return sorted({2, min(gpus, 4), gpus})


def message_sizes_mb(nproc: int, gpus: int, count: int = 4, budget: int | None = None
                     ) -> list[float]:
    """Message sizes in MB, 4x apart, for a ring benchmark of nproc processes (largest last).

    The largest is the size policy's "ring_message" for the device the workers will use
    (dx.worker_device, as dx.init_worker decides): one GPU each (NCCL), else the CPU (gloo).
    `budget` stands for one GPU's free bytes, so that GPU cases can be tested anywhere.
    """
    from .distributed import worker_device
    from .checks import whole_number
    from .sizes import problem_size

    nproc = whole_number(nproc, "nproc")
    count = whole_number(count, "count")
    process_counts(gpus)  # validates gpus
    if worker_device(nproc, n_gpus=gpus).type == "cuda":
        largest = problem_size("ring_message", "cuda", budget=budget)
    else:
        largest = problem_size("ring_message", "cpu")
    return [largest * 4 / 2**20 / 4**k for k in reversed(range(count))]


def check_input(rank: int, numel: int = 1001) -> torch.Tensor:
    """The small tensor rank contributes to the benchmark's correctness check (CPU, float32).

    The notebook sums these itself, in one process, and compares with what the ring returned.
    """
    gen = torch.Generator().manual_seed(10_000 + rank)
    return torch.randn(numel, generator=gen)


def bus_bandwidth(size_bytes: float, seconds: float, n: int) -> tuple[float, float]:
    """(algbw, busbw) in bytes/s: size/time, and the per-link rate 2 (n-1)/n * algbw."""
    if seconds <= 0 or n < 1:
        raise ValueError(f"need seconds > 0 and n >= 1, got seconds={seconds}, n={n}")
    algbw = size_bytes / seconds
    return algbw, algbw * 2 * (n - 1) / n


def benchmark(sizes_mb: Sequence[float], repeats: int = 5, timeout_s: float = 60.0) -> dict:
    """In a worker: check ring == all_reduce, then time both per size, interleaved.

    Per size: "ring_s" and "allreduce_s" hold the medians, "ring_runs" and "allreduce_runs"
    every run, "*_first_s" the first call. Also returns "check": the ring's sum of
    `check_input(rank)` over all ranks (rank 0's copy).
    """
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", torch.cuda.current_device()) \
        if dist.get_backend() == "nccl" else torch.device("cpu")

    # The ring's answer on a small input that the notebook can recompute in one process.
    check = ring_allreduce_dist(check_input(rank).to(device), timeout_s)
    out = {"world": n, "backend": dist.get_backend(), "check": check.cpu().tolist(),
           "sizes_bytes": [], "ring_s": [], "allreduce_s": [], "ring_runs": [],
           "allreduce_runs": [], "ring_first_s": [], "allreduce_first_s": []}
    gen = torch.Generator().manual_seed(rank)
    for mb in sizes_mb:
        numel = int(mb * 2**20) // 4
        x = torch.randn(numel, generator=gen).to(device)
        ours, theirs = x.clone(), x.clone()
        ring_allreduce_dist(ours, timeout_s)
        dist.all_reduce(theirs)
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
        work = x.clone()   # both reduce it in place: it is reset before every timed call

        def reset() -> None:
            work.copy_(x)
            dist.barrier()  # start together, or we time the neighbour's late arrival

        timed = measure_interleaved(  # interleaved, so that noise hits both alike
            {"ring": lambda: ring_allreduce_dist(work, timeout_s),
             "allreduce": lambda: dist.all_reduce(work)},
            devices=[device], runs=repeats, before=reset)
        out["sizes_bytes"].append(numel * 4)
        for key, m in timed.items():
            out[f"{key}_s"].append(m.median)
            out[f"{key}_runs"].append(m.warm)
            out[f"{key}_first_s"].append(m.cold)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    """Worker entry point: benchmark the ring against dist.all_reduce and hand back results."""
    from .distributed import finish_worker, init_worker, save_result

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", type=float, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    rank, _, _ = init_worker(args.timeout)
    try:
        result = benchmark(args.sizes_mb, args.repeats, args.timeout)
        if rank == 0:
            save_result(result)
    finally:
        finish_worker()


if __name__ == "__main__":
    main()
