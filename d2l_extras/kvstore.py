"""The sharded parameter server's torchrun job (notebook 08): its ShardedStore across processes.

Process j is a worker and server j. Tasks: compare (store against allreduce training), staleness
(pulls up to tau updates old), fault (checkpoints, a crash, a restart): python -m d2l_extras.kvstore
"""
import argparse
import errno
import json
import os
import pathlib
from collections import defaultdict
from functools import partial
from typing import Sequence

import torch
import torch.distributed as dist
from torch import nn

import d2l_extras as dx
from .checks import COUNT
from .distributed import init_worker, run_worker

COMMIT_FILE, ACK_LOG = "committed.json", "acks.log"
TEMP_MARK = ".tmp"  # temporary files are named <target>.tmp<pid> beside their target
KILLED_MARK = "killed-once"  # the demonstration crash happens only once per work directory
CRASH_EXIT_CODE = 86  # the demonstration crash's: a notebook tells it from other failures
COMPARE_CHUNKS = 5   # task_compare trains in this many chunks: the first apart, then 4 runs


class KVStore(dx.ShardedStore):
    """Notebook 08's ShardedStore with server j in process j: push and pull by send and receive."""

    def __init__(self, lr: float | None = None, max_staleness: int = 0, seed: int = 0,
                 device: torch.device | str = "cpu"):
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        super().__init__(servers=self.world)
        self.lr, self.max_staleness, self.device = lr, max_staleness, torch.device(device)
        self.old = defaultdict(list)  # this server's keys -> older versions, newest last
        self._rng = torch.Generator().manual_seed(seed * 7919 + self.rank)
        self.versions_served: list[int] = []  # how many updates old each pull was (staleness)

    def push_all(self, grads: dict[str, torch.Tensor]) -> None:
        """Every rank pushes the same keys: their owners sum, or take the SGD step with the mean."""
        ops, inbox = [], {}
        for tag, (key, grad) in enumerate(grads.items()):
            grad, j = grad.detach().to(self.device).contiguous(), self.owner[key]
            if j != self.rank:
                ops.append(dist.P2POp(dist.isend, grad, j, tag=tag))
                continue
            inbox[key] = [grad if r == j else torch.empty_like(grad) for r in range(self.world)]
            ops += [dist.P2POp(dist.irecv, b, r, tag=tag)
                    for r, b in enumerate(inbox[key]) if r != j]
        _run(ops)
        for key, values in inbox.items():
            old = self.shards[self.rank][key]
            self.push(key, values)  # the notebook's push: the owner sums, in rank order
            if self.lr is not None:
                self.shards[self.rank][key] = old - self.lr * self.pull(key) / self.world
            keep = self.max_staleness  # the versions a stale pull may serve
            self.old[key] = (self.old[key] + [old])[-keep:] if keep else []

    def pull_all(self, keys: Sequence[str], latest: bool = False) -> dict[str, torch.Tensor]:
        """Every rank pulls the same keys; each worker gets a version up to max_staleness old."""
        ops, out, stale = [], {}, self.max_staleness and not latest
        for tag, key in enumerate(keys):
            j = self.owner[key]
            if j != self.rank:  # the initial copy only gives the shape and dtype
                out[key] = torch.empty_like(self.shards[j][key])
                ops.append(dist.P2POp(dist.irecv, out[key], j, tag=tag))
                continue
            versions = self.old[key] + [self.shards[j][key]]
            for r in range(self.world):  # at random, each worker its own age
                age = int(torch.randint(len(versions), (1,), generator=self._rng)) if stale else 0
                self.versions_served.append(age)
                if r == j:
                    out[key] = versions[-1 - age].clone()
                else:
                    ops.append(dist.P2POp(dist.isend, versions[-1 - age], r, tag=tag))
        _run(ops)
        return out

    def save(self, directory: str, step: int) -> None:
        """Checkpoint every shard at `step`, then commit it (collective; atomic on each rank)."""
        (folder := pathlib.Path(directory)).mkdir(parents=True, exist_ok=True)
        state = {"step": step, "world": self.world,
                 "values": {k: v.cpu() for k, v in self.shards[self.rank].items()}}
        _atomic_write(folder / f"shard-{self.rank}-step{step}.pt", partial(torch.save, state))
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

    def restore(self, directory: str) -> int:
        """Load this rank's shard of the last committed step; return that step (0: none)."""
        if self.rank == 0:  # remove what a crash of an earlier run left half-written
            for tmp in pathlib.Path(directory).glob(f"?*{TEMP_MARK}*"):
                if tmp.name.rpartition(TEMP_MARK)[2].isdecimal():
                    tmp.unlink()
        if (step := committed_step(directory)) is None:
            return 0
        path = pathlib.Path(directory, f"shard-{self.rank}-step{step}.pt")
        state = torch.load(path, map_location=self.device, weights_only=True)
        if state["world"] != self.world:  # a rerun with another --nproc in the same directory
            raise RuntimeError(f"{path} is of {state['world']} processes, not {self.world}: "
                               "give this job a new --workdir")
        self.shards[self.rank].update(state["values"])
        return step


def _run(ops: list) -> None:
    for work in dist.batch_isend_irecv(ops) if ops else []:
        work.wait()  # up to the group's timeout (--timeout): a dead peer raises


def _atomic_write(path: str, write) -> None:
    # Readers see the old file or the new; a crash before the rename leaves tmp to restore().
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


def make_problem(seed: int = 0, n: int = 2048, features: int = 20, classes: int = 4) -> tuple:
    """Synthetic classification data (the same on every rank for a given seed)."""
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(n, features, generator=gen)
    teacher = torch.randn(features, classes, generator=gen)
    return X, (X @ teacher + 0.5 * torch.randn(n, classes, generator=gen)).argmax(1)


def make_net(seed: int = 0) -> nn.Module:
    """Notebook 08's two-layer MLP (20, 32, 4), its weights drawn from `seed` on every rank."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 4))


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
            store.push_all(gradients(net, X[idx], y[idx]))
    return curve


def _params(net: nn.Module) -> dict[str, list]:
    return {name: p.detach().cpu().reshape(-1).tolist() for name, p in net.named_parameters()}


def _setup(args, **store_options) -> tuple:
    device = init_worker(args.timeout)[2]  # joins the group on the first call
    X, y = (t.to(device) for t in make_problem(args.seed))
    net = make_net(args.seed).to(device)
    store = KVStore(lr=args.lr, device=device, **store_options)
    for name, p in net.named_parameters():  # on every rank in this order: the same owners
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
                    dist.all_reduce(grad)
                    with torch.no_grad():
                        p -= args.lr * grad / store.world

    timed = dx.measure_interleaved({h: partial(chunk, h) for h in done}, devices=[store.device],
                                   runs=max(1, min(args.steps, COMPARE_CHUNKS) - 1),
                                   before=dist.barrier)
    for how in done:  # the steps that no chunk took
        chunk(how, args.steps)
    return {"world": store.world, "backend": dist.get_backend(), "owners": store.owner,
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
    start = store.restore(args.workdir)
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
