"""A sharded (key, value) parameter store with push and pull on torch.distributed (d2l 12.7.4).

As a torchrun worker (python -m d2l_extras.kvstore --help) it trains through the store."""
import argparse
import datetime
import errno
import json
import os
import pathlib
from functools import partial
from typing import Mapping, Sequence

import torch
import torch.distributed as dist
from torch import nn

from .checks import COUNT, positive_number, whole_number
from .distributed import init_worker, run_worker, wait_for
from .timing import measure_interleaved

COMMIT_FILE = "committed.json"
ACK_LOG = "acks.log"
TEMP_MARK = ".tmp"  # temporary files are named <target>.tmp<pid> beside their target
KILLED_MARK = "killed-once"  # the demonstration crash happens only once per work directory
CRASH_EXIT_CODE = 86  # the demonstration crash's: a notebook tells it from other failures
COMPARE_CHUNKS = 5   # task_compare trains in this many chunks: the first apart, then 4 runs


def shard_owners(sizes: Mapping[str, int], world: int) -> dict[str, int]:
    """Owner rank of each key (in order) when keys of these sizes are spread over world ranks."""
    load, owners = [0] * whole_number(world, "world (number of ranks)"), {}
    for key, numel in sizes.items():
        owners[key] = load.index(min(load))  # the least loaded rank (the lowest on a tie)
        load[owners[key]] += whole_number(numel, f"shard_owners: the size of {key!r}", minimum=0)
    return owners


class KVStore:
    """Sharded parameter server: each key's owner sums the pushes, or (lr) steps with their mean."""

    def __init__(self, lr: float | None = None, max_staleness: int = 0, timeout_s: float = 60.0,
                 device: torch.device | str | None = None, seed: int = 0):
        if not dist.is_initialized():
            raise RuntimeError("KVStore needs dx.distributed.init_worker() first (in a worker of dx.launch)")
        self.lr = None if lr is None else positive_number(lr, "lr (None: plain aggregation)")
        # a pull may serve a version up to max_staleness updates old (at random)
        self.max_staleness = whole_number(max_staleness, "max_staleness", minimum=0)
        self.timeout = datetime.timedelta(seconds=positive_number(timeout_s, "timeout_s"))
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.device = torch.device(device or ("cuda" if dist.get_backend() == "nccl" else "cpu"))
        self._meta = {}  # key -> (owner rank, shape, dtype, message tag), the same on every rank
        self._history = {}  # this rank's keys -> their versions, newest (the value) last
        self._rng = torch.Generator().manual_seed(seed * 7919 + self.rank)
        self.versions_served: list[int] = []  # how many updates old each pull was (staleness)

    def init(self, key: str, value: torch.Tensor) -> None:
        """Register key on every rank (same order everywhere); its owner keeps `value`."""
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            raise TypeError(f"init(key, value): keys are strings and values tensors, got "
                            f"{type(key).__name__} and {type(value).__name__}")
        if key in self._meta:
            raise ValueError(f"key {key!r} was already initialized")
        sizes = {k: shape.numel() for k, (_, shape, _, _) in self._meta.items()}
        owner = shard_owners(sizes | {key: value.numel()}, self.world)[key]
        self._meta[key] = (owner, value.shape, value.dtype, len(self._meta))
        if owner == self.rank:
            self._history[key] = [value.detach().to(self.device, copy=True)]

    def owners(self) -> dict[str, int]:
        """The rank that holds each key's value, in registration order."""
        return {key: meta[0] for key, meta in self._meta.items()}

    def _check_key(self, key: str, op: str) -> tuple[int, torch.Size, torch.dtype, int]:
        if key not in self._meta:
            raise KeyError(f"{op}: unknown key {key!r}; known keys are {list(self._meta)}. "
                           f"Call init(key, value) on every rank first.")
        return self._meta[key]

    def _run(self, ops: list) -> None:
        for work in dist.batch_isend_irecv(ops) if ops else []:
            wait_for(work, self.timeout)  # a dead peer raises instead of hanging

    def push_all(self, values: Mapping[str, torch.Tensor]) -> None:
        """Push several keys at once (one round of messages): every rank passes the same keys."""
        ops, inbox = [], {}
        for key, value in values.items():
            owner, shape, dtype, tag = self._check_key(key, "push")
            if not isinstance(value, torch.Tensor) or value.shape != shape or value.dtype != dtype:
                got = (f"{tuple(value.shape)} {value.dtype}" if isinstance(value, torch.Tensor)
                       else type(value).__name__)
                raise ValueError(f"push: key {key!r} holds {tuple(shape)} {dtype}, got {got}")
            value = value.detach().to(self.device).contiguous()
            if owner != self.rank:
                ops.append(dist.P2POp(dist.isend, value, owner, tag=tag))
                continue
            inbox[key] = [value if r == self.rank else torch.empty_like(value)
                          for r in range(self.world)]
            ops += [dist.P2POp(dist.irecv, buf, r, tag=tag)
                    for r, buf in enumerate(inbox[key]) if r != self.rank]
        self._run(ops)
        for key, bufs in inbox.items():
            total, history = sum(bufs[1:], bufs[0].clone()), self._history[key]  # in rank order
            history.append(total if self.lr is None else history[-1] - self.lr * total / self.world)
            del history[:-(self.max_staleness + 1)]

    def pull_all(self, keys: Sequence[str], latest: bool = False) -> dict[str, torch.Tensor]:
        """Pull several keys at once: every rank passes the same keys in the same order."""
        ops, out = [], {}
        for key in keys:
            owner, shape, dtype, tag = self._check_key(key, "pull")
            if owner != self.rank:
                out[key] = torch.empty(shape, dtype=dtype, device=self.device)
                ops.append(dist.P2POp(dist.irecv, out[key], owner, tag=tag))
                continue
            history, stale = self._history[key], not latest and self.max_staleness > 0
            for r in range(self.world):  # a version for each worker (history is tau + 1 long)
                age = int(torch.randint(len(history), (1,), generator=self._rng)) if stale else 0
                self.versions_served.append(age)
                if r == self.rank:
                    out[key] = history[-1 - age].clone()
                else:
                    ops.append(dist.P2POp(dist.isend, history[-1 - age], r, tag=tag))
        self._run(ops)
        return out

    def save(self, directory: str, step: int) -> None:
        """Checkpoint every shard at `step`, then commit it (collective; atomic on each rank)."""
        (folder := pathlib.Path(directory)).mkdir(parents=True, exist_ok=True)
        values = {k: h[-1].cpu() for k, h in self._history.items()}
        _atomic_write(folder / f"shard-{self.rank}-step{step}.pt", lambda f:
                      torch.save({"step": step, "world": self.world, "values": values}, f))
        dist.barrier()  # every shard of this step is on disk
        if self.rank == 0:  # the commit record is what makes the step count (acknowledged)
            commit = json.dumps({"step": step}).encode()
            _atomic_write(folder / COMMIT_FILE, lambda f: f.write(commit))
            with open(folder / ACK_LOG, "ab", buffering=0) as log:
                log.write(f"{step}\n".encode())
                os.fsync(log.fileno())
        dist.barrier()  # nobody deletes an old shard before the new step is committed
        for old in folder.glob(f"shard-{self.rank}-step*.pt"):
            if int(old.stem.rpartition("step")[2]) < step:
                old.unlink()

    def load(self, directory: str) -> int:
        """Load this rank's shard of the last committed step; return that step (0: none)."""
        if self.rank == 0:  # remove what a crash of an earlier run left half-written
            for tmp in pathlib.Path(directory).glob(f"?*{TEMP_MARK}*"):
                if tmp.name.rpartition(TEMP_MARK)[2].isdecimal():
                    tmp.unlink()
        if (step := committed_step(directory)) is None:
            return 0
        path = os.path.join(directory, f"shard-{self.rank}-step{step}.pt")
        state = torch.load(path, map_location=self.device, weights_only=True)
        if (state["world"], set(state["values"])) != (self.world, set(self._history)):
            raise RuntimeError(f"{path} holds keys {sorted(state['values'])} of {state['world']} "
                               f"processes; this rank of {self.world} owns {sorted(self._history)}")
        self._history.update({key: [value] for key, value in state["values"].items()})
        return step


def _atomic_write(path: str, write) -> None:
    # Readers see the old file or the new; a crash before the rename leaves tmp to load().
    tmp = f"{path}{TEMP_MARK}{os.getpid()}"
    try:
        with open(tmp, "wb", buffering=0) as f:  # unbuffered: fsync sees every byte
            write(f)
            os.fsync(f.fileno())
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    if os.name == "posix":  # or a power cut can undo the rename (Windows: NTFS journals it)
        fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
        try:
            os.fsync(fd)
        except OSError as error:  # a few (network) file systems cannot sync a directory
            if error.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
                raise
        finally:
            os.close(fd)


def committed_step(directory: str) -> int | None:
    """The last step whose shards were all checkpointed in directory, or None."""
    path = pathlib.Path(directory, COMMIT_FILE)
    return int(json.loads(path.read_text(encoding="utf-8"))["step"]) if path.exists() else None


def acknowledged_steps(directory: str) -> list[int]:
    """Every step acknowledged (committed) in directory, oldest first, over all runs."""
    path = pathlib.Path(directory, ACK_LOG)
    return [int(s) for s in path.read_text(encoding="utf-8").split()] if path.exists() else []


def make_problem(seed: int = 0, n: int = 2048, features: int = 20, classes: int = 4) -> tuple:
    """Synthetic classification data (the same on every rank for a given seed)."""
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(n, features, generator=gen)
    teacher = torch.randn(features, classes, generator=gen)
    return X, (X @ teacher + 0.5 * torch.randn(n, classes, generator=gen)).argmax(1)


def make_net(seed: int = 0, features: int = 20, hidden: int = 32, classes: int = 4) -> nn.Module:
    """A two-layer MLP with weights drawn from `seed` (identical on every rank)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))


def batch_of(step: int, rank: int, world: int, batch: int, n: int, seed: int = 0) -> torch.Tensor:
    """Indices of rank's share of step's global minibatch (depends only on seed and step)."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
    return torch.randint(0, n, (batch * world,), generator=gen)[rank * batch:(rank + 1) * batch]


def gradients(net: nn.Module, X: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """Gradients of the cross-entropy loss of net on (X, y), by parameter name."""
    names, params = zip(*net.named_parameters())
    return dict(zip(names, torch.autograd.grad(nn.functional.cross_entropy(net(X), y), params)))


def train_kvstore(store: KVStore, net: nn.Module, X: torch.Tensor, y: torch.Tensor, steps: int,
                  batch: int, start: int = 0, seed: int = 0, eval_every: int = 0) -> list:
    """Train net through the store: pull weights, compute a gradient, push it; (step, loss)."""
    names, curve = [n for n, _ in net.named_parameters()], []
    for step in range(start, steps + 1):  # the last round only pulls the newest weights
        if step == steps or eval_every and step % eval_every == 0:
            net.load_state_dict(store.pull_all(names, latest=True), strict=False)
            if eval_every:
                with torch.no_grad():
                    curve.append((step, float(nn.functional.cross_entropy(net(X), y))))
        if step < steps:
            net.load_state_dict(store.pull_all(names), strict=False)
            idx = batch_of(step, store.rank, store.world, batch, len(X), seed)
            store.push_all(gradients(net, X[idx].to(store.device), y[idx].to(store.device)))
    return curve


def _params(net: nn.Module) -> dict[str, list]:
    return {name: p.detach().cpu().reshape(-1).tolist() for name, p in net.named_parameters()}


def _setup(args, **store_options) -> tuple:
    device = init_worker(args.timeout)[2]  # joins the group on the first call
    X, y = (t.to(device) for t in make_problem(args.seed))
    net = make_net(args.seed).to(device)
    store = KVStore(lr=args.lr, timeout_s=args.timeout, device=device, **store_options)
    for name, p in net.named_parameters():
        store.init(name, p.detach())
    return X, y, net, store


def task_compare(args) -> dict:
    """Train through the store (synchronous) and with allreduce; both weights and step times."""
    # In turns, after a barrier, each trains a warm-up chunk, then timed ones (*_runs: s/step).
    X, y, net, store = _setup(args)
    ref = make_net(args.seed).to(store.device)
    size = max(1, args.steps // COMPARE_CHUNKS)
    done = {"store": 0, "allreduce": 0}  # steps each has trained so far

    def chunk(how: str, end: int | None = None) -> None:
        start, done[how] = done[how], end or min(done[how] + size, args.steps)
        if how == "store":
            train_kvstore(store, net, X, y, done[how], args.batch, start=start, seed=args.seed)
        else:  # the reference: every rank averages gradients by all_reduce and steps itself
            for step in range(start, done[how]):
                idx = batch_of(step, store.rank, store.world, args.batch, len(X), args.seed)
                for p, grad in zip(ref.parameters(), gradients(ref, X[idx], y[idx]).values()):
                    wait_for(dist.all_reduce(grad, async_op=True), store.timeout)
                    with torch.no_grad():
                        p -= args.lr * grad / store.world

    timed = measure_interleaved({h: partial(chunk, h) for h in done}, devices=[store.device],
                                runs=max(1, min(args.steps, COMPARE_CHUNKS) - 1),
                                before=dist.barrier)
    for how in done:  # the steps that no chunk took
        chunk(how, args.steps)
    return {"world": store.world, "backend": dist.get_backend(), "owners": store.owners(),
            "store": _params(net), "allreduce": _params(ref),
            **{f"{how}_runs": [t / size for t in m.warm] for how, m in timed.items()}}


def task_staleness(args) -> dict:
    """Train through stores whose pulls may be up to tau updates old, for each --staleness."""
    curves, served = {}, {}
    for tau in args.staleness:
        X, y, net, store = _setup(args, max_staleness=tau, seed=args.seed)
        curves[str(tau)] = train_kvstore(store, net, X, y, args.steps, args.batch,
                                         seed=args.seed, eval_every=args.eval_every)
        ages = store.versions_served  # how old the weights served to rank 0 were (0: newest)
        served[str(tau)] = {"max": max(ages), "stale_share": sum(a > 0 for a in ages) / len(ages)}
    return {"world": store.world, "curves": curves, "served": served}


def task_fault(args) -> dict:
    """Checkpointed store training that resumes from --workdir; one rank may crash once."""
    X, y, net, store = _setup(args)
    start = store.load(args.workdir)
    mark = pathlib.Path(args.workdir, KILLED_MARK)
    for step in range(start, args.steps):
        if step > start and step % args.ckpt_every == 0:
            store.save(args.workdir, step)
        if step == args.kill_at and store.rank == args.kill_rank and not mark.exists():
            mark.write_text(f"rank {store.rank} killed at step {step}", encoding="utf-8")
            # Like a power cut, on every OS (Windows has no SIGKILL): no finally, no clean-up.
            os._exit(CRASH_EXIT_CODE)
        train_kvstore(store, net, X, y, step + 1, args.batch, start=step, seed=args.seed)
    return {"resumed_from": start, "params": _params(net)}


def main(argv: Sequence[str] | None = None) -> None:
    """Worker entry point: run tasks (compare, staleness, fault); rank 0 hands back all."""
    tasks = {"compare": task_compare, "staleness": task_staleness, "fault": task_fault}
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(tasks), nargs="+", default=["compare"],
                        help="one or more tasks, run in this order")
    parser.add_argument("--staleness", type=COUNT,
                        nargs="+", default=[0, 4, 16], help="0: always the newest weights")
    parser.add_argument("--workdir", help="checkpoints (task fault)")
    defaults = {"--steps": 60, "--batch": 32, "--lr": 0.5, "--seed": 0, "--eval-every": 5,
                "--ckpt-every": 10, "--kill-at": -1, "--kill-rank": 1, "--timeout": 60.0}
    helps = {"--batch": "per worker", "--kill-at": "step at which a rank crashes"}
    for flag, default in defaults.items():  # the type follows the default: int or float
        parser.add_argument(flag, type=type(default), default=default, help=helps.get(flag))
    args = parser.parse_args(argv)
    if "fault" in args.task and not args.workdir:
        parser.error("--task fault needs --workdir (where the shards are checkpointed)")
    run_worker(lambda: {task: tasks[task](args) for task in args.task})


if __name__ == "__main__":
    main()
