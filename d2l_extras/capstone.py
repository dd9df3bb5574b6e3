"""The capstone's DDP worker: k processes train TinyGPT, each on its slice of one global batch.

From a notebook: dx.launch("d2l_extras.capstone", 2); without torchrun it trains in this process:
    python -m d2l_extras.distributed --nproc-per-node=2 -m d2l_extras.capstone --steps 20"""
import argparse
import contextlib
import inspect
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from .checks import COUNT, WHOLE, option, positive_number
from .ddp import parser, time_comm
from .distributed import init_worker, run_worker
from .lessons import Benchmark  # notebook 00 teaches it
from .memory import peak_memory
from .parallel import per_process_batch
from .ring import bus_bandwidth
from .timing import measure_interleaved
from .transformer import TinyGPT, lm_loss, load_text

# TinyGPT's only buffers are constant causal masks: no broadcast at every forward (renamed in 2.15)
_NO_BUFFER_SYNC = ({"forward_sync_buffers": False} if "forward_sync_buffers"
                   in inspect.signature(DistributedDataParallel).parameters
                   else {"broadcast_buffers": False})


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The worker's options: model and batch sizes, steps, and what to time."""
    p = parser("d2l_extras.capstone", __doc__, (
        ("steps", WHOLE, 20, "training steps (all timed)"),
        ("batch-size", WHOLE, 32, "global batch (sequences), split over the processes"),
        ("seq-len", WHOLE, 64, None), ("d-model", WHOLE, 64, None),
        ("heads", WHOLE, 4, None), ("layers", WHOLE, 2, None),
        ("lr", option(positive_number), 3e-3, None), ("seed", int, 0, None),
        ("comm-steps", COUNT, 5, "passes timed with and without "
         "allreduce, and allreduces of the gradients alone (busbw) (0: none)"),
        ("share", WHOLE, 1, "also time steps on 1/share of the batch (t_compute(B/k))"),
        ("threads", int, 0, "torch threads per process (0: keep)"),
        ("timeout", option(positive_number), 120, "seconds any collective may wait")))
    args = p.parse_args(argv)
    if args.d_model % args.heads:
        p.error(f"--d-model {args.d_model} must be a multiple of --heads {args.heads}")
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
    pids: list = [None] * world  # which processes took part: a check that k really ran
    dist.all_gather_object(pids, os.getpid())
    text = load_text()
    torch.manual_seed(args.seed)  # DDP also broadcasts rank 0's weights when it wraps
    net = TinyGPT(len(text.vocab), args.seq_len, args.d_model, args.heads, args.layers)
    ids = [device] if device.type == "cuda" else None
    model = DistributedDataParallel(net.to(device), device_ids=ids, **_NO_BUFFER_SYNC)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, foreach=True)

    def batch(step: int, rows: slice = slice(rank * per, (rank + 1) * per)):
        X, Y = global_batch(text, step, args)
        return X[rows].to(device), Y[rows].to(device)

    def train_step(X: torch.Tensor, Y: torch.Tensor, sync: bool = True) -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        with contextlib.nullcontext() if sync else model.no_sync():  # no_sync: no allreduce
            (loss := lm_loss(model, X, Y)).backward()  # DDP averages the gradients here
        opt.step()
        return loss.detach()

    losses, times = [], []
    for step in range(args.steps):
        X, Y = batch(step)
        with Benchmark(devices=[device], verbose=False) as clock:
            loss = train_step(X, Y)
        times.append(clock.elapsed)
        dist.all_reduce(loss)  # equal slices: the global loss is the mean of the slices'
        losses.append(loss.item() / world)
    result = {"processes": world, "pids": len(set(pids)), "backend": dist.get_backend(),
              "device": device.type, "batch_size": args.batch_size, "seq_len": args.seq_len,
              "losses": losses, "step_runs": times[1:] or times,  # the first step warms up
              "grad_bytes": grad_bytes}
    X, Y = batch(args.steps)
    if args.comm_steps:  # on one more batch, after training
        comm = time_comm(model, X, Y, args.comm_steps, loss=lm_loss)
        result.update(synced_runs=comm["sync_runs"][0], no_sync_runs=comm["no_sync_runs"][0])
        if world > 1:  # the ring's bus bandwidth at the gradients' size
            result.update(allreduce_s=comm["allreduce_s"],
                          busbw=bus_bandwidth(grad_bytes, comm["allreduce_s"], world)[1])
    # every process takes it (its allreduce needs all); the peak is above the model and Adam's
    result["peak_bytes"] = peak_memory(lambda: train_step(X, Y), device)
    if args.share > 1:  # a whole step on B/share, nothing sent: t_compute(B/k) for k=share
        Xs, Ys = batch(args.steps + 1, slice(0, max(1, args.batch_size // args.share)))
        result["share_runs"] = measure_interleaved(
            {"share": lambda: train_step(Xs, Ys, sync=False)}, devices=[device],
            runs=max(4, args.comm_steps))["share"].warm
    return result


def main(argv: list[str] | None = None) -> None:
    """Entry point: parse arguments, train, and let rank 0 save the result."""
    args = parse_args(argv)
    run_worker(lambda: train(args))


if __name__ == "__main__":
    main()
