"""A sharded (key, value) parameter store with push and pull on torch.distributed (d2l 12.7.4).

Every process is a worker and a server: each key has one owner rank that holds its value.
`push(key, grad)` sends every worker's gradient to the owner, which aggregates them (and, with
a learning rate, takes an SGD step); `pull(key)` sends the owner's value to every worker. All
processes call push and pull in the same order (like collectives); a dead peer raises, never hangs.
Shards are checkpointed atomically (temporary file, fsync, os.replace, fsync of the directory;
a step counts as acknowledged only once every shard of it is on disk), so a restarted job loses
nothing acknowledged, and a restart removes the temporary files a crash left behind.

Run it as a worker; rank 0 hands back {task: result}. One task per job in the notebook, so that
each section reruns alone. One machine, 2 processes (everything on 127.0.0.1): train through the store
and with allreduce (task compare), or with stale pulls (task staleness):
    python -m d2l_extras.distributed --nproc-per-node=2 -m d2l_extras.kvstore --task compare --steps 60
Fault tolerance: train with checkpoints in --workdir; rank 1 ends itself abruptly once at step
23 (exit code 86, no clean-up). Run the same command again and it resumes from the last
committed checkpoint:
    python -m d2l_extras.distributed --nproc-per-node=2 -m d2l_extras.kvstore --task fault --workdir /tmp/kv --kill-at 23
Two machines, 2 processes each: run on both with --node-rank=0 and 1 and the first machine's
address; --workdir must then be a directory both machines see (a shared file system):
    python -m torch.distributed.run --nnodes=2 --node-rank=0 --nproc-per-node=2 \
        --master-addr=10.0.0.1 --master-port=29500 -m d2l_extras.kvstore --task compare
"""
from __future__ import annotations

import argparse
import datetime
import errno
import json
import os
from typing import Mapping, Sequence

import torch
from torch import nn

from .distributed import wait_for
from .checks import whole_number

COMMIT_FILE = "committed.json"
ACK_LOG = "acks.log"
KILLED_MARK = "killed-once"  # the demonstration crash happens only once per work directory
# The exit code of the demonstration crash: a notebook tells it from any other failure by it.
CRASH_EXIT_CODE = 86


def _least_loaded(load: Sequence[int]) -> int:
    # The rank holding the fewest numbers so far (the lowest such rank on a tie).
    return min(range(len(load)), key=lambda r: (load[r], r))


def shard_owners(sizes: Mapping[str, int], world: int) -> dict[str, int]:
    """Owner rank of each key (in order) when keys of these sizes are spread over world ranks."""
    world = whole_number(world, "world (number of ranks)")
    load, owners = [0] * world, {}
    for key, numel in sizes.items():
        numel = whole_number(numel, f"shard_owners: the size of {key!r} (in elements)",
                             minimum=0)
        owners[key] = _least_loaded(load)
        load[owners[key]] += numel
    return owners


class KVStore:
    """Sharded parameter server over torch.distributed: push aggregates, pull retrieves.

    lr=None: a key's value becomes the sum of what all workers pushed (plain aggregation).
    lr=float: the owner takes an SGD step with the mean of the pushed gradients.
    max_staleness=tau > 0: a pull may return a version up to tau updates old (chosen at random
    per worker and pull), which emulates asynchronous workers that do not wait for the newest
    weights.
    """

    def __init__(self, lr: float | None = None, max_staleness: int = 0, timeout_s: float = 60.0,
                 device: torch.device | str | None = None, seed: int = 0):
        import torch.distributed as dist

        if not dist.is_initialized():
            raise RuntimeError("KVStore needs torch.distributed: call dx.init_worker() in a "
                               "process started by torchrun (dx.launch)")
        if lr is not None and not lr > 0:
            raise ValueError(f"lr must be > 0 (or None for plain aggregation), got {lr!r}")
        max_staleness = whole_number(max_staleness, "max_staleness", minimum=0)
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s!r}")
        self.dist = dist
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.lr, self.max_staleness = lr, max_staleness
        self.timeout = datetime.timedelta(seconds=timeout_s)
        self.device = torch.device(device) if device is not None else (
            torch.device("cuda", torch.cuda.current_device())
            if dist.get_backend() == "nccl" else torch.device("cpu"))
        # key -> (owner rank, shape, dtype, message tag), the same on every rank
        self._meta: dict[str, tuple[int, torch.Size, torch.dtype, int]] = {}
        self._load = [0] * self.world
        self._values: dict[str, torch.Tensor] = {}      # this rank's shard
        self._history: dict[str, list[torch.Tensor]] = {}  # newest last, for bounded staleness
        self._rng = torch.Generator().manual_seed(seed * 7919 + self.rank)
        self.versions_served: list[int] = []  # how many updates old each pull was (staleness)

    # -- keys and owners ----------------------------------------------------------------------
    def init(self, key: str, value: torch.Tensor) -> None:
        """Register key on every rank (same order everywhere); its owner keeps `value`."""
        if not isinstance(key, str):
            raise TypeError(f"keys are strings, got {type(key).__name__}")
        if key in self._meta:
            raise ValueError(f"key {key!r} was already initialized")
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"init({key!r}, value): value must be a tensor")
        # Balance the shards: the next key goes to the rank holding the fewest numbers so far
        # (the rule of shard_owners, applied one key at a time).
        owner = _least_loaded(self._load)
        self._load[owner] += value.numel()
        self._meta[key] = (owner, value.shape, value.dtype, len(self._meta))
        if owner == self.rank:
            self._values[key] = value.detach().to(self.device, copy=True)
            self._history[key] = [self._values[key].clone()]

    def owner(self, key: str) -> int:
        """The rank that holds key's value."""
        return self._check_key(key, "owner")[0]

    def keys(self) -> list[str]:
        """All registered keys, in registration order."""
        return list(self._meta)

    def shard_keys(self) -> list[str]:
        """The keys this rank owns."""
        return list(self._values)

    def _check_key(self, key: str, op: str) -> tuple[int, torch.Size, torch.dtype, int]:
        if key not in self._meta:
            raise KeyError(f"{op}: unknown key {key!r}; known keys are {self.keys()}. "
                           f"Call init(key, value) on every rank first.")
        return self._meta[key]

    # -- push and pull ------------------------------------------------------------------------
    def _run(self, ops: list) -> None:
        if ops:
            for work in self.dist.batch_isend_irecv(ops):
                wait_for(work, self.timeout)  # a dead peer raises instead of hanging

    def push(self, key: str, value: torch.Tensor) -> None:
        """Send value for key to its owner, which aggregates all workers' values."""
        self.push_all({key: value})

    def push_all(self, values: Mapping[str, torch.Tensor]) -> None:
        """Push several keys at once (one round of messages): every rank passes the same keys."""
        for key, value in values.items():
            _, shape, dtype, _ = self._check_key(key, "push")
            if not isinstance(value, torch.Tensor) or value.shape != shape or value.dtype != dtype:
                got = (f"{tuple(value.shape)} {value.dtype}" if isinstance(value, torch.Tensor)
                       else type(value).__name__)
                raise ValueError(f"push: key {key!r} holds {tuple(shape)} {dtype}, got {got}")
        P2P = self.dist.P2POp
        ops, inbox = [], {}
        for key, value in values.items():
            owner, shape, dtype, tag = self._meta[key]
            if owner == self.rank:
                inbox[key] = {r: torch.empty(shape, dtype=dtype, device=self.device)
                              for r in range(self.world) if r != self.rank}
                ops += [P2P(self.dist.irecv, buf, r, tag=tag) for r, buf in inbox[key].items()]
            else:
                send = value.detach().to(self.device).contiguous()
                ops.append(P2P(self.dist.isend, send, owner, tag=tag))
        self._run(ops)
        for key, bufs in inbox.items():
            bufs[self.rank] = values[key].detach().to(self.device)
            total = bufs[0].clone()
            for r in range(1, self.world):  # fixed order: the same sum on every run
                total += bufs[r]
            self._apply(key, total)

    def _apply(self, key: str, total: torch.Tensor) -> None:
        if self.lr is None:
            self._values[key] = total
        else:
            self._values[key] = self._values[key] - self.lr * total / self.world
        history = self._history[key]
        history.append(self._values[key].clone())
        del history[:-(self.max_staleness + 1)]

    def pull(self, key: str, latest: bool = False) -> torch.Tensor:
        """Return key's value from its owner (maybe stale, unless latest=True)."""
        return self.pull_all([key], latest)[key]

    def pull_all(self, keys: Sequence[str], latest: bool = False) -> dict[str, torch.Tensor]:
        """Pull several keys at once: every rank passes the same keys in the same order."""
        for key in keys:
            self._check_key(key, "pull")
        P2P = self.dist.P2POp
        ops, out = [], {}
        for key in keys:
            owner, shape, dtype, tag = self._meta[key]
            if owner == self.rank:
                for r in range(self.world):
                    version = self._version_for(key, latest)
                    if r == self.rank:
                        out[key] = version.clone()
                    else:
                        ops.append(P2P(self.dist.isend, version, r, tag=tag))
            else:
                out[key] = torch.empty(shape, dtype=dtype, device=self.device)
                ops.append(P2P(self.dist.irecv, out[key], owner, tag=tag))
        self._run(ops)
        return out

    def _version_for(self, key: str, latest: bool) -> torch.Tensor:
        history = self._history[key]
        age = 0
        if not latest and self.max_staleness > 0:
            age = int(torch.randint(0, min(self.max_staleness, len(history) - 1) + 1, (1,),
                                    generator=self._rng))
        self.versions_served.append(age)
        return history[-1 - age]

    # -- checkpoints --------------------------------------------------------------------------
    def _barrier(self) -> None:
        flag = torch.ones(1, device=self.device)
        wait_for(self.dist.all_reduce(flag, async_op=True), self.timeout)
        flag.item()  # holds the host too: on NCCL the wait only orders the GPU's stream

    def save(self, directory: str, step: int) -> None:
        """Checkpoint every shard at `step`, then commit it (collective; atomic on each rank)."""
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"shard-{self.rank}-step{step}.pt")
        state = {"step": step, "world": self.world,
                 "values": {k: v.cpu() for k, v in self._values.items()}}
        _atomic_write(path, lambda f: torch.save(state, f))
        self._barrier()  # every shard of this step is on disk
        if self.rank == 0:  # the commit record is what makes the step count (acknowledged)
            _atomic_write(os.path.join(directory, COMMIT_FILE),
                          lambda f: f.write(json.dumps({"step": step}).encode()))
            with open(os.path.join(directory, ACK_LOG), "a", encoding="utf-8") as log:
                log.write(f"{step}\n")
                log.flush()
                os.fsync(log.fileno())
        self._barrier()  # nobody deletes an old shard before the new step is committed
        for name in os.listdir(directory):
            prefix = f"shard-{self.rank}-step"
            if name.startswith(prefix) and name.endswith(".pt") and \
                    int(name[len(prefix):-3]) < step:
                os.remove(os.path.join(directory, name))

    def load(self, directory: str) -> int:
        """Load this rank's shard of the last committed step; return that step (0: none).

        Also removes the temporary files that a crash of an earlier run left half-written
        (each rank its own shards'; rank 0 the rest): nothing of this job is writing yet.
        """
        if os.path.isdir(directory):
            mine = f"shard-{self.rank}-"
            remove_temporaries(directory, lambda name: name.startswith(mine) or
                               (self.rank == 0 and not name.startswith("shard-")))
        step = committed_step(directory)
        if step is None:
            return 0
        path = os.path.join(directory, f"shard-{self.rank}-step{step}.pt")
        state = torch.load(path, map_location=self.device, weights_only=True)
        if state["world"] != self.world or set(state["values"]) != set(self._values):
            raise RuntimeError(f"{path} holds keys {sorted(state['values'])} of a "
                               f"{state['world']}-process job, but this rank of a {self.world}-"
                               f"process job owns {sorted(self._values)}")
        for key, value in state["values"].items():
            self._values[key] = value
            self._history[key] = [value.clone()]
        return step


TEMP_MARK = ".tmp"  # temporary files are named <target>.tmp<pid> beside their target


def _atomic_write(path: str, write) -> None:
    # Write beside the target and flush it to disk, then rename: readers see the old or the new
    # file. A failed write removes its temporary file; a crash between the write and the rename
    # leaves it, and the next load() removes it.
    tmp = f"{path}{TEMP_MARK}{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    os.replace(tmp, path)
    _fsync_directory(os.path.dirname(os.path.abspath(path)))


def _fsync_directory(directory: str) -> None:
    # The rename is an entry in the directory: until the directory itself is on disk, a power
    # cut can bring back the old entry. POSIX only: Windows cannot open a directory this way
    # (NTFS journals the rename itself).
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as error:  # some file systems (a few network ones) cannot sync a directory
        if error.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def remove_temporaries(directory: str, owned=lambda name: True) -> list[str]:
    """Delete the temporary files (NAME.tmp<pid>) in directory that `owned(name)` accepts."""
    removed = []
    for name in sorted(os.listdir(directory)):
        stem, mark, pid = name.rpartition(TEMP_MARK)
        if mark and stem and pid.isdigit() and owned(name):
            os.remove(os.path.join(directory, name))
            removed.append(name)
    return removed


def committed_step(directory: str) -> int | None:
    """The last step whose shards were all checkpointed in directory, or None."""
    path = os.path.join(directory, COMMIT_FILE)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return int(json.load(f)["step"])


def acknowledged_steps(directory: str) -> list[int]:
    """Every step acknowledged (committed) in directory, oldest first, over all runs."""
    path = os.path.join(directory, ACK_LOG)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [int(line) for line in f if line.strip()]


# ---------------------------------------------------------------------------------------------
# A small problem to train through the store: an MLP classifier on synthetic data.

def make_problem(seed: int = 0, n: int = 2048, features: int = 20, classes: int = 4
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic classification data (the same on every rank for a given seed)."""
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(n, features, generator=gen)
    teacher = torch.randn(features, classes, generator=gen)
    y = (X @ teacher + 0.5 * torch.randn(n, classes, generator=gen)).argmax(1)
    return X, y


def make_net(seed: int = 0, features: int = 20, hidden: int = 32, classes: int = 4) -> nn.Module:
    """A two-layer MLP with weights drawn from `seed` (identical on every rank)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))


def batch_of(step: int, rank: int, world: int, batch: int, n: int, seed: int = 0
             ) -> torch.Tensor:
    """Indices of rank's share of step's global minibatch (depends only on seed and step)."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
    return torch.randint(0, n, (batch * world,), generator=gen)[rank * batch:(rank + 1) * batch]


def gradients(net: nn.Module, X: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """Gradients of the cross-entropy loss of net on (X, y), by parameter name."""
    loss = nn.functional.cross_entropy(net(X), y)
    names, params = zip(*net.named_parameters())
    return dict(zip(names, torch.autograd.grad(loss, params)))


def _load_into(net: nn.Module, values: Mapping[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for name, p in net.named_parameters():
            p.copy_(values[name])


def _full_loss(net: nn.Module, X: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float(nn.functional.cross_entropy(net(X), y))


def train_kvstore(store: KVStore, net: nn.Module, X: torch.Tensor, y: torch.Tensor, steps: int,
                  batch: int, start: int = 0, seed: int = 0, eval_every: int = 0,
                  on_step=None) -> list[tuple[int, float]]:
    """Train net through the store: pull weights, compute a gradient, push it; (step, loss)."""
    rank, world, names = store.rank, store.world, [n for n, _ in net.named_parameters()]
    curve = []
    for step in range(start, steps):
        if eval_every and step % eval_every == 0:
            _load_into(net, store.pull_all(names, latest=True))
            curve.append((step, _full_loss(net, X, y)))
        if on_step is not None:
            on_step(step)
        _load_into(net, store.pull_all(names))
        idx = batch_of(step, rank, world, batch, len(X), seed)
        store.push_all(gradients(net, X[idx].to(store.device), y[idx].to(store.device)))
    _load_into(net, store.pull_all(names, latest=True))
    if eval_every:
        curve.append((steps, _full_loss(net, X, y)))
    return curve


def train_allreduce(net: nn.Module, X: torch.Tensor, y: torch.Tensor, steps: int, batch: int,
                    lr: float, seed: int = 0, timeout_s: float = 60.0, start: int = 0) -> None:
    """The reference: every rank averages gradients with dist.all_reduce and steps itself."""
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    timeout = datetime.timedelta(seconds=timeout_s)
    device = next(net.parameters()).device
    for step in range(start, steps):
        idx = batch_of(step, rank, world, batch, len(X), seed)
        grads = gradients(net, X[idx].to(device), y[idx].to(device))
        with torch.no_grad():
            for name, p in net.named_parameters():
                wait_for(dist.all_reduce(grads[name], async_op=True), timeout)
                p -= lr * grads[name] / world


def _params(net: nn.Module) -> dict[str, list]:
    return {name: p.detach().cpu().reshape(-1).tolist() for name, p in net.named_parameters()}


# ---------------------------------------------------------------------------------------------
# Worker tasks: each returns what rank 0 hands back; the notebook checks it against its own
# single-process computation.

def _net_and_store(args, device, **store_options) -> tuple[nn.Module, "KVStore"]:
    # Every task starts the same way: a fresh model whose parameters seed a fresh store.
    net = make_net(args.seed).to(device)
    store = KVStore(lr=args.lr, timeout_s=args.timeout, device=device, **store_options)
    for name, p in net.named_parameters():
        store.init(name, p.detach())
    return net, store


COMPARE_CHUNKS = 5   # task_compare trains in this many chunks: the first apart, then 4 runs


def task_compare(args, device) -> dict:
    """Train through the store (synchronous) and with allreduce; both weights and step times.

    Both train in COMPARE_CHUNKS chunks of steps, in turns, each chunk after a barrier; the
    first chunk of each is timed apart (warm-up), the others are the runs of the step times
    ("store_runs", "allreduce_runs": seconds per step). Leftover steps train untimed.
    """
    import torch.distributed as dist

    from .timing import measure_interleaved

    X, y = make_problem(args.seed)
    X, y = X.to(device), y.to(device)
    net, store = _net_and_store(args, device)
    ref = make_net(args.seed).to(device)
    size = max(1, args.steps // COMPARE_CHUNKS)
    done = {"store": 0, "allreduce": 0}   # steps each has trained so far

    def chunk(how: str, end: int | None = None) -> None:
        start, stop = done[how], end or min(done[how] + size, args.steps)
        if how == "store":
            train_kvstore(store, net, X, y, stop, args.batch, start=start, seed=args.seed)
        else:
            train_allreduce(ref, X, y, stop, args.batch, args.lr, args.seed, args.timeout,
                            start=start)
        done[how] = stop

    timed = measure_interleaved({how: lambda how=how: chunk(how) for how in done},
                                devices=[device], runs=max(1, min(args.steps, COMPARE_CHUNKS)
                                                           - 1), before=dist.barrier)
    for how in done:   # the steps that no chunk took
        chunk(how, args.steps)
    runs = {how: [t / size for t in m.warm] for how, m in timed.items()}
    return {"world": store.world, "backend": store.dist.get_backend(),
            "owners": {k: store.owner(k) for k in store.keys()},
            "store": _params(net), "allreduce": _params(ref), "steps": args.steps,
            "store_runs": runs["store"], "allreduce_runs": runs["allreduce"]}


def task_staleness(args, device) -> dict:
    """Train through stores whose pulls may be up to tau updates old, for each --staleness."""
    X, y = make_problem(args.seed)
    X, y = X.to(device), y.to(device)
    curves, served = {}, {}
    for tau in args.staleness:
        net, store = _net_and_store(args, device, max_staleness=tau, seed=args.seed)
        curves[str(tau)] = train_kvstore(store, net, X, y, args.steps, args.batch,
                                         seed=args.seed, eval_every=args.eval_every)
        # How old the weights were that rank 0 was served (0 = the newest).
        ages = store.versions_served
        served[str(tau)] = {"max": max(ages), "stale_share": sum(a > 0 for a in ages) / len(ages)}
    return {"world": store.world, "curves": curves, "served": served}


def task_fault(args, device) -> dict:
    """Checkpointed store training that resumes from --workdir; one rank may crash once."""
    X, y = make_problem(args.seed)
    X, y = X.to(device), y.to(device)
    net, store = _net_and_store(args, device)
    start = store.load(args.workdir)
    if store.rank == 0:
        print(f"fault: starting at step {start}", flush=True)
    mark = os.path.join(args.workdir, KILLED_MARK)

    def on_step(step: int) -> None:
        if step > start and step % args.ckpt_every == 0:
            store.save(args.workdir, step)
        if step == args.kill_at and store.rank == args.kill_rank and not os.path.exists(mark):
            with open(mark, "w", encoding="utf-8") as f:
                f.write(f"rank {store.rank} killed at step {step}")
            print(f"rank {store.rank}: crashing on purpose at step {step} "
                  f"(exit code {CRASH_EXIT_CODE})", flush=True)
            # No clean-up, no goodbye: like a power cut. os._exit skips every finally block
            # and leaves the process group as it is, on every OS (Windows has no SIGKILL).
            os._exit(CRASH_EXIT_CODE)

    train_kvstore(store, net, X, y, args.steps, args.batch, start=start, seed=args.seed,
                  on_step=on_step)
    return {"resumed_from": start, "params": _params(net)}


def task_check(args, device) -> dict:
    """For the tests: push/pull equal all_reduce (with and without lr); errors are clear."""
    import torch.distributed as dist

    rank = dist.get_rank()
    shapes = {"a": (5,), "b": (3, 7), "c": (11,), "d": (2, 2, 2)}
    gen = torch.Generator().manual_seed(100 + rank)
    store = KVStore(timeout_s=args.timeout, device=device)
    sgd = KVStore(lr=0.5, timeout_s=args.timeout, device=device)
    start = {k: torch.full(s, 2.0) for k, s in shapes.items()}
    for k, s in shapes.items():
        store.init(k, torch.zeros(s))
        sgd.init(k, start[k])
    for round_ in range(2):
        grads = {k: torch.randn(s, generator=gen).to(device) for k, s in shapes.items()}
        store.push_all(grads)
        for k in shapes:
            sgd.push(k, grads[k])
        pulled, stepped = store.pull_all(list(shapes)), {k: sgd.pull(k) for k in shapes}
        for k in shapes:
            total = grads[k].clone()
            wait_for(dist.all_reduce(total, async_op=True),
                     datetime.timedelta(seconds=args.timeout))
            torch.testing.assert_close(pulled[k], total)
            start[k] = start[k].to(device) - 0.5 * total / dist.get_world_size()
            torch.testing.assert_close(stepped[k], start[k])
    errors = {}
    try:
        store.pull("nope")
    except KeyError as e:
        errors["unknown"] = str(e)
    try:
        store.push("b", torch.zeros(3))
    except ValueError as e:
        errors["shape"] = str(e)
    return {"owners": {k: store.owner(k) for k in shapes}, "shard": store.shard_keys(),
            "errors": errors, "ok": True}


TASKS = {"compare": task_compare, "staleness": task_staleness, "fault": task_fault,
         "check": task_check}


def main(argv: Sequence[str] | None = None) -> None:
    """Worker entry point: run tasks (compare, staleness, fault, check); rank 0 hands back results."""
    from .distributed import finish_worker, init_worker, save_result

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(TASKS), nargs="+", default=["compare"],
                        help="one or more tasks, run in this order")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=32, help="per worker")
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--staleness", type=int, nargs="+", default=[0, 4, 16])
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--workdir", default=None, help="checkpoints (task fault)")
    parser.add_argument("--ckpt-every", type=int, default=10)
    parser.add_argument("--kill-at", type=int, default=-1, help="step at which a rank crashes")
    parser.add_argument("--kill-rank", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    if "fault" in args.task and not args.workdir:
        parser.error("--task fault needs --workdir (where the shards are checkpointed)")
    if any(tau < 0 for tau in args.staleness):
        parser.error("--staleness takes whole numbers >= 0 (0: always the newest weights)")
    rank, _, device = init_worker(args.timeout)
    try:
        results = {}
        for task in args.task:
            done = os.path.join(args.workdir, f"{task}.json") if args.workdir else None
            if done and os.path.exists(done):
                # A restarted job does not redo a task that finished before the crash.
                with open(done, encoding="utf-8") as f:
                    results[task] = json.load(f)
                continue
            results[task] = TASKS[task](args, device)
            if done and rank == 0 and task != "fault":
                _atomic_write(done, lambda f: f.write(json.dumps(results[task]).encode()))
        if rank == 0:
            save_result(results)
    finally:
        finish_worker()


if __name__ == "__main__":
    main()
