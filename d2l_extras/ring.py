"""Ring allreduce (d2l 12.7.2): reduce-scatter, then all-gather; simulated and between processes:
    python -m d2l_extras.distributed --nproc-per-node=2 -m d2l_extras.ring --sizes-mb 1 4 16 64
"""
import argparse
import datetime
from dataclasses import dataclass, field
from typing import Sequence

import torch
import torch.distributed as dist

from .checks import whole_number
from .distributed import init_worker, run_worker, wait_for, worker_device
from .sizes import problem_size
from .timing import measure_interleaved

@dataclass
class RingStats:
    """What a simulated ring allreduce did: bytes per link (src, dst) and the steps it took."""

    link_bytes: dict[tuple[int, int], int]
    steps: list[tuple[str, list[tuple[int, int, int]]]] = field(default_factory=list)

    def schedule(self) -> str:
        """The steps as text: in each, node src sends chunk c to node dst."""
        return "\n".join(f"step {i} ({phase}): " + ", ".join(f"{s}->{d}:c{c}" for s, d, c in moves)
                         for i, (phase, moves) in enumerate(self.steps, 1))


def ring_allreduce(tensors: Sequence[torch.Tensor]) -> tuple[list[torch.Tensor], RingStats]:
    """Sum same-shaped tensors (one per node) around a ring; return the results and stats."""
    if not isinstance(tensors, Sequence) or not tensors or \
            not all(isinstance(t, torch.Tensor) for t in tensors):
        raise TypeError("ring_allreduce needs a non-empty list of torch.Tensor, one per device")
    shape, dtype, n = tensors[0].shape, tensors[0].dtype, len(tensors)
    for i, t in enumerate(tensors):
        if (t.shape, t.dtype) != (shape, dtype):
            raise ValueError(f"all tensors need the same shape and dtype: tensor 0 is "
                             f"{tuple(shape)} {dtype}, tensor {i} is {tuple(t.shape)} {t.dtype}")
    flat = [t.detach().reshape(-1).clone() for t in tensors]  # never modify the inputs
    # tensor_split also works when n does not divide the size: chunks differ by one element.
    chunks = [torch.tensor_split(f, n) for f in flat]
    stats = RingStats({(i, (i + 1) % n): 0 for i in range(n)} if n > 1 else {})
    # Step s: node i sends chunk i-s to node i+1, which adds it to its own for n-1 steps
    # (reduce-scatter: node i then has chunk i+1 complete), then keeps it (all-gather).
    for s in range(2 * (n - 1)):
        gather = s >= n - 1
        moves = [(i, (i + 1) % n, (i - s) % n) for i in range(n)]
        # The n sends of a step happen at once; in turns too, as no node sends what it gets.
        for src, dst, c in moves:
            data, target = chunks[src][c].to(flat[dst].device), chunks[dst][c]
            target.copy_(data if gather else target + data)
            stats.link_bytes[(src, dst)] += data.numel() * data.element_size()
        stats.steps.append(("all-gather" if gather else "reduce-scatter", moves))
    return [f.view(shape) for f in flat], stats


def ring_allreduce_dist(tensor: torch.Tensor, timeout_s: float = 60.0) -> torch.Tensor:
    """Sum `tensor` over all processes in place with a ring of send/recv; returns it."""
    if not dist.is_initialized():
        raise RuntimeError("ring_allreduce_dist needs torch.distributed: call dx.distributed.init_worker() "
                           "in a process started by torchrun (dx.launch)")
    if not tensor.is_contiguous():
        raise ValueError("ring_allreduce_dist works in place: pass tensor.contiguous(), use that")
    rank, n = dist.get_rank(), dist.get_world_size()
    chunks = torch.tensor_split(tensor.view(-1), n)
    inbox = torch.empty_like(chunks[0])  # the first chunk is the largest
    # ring_allreduce's steps: reduce-scatter adds into the target chunk, all-gather fills it.
    for s in range(2 * (n - 1)):
        send, target = chunks[(rank - s) % n], chunks[(rank - s - 1) % n]
        recv = target if s >= n - 1 else inbox[:target.numel()]
        # Post the send and the receive together: with NCCL, two blocking sends would deadlock.
        ops = [dist.P2POp(dist.isend, send, (rank + 1) % n),
               dist.P2POp(dist.irecv, recv, (rank - 1) % n)]
        for work in dist.batch_isend_irecv(ops):
            wait_for(work, datetime.timedelta(seconds=timeout_s))
        if recv is not target:
            target.add_(recv)
    return tensor


def process_counts(gpus: int) -> list[int]:
    """How many processes to run the ring with, given the number of GPUs here (0 or more)."""
    # One backend for all counts (NCCL from 2 GPUs, else gloo), so that bus bandwidths compare.
    gpus = whole_number(gpus, "gpus (0 on a CPU-only machine)", minimum=0)
    return [2, 4] if gpus < 2 else sorted({2, min(gpus, 4), gpus})


def message_sizes_mb(nproc: int, gpus: int, count: int = 4, budget: int | None = None
                     ) -> list[float]:
    """MB sizes 4x apart (largest last) for nproc ring processes; budget: one GPU's free bytes."""
    process_counts(gpus)  # validates gpus
    gpu = worker_device(whole_number(nproc, "nproc"), n_gpus=gpus).type == "cuda"
    largest = problem_size("ring_message", "cuda" if gpu else "cpu", budget=budget if gpu else None)
    return [largest * 4 / 2**20 / 4**k for k in reversed(range(whole_number(count, "count")))]


def check_input(rank: int, numel: int = 1001) -> torch.Tensor:
    """The tensor rank adds in the benchmark's check: (rank + 1) * (0, 1, ..., numel - 1)."""
    # n ranks sum to n (n + 1) / 2 * (0, 1, ...), which notebook 08 writes down by hand; every
    # position holds its own value, so a chunk added in the wrong place shows. Exact in float32.
    return (whole_number(rank, "rank", minimum=0) + 1) * torch.arange(
        whole_number(numel, "numel"), dtype=torch.float32)


def bus_bandwidth(size_bytes: float, seconds: float, n: int) -> tuple[float, float]:
    """(algbw, busbw) in bytes/s: size/time, and the per-link rate 2 (n-1)/n * algbw."""
    if seconds <= 0 or n < 1:
        raise ValueError(f"need seconds > 0 and n >= 1, got seconds={seconds}, n={n}")
    algbw = size_bytes / seconds
    return algbw, algbw * 2 * (n - 1) / n


def benchmark(sizes_mb: Sequence[float], repeats: int = 5, timeout_s: float = 60.0) -> dict:
    """In a torchrun worker: check ring == all_reduce, then time both per size, interleaved."""
    rank, n, device = init_worker(timeout_s)  # joins the group unless it is joined already
    check = ring_allreduce_dist(check_input(rank).to(device), timeout_s)
    out = {"sizes_bytes": [], "ring_runs": [], "allreduce_runs": []}
    gen = torch.Generator().manual_seed(rank)
    for mb in sizes_mb:
        x = torch.randn(int(mb * 2**20) // 4, generator=gen).to(device)
        ours, theirs = ring_allreduce_dist(x.clone(), timeout_s), x.clone()
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
        out["sizes_bytes"].append(x.numel() * 4)
        for key, m in timed.items():
            out[f"{key}_runs"].append(m.warm)
    return {"world": n, "backend": dist.get_backend(), "check": check.cpu().tolist(), **out}


def main(argv: Sequence[str] | None = None) -> None:
    """Worker entry point: benchmark the ring against dist.all_reduce and hand back results."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes-mb", type=float, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    run_worker(lambda: benchmark(args.sizes_mb, args.repeats, args.timeout))


if __name__ == "__main__":
    main()
