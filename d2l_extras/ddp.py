"""Train the small ResNet-18 with DistributedDataParallel (DDP), one process per device.

torchrun (the same as `python -m torch.distributed.run`) starts the processes; each joins the
process group (NCCL when every process has its own GPU, else gloo on the CPU), trains on its
share of every batch (DistributedSampler), and DDP sums the gradients while backward runs.
Rank 0 prints one line per epoch and hands a result dict back (dx.save_result).

One machine, 2 processes (from a notebook: dx.launch("d2l_extras.ddp", 2, ["--epochs", "2"])):
    python -m torch.distributed.run --nproc-per-node=2 --master-addr=127.0.0.1 \\
        --master-port=29500 -m d2l_extras.ddp --epochs 2
Two machines with 4 GPUs each: run this on both, with --node-rank=0 on the machine whose
address is given as --master-addr and --node-rank=1 on the other (the port must be open):
    python -m torch.distributed.run --nnodes=2 --node-rank=0 --nproc-per-node=4 \\
        --master-addr=10.0.0.1 --master-port=29500 -m d2l_extras.ddp --epochs 10
Started without torchrun (python -m d2l_extras.ddp), it trains in this one process.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Subset
from torch.utils.data.distributed import DistributedSampler

from .data import SOURCES, default_sizes, load_images
from .distributed import free_port, init_worker, save_result
from .models import init_weights, resnet18
from .profiles import by_profile
from .timing import Benchmark


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
    p.add_argument("--threads", type=int, default=0,
                   help="CPU threads per process (0: torch's default, OMP_NUM_THREADS)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: none)")
    p.add_argument("--timeout", type=float, default=300,
                   help="seconds any process waits for the others before giving up")
    p.add_argument("--crash-rank", type=int, default=-1,
                   help="for tests: this rank raises an error after its first step")
    args = p.parse_args(argv)
    for name in ("epochs", "batch_size", "width", "n_train", "n_test"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    return args


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
    if args.batch_size % world:
        raise ValueError(f"--batch-size {args.batch_size} does not split evenly over {world} "
                         f"processes; use a multiple of {world}")
    # Rank 0 looks for (and may download) the data first; the others then read the same set.
    choice = [None]
    if rank == 0:
        data = load_images(args.n_train, args.n_test, args.data)
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
    # so all replicas start equal whatever their seeds; then it hooks allreduce into backward.
    model = DistributedDataParallel(net.to(device),
                                    device_ids=[device] if device.type == "cuda" else None)
    # Each process sees a different 1/world of every epoch, reshuffled per epoch (set_epoch).
    sampler = DistributedSampler(data.train, world, rank, shuffle=True, seed=args.seed)
    loader = DataLoader(data.train, args.batch_size // world, sampler=sampler,
                        pin_memory=device.type == "cuda")
    # The test set is split without padding, so no image is counted twice.
    test_loader = DataLoader(Subset(data.test, range(rank, len(data.test), world)),
                             args.batch_size // world)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    if rank == 0:
        print(f"{world} process(es), backend {dist.get_backend()}, device {device.type}, "
              f"{torch.get_num_threads()} CPU thread(s) each, ResNet-18 (width {args.width}), "
              f"batch {args.batch_size} "
              f"({args.batch_size // world} per process), sync BN: {args.sync_bn}", flush=True)
    history: dict[str, list[float]] = {"epoch_seconds": [], "epoch_samples_per_s": [],
                                       "train_loss": [], "test_acc": []}
    steps, start = 0, time.perf_counter()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        stats = torch.zeros(2, dtype=torch.float64, device=device)  # loss sum, examples
        with Benchmark(devices=[device], verbose=False) as clock:
            for X, y in loader:
                X, y = X.to(device, non_blocking=True), y.to(device, non_blocking=True)
                optimizer.zero_grad(set_to_none=True)
                loss = F.cross_entropy(model(X), y)
                loss.backward()  # DDP averages the gradients over all processes here
                optimizer.step()
                stats += torch.stack([loss.detach().double() * len(y),
                                      torch.tensor(len(y), dtype=torch.float64, device=device)])
                steps += 1
                if rank == args.crash_rank:
                    raise RuntimeError(f"rank {rank} failed on purpose after step {steps} "
                                       "(--crash-rank)")
                if args.max_steps and steps >= args.max_steps:
                    break
        dist.all_reduce(stats)
        counts = _count_correct(model.module, test_loader, device)
        dist.all_reduce(counts)
        history["epoch_seconds"].append(clock.elapsed)
        history["epoch_samples_per_s"].append(stats[1].item() / clock.elapsed)
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
    return {"processes": world, "backend": dist.get_backend(), "device": device.type,
            "data": data.name, "n_train": len(data.train), "batch_size": args.batch_size,
            "lr": args.lr, "momentum": args.momentum, "width": args.width,
            "threads": torch.get_num_threads(), "sync_bn": args.sync_bn, "steps": steps,
            "samples_per_s": statistics.median(warm), "accuracy": history["test_acc"][-1],
            "train_seconds": time.perf_counter() - start, "param_l2": param_l2, **history}


def main(argv: list[str] | None = None) -> None:
    """Entry point: parse arguments, train, and let rank 0 save the result."""
    args = parse_args(argv)
    if "RANK" not in os.environ:  # started without torchrun: be a group of one
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    try:
        result = train(args)
        if int(os.environ["RANK"]) == 0:
            save_result(result)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
