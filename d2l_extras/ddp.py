"""Train the small ResNet-18 with DistributedDataParallel (DDP), one process per device.

torchrun starts the processes (on one machine `python -m d2l_extras.distributed`: torchrun with its
rendezvous store kept on 127.0.0.1); each joins the
process group (NCCL when every process has its own GPU, else gloo on the CPU), trains on its
share of every batch (DistributedSampler), and DDP sums the gradients while backward runs.
Rank 0 prints one line per epoch and hands a result dict back (save_result).

One machine, 2 processes (from a notebook: dx.launch("d2l_extras.ddp", 2, ["--epochs", "2"])):
    python -m d2l_extras.distributed --nproc-per-node=2 -m d2l_extras.ddp --epochs 2
Two machines with 4 GPUs each: run this on both, with --node-rank=0 on the machine whose
address is given as --master-addr and --node-rank=1 on the other (the port must be open):
    python -m torch.distributed.run --nnodes=2 --node-rank=0 --nproc-per-node=4 \\
        --master-addr=10.0.0.1 --master-port=29500 -m d2l_extras.ddp --epochs 10
Started without torchrun (python -m d2l_extras.ddp), it trains in this one process.
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import asdict, dataclass, field
from math import inf
from typing import Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, Subset
from torch.utils.data.distributed import DistributedSampler

from .data import SOURCES, default_sizes, load_images
from .distributed import init_worker, run_worker, worker_device
from .checks import whole_number
from .models import init_weights, resnet18
from .parallel import even_batch_size, per_process_batch
from .profiles import by_profile
from .profiling import TimelineEvent, launch_stacks, profile_trace, trace_events
from .report import notice
from .sizes import problem_size
from .bands import Band
from .timing import Benchmark, measure_interleaved


class _AllReduceSum(torch.autograd.Function):
    """Sum a tensor over all processes; backward sums the incoming gradients the same way."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.clone()
        dist.all_reduce(tensor)
        return tensor

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class GlooSyncBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm2d whose batch statistics are summed over all processes; works with gloo on CPU.

    torch.nn.SyncBatchNorm does the same on GPUs only. The statistics travel through an
    allreduce that autograd knows (_AllReduceSum), so backward sums their gradients too.
    """

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        if not (self.training and dist.is_initialized() and dist.get_world_size() > 1):
            return super().forward(X)
        C, shape = X.shape[1], (1, X.shape[1], 1, 1)
        count = torch.full((1,), X.numel() // C, dtype=X.dtype, device=X.device)
        local = torch.cat([X.sum(dim=(0, 2, 3)), (X * X).sum(dim=(0, 2, 3)), count])
        stats = _AllReduceSum.apply(local)
        n = stats[-1]
        mean = stats[:C] / n
        var = stats[C:2 * C] / n - mean * mean  # the biased variance normalizes, as in BatchNorm
        with torch.no_grad():
            self.num_batches_tracked += 1
            # momentum=None means a cumulative average, as in nn.BatchNorm2d.
            m = self.momentum if self.momentum is not None else 1 / self.num_batches_tracked.item()
            self.running_mean.lerp_(mean, m)
            self.running_var.lerp_(var * n / (n - 1).clamp(min=1), m)
        Y = (X - mean.view(shape)) * torch.rsqrt(var.view(shape) + self.eps)
        return Y * self.weight.view(shape) + self.bias.view(shape)


def sync_batchnorm(net: nn.Module, device: torch.device) -> nn.Module:
    """Make every BatchNorm2d share its statistics across processes (GPU: nn.SyncBatchNorm)."""
    if device.type == "cuda":
        return nn.SyncBatchNorm.convert_sync_batchnorm(net)
    for name, child in net.named_children():
        if isinstance(child, nn.BatchNorm2d) and not isinstance(child, GlooSyncBatchNorm2d):
            synced = GlooSyncBatchNorm2d(child.num_features, child.eps, child.momentum)
            synced.load_state_dict(child.state_dict())
            setattr(net, name, synced)
        else:
            sync_batchnorm(child, device)
    return net


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line; unset sizes come from the D2L_PROFILE profile."""
    n_train, n_test = default_sizes()
    p = argparse.ArgumentParser(prog="python -m d2l_extras.ddp",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=by_profile(3, 5, 10))
    p.add_argument("--batch-size", type=int, default=by_profile(64, 128, 256),
                   help="global batch size, split evenly over the processes")
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--momentum", type=float, default=0.9,
                   help="SGD momentum (0: the book's plain SGD, which needs many more epochs)")
    p.add_argument("--width", type=int, default=by_profile(16, 32, 64),
                   help="channels of ResNet-18's first stage (the book uses 64)")
    p.add_argument("--n-train", type=int, default=n_train)
    p.add_argument("--n-test", type=int, default=n_test)
    p.add_argument("--data", choices=SOURCES, default="auto",
                   help="auto: Fashion-MNIST when cached or downloadable, else the digits")
    p.add_argument("--sync-bn", action="store_true",
                   help="BatchNorm statistics over the global batch, not each process's share")
    p.add_argument("--bucket-mb", type=float, default=25.0,
                   help="DDP's gradient bucket size in MB (25 is PyTorch's default; a bucket "
                        "larger than the model means one allreduce, after the whole backward)")
    p.add_argument("--sync-every-step", action="store_true",
                   help="read the loss (loss.item()) after every step: a barrier that makes the "
                        "host wait for the device, so no two steps overlap")
    p.add_argument("--profile", action="store_true",
                   help="rank 0 profiles one training step after training; result['timeline']")
    p.add_argument("--check-no-sync", action="store_true",
                   help="before training, check that no_sync() gradient accumulation over two "
                        "micro-batches gives the gradient of one big batch")
    p.add_argument("--threads", type=int, default=0,
                   help="CPU threads per process (0: torch's default, OMP_NUM_THREADS)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: none)")
    p.add_argument("--time-comm", type=int, default=0, metavar="N",
                   help="after training, time N forward-backward passes with gradient sync and "
                        "N inside no_sync(), on the same batch, and N allreduces of all the "
                        "gradients alone: medians in result['comm'] (0: none)")
    p.add_argument("--time-batches", type=int, nargs="+", default=[], metavar="B",
                   help="with --time-comm: the batch sizes per process to time (default: this "
                        "process's share of --batch-size)")
    p.add_argument("--timeout", type=float, default=300,
                   help="seconds any process waits for the others before giving up")
    p.add_argument("--crash-rank", type=int, default=-1,
                   help="for tests: this rank raises an error after its first step")
    args = p.parse_args(argv)
    for name in ("epochs", "batch_size", "width", "n_train", "n_test"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.bucket_mb <= 0:
        p.error(f"--bucket-mb must be > 0, got {args.bucket_mb}")
    if args.time_comm < 0:
        p.error(f"--time-comm must be >= 0 (steps to time), got {args.time_comm}")
    if args.time_batches and not args.time_comm:
        p.error("--time-batches needs --time-comm N (how many steps to time)")
    if any(b < 1 for b in args.time_batches):
        p.error(f"--time-batches must all be >= 1, got {args.time_batches}")
    return args


@dataclass
class RunPlan:
    """How notebook 07 compares 1 process with k: the processes, batch, where they run, sizes."""

    k: int                      # processes of the parallel run
    batch_size: int             # global batch, a multiple of k
    device: str                 # "cuda": one NCCL process per GPU; "cpu": gloo, 1 thread each
    args: list[str] = field(default_factory=list)     # extra ddp arguments of both runs
    env: dict[str, str] = field(default_factory=dict)  # environment of both runs
    gpu_args: list[str] = field(default_factory=list)  # exactly one GPU: one process timed on it

    @property
    def per_process(self) -> int:
        """Examples per process and step in the k-process run."""
        return self.batch_size // self.k

    @property
    def gpu_alone(self) -> bool:
        """True with exactly one GPU: one process is also timed on it (with gpu_args)."""
        return bool(self.gpu_args)

    @property
    def width(self) -> int:
        """ResNet-18's width in the 1- and k-process runs (sized for `device`)."""
        return int(self.args[self.args.index("--width") + 1])


def run_sizes(device: str, budget: int | None = None) -> list[str]:
    """--width and --n-train of a run on device ('cpu' or 'cuda'), from the size policy."""
    return ["--width", str(problem_size("ddp_width", device, budget=budget)),
            "--n-train", str(problem_size("ddp_images", device, budget=budget))]


def run_plan(n_gpus: int, batch_size: int, budget: int | None = None) -> RunPlan:
    """Plan 1 vs k processes for n_gpus GPUs: k = n_gpus (>= 2), else 2 CPU processes.

    batch_size is the global batch of CPU processes. On GPUs each process takes the size
    policy's ddp_batch instead (k times it in all), so that its step is not launch-bound.
    Each run is sized for the device its processes will use (worker_device, as init_worker
    decides); `budget` (bytes) stands for that device's free memory, as in problem_size.
    """
    n_gpus = whole_number(n_gpus, "n_gpus", minimum=0)
    k = max(n_gpus, 2)
    per_gpu = problem_size("ddp_batch", "cuda", budget=budget) if n_gpus else 0
    if worker_device(k, n_gpus=n_gpus).type == "cuda":  # a GPU of its own for every process
        return RunPlan(k, k * per_gpu, "cuda", run_sizes("cuda", budget))
    # No GPU per process: k = 2 CPU processes with one thread each (a core stands in for a
    # device), even beside one GPU, whose single process is then timed apart, at a GPU's sizes.
    alone = worker_device(1, n_gpus=n_gpus).type == "cuda"
    return RunPlan(2, even_batch_size(batch_size, 2), "cpu",
                   ["--threads", "1", *run_sizes("cpu", budget)], {"D2L_BACKEND": "gloo"},
                   [*run_sizes("cuda", budget), "--batch-size", str(per_gpu)] if alone else [])


def shard_loaders(train_set: Dataset, test_set: Dataset, batch_size: int, world: int, rank: int,
                  seed: int = 0, pin_memory: bool = False
                  ) -> tuple[DataLoader, DistributedSampler, DataLoader]:
    """This rank's training loader (and its sampler) and its share of the test set."""
    per_process_batch(batch_size, world)
    if not 0 <= rank < world:
        raise ValueError(f"rank must be in 0..{world - 1}, got {rank}")
    # Each process sees a different 1/world of every epoch, reshuffled per epoch (set_epoch);
    # the sampler repeats a few examples so that every rank gets ceil(N / world) of them.
    sampler = DistributedSampler(train_set, world, rank, shuffle=True, seed=seed)
    loader = DataLoader(train_set, batch_size // world, sampler=sampler, pin_memory=pin_memory)
    # The test set is split without padding, so no image is counted twice.
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
    net = nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 10)).to(device)
    reference = [p.detach().clone() for p in net.parameters()]
    ref_net = nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 10))
    with torch.no_grad():
        for p, r in zip(ref_net.parameters(), reference):
            p.copy_(r.cpu())
    F.cross_entropy(ref_net(X), y).backward()  # the whole global batch in one process
    model = DistributedDataParallel(net, device_ids=[device] if device.type == "cuda" else None)
    mine = slice(rank * 2 * micro_batch, (rank + 1) * 2 * micro_batch)
    X_r, y_r = X[mine].to(device), y[mine].to(device)
    halves = (slice(0, micro_batch), slice(micro_batch, 2 * micro_batch))
    with model.no_sync():  # backward only accumulates into .grad; no allreduce
        (F.cross_entropy(model(X_r[halves[0]]), y_r[halves[0]]) / 2).backward()
    local = torch.cat([p.grad.flatten() for p in model.parameters()])
    gathered = [torch.empty_like(local) for _ in range(world)]
    dist.all_gather(gathered, local)  # after no_sync, every rank holds a different gradient
    differ = max((g - gathered[0]).abs().max().item() for g in gathered)
    # The second micro-batch runs outside no_sync: its backward allreduces the accumulated sum.
    (F.cross_entropy(model(X_r[halves[1]]), y_r[halves[1]]) / 2).backward()
    error = max((p.grad.cpu() - r.grad).abs().max().item()
                for p, r in zip(model.parameters(), ref_net.parameters()))
    scale = max(r.grad.abs().max().item() for r in ref_net.parameters())
    return {"max_error": error, "grad_scale": scale, "unsynced_difference": differ,
            "micro_batch": micro_batch, "global_batch": len(X)}


# Communication ops and kernels, by how their names begin: NCCL's kernels (ncclDevKernel_...,
# ncclKernel_... before NCCL 2.19) and the profiler's ops of a collective (nccl:all_reduce,
# gloo:broadcast, c10d::allreduce_, record_param_comms).
_COMM_PREFIXES = ("nccl", "gloo:", "mpi:", "ucc:", "c10d::", "record_param_comms")
# The collectives as names spell them once "_" is dropped; the longer word first
# (allreduce before reduce, sendrecv before send).
_COLLECTIVES = ("allreduce", "reducescatter", "allgather", "alltoall", "broadcast", "sendrecv",
                "send", "recv", "reduce", "scatter", "gather", "barrier")


def collective(name: str) -> str | None:
    """The collective an op or kernel runs ('allreduce', 'broadcast'...), from its name.

    None for computation; 'communication' where the name does not say which collective
    (record_param_comms, or NCCL's generic kernel ncclDevKernel_Generic).
    """
    flat = name.lower().removeprefix("void ")
    if not flat.startswith(_COMM_PREFIXES):
        return None
    flat = flat.split("(")[0].replace("_", "")  # the arguments name no collective
    return next((word for word in _COLLECTIVES if word in flat), "communication")


def _phase(name: str) -> str:
    # Which part of a training step a CPU op belongs to, by its name.
    if "Backward" in name or "evaluate_function" in name or "backward" in name:
        return "backward"
    if "Optimizer" in name or "sgd" in name.lower():
        return "optimizer"
    return "forward"


def comm_overlap(events: Sequence[dict | TimelineEvent]) -> dict:
    """From a step's timeline: when backward ended, and how much allreduce ran before that."""
    def get(ev, key):
        return ev[key] if isinstance(ev, dict) else getattr(ev, key)
    backward = [ev for ev in events if get(ev, "kind") == "backward"]
    reduces = [ev for ev in events if get(ev, "kind") == "allreduce"]
    if not backward or not reduces:
        raise ValueError(f"the timeline needs backward and allreduce events, got "
                         f"{len(backward)} and {len(reduces)} (was it profiled with --profile "
                         "in 2 or more processes?)")
    end = max(get(ev, "start") + get(ev, "duration") for ev in backward)
    total = sum(get(ev, "duration") for ev in reduces)
    before = sum(max(0.0, min(get(ev, "start") + get(ev, "duration"), end) - get(ev, "start"))
                 for ev in reduces)
    return {"backward_end": end, "first_allreduce": min(get(ev, "start") for ev in reduces),
            "allreduces": len(reduces), "allreduce_seconds": total, "overlapped_seconds": before}


def step_timeline(step: Callable[[], object], device: torch.device) -> list[dict]:
    """Profile one call of step(); return its events as dicts (lane, start, kind...) for JSON."""
    trace = profile_trace(step, [device])
    events, stacks = trace_events(trace), launch_stacks(trace)
    # gloo runs its collectives on threads of its own: lanes that hold nothing else
    lanes: dict[str, bool] = {}
    for ev in events:
        lanes[ev.lane] = lanes.get(ev.lane, True) and collective(ev.name) is not None
    comm = {lane for lane, only_comm in lanes.items() if only_comm and lane.startswith("CPU")}
    backward_end = max((ev.end for ev in events
                        if ev.kind == "cpu op" and _phase(ev.name) == "backward"), default=inf)

    def cpu_kind(ev: TimelineEvent) -> str:
        if ev.lane in comm:
            return collective(ev.name)
        # What runs after the last backward op is the optimizer's update, whatever its op names.
        # A collective called here only starts one (on gloo's threads, or as a GPU kernel).
        phase = _phase(ev.name)
        return "optimizer" if phase == "forward" and ev.start >= backward_end else phase

    kinds = []
    for ev in events:
        if ev.kind == "cpu op":
            kinds.append(cpu_kind(ev))
            continue
        # On a GPU a collective is a kernel of its own (NCCL's), beside the compute kernels,
        # which run later than their launch: each is the part of the step that launched it.
        stack = stacks.get(ev, [])  # the CPU ops around its launch, outermost first
        kind = collective(ev.name)
        if kind == "communication":  # a generic NCCL kernel: the op that launched it says
            named = [collective(op.name) for op in stack]
            kind = next((c for c in reversed(named) if c not in (None, "communication")), kind)
        kinds.append(kind or (cpu_kind(stack[0]) if stack else ev.kind))
    found: dict[str, set] = {}
    for ev, kind in zip(events, kinds):
        found.setdefault(ev.lane, set()).add(kind)
    # Name the rows by what they do: "CPU thread 0 (forward, backward)", "communication thread 1"
    names = {}
    for lane, lane_kinds in found.items():
        if lane in comm:
            names[lane] = lane.replace("CPU thread", "communication thread")
        else:
            work = [k for k in ("forward", "backward") if k in lane_kinds]
            names[lane] = f"{lane} ({', '.join(work)})" if work else lane
    return [asdict(TimelineEvent(ev.name, names[ev.lane], ev.start, ev.duration, kind))
            for ev, kind in zip(events, kinds)]


def _cross_entropy(model: nn.Module, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(X), y)


def time_comm(model: DistributedDataParallel, X: torch.Tensor, y: torch.Tensor,
              steps: int, batches: Sequence[int] = (),
              loss: Callable[[nn.Module, torch.Tensor, torch.Tensor],
                             torch.Tensor] = _cross_entropy) -> dict:
    """Seconds of a forward-backward pass with gradient sync and inside no_sync().

    For each batch size (default: len(X)), `steps` passes each way on the first examples of
    (X, y), interleaved after one warm-up of each, so that noise hits both alike; the
    difference is what the gradient allreduce adds to a step. Also times `steps` allreduces of
    a buffer as large as all the gradients, alone. Every process must call it alike: each timed
    pass starts at a barrier. For each, "<name>_s" holds medians and "<name>_runs" every run
    (a median and its band: `dx.Band.of(runs)`). `loss(model, X, y)` is the loss of a pass
    (default: cross-entropy of model(X) against y).
    """
    steps = whole_number(steps, "steps")
    batches = [whole_number(b, "each batch size") for b in batches] or [len(X)]
    if max(batches) > len(X):
        raise ValueError(f"batch {max(batches)} is larger than the {len(X)} examples given")
    device = next(model.parameters()).device

    def step(b: int) -> None:
        model.zero_grad(set_to_none=True)
        loss(model, X[:b], y[:b]).backward()  # DDP allreduces in here

    def unsynced(b: int) -> None:
        with model.no_sync():  # the same pass, its gradients kept local
            step(b)

    grads = [p for p in model.parameters() if p.requires_grad]
    flat = torch.zeros(sum(p.numel() for p in grads), device=device)
    out = {"steps": steps, "batches": batches, "sync_s": [], "no_sync_s": [], "sync_runs": [],
           "no_sync_runs": [], "grad_bytes": sum(p.numel() * p.element_size() for p in grads)}
    # A barrier before each timed pass: start together, or a step waits for a late neighbour.
    # A fixed number of runs: every process must take the same collectives.
    for b in batches:
        timed = measure_interleaved({"sync": lambda: step(b), "no_sync": lambda: unsynced(b)},
                                    devices=[device], runs=steps, before=dist.barrier)
        for key, m in timed.items():
            out[f"{key}_s"].append(m.median)
            out[f"{key}_runs"].append(m.warm)
    ar = measure_interleaved({"allreduce": lambda: dist.all_reduce(flat)}, devices=[device],
                             runs=steps, before=dist.barrier)["allreduce"]
    out["allreduce_s"], out["allreduce_runs"] = ar.median, ar.warm
    model.zero_grad(set_to_none=True)
    return out


def _count_correct(net: nn.Module, loader: DataLoader, device: torch.device) -> torch.Tensor:
    totals = torch.zeros(2, dtype=torch.float64, device=device)  # correct, seen
    net.eval()
    with torch.no_grad():
        for X, y in loader:
            X, y = X.to(device), y.to(device)
            totals[0] += (net(X).argmax(dim=1) == y).sum()
            totals[1] += len(y)
    net.train()
    return totals


def train(args: argparse.Namespace) -> dict:
    """Train with DDP in this process (one of WORLD_SIZE); return the summary dict."""
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    rank, world, device = init_worker(args.timeout)
    per_process_batch(args.batch_size, world)  # before the data loads: fail early
    # Which processes took part: their ids, gathered (a check that k processes really ran).
    pids: list = [None] * world
    dist.all_gather_object(pids, os.getpid())
    no_sync = no_sync_check(device) if args.check_no_sync else None
    # Rank 0 looks for (and may download) the data first; the others then read the same set.
    choice = [None]
    if rank == 0:  # says in one line (notice) when it falls back to the digits
        data = load_images(args.n_train, args.n_test, args.data, verbose=False)
        if data.fallback:
            notice(data.fallback)
        choice = [data.name]
    dist.broadcast_object_list(choice, src=0)
    if rank != 0:
        data = load_images(args.n_train, args.n_test, choice[0], download=False, verbose=False)

    torch.manual_seed(args.seed)
    net = resnet18(10, 1, args.width)
    net.apply(init_weights)
    if args.sync_bn and world > 1:
        net = sync_batchnorm(net, device)
    # DDP copies rank 0's parameters and buffers to every process when it wraps the model,
    # so all replicas start equal whatever their seeds; then it hooks allreduce into backward:
    # gradients are packed into buckets of bucket_cap_mb, and each bucket is allreduced as
    # soon as backward has filled it. broadcast_buffers=True (the default) sends rank 0's
    # buffers (BatchNorm's running statistics) to all processes at every forward pass.
    ids = [device] if device.type == "cuda" else None  # the GPU this process owns
    model = DistributedDataParallel(net.to(device), device_ids=ids,
                                    bucket_cap_mb=args.bucket_mb)
    loader, sampler, test_loader = shard_loaders(data.train, data.test, args.batch_size,
                                                 world, rank, args.seed, device.type == "cuda")
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    if rank == 0:  # one short line: what runs where, on what
        threads = torch.get_num_threads()
        print(f"{world} process{'es' if world > 1 else ''} ({dist.get_backend()} on "
              f"{device.type}, {threads} thread{'s' if threads > 1 else ''} each): "
              f"ResNet-18 width {args.width}, batch {args.batch_size} = {world} x "
              f"{args.batch_size // world}, {len(data.train)} {data.name} images"
              + (", sync BN" if args.sync_bn else ""), flush=True)
    history: dict[str, list[float]] = {"epoch_seconds": [], "epoch_samples_per_s": [],
                                       "epoch_samples": [], "train_loss": [], "test_acc": []}
    steps = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        # Examples are counted on the host: torch.tensor(len(y), device=cuda) would copy from
        # host memory and then wait for the stream (a blocking copy): a wait in every step.
        seen = 0
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
                seen += len(y)
                steps += 1
                if rank == args.crash_rank:
                    raise RuntimeError(f"rank {rank} failed on purpose after step {steps} "
                                       "(--crash-rank)")
                if args.max_steps and steps >= args.max_steps:
                    break
        stats = torch.stack([loss_sum, torch.full_like(loss_sum, seen)])  # a fill, no copy
        dist.all_reduce(stats)
        counts = _count_correct(model.module, test_loader, device)
        dist.all_reduce(counts)
        history["epoch_seconds"].append(clock.elapsed)
        history["epoch_samples_per_s"].append(stats[1].item() / clock.elapsed)
        history["epoch_samples"].append(int(stats[1].item()))  # over all processes
        history["train_loss"].append(stats[0].item() / stats[1].item())
        history["test_acc"].append(counts[0].item() / counts[1].item())
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs}: loss {history['train_loss'][-1]:.3f}, "
                  f"test acc {history['test_acc'][-1]:.3f}, "
                  f"{history['epoch_samples_per_s'][-1]:.0f} samples/s ({clock.elapsed:.1f} s)",
                  flush=True)
        if args.max_steps and steps >= args.max_steps:
            break
    # The first epoch includes warm-up (allocations, cuDNN autotuning): leave it out when we can.
    warm = history["epoch_samples_per_s"][1:] or history["epoch_samples_per_s"]
    with torch.no_grad():
        param_l2 = sum(p.double().pow(2).sum() for p in model.module.parameters()).sqrt().item()
    timeline = None
    if args.profile:  # one more step, after training, profiled on rank 0 (all ranks take it)
        X, y = next(iter(loader))
        X, y = X.to(device), y.to(device)

        def step() -> None:
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(X), y).backward()
            optimizer.step()
        step()  # warm: the first step after an evaluation allocates again
        if rank == 0:
            timeline = step_timeline(step, device)
        else:
            step()
    comm = None
    if args.time_comm:  # after training: the passes use its final weights, the same batch
        size = max(args.time_batches or [args.batch_size // world])
        X, y = next(iter(DataLoader(data.train, size, sampler=sampler)))
        comm = time_comm(model, X.to(device), y.to(device), args.time_comm, args.time_batches)
    return {"processes": world, "pids": len(set(pids)), "no_sync": no_sync,
            "timeline": timeline, "comm": comm, "bucket_mb": args.bucket_mb,
            "samples_seen": sum(history["epoch_samples"]),
            "backend": dist.get_backend(), "device": device.type,
            "data": data.name, "n_train": len(data.train), "batch_size": args.batch_size,
            "lr": args.lr, "momentum": args.momentum, "width": args.width,
            "threads": torch.get_num_threads(), "sync_bn": args.sync_bn, "steps": steps,
            "samples_per_s": Band.of(warm).value, "samples_per_s_runs": warm, "accuracy": history["test_acc"][-1],
            "train_seconds": sum(history["epoch_seconds"]), "param_l2": param_l2, **history}


def main(argv: list[str] | None = None) -> None:
    """Entry point: parse arguments, train, and let rank 0 save the result."""
    args = parse_args(argv)
    run_worker(lambda: train(args))

if __name__ == "__main__":
    main(sys.argv[1:])
