"""Train the small ResNet-18 with DDP, one process per device (NCCL if each has a GPU, else gloo).

Rank 0 prints a line per epoch and saves a result dict; without torchrun it trains alone. With 2
processes, and on 2 machines with 4 GPUs each (--node-rank=1 on the other; the port must be open):
    python -m d2l_extras.distributed --nproc-per-node=2 -m d2l_extras.ddp --epochs 2
    python -m torch.distributed.run --nnodes=2 --node-rank=0 --nproc-per-node=4 \\
        --master-addr=10.0.0.1 --master-port=29500 -m d2l_extras.ddp --epochs 10
"""
import argparse
import contextlib
import copy
import os
from dataclasses import asdict, replace
from functools import partial
from types import SimpleNamespace
from typing import Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.nn.functional import all_gather, all_reduce
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset

from .bands import Band
from .checks import COUNT, WHOLE, option, positive_number, whole_number
from .data import SOURCES, default_sizes, load_images
from .distributed import init_worker, run_worker, worker_device
from .lessons import Benchmark  # notebook 00 teaches it
from .models import init_weights, resnet18
from .parallel import evaluate_accuracy, even_batch_size, per_process_batch
from .profiles import by_profile
from .profiling import TimelineEvent, launch_stacks, profile_trace, trace_events
from .report import notice
from .sizes import problem_size
from .timing import measure_interleaved


class GlooSyncBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm2d whose batch statistics are summed over all processes; works with gloo."""

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        if not (self.training and dist.is_initialized() and dist.get_world_size() > 1):
            return super().forward(X)
        C, shape = X.shape[1], (1, X.shape[1], 1, 1)
        count = torch.full((1,), X.numel() // C, dtype=X.dtype, device=X.device)
        # autograd's all_reduce: each input's gradient is summed over the processes too
        stats = all_reduce(torch.cat([X.sum((0, 2, 3)), (X * X).sum((0, 2, 3)), count]))
        n = stats[-1]
        mean = stats[:C] / n
        var = stats[C:2 * C] / n - mean * mean  # the biased variance normalizes, as in BatchNorm
        with torch.no_grad():
            self.num_batches_tracked += 1  # momentum None: a cumulative average, as BatchNorm2d
            m = self.momentum if self.momentum is not None else 1 / self.num_batches_tracked.item()
            self.running_mean.lerp_(mean, m)
            self.running_var.lerp_(var * n / (n - 1).clamp(min=1), m)
        Y = (X - mean.view(shape)) * torch.rsqrt(var.view(shape) + self.eps)
        return Y * self.weight.view(shape) + self.bias.view(shape)


def sync_batchnorm(net: nn.Module, device: torch.device) -> nn.Module:
    """Make every BatchNorm2d share its statistics across processes (GPU: nn.SyncBatchNorm)."""
    if device.type == "cuda":
        return nn.SyncBatchNorm.convert_sync_batchnorm(net)
    for module in net.modules():
        if isinstance(module, nn.BatchNorm2d):  # the same state, a forward that syncs
            module.__class__ = GlooSyncBatchNorm2d
    return net


def parser(module: str, doc: str, options: Sequence[tuple]) -> argparse.ArgumentParser:
    """A parser of `python -m module`: one --NAME per (name, type, default, help); bool: a flag."""
    p = argparse.ArgumentParser(prog=f"python -m {module}", description=doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, kind, default, text in options:
        how = {"action": "store_true"} if kind is bool else {"type": kind, "default": default}
        p.add_argument(f"--{name}", help=text, **how)
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line; unset sizes come from the D2L_PROFILE profile."""
    n_train, n_test = default_sizes()
    p = parser("d2l_extras.ddp", __doc__, (
        ("epochs", WHOLE, by_profile(3, 5, 10), None), ("seed", int, 0, None),
        ("batch-size", WHOLE, by_profile(64, 128, 256), "global, split over the processes"),
        ("lr", float, 0.02, None),
        ("momentum", float, 0.9, "SGD momentum (0: the book's SGD, many more epochs)"),
        ("width", WHOLE, by_profile(16, 32, 64), "channels of ResNet-18's first stage"),
        ("n-train", WHOLE, n_train, None), ("n-test", WHOLE, n_test, None),
        ("bucket-mb", option(positive_number), 25.0, "gradient buckets in MB (torch's default)"),
        ("threads", int, 0, "CPU threads per process (0: torch's default)"),
        ("max-steps", COUNT, 0, "stop after this many steps (0: none)"),
        ("time-comm", COUNT, 0, "after training, time N passes with "
         "and N without (no_sync) gradient sync, and N allreduces alone: result['comm']"),
        ("timeout", float, 300, "seconds any process waits for the others"),
        ("crash-rank", int, -1, "for tests: this rank raises an error after its first step"),
        ("sync-bn", bool, False, "BatchNorm statistics over the global batch"),
        ("sync-every-step", bool, False, "loss.item() after each step: the host waits for it"),
        ("profile", bool, False, "rank 0 profiles a step after training: result['timeline']"),
        ("check-no-sync", bool, False, "check no_sync() accumulation against one big batch")))
    p.add_argument("--time-batches", type=WHOLE, nargs="+", default=[], metavar="B",
                   help="with --time-comm: batch sizes per process (default: this one's share)")
    p.add_argument("--data", choices=SOURCES, default="auto",
                   help="auto: Fashion-MNIST when cached or downloadable, else the digits")
    args = p.parse_args(argv)
    if args.time_batches and not args.time_comm:
        p.error("--time-batches needs --time-comm N (how many steps to time)")
    return args


def run_sizes(device: str, budget: int | None = None) -> list[str]:
    """--width and --n-train of a run on device ('cpu' or 'cuda'), from the size policy."""
    return ["--width", str(problem_size("ddp_width", device, budget=budget)),
            "--n-train", str(problem_size("ddp_images", device, budget=budget))]


def run_plan(n_gpus: int, batch_size: int, budget: int | None = None) -> SimpleNamespace:
    """Plan 1 vs k processes: n_gpus (>= 2) with ddp_batch each, else 2 CPU ones on batch_size."""
    # args and env of the 1- and k-process runs, sized for their device of `budget` free bytes
    n_gpus = whole_number(n_gpus, "n_gpus", minimum=0)
    per_gpu = problem_size("ddp_batch", "cuda", budget=budget) if n_gpus else 0
    if worker_device(max(n_gpus, 2), n_gpus=n_gpus).type == "cuda":  # one NCCL process per GPU
        k, batch, device, args, env, gpu_args = n_gpus, n_gpus * per_gpu, "cuda", [], {}, []
    else:  # 2 gloo processes of a thread each, even beside one GPU, whose run is timed apart
        k, batch, device, env = 2, even_batch_size(batch_size, 2), "cpu", {"D2L_BACKEND": "gloo"}
        args = ["--threads", "1"]
        alone = worker_device(1, n_gpus=n_gpus).type == "cuda"
        gpu_args = [*run_sizes("cuda", budget), "--batch-size", str(per_gpu)] if alone else []
    args += run_sizes(device, budget)
    return SimpleNamespace(k=k, batch_size=batch, per_process=batch // k, device=device,
                           args=args, env=env, gpu_args=gpu_args, gpu_alone=bool(gpu_args),
                           width=int(args[args.index("--width") + 1]))


def shard_loaders(train_set: Dataset, test_set: Dataset, batch_size: int, world: int, rank: int,
                  seed: int = 0, pin_memory: bool = False
                  ) -> tuple[DataLoader, DistributedSampler, DataLoader]:
    """This rank's training loader (and its sampler) and its share of the test set."""
    per_process_batch(batch_size, world)
    if not 0 <= rank < world:
        raise ValueError(f"rank must be in 0..{world - 1}, got {rank}")
    # The sampler pads so each rank gets ceil(N / world); the test set is split without padding.
    sampler = DistributedSampler(train_set, world, rank, shuffle=True, seed=seed)
    loader = DataLoader(train_set, batch_size // world, sampler=sampler, pin_memory=pin_memory)
    test = DataLoader(Subset(test_set, range(rank, len(test_set), world)), batch_size // world)
    return loader, sampler, test


def no_sync_check(device: torch.device, micro_batch: int = 4, seed: int = 0) -> dict:
    """Accumulate two micro-batches under no_sync(); compare with one big batch, no DDP."""
    world, rank = dist.get_world_size(), dist.get_rank()
    gen = torch.Generator().manual_seed(seed)  # every rank draws the same global batch
    X = torch.randn(2 * micro_batch * world, 1, 28, 28, generator=gen)
    y = torch.randint(0, 10, (len(X),), generator=gen)
    torch.manual_seed(seed)
    # No BatchNorm here: its statistics depend on how the batch is cut, gradients must not.
    ref_net = nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 10))
    net = copy.deepcopy(ref_net).to(device)
    F.cross_entropy(ref_net(X), y).backward()  # the whole global batch in one process
    model = DistributedDataParallel(net, device_ids=[device] if device.type == "cuda" else None)
    X_r, y_r = (t.chunk(world)[rank].to(device) for t in (X, y))
    halves = (slice(0, micro_batch), slice(micro_batch, None))
    with model.no_sync():  # backward only accumulates into .grad; no allreduce
        (F.cross_entropy(model(X_r[halves[0]]), y_r[halves[0]]) / 2).backward()
    unsynced = all_gather(torch.cat([p.grad.flatten() for p in model.parameters()]))
    # The second micro-batch runs outside no_sync: its backward allreduces the accumulated sum.
    (F.cross_entropy(model(X_r[halves[1]]), y_r[halves[1]]) / 2).backward()
    pairs = list(zip(model.parameters(), ref_net.parameters()))
    return {"max_error": max((p.grad.cpu() - r.grad).abs().max().item() for p, r in pairs),
            "grad_scale": max(r.grad.abs().max().item() for _, r in pairs),
            "unsynced_difference": max((g - unsynced[0]).abs().max().item() for g in unsynced),
            "micro_batch": micro_batch, "global_batch": len(X)}


# NCCL's kernels (ncclKernel_ before NCCL 2.19) and ops (nccl:all_reduce, c10d::allreduce_...)
_COMM_PREFIXES = ("nccl", "gloo:", "mpi:", "ucc:", "c10d::", "record_param_comms")
# The collectives as names spell them without "_"; the longer word first (allreduce, reduce).
_COLLECTIVES = ("allreduce", "reducescatter", "allgather", "alltoall", "broadcast", "sendrecv",
                "send", "recv", "reduce", "scatter", "gather", "barrier")


def collective(name: str) -> str | None:
    """An op's or kernel's collective ('allreduce'...), 'communication' if unnamed, else None."""
    flat = name.lower().removeprefix("void ")
    if not flat.startswith(_COMM_PREFIXES):
        return None
    flat = flat.split("(")[0].replace("_", "")  # the arguments name no collective
    return next((word for word in _COLLECTIVES if word in flat), "communication")


def _phase(name: str) -> str:
    lower = name.lower()
    if "backward" in lower or "evaluate_function" in lower:
        return "backward"
    return "optimizer" if "optimizer" in lower or "sgd" in lower else "forward"


def comm_overlap(events: Sequence[dict | TimelineEvent]) -> dict:
    """From a step's timeline: when backward ended, how much allreduce ran before and after."""
    events = [ev if isinstance(ev, dict) else asdict(ev) for ev in events]
    backward = [ev["start"] + ev["duration"] for ev in events if ev["kind"] == "backward"]
    reduces = [(ev["start"], ev["duration"]) for ev in events if ev["kind"] == "allreduce"]
    if not backward or not reduces:
        raise ValueError(f"the timeline needs backward and allreduce events, got {len(backward)} "
                         f"and {len(reduces)}: profile a step of 2 or more processes (--profile)")
    end = max(backward)
    return {"backward_end": end, "first_allreduce": min(s for s, _ in reduces),
            "allreduces": len(reduces), "allreduce_seconds": sum(d for _, d in reduces),
            "overlapped_seconds": sum(max(0.0, min(s + d, end) - s) for s, d in reduces),
            # per allreduce, never below 0: the sums' difference could round to -1e-17 s
            "exposed_seconds": sum(max(0.0, s + d - max(s, end)) for s, d in reduces)}


def step_timeline(step: Callable[[], object], device: torch.device) -> list[dict]:
    """Profile one call of step(); return its events as dicts (lane, start, kind...) for JSON."""
    trace = profile_trace(step, [device])
    events, stacks = trace_events(trace), launch_stacks(trace)
    # gloo runs its collectives on threads of its own: CPU lanes that hold nothing else
    comm = ({ev.lane for ev in events if ev.lane.startswith("CPU")}
            - {ev.lane for ev in events if collective(ev.name) is None})
    backward_end = max((ev.end for ev in events if ev.kind == "cpu op"
                        and _phase(ev.name) == "backward"), default=float("inf"))

    def kind(ev: TimelineEvent) -> str:
        if ev.lane in comm:
            return collective(ev.name)
        if ev.kind == "cpu op":
            # after backward: the optimizer, whatever its op names (collectives run elsewhere)
            phase = _phase(ev.name)
            return "optimizer" if phase == "forward" and ev.start >= backward_end else phase
        # a GPU kernel belongs to the CPU ops around its launch, which also name generic NCCL's
        stack = stacks.get(ev, [])
        if collective(ev.name) is None:
            return kind(stack[0]) if stack else ev.kind
        names = map(collective, [ev.name, *(op.name for op in reversed(stack))])
        return next((c for c in names if c not in (None, "communication")), "communication")

    kinds = [kind(ev) for ev in events]
    done = {(ev.lane, k) for ev, k in zip(events, kinds)}

    def lane_name(lane: str) -> str:  # "CPU thread 0 (forward, backward)", "communication thread 1"
        if lane in comm:
            return lane.replace("CPU thread", "communication thread")
        work = ", ".join(k for k in ("forward", "backward") if (lane, k) in done)
        return f"{lane} ({work})" if work else lane
    return [asdict(replace(ev, lane=lane_name(ev.lane), kind=k)) for ev, k in zip(events, kinds)]


def time_comm(model: DistributedDataParallel, X: torch.Tensor, y: torch.Tensor, steps: int,
              batches: Sequence[int] = (), loss: Callable | None = None) -> dict:
    """Time passes with and without (no_sync) gradient sync per batch, and allreduces alone."""
    # Each pass: loss(model, X[:b], y[:b]); every process calls it alike (a barrier per run).
    loss = loss or (lambda model, X, y: F.cross_entropy(model(X), y))
    steps = whole_number(steps, "steps")
    batches = [whole_number(b, "each batch size") for b in batches] or [len(X)]
    if max(batches) > len(X):
        raise ValueError(f"batch {max(batches)} is larger than the {len(X)} examples given")
    device = next(model.parameters()).device
    timed = partial(measure_interleaved, devices=[device], runs=steps, before=dist.barrier)

    def step(b: int, sync: bool = True) -> None:
        model.zero_grad(set_to_none=True)
        with contextlib.nullcontext() if sync else model.no_sync():  # no_sync: kept local
            loss(model, X[:b], y[:b]).backward()  # DDP allreduces in here

    grads = [p for p in model.parameters() if p.requires_grad]
    flat = torch.zeros(sum(p.numel() for p in grads), device=device)
    per_batch = [timed({"sync": lambda: step(b), "no_sync": lambda: step(b, sync=False)})
                 for b in batches]
    ar = timed({"allreduce": lambda: dist.all_reduce(flat)})["allreduce"]
    model.zero_grad(set_to_none=True)
    return {"steps": steps, "batches": batches, "allreduce_s": ar.median, "allreduce_runs": ar.warm,
            "grad_bytes": sum(p.numel() * p.element_size() for p in grads),
            **{f"{key}_s": [t[key].median for t in per_batch] for key in ("sync", "no_sync")},
            **{f"{key}_runs": [t[key].warm for t in per_batch] for key in ("sync", "no_sync")}}


def train(args: argparse.Namespace) -> dict:
    """Train with DDP in this process (one of WORLD_SIZE); return the summary dict."""
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    rank, world, device = init_worker(args.timeout)
    per_process_batch(args.batch_size, world)  # before the data loads: fail early
    pids: list = [None] * world  # which processes took part (a check that k really ran)
    dist.all_gather_object(pids, os.getpid())
    no_sync = no_sync_check(device) if args.check_no_sync else None
    # Rank 0 looks for (and may download) the data first; the others then read the same set.
    data = load_images(args.n_train, args.n_test, args.data, verbose=False) if rank == 0 else None
    choice = [data and data.name]
    dist.broadcast_object_list(choice, src=0)
    if rank:
        data = load_images(args.n_train, args.n_test, choice[0], download=False, verbose=False)
    elif data.fallback:
        notice(data.fallback)
    torch.manual_seed(args.seed)
    net = resnet18(10, 1, args.width).apply(init_weights)
    if args.sync_bn and world > 1:
        net = sync_batchnorm(net, device)
    # DDP sends rank 0's weights now and its buffers at each forward; backward allreduces buckets
    ids = [device] if device.type == "cuda" else None  # the GPU this process owns
    model = DistributedDataParallel(net.to(device), device_ids=ids,
                                    bucket_cap_mb=args.bucket_mb)
    loader, sampler, test_loader = shard_loaders(data.train, data.test, args.batch_size,
                                                 world, rank, args.seed, device.type == "cuda")
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    if rank == 0:  # one short line: what runs where, on what
        threads = torch.get_num_threads()
        print(f"{world} process{'es' * (world > 1)} ({dist.get_backend()} on {device.type}, "
              f"{threads} thread{'s' * (threads > 1)} each): ResNet-18 width {args.width}, batch "
              f"{args.batch_size} = {world} x {args.batch_size // world}, {len(data.train)} "
              f"{data.name} images{', sync BN' * args.sync_bn}", flush=True)
    rates, test_acc, seen_total, steps = [], [], 0, 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        seen = 0  # on the host: torch.tensor(len(y), device=cuda) would wait for the stream
        with Benchmark(devices=[device], verbose=False) as clock:
            for X, y in loader:
                X, y = X.to(device, non_blocking=True), y.to(device, non_blocking=True)
                optimizer.zero_grad(set_to_none=True)
                loss = F.cross_entropy(model(X), y)
                loss.backward()  # DDP averages the gradients over all processes here
                optimizer.step()
                if args.sync_every_step:
                    loss.item()  # the host waits until the device has finished this step
                loss_sum += loss.detach().double() * len(y)  # queued on the device, no wait
                seen, steps = seen + len(y), steps + 1
                if rank == args.crash_rank:
                    raise RuntimeError(f"rank {rank} failed on purpose (--crash-rank)")
                if steps == args.max_steps:
                    break
        tested = len(test_loader.dataset)  # this rank's share, which may be empty
        acc = evaluate_accuracy([model.module], test_loader, [device]) if tested else 0.0
        stats = torch.cat([loss_sum.view(1), torch.tensor([seen, acc * tested, tested],
                                                          dtype=torch.float64, device=device)])
        dist.all_reduce(stats)
        loss_total, n, correct, tested = stats.tolist()
        rates.append(n / clock.elapsed)
        test_acc.append(correct / tested)
        seen_total += int(n)
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs}: loss {loss_total / n:.3f}, test acc "
                  f"{test_acc[-1]:.3f}, {rates[-1]:.0f} samples/s ({clock.elapsed:.1f} s)",
                  flush=True)
        if steps == args.max_steps:
            break
    warm = rates[1:] or rates  # the first epoch warms up (allocations, cuDNN autotuning)
    param_l2 = nn.utils.parameters_to_vector(model.module.parameters()).double().norm().item()
    timeline = comm = None
    if args.profile:  # one more step, after training, profiled on rank 0 (all ranks take it)
        X, y = (t.to(device) for t in next(iter(loader)))

        def step() -> None:
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(X), y).backward()
            optimizer.step()
        step()  # warm: the first step after an evaluation allocates again
        timeline = step_timeline(step, device) if rank == 0 else step()
    if args.time_comm:  # after training: the passes use its final weights, the same batch
        size = max(args.time_batches or [args.batch_size // world])
        X, y = next(iter(DataLoader(data.train, size, sampler=sampler)))
        comm = time_comm(model, X.to(device), y.to(device), args.time_comm, args.time_batches)
    return {"processes": world, "pids": len(set(pids)), "no_sync": no_sync, "timeline": timeline,
            "comm": comm, "samples_seen": seen_total, "steps": steps,
            "backend": dist.get_backend(), "device": device.type, "n_train": len(data.train),
            "param_l2": param_l2, "samples_per_s": Band.of(warm).value, "samples_per_s_runs": warm,
            "accuracy": test_acc[-1], "test_acc": test_acc, "width": args.width,
            "batch_size": args.batch_size, "bucket_mb": args.bucket_mb}


def main(argv: list[str] | None = None) -> None:
    """Entry point: parse arguments, train, and let rank 0 save the result."""
    args = parse_args(argv)
    run_worker(lambda: train(args))


if __name__ == "__main__":
    main()
