"""Data parallelism from scratch: copy parameters, split batches, sum gradients (allreduce).

Every function takes a list of devices, which may repeat: dx.devices(k) simulates missing GPUs
as replicas on one device, and the arithmetic is the same as on k real ones.
"""
from __future__ import annotations

import contextlib
import copy
import warnings
from typing import Callable, Iterable, Iterator, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from .checks import whole_number
from .models import lenet


def _check_devices(devices: Sequence[torch.device | str]) -> list[torch.device]:
    if isinstance(devices, (str, torch.device)) or not isinstance(devices, Sequence) \
            or len(devices) == 0:
        raise ValueError(f"need a non-empty list of devices such as dx.devices(2), got {devices!r}")
    return [torch.device(d) for d in devices]


def get_params(params: Sequence[torch.Tensor], device: torch.device | str) -> list[torch.Tensor]:
    """Copy parameters to device as new leaf tensors that record gradients."""
    return [p.detach().to(device, copy=True).requires_grad_() for p in params]


def allreduce(data: Sequence[torch.Tensor]) -> None:
    """Sum the tensors (one per device) in place: afterwards every one holds the total."""
    if len(data) == 0 or not all(isinstance(t, torch.Tensor) for t in data):
        raise ValueError("allreduce needs a non-empty list of tensors, one per device")
    first = data[0]
    for i, t in enumerate(data[1:], 1):
        if t.shape != first.shape or t.dtype != first.dtype:
            raise ValueError(f"allreduce needs tensors of one shape and dtype: tensor 0 is "
                             f"{tuple(first.shape)} {first.dtype}, tensor {i} is "
                             f"{tuple(t.shape)} {t.dtype}")
        if any(t is s for s in data[:i]):
            raise ValueError(f"tensor {i} appears twice in the list; each device needs its own")
    # Gather: add everything into the first device's tensor (copying it there first) ...
    for t in data[1:]:
        first += t.to(first.device)
    # ... then broadcast: copy the total back to every other device.
    for t in data[1:]:
        t.copy_(first)


def split_batch(X: torch.Tensor, y: torch.Tensor, devices: Sequence[torch.device | str]
                ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Split X and y along the batch dimension into len(devices) shards, one on each device."""
    if not isinstance(X, torch.Tensor) or not isinstance(y, torch.Tensor):
        raise TypeError(f"split_batch needs tensors X and y, got {type(X).__name__} "
                        f"and {type(y).__name__}")
    if X.dim() == 0 or y.dim() == 0 or X.shape[0] != y.shape[0]:
        raise ValueError(f"X and y must hold the same number of examples along dimension 0, "
                         f"got X {tuple(X.shape)} and y {tuple(y.shape)}")
    devices = _check_devices(devices)
    # tensor_split makes shard sizes differ by at most one (10 over 3 -> 4, 3, 3); with fewer
    # examples than devices the last shards are empty, which adds nothing to the gradient.
    X_shards = torch.tensor_split(X, len(devices))
    y_shards = torch.tensor_split(y, len(devices))
    return ([s.to(d) for s, d in zip(X_shards, devices)],
            [s.to(d) for s, d in zip(y_shards, devices)])


def sgd(params: Iterable[torch.Tensor], lr: float, batch_size: int) -> None:
    """Minibatch SGD on summed gradients: p -= lr * grad / batch_size, then zero the gradient."""
    with torch.no_grad():
        for p in params:
            p -= lr * p.grad / batch_size
            p.grad.zero_()


def train_batch(X: torch.Tensor, y: torch.Tensor, device_params: Sequence[Sequence[torch.Tensor]],
                devices: Sequence[torch.device | str], lr: float,
                net: Callable[[torch.Tensor, Sequence[torch.Tensor]], torch.Tensor] = lenet,
                allreduce: Callable[[list[torch.Tensor]], None] = allreduce) -> torch.Tensor:
    """One data-parallel SGD step on the global batch (X, y); returns the summed loss.

    `allreduce` sums a list of gradients (one per device) in place; pass your own to try it.
    """
    devices = _check_devices(devices)
    if not callable(allreduce):
        raise TypeError(f"allreduce must be a function that sums a list of tensors in place, "
                        f"got {type(allreduce).__name__}")
    if len(device_params) != len(devices):
        raise ValueError(f"need one parameter copy per device: {len(device_params)} copies "
                         f"for {len(devices)} devices")
    X_shards, y_shards = split_batch(X, y, devices)
    # Each device computes the loss of its shard with its own parameter copy ...
    losses = [F.cross_entropy(net(X_s, params), y_s, reduction="sum")
              for X_s, y_s, params in zip(X_shards, y_shards, device_params)]
    for loss in losses:  # ... and backpropagates it, on that device.
        loss.backward()
    with torch.no_grad():
        # Sum each parameter's gradient over the devices and hand the sum back to all of them.
        for i in range(len(device_params[0])):
            allreduce([params[i].grad for params in device_params])
    # Every copy takes the same step, so the copies stay identical without being exchanged.
    for params in device_params:
        sgd(params, lr, X.shape[0])  # divide by the global batch size: the mean over all shards
    return sum(loss.detach().to(devices[0]) for loss in losses)


def even_batch_size(batch_size: int, k: int) -> int:
    """Return the smallest multiple of k that is >= batch_size (k processes get equal shares)."""
    batch_size, k = whole_number(batch_size, "batch_size"), whole_number(k, "k")
    # DDP averages the processes' mean losses: that is the mean over the global batch only when
    # every process holds the same number of examples.
    return -(-batch_size // k) * k


def per_process_batch(batch_size: int, k: int) -> int:
    """Return each of k processes' share of a global batch; say which batch to use if uneven."""
    batch_size, k = whole_number(batch_size, "batch_size"), whole_number(k, "k")
    if batch_size % k:
        raise ValueError(f"--batch-size {batch_size} does not split evenly over {k} processes; "
                         f"use a multiple of {k}, e.g. {even_batch_size(batch_size, k)}")
    return batch_size // k


def _tf32_switches(allowed: bool) -> list[tuple[object, str, object]]:
    """(settings, attribute, value) of every switch that lets float32 run as TF32, parents first."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    if torch.__version__ >= "2.9":  # a TorchVersion: compares 2.10 > 2.9 as numbers
        # From 2.9 the allow_tf32 flags are deprecated: setting one warns, and reading one raises
        # once TF32 was set through fp32_precision ("ieee": true float32, or "tf32"). cuDNN's
        # own value comes first: setting it overrides its convolutions' and recurrent layers'.
        value = "tf32" if allowed else "ieee"
        return [(matmul, "fp32_precision", value), (cudnn, "fp32_precision", value),
                (cudnn.conv, "fp32_precision", value), (cudnn.rnn, "fp32_precision", value)]
    return [(matmul, "allow_tf32", allowed), (cudnn, "allow_tf32", allowed)]


@contextlib.contextmanager
def allow_tf32(allowed: bool) -> Iterator[None]:
    """Within the block, CUDA float32 matmuls and cuDNN layers may (True) or may not run as TF32.

    TF32 keeps float32's range but a 10-bit mantissa, and runs on the Tensor Cores of Ampere and
    later GPUs. The settings are restored on leaving, even after an error. torch 2.9 and later
    are set through fp32_precision, earlier releases through the allow_tf32 flags.
    """
    if not isinstance(allowed, bool):
        raise ValueError(f"allow_tf32() takes True (TF32 allowed) or False (true float32), "
                         f"got {allowed!r}")
    switches = _tf32_switches(allowed)
    saved = [getattr(settings, name) for settings, name, _ in switches]
    try:
        for settings, name, value in switches:
            setattr(settings, name, value)
        yield
    finally:
        for (settings, name, _), value in zip(switches, saved):
            setattr(settings, name, value)


# Inductor's hint when it compiles float32 matmuls for an Ampere or later GPU with TF32 off.
_TF32_HINT = "TensorFloat32 tensor cores for float32 matrix multiplication available"


def set_float32_precision(tf32: bool) -> str:
    """Choose, from now on, TF32 (True) or full float32 for CUDA float32 matrix products.

    Returns the choice in words; on a GPU where it matters (compute capability 8.0 and later)
    it is also printed once. Having chosen, Inductor's hint that TF32 is off is not repeated.
    """
    if not isinstance(tf32, bool):
        raise ValueError(f"set_float32_precision() takes True (TF32) or False (full float32), "
                         f"got {tf32!r}")
    # The matmul switch only (the first): cuDNN's, set for good through fp32_precision, make
    # torch raise wherever its code still reads cudnn.allow_tf32 (torch.export does, 2.14).
    settings, name, value = _tf32_switches(tf32)[0]
    setattr(settings, name, value)
    words = ("float32 matrix products as TF32 (10-bit mantissa, Tensor Cores)" if tf32 else
             "float32 matrix products in full float32 (TF32 off)")
    warnings.filterwarnings("ignore", message=_TF32_HINT)
    gpu = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 0)
    if gpu:
        from .report import notice

        notice(f"{words} on {torch.cuda.get_device_name()}, chosen with "
               f"dx.set_float32_precision(tf32={tf32})")
    return words


@contextlib.contextmanager
def strict_float32() -> Iterator[None]:
    """Within the block, GPUs compute float32 in full precision and cuDNN deterministically.

    Ampere and later GPUs may run float32 convolutions (and matmuls, if allowed) in TF32, with a
    10-bit mantissa, and cuDNN may pick a different algorithm for a batch of 12 than for 25:
    then k devices and one device differ by far more than float32 rounding. The old settings
    are restored on leaving, even after an error.
    """
    cudnn = torch.backends.cudnn
    saved = (cudnn.deterministic, cudnn.benchmark)
    with allow_tf32(False):
        try:
            cudnn.deterministic, cudnn.benchmark = True, False
            yield
        finally:
            cudnn.deterministic, cudnn.benchmark = saved


def replicate(module: nn.Module, devices: Sequence[torch.device | str]) -> list[nn.Module]:
    """Return one independent copy of module on each device (the same device may repeat)."""
    return [copy.deepcopy(module).to(d) for d in _check_devices(devices)]


def evaluate_accuracy(nets: Sequence[Callable[[torch.Tensor], torch.Tensor]],
                      data_iter: Iterable, devices: Sequence[torch.device | str]) -> float:
    """Accuracy with each batch split over devices; nets[i] is the model (replica) on devices[i]."""
    devices = _check_devices(devices)
    if len(nets) != len(devices):
        raise ValueError(f"need one model per device: {len(nets)} models, {len(devices)} devices")
    modes = [net.training for net in nets if isinstance(net, nn.Module)]
    for net in nets:
        if isinstance(net, nn.Module):
            net.eval()  # BatchNorm uses its running statistics when evaluating
    correct = torch.zeros((), dtype=torch.int64, device=devices[0])
    total = 0
    try:
        with torch.no_grad():
            for X, y in data_iter:
                X_shards, y_shards = split_batch(X, y, devices)
                for net, X_s, y_s in zip(nets, X_shards, y_shards):
                    if len(y_s):
                        correct += (net(X_s).argmax(dim=1) == y_s).sum().to(devices[0])
                total += len(y)
    finally:
        for net, mode in zip([n for n in nets if isinstance(n, nn.Module)], modes):
            net.train(mode)
    if total == 0:
        raise ValueError("evaluate_accuracy got no examples from data_iter")
    return correct.item() / total
