"""The ring's torchrun job (notebook 08): its ring_allreduce_dist against dist.all_reduce.
    python -m d2l_extras.distributed --nproc-per-node=2 -m d2l_extras.ring --sizes-mb 1 4 16 64
"""
import argparse
from typing import Sequence

import torch
import torch.distributed as dist

import d2l_extras as dx
from .distributed import init_worker, run_worker


def bus_bandwidth(size_bytes: float, seconds: float, n: int) -> tuple[float, float]:
    """(algbw, busbw) in bytes/s: size/time, and the per-link rate 2 (n-1)/n * algbw."""
    algbw = size_bytes / seconds
    return algbw, algbw * 2 * (n - 1) / n


def benchmark(sizes_mb: Sequence[float], repeats: int = 5, timeout_s: float = 60.0) -> dict:
    """In a torchrun worker: check ring == all_reduce, then time both per size, interleaved."""
    rank, n, device = init_worker(timeout_s)  # the group's timeout bounds every wait
    # Rank r adds (r + 1) * (0, 1, ..., 1000): the sum n (n + 1) / 2 * (...), which notebook 08
    # writes down; every position holds its own value, so a chunk added in the wrong place shows.
    check = dx.ring_allreduce_dist((rank + 1) * torch.arange(1001.0, device=device))
    out = {"sizes_bytes": [], "ring_runs": [], "allreduce_runs": []}
    gen = torch.Generator().manual_seed(rank)
    for mb in sizes_mb:
        x = torch.randn(int(mb * 2**20) // 4, generator=gen).to(device)
        ours, theirs = dx.ring_allreduce_dist(x.clone()), x.clone()
        dist.all_reduce(theirs)
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
        work = x.clone()   # both reduce it in place: it is reset before every timed call

        def reset() -> None:
            work.copy_(x)
            dist.barrier()  # start together, or we time the neighbour's late arrival

        timed = dx.measure_interleaved(  # interleaved, so that noise hits both alike
            {"ring": lambda: dx.ring_allreduce_dist(work),
             "allreduce": lambda: dist.all_reduce(work)},
            devices=[device], runs=repeats, before=reset)
        out["sizes_bytes"].append(x.numel() * 4)
        for key, m in timed.items():
            out[f"{key}_runs"].append(m.warm)
    return {"world": n, "backend": dist.get_backend(), "check": check.cpu().tolist(), **out}


def main(argv: Sequence[str] | None = None) -> None:
    """Worker entry point: benchmark the ring against dist.all_reduce and hand back results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", type=float, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    run_worker(lambda: benchmark(args.sizes_mb, args.repeats, args.timeout))


if __name__ == "__main__":
    main()
