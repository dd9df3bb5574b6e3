"""What notebook 07's jobs (d2l_extras.ddp_job, .tensor_parallel; saved from it) use around it.

Without torchrun the job trains alone. With 2 processes, and on 2 machines with 4 GPUs each
(--node-rank=1 on the other; the port must be open):
    python -m d2l_extras.distributed --nproc-per-node=2 -m d2l_extras.ddp_job --epochs 2
    python -m torch.distributed.run --nnodes=2 --node-rank=0 --nproc-per-node=4 \\
        --master-addr=10.0.0.1 --master-port=29500 -m d2l_extras.ddp_job --epochs 10
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
from torch.distributed.nn.functional import all_gather
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset

import d2l_extras as dx
from .checks import COUNT, WHOLE, option, positive_number
from .data import SOURCES, default_sizes, load_images
from .distributed import (comm_counts, distinct_processes, init_worker, run_worker,
                          worker_device)
from .parallel import evaluate_accuracy, even_batch_size, per_process_batch
from .profiling import TimelineEvent, launch_stacks, profile_trace, trace_events
from .report import notice


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line; unset sizes come from the D2L_PROFILE profile."""
    n_train, n_test = default_sizes()
    p = argparse.ArgumentParser(prog="python -m d2l_extras.ddp_job", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, kind, default, text in (  # (name, type, default, help); bool: a flag
        ("epochs", WHOLE, dx.by_profile(3, 5, 10), None), ("seed", int, 0, None),
        ("batch-size", WHOLE, dx.by_profile(64, 128, 256), "global, split over the processes"),
        ("lr", float, 0.02, None), ("momentum", float, 0.9, "SGD momentum (0: the book's SGD)"),
        ("width", WHOLE, dx.by_profile(16, 32, 64), "channels of ResNet-18's first stage"),
        ("n-train", WHOLE, n_train, None), ("n-test", WHOLE, n_test, None),
        ("bucket-mb", option(positive_number), 25.0, "gradient buckets in MB (torch's default)"),
        ("threads", int, 0, "CPU threads per process (0: torch's default)"),
        ("max-steps", COUNT, 0, "stop after this many steps (0: none)"),
        ("time-comm", COUNT, 0, "after training, time N passes with "
         "and N without (no_sync) gradient sync, and N allreduces alone: result['comm']"),
        ("timeout", float, 300, "seconds any process waits for the others"),
        ("crash-rank", int, -1, "for tests: this rank raises an error after its first step"),
        ("sync-bn", bool, False, "BatchNorm statistics over the global batch (GPUs)"),
        ("profile", bool, False, "rank 0 profiles a step after training: result['timeline']"),
        ("check-no-sync", bool, False, "check no_sync() accumulation against one big batch")):
        how = {"action": "store_true"} if kind is bool else {"type": kind, "default": default}
        p.add_argument(f"--{name}", help=text, **how)
    p.add_argument("--time-batches", type=WHOLE, nargs="+", default=[], metavar="B",
                   help="with --time-comm: batch sizes per process (default: this one's share)")
    p.add_argument("--data", choices=SOURCES, default="auto",
                   help="auto: Fashion-MNIST when cached or downloadable, else the digits")
    return p.parse_args(argv)


def run_sizes(device: str, budget: int | None = None) -> list[str]:
    """--width and --n-train of a run on device ('cpu' or 'cuda'), from the size policy."""
    return ["--width", str(dx.problem_size("ddp_width", device, budget=budget)),
            "--n-train", str(dx.problem_size("ddp_images", device, budget=budget))]


def run_plan(n_gpus: int, batch_size: int, budget: int | None = None) -> SimpleNamespace:
    """Plan 1 vs k processes: n_gpus (>= 2) with ddp_batch each, else 2 CPU ones on batch_size."""
    per_gpu = dx.problem_size("ddp_batch", "cuda", budget=budget) if n_gpus else 0
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


def init_weights(module: nn.Module) -> None:
    """He-initialize the weights of Linear and Conv2d layers; zero their biases."""
    # The book's N(0, 0.01^2) leaves the activations tiny: BatchNorm's running variance (from 1)
    # lags for hundreds of steps and short runs stay at chance. He keeps them near 1.
    if isinstance(module, (nn.Linear, nn.Conv2d)):
        nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
        if module.bias is not None:
            nn.init.zeros_(module.bias)


def shard_loaders(train_set: Dataset, test_set: Dataset, batch_size: int, world: int, rank: int,
                  seed: int = 0, pin_memory: bool = False
                  ) -> tuple[DataLoader, DistributedSampler, DataLoader]:
    """This rank's training loader (and its sampler) and its share of the test set."""
    per_process_batch(batch_size, world)  # says which batch to use if uneven
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
    X_r, y_r = (t.chunk(world)[rank].to(device).split(micro_batch) for t in (X, y))
    with model.no_sync():  # backward only accumulates into .grad; no allreduce
        (F.cross_entropy(model(X_r[0]), y_r[0]) / 2).backward()
    unsynced = all_gather(torch.cat([p.grad.flatten() for p in model.parameters()]))
    # The second micro-batch runs outside no_sync: its backward allreduces the accumulated sum.
    (F.cross_entropy(model(X_r[1]), y_r[1]) / 2).backward()
    pairs = list(zip(model.parameters(), ref_net.parameters()))
    return {"max_error": max((p.grad.cpu() - r.grad).abs().max().item() for p, r in pairs),
            "grad_scale": max(r.grad.abs().max().item() for _, r in pairs),
            "unsynced_difference": max((g - unsynced[0]).abs().max().item() for g in unsynced)}


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


def comm_overlap(events: Sequence[dict]) -> dict:
    """From a step's timeline (step_timeline's): when backward ended, how much allreduce ran."""
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
              batches: Sequence[int] = ()) -> dict:
    """On every process: time passes on X[:b] with and without (no_sync) sync, allreduces alone."""
    batches = list(batches) or [len(X)]
    device = next(model.parameters()).device
    timed = partial(dx.measure_interleaved, devices=[device], runs=steps, before=dist.barrier)

    def step(b: int, sync: bool = True) -> None:
        model.zero_grad(set_to_none=True)
        with contextlib.nullcontext() if sync else model.no_sync():  # no_sync: kept local
            F.cross_entropy(model(X[:b]), y[:b]).backward()  # DDP allreduces in here

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


class Job:
    """One process of the DDP job: its group, data and device; what it reports of the training."""

    def __init__(self, args: argparse.Namespace):
        if args.threads > 0:
            torch.set_num_threads(args.threads)
        self.args = args
        self.rank, self.world, self.device = init_worker(args.timeout)
        self.pids = distinct_processes()
        self.no_sync = no_sync_check(self.device) if args.check_no_sync else None
        # Rank 0 looks for (and may download) the data first; the others read the set it chose.
        load = partial(load_images, args.n_train, args.n_test, verbose=False)
        data = None if self.rank else load(args.data)
        name = [data and data.name]
        dist.broadcast_object_list(name, src=0)
        self.data = data = data or load(name[0], download=False)
        if self.rank == 0 and data.fallback:
            notice(data.fallback)
        self.device_ids = [self.device] if self.device.type == "cuda" else None  # its GPU
        self.train_loader, self.sampler, self.test_loader = shard_loaders(
            data.train, data.test, args.batch_size, self.world, self.rank, args.seed,
            self.device.type == "cuda")
        self.rates, self.test_acc, self.seen, self.steps, self.samples = [], [], 0, 0, 0
        torch.manual_seed(args.seed)  # the same network in every process

    def place(self, net: nn.Module) -> nn.Module:
        """Initialize the network, sync its BatchNorm if asked, move it to this device."""
        net.apply(init_weights)
        if self.args.sync_bn and self.world > 1:  # the global batch's statistics (GPUs only)
            net = nn.SyncBatchNorm.convert_sync_batchnorm(net)
        a, n, w = self.args, torch.get_num_threads(), self.world  # one line: what runs where
        print(f"{w} process{'es' * (w > 1)} ({dist.get_backend()} on {self.device.type}, {n} "
              f"thread{'s' * (n > 1)} each): ResNet-18 width {a.width}, batch {a.batch_size} = "
              f"{w} x {a.batch_size // w}, {len(self.data.train)} {self.data.name} images"
              f"{', sync BN' * a.sync_bn}", flush=True) if self.rank == 0 else None
        return net.to(self.device)

    @property
    def loader(self):
        """This process's batches, on its device; counted, to --max-steps, or --crash-rank."""
        for X, y in self.train_loader:  # non_blocking: from pinned memory, the host goes on
            yield X.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            self.seen, self.steps = self.seen + len(y), self.steps + 1  # the step is done
            if self.rank == self.args.crash_rank:
                raise RuntimeError(f"rank {self.rank} failed on purpose (--crash-rank)")
            if self.steps == self.args.max_steps:
                return

    def epochs(self, model: DistributedDataParallel):
        """Yield each epoch's number; time it, then test and print one line, on rank 0."""
        for epoch in range(self.args.epochs):
            seen = self.seen  # on the host: a count on the GPU would wait for its stream
            with dx.Benchmark(devices=[self.device], verbose=False) as clock:
                yield epoch
            tested = len(self.test_loader.dataset)  # this rank's share, which may be empty
            acc = evaluate_accuracy([model.module], self.test_loader, [self.device]) \
                if tested else 0
            stats = torch.tensor([self.seen - seen, acc * tested, tested], dtype=torch.float64,
                                 device=self.device)  # counts: exact in float64
            dist.all_reduce(stats)
            n, correct, tested = stats.tolist()
            self.rates.append(n / clock.elapsed)
            self.test_acc.append(correct / tested)
            self.samples += int(n)
            if self.rank == 0:
                print(f"epoch {epoch + 1}/{self.args.epochs}: test acc {self.test_acc[-1]:.3f}, "
                      f"{self.rates[-1]:.0f} samples/s ({clock.elapsed:.1f} s)", flush=True)
            if self.steps == self.args.max_steps:
                return

    def summary(self, model: DistributedDataParallel, optimizer: torch.optim.Optimizer) -> dict:
        """Profile a step, time communication (if asked); return what rank 0 hands back."""
        args, device, loader = self.args, self.device, self.train_loader
        timeline = comm = None
        if args.profile:  # one more step, after training, profiled on rank 0 (all ranks take it)
            X, y = (t.to(device) for t in next(iter(loader)))

            def step() -> None:
                optimizer.zero_grad(set_to_none=True)
                F.cross_entropy(model(X), y).backward()
                optimizer.step()
            step()  # warm: the first step after an evaluation allocates again
            timeline = step_timeline(step, device) if self.rank == 0 else step()
        if args.time_comm:  # after training: the passes use its final weights, the same batch
            size = max(args.time_batches or [args.batch_size // self.world])
            X, y = next(iter(DataLoader(self.data.train, size, sampler=self.sampler)))
            comm = time_comm(model, X.to(device), y.to(device), args.time_comm, args.time_batches)
        warm = self.rates[1:] or self.rates  # the first epoch warms up (allocations, cuDNN)
        params = nn.utils.parameters_to_vector(model.module.parameters()).double()
        return {"processes": self.world, "pids": self.pids, "no_sync": self.no_sync,
                "timeline": timeline, "comm": comm, "samples_seen": self.samples,
                "steps": self.steps, "backend": dist.get_backend(), "device": device.type,
                "n_train": len(self.data.train), "param_l2": params.norm().item(),
                "samples_per_s": dx.Band.of(warm).value, "samples_per_s_runs": warm,
                "accuracy": self.test_acc[-1], "test_acc": self.test_acc, "width": args.width,
                "batch_size": args.batch_size, "bucket_mb": args.bucket_mb}


def entry_point(train: Callable[[argparse.Namespace], dict]) -> Callable[..., None]:
    """The `main(argv=None)` torchrun runs: parse, train(args), rank 0 hands back the result."""
    def main(argv: list[str] | None = None) -> None:
        run_worker(partial(train, parse_args(argv)))
    return main


# Tensor parallelism (notebook 07's d2l_extras.tensor_parallel): the notebook's split_run on an
# MLP and on a TinyGPT block, each checked against the unsplit block in the same process.
TP_PROG = "python -m d2l_extras.tensor_parallel"


def tp_options(argv: Sequence[str] | None = None, k: int = 1) -> argparse.Namespace:
    """The tensor-parallel job's options, checked for k processes (each takes whole heads)."""
    p = argparse.ArgumentParser(prog=TP_PROG, description="An MLP and a transformer block split "
                                "over the processes (DTensor), checked against one process.")
    for name, default, text in (("width", 64, "d: the MLP is d -> 4d -> d"),
                                ("heads", 4, "attention heads of the transformer block"),
                                ("batch", 2, None), ("tokens", 8, "tokens a sequence"),
                                ("seed", 0, "the weights' and input's seed, the same on every rank")):
        p.add_argument(f"--{name}", type=WHOLE if name != "seed" else int, default=default,
                       help=text)
    p.add_argument("--timeout", type=option(positive_number), default=60.0,
                   help="seconds any collective may wait")
    args = p.parse_args(argv)
    if args.width % args.heads:
        raise ValueError(f"--width {args.width} must be a multiple of --heads {args.heads}: "
                         "each head takes width / heads of the features")
    if args.heads % k:
        raise ValueError(f"--heads {args.heads} do not split evenly over {k} processes: each "
                         f"process takes whole heads; pick --heads a multiple of {k}")
    return args


def _tp_part(split_run: Callable, block: nn.Module, plan: dict, args: argparse.Namespace,
             k: int, device: torch.device) -> dict:
    # One block split by plan, its output against the unsplit block's (worst rank), its counts.
    x = torch.randn(args.batch, args.tokens, args.width, requires_grad=True)
    tp, y, forward, backward = split_run(block, plan, x, k, device)
    with torch.no_grad():
        y, one = y.detach().cpu(), block(x)
    diff = torch.tensor((y - one).abs().max().item(), device=device)
    dist.all_reduce(diff, dist.ReduceOp.MAX)  # every rank's output must be the whole y
    local = {name: p.to_local() if hasattr(p, "to_local") else p
             for name, p in tp.named_parameters()}
    whole = dict(block.named_parameters())
    return {"max_diff": diff.item(), "forward": comm_counts(forward),
            "backward": comm_counts(backward),
            "shards": {name: list(p.shape) for name, p in local.items()
                       if p.shape != whole[name].shape},
            "params": sum(p.numel() for p in block.parameters()),
            "local_params": sum(p.numel() for p in local.values()), "x": x.tolist(),
            "y": y.tolist()}


def tp_entry(split_run: Callable, mlp_block: Callable[[int], nn.Module], mlp_plan: dict,
             block_plan: dict) -> Callable[..., None]:
    """The `main(argv=None)` of the tensor-parallel job: an MLP and a TinyGPT block, split."""
    from .transformer import Block  # its attention's qkv keeps whole heads together

    def work(argv: Sequence[str] | None) -> dict:
        k = int(os.environ.get("WORLD_SIZE", 1))
        args = tp_options(argv, k)  # a clear error before any process waits for another
        rank, k, device = init_worker(args.timeout)
        out = {"processes": k, "pids": distinct_processes(), "backend": dist.get_backend(),
               "device": device.type}
        for name, make, plan in (("mlp", lambda: mlp_block(args.width), mlp_plan),
                                 ("block", lambda: Block(args.width, args.heads), block_plan)):
            torch.manual_seed(args.seed)  # the same weights and input in every process
            out[name] = _tp_part(split_run, make(), plan, args, k, device)
        return out

    def main(argv: Sequence[str] | None = None) -> None:
        run_worker(partial(work, argv))
    return main
