"""The capstone's DDP worker: train the character-level TinyGPT in k processes (torchrun).

Every process draws the same global batches (one generator, seeded per step) and trains on its
slice of each, so k processes take the steps one process takes on the whole batch: their losses
agree up to rounding. After training, the processes time forward + backward with DDP's allreduce
and inside `no_sync()` on the same batch, as notebook 07's worker does (`ddp.time_comm`): the
difference is the communication a step did not hide. An allreduce of the gradients' size alone
gives the bus bandwidth (busbw, the model's beta).

From a notebook: dx.launch("d2l_extras.capstone", 2, ["--steps", "20"]); from a terminal:
    python -m d2l_extras.distributed --nproc-per-node=2 -m d2l_extras.capstone --steps 20
Started without torchrun (python -m d2l_extras.capstone), it trains in this one process.
"""
from __future__ import annotations

import argparse
import inspect
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from .bands import Band
from .ddp import time_comm
from .distributed import init_worker, run_worker
from .memory import peak_memory
from .parallel import per_process_batch
from .ring import bus_bandwidth
from .timing import Benchmark, measure_interleaved
from .transformer import TinyGPT, lm_loss, load_text


def _positive(kind: type):
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value
    return parse


# TinyGPT's only buffers are its constant causal masks: broadcasting them from rank 0 at every
# forward (DDP's default) would add a collective per step that changes nothing. torch 2.15
# renames the switch forward_sync_buffers and warns at the old name.
_NO_BUFFER_SYNC = ({"forward_sync_buffers": False} if "forward_sync_buffers"
                   in inspect.signature(DistributedDataParallel).parameters
                   else {"broadcast_buffers": False})


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The worker's options: model and batch sizes, steps, and what to time."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    whole, real = _positive(int), _positive(float)
    p.add_argument("--steps", type=whole, default=20, help="training steps (all timed)")
    p.add_argument("--batch-size", type=whole, default=32,
                   help="global batch (sequences), split evenly over the processes")
    p.add_argument("--seq-len", type=whole, default=64)
    p.add_argument("--d-model", type=whole, default=64)
    p.add_argument("--heads", type=whole, default=4)
    p.add_argument("--layers", type=whole, default=2)
    p.add_argument("--lr", type=real, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--comm-steps", type=int, default=5,
                   help="forward + backward pairs timed with and without allreduce, and "
                        "allreduces of the gradients alone (busbw) (0: none)")
    p.add_argument("--share", type=whole, default=1,
                   help="also time steps on 1/share of the batch (t_compute(B/k) for k=share)")
    p.add_argument("--threads", type=int, default=0, help="torch threads per process (0: keep)")
    p.add_argument("--timeout", type=real, default=120, help="seconds any collective may wait")
    args = p.parse_args(argv)
    if args.d_model % args.heads:
        p.error(f"--d-model {args.d_model} must be a multiple of --heads {args.heads}")
    if args.comm_steps < 0:
        p.error(f"--comm-steps must be >= 0, got {args.comm_steps}")
    return args


def global_batch(text, step: int, args: argparse.Namespace):
    """The global batch of a step: the same on every process, whatever k."""
    gen = torch.Generator().manual_seed(args.seed * 100_003 + step)
    return text.batch(args.batch_size, args.seq_len, gen)


def train(args: argparse.Namespace) -> dict:
    """Train with DDP in this process (one of WORLD_SIZE); return rank 0's summary."""
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    rank, world, device = init_worker(args.timeout)
    per = per_process_batch(args.batch_size, world)
    mine = slice(rank * per, (rank + 1) * per)
    pids: list = [None] * world
    dist.all_gather_object(pids, os.getpid())
    text = load_text()
    torch.manual_seed(args.seed)  # DDP also broadcasts rank 0's weights when it wraps
    net = TinyGPT(len(text.vocab), args.seq_len, args.d_model, args.heads, args.layers)
    ids = [device] if device.type == "cuda" else None
    model = DistributedDataParallel(net.to(device), device_ids=ids, **_NO_BUFFER_SYNC)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, foreach=True)

    def batch(step: int, rows: slice = mine):
        X, Y = global_batch(text, step, args)
        return X[rows].to(device), Y[rows].to(device)

    losses, times = [], []
    for step in range(args.steps):
        X, Y = batch(step)
        with Benchmark(devices=[device], verbose=False) as clock:
            opt.zero_grad(set_to_none=True)
            loss = lm_loss(model, X, Y)
            loss.backward()  # DDP averages the gradients over the processes here
            opt.step()
        times.append(clock.elapsed)
        mean = loss.detach().clone()
        dist.all_reduce(mean)  # equal slices: the global loss is the mean of the slices'
        losses.append(mean.item() / world)
    warm = times[1:] or times  # the first step allocates and warms up
    step_s = Band.of(warm).value
    result = {"processes": world, "pids": len(set(pids)), "backend": dist.get_backend(),
              "device": device.type, "threads": torch.get_num_threads(),
              "batch_size": args.batch_size, "seq_len": args.seq_len, "losses": losses,
              "step_s": step_s, "step_runs": warm, "tokens_per_s": args.batch_size * args.seq_len / step_s,
              "grad_bytes": grad_bytes, "parameters": sum(p.numel() for p in net.parameters())}
    X, Y = batch(args.steps)
    if args.comm_steps:  # on one more batch, after training
        comm = time_comm(model, X, Y, args.comm_steps, loss=lm_loss)
        result.update(synced_s=comm["sync_s"][0], no_sync_s=comm["no_sync_s"][0],
                      synced_runs=comm["sync_runs"][0], no_sync_runs=comm["no_sync_runs"][0])
        result["comm_s"] = result["synced_s"] - result["no_sync_s"]
        if world > 1:  # the ring's bus bandwidth at the gradients' size
            seconds = comm["allreduce_s"]
            result.update(allreduce_s=seconds, allreduce_runs=comm["allreduce_runs"],
                          busbw=bus_bandwidth(grad_bytes, seconds, world)[1])

    def fwd_bwd(X: torch.Tensor, Y: torch.Tensor) -> None:
        model.zero_grad(set_to_none=True)
        lm_loss(model, X, Y).backward()

    def train_step() -> None:
        fwd_bwd(X, Y)
        opt.step()
    # Every process takes this step (its allreduce needs them all); each measures its own peak,
    # above what it held before (the model and Adam's state), as dx.peak_memory does.
    result["peak_bytes"] = peak_memory(train_step, device)
    if args.share > 1:  # a whole step on B/share, nothing sent: t_compute(B/k) for k=share
        Xs, Ys = batch(args.steps + 1, slice(0, max(1, args.batch_size // args.share)))

        def local_step() -> None:
            with model.no_sync():  # backward keeps its gradients local: no allreduce
                fwd_bwd(Xs, Ys)
            opt.step()
        # The first call (new shapes) is timed apart; a fixed number of runs after it.
        m = measure_interleaved({"share": local_step}, devices=[device],
                                runs=max(4, args.comm_steps))["share"]
        result.update(share=args.share, share_s=m.median, share_runs=m.warm)
    return result


def main(argv: list[str] | None = None) -> None:
    """Entry point: parse arguments, train, and let rank 0 save the result."""
    args = parse_args(argv)
    run_worker(lambda: train(args))

if __name__ == "__main__":
    main(sys.argv[1:])
