"""What notebook 08's FSDP2 job measures around its step: the check, memory, collectives, times.

The notebook writes the model, how it is sharded and the step (`#@save sharding`); `job` runs
them in a torchrun worker: one step checked against one process's full-batch step, the bytes of
each rank's shards, the collectives of one step (CommDebugMode), then FSDP2 against DDP in turns.
"""
import argparse
import copy
import warnings
from typing import Callable

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from .checks import WHOLE, option, positive_number
from .distributed import comm_counts, init_worker, run_worker
from .parallel import per_process_batch
from .timing import measure_interleaved

FIRST_CPU_RELEASE = "2.7"  # CPU streams got record_event there (pytorch/pytorch#145935)


def cpu_support() -> str:
    """Why FSDP2 cannot run on this torch's CPU, in one line; '' where it can."""
    # FSDP2 records events on its streams; before 2.7 a CPU stream had no record_event.
    if hasattr(torch.cpu.Stream, "record_event"):
        return ""
    return (f"FSDP2 on a CPU needs torch >= {FIRST_CPU_RELEASE}; this is "
            f"{torch.__version__.split('+')[0]}: skipped")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The job's options: the model's size, the global batch, what to time."""
    p = argparse.ArgumentParser(prog="python -m d2l_extras.sharding", description=(
        "Notebook 08's FSDP2 job: fully_shard per block, one step checked against one "
        "process, the shards' bytes, one step's collectives, then time against DDP."))
    for name, kind, default, text in (
            ("width", WHOLE, 256, "units of each block's Linear layer"),
            ("depth", WHOLE, 4, "blocks, each sharded on its own"),
            ("batch_size", WHOLE, 64, "global batch, split evenly over the processes"),
            ("lr", option(positive_number), 1e-3, "AdamW's learning rate"),
            ("runs", WHOLE, 8, "timed steps of FSDP2 and of DDP, in turns"),
            ("timeout", option(positive_number), 60, "seconds any collective may wait")):
        p.add_argument(f"--{name.replace('_', '-')}", type=kind, default=default, help=text)
    return p.parse_args(argv)


def job(model_fn: Callable, shard_fn: Callable, step_fn: Callable,
        argv: list[str] | None = None) -> None:
    """The FSDP2 job in this process: model_fn(width, depth), shard_fn(model, mesh), step_fn."""
    args = parse_args(argv)
    run_worker(lambda: _measure(args, model_fn, shard_fn, step_fn))


def _local_bytes(tensors) -> int:
    # A DTensor's bytes on this rank: its local shard, without the padding FSDP2 may add.
    return sum(t.to_local().numel() * t.element_size() for t in tensors)


def _measure(args: argparse.Namespace, model_fn: Callable, shard_fn: Callable,
             step_fn: Callable) -> dict:
    rank, k, device = init_worker(args.timeout)
    if k < 2:  # one process holds everything: FSDP2 then calls no collective at all
        raise ValueError(f"FSDP2 shards over at least 2 processes, got {k}: launch 2 or more")
    rows = per_process_batch(args.batch_size, k)  # or an error that names a batch that splits
    if device.type == "cpu" and (why := cpu_support()):
        return {"skipped": why}
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode

    gen = torch.Generator().manual_seed(0)  # the same global batch on every rank
    X, Y = (torch.randn(args.batch_size, args.width, generator=gen).to(device) for _ in "XY")
    mine = slice(rank * rows, (rank + 1) * rows)
    model = model_fn(args.width, args.depth).to(device)
    reference = copy.deepcopy(model)  # one process: the full model and batch
    params = sum(p.numel() for p in model.parameters())
    block_params = sum(p.numel() for p in model[0].parameters())
    shard_fn(model, init_device_mesh(device.type, (k,)))
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    with CommDebugMode() as comm, warnings.catch_warnings():
        # Under CommDebugMode's dispatch mode every block's output looks like a view to FSDP2,
        # which warns of in-place ops on it: the step does none.
        warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* view tensor")
        step_fn(model, opt, X[mine], Y[mine])
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    state = [s for p in model.parameters() for key, s in opt.state[p].items()
             if key in ("exp_avg", "exp_avg_sq")]  # Adam's two moments (not its step count)
    mem = {"weights": _local_bytes(model.parameters()),
           "gradients": _local_bytes(p.grad for p in model.parameters()),
           "Adam's moments": _local_bytes(state)}
    every = [None] * k
    dist.all_gather_object(every, mem)
    step_fn(reference, torch.optim.AdamW(reference.parameters(), lr=args.lr), X, Y)
    # Weights and gradients: Adam's first step is about lr * sign(gradient), blind to a
    # gradient's scale; the gradients are not. full_tensor() all-gathers: every rank joins.
    pairs = [(a, b) for p, q in zip(model.parameters(), reference.parameters())
             for a, b in ((p, q), (p.grad, q.grad))]
    with torch.no_grad():
        diff = max(float((a.full_tensor() - b).abs().max()) for a, b in pairs)

    ddp = DDP(model_fn(args.width, args.depth).to(device),
              device_ids=[device.index] if device.type == "cuda" else None)
    ddp_opt = torch.optim.AdamW(ddp.parameters(), lr=args.lr)
    timed = measure_interleaved(
        {"fsdp": lambda: step_fn(model, opt, X[mine], Y[mine]),
         "ddp": lambda: step_fn(ddp, ddp_opt, X[mine], Y[mine])},
        devices=[device], runs=args.runs, before=dist.barrier)
    return {"world": k, "backend": dist.get_backend(), "params": params,
            "block_params": block_params, "depth": args.depth, "max_diff": diff,
            "bytes": {what: [m[what] for m in every] for what in mem},
            "collectives": comm_counts(comm),
            "cuda_peak_bytes": peak,
            **{f"{how}_runs": m.warm for how, m in timed.items()}}
