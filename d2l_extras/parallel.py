"""Data parallelism from scratch: copy parameters, split batches, sum gradients (allreduce)."""
from __future__ import annotations

import contextlib
import copy
import warnings
from typing import Callable, ContextManager, Iterable, Iterator, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from .checks import whole_number
from .models import lenet
from .report import notice

# Inductor's hint when it compiles float32 matmuls for an Ampere or later GPU with TF32 off.
_TF32_HINT = "TensorFloat32 tensor cores for float32 matrix multiplication available"


def _check_devices(devices: Sequence[torch.device | str]) -> list[torch.device]:
    # Devices may repeat: dx.devices(k) simulates missing GPUs, with the same arithmetic.
    if isinstance(devices, (str, torch.device)) or not isinstance(devices, Sequence) or not devices:
        raise ValueError(f"need a non-empty list of devices such as dx.devices(2), got {devices!r}")
    return [torch.device(d) for d in devices]


def get_params(params: Sequence[torch.Tensor], device: torch.device | str) -> list[torch.Tensor]:
    """Copy parameters to device as new leaf tensors that record gradients."""
    return [p.detach().to(device, copy=True).requires_grad_() for p in params]


def allreduce(data: Sequence[torch.Tensor]) -> None:
    """Sum the tensors (one per device) in place: afterwards every one holds the total."""
    if len(data) == 0 or not all(isinstance(t, torch.Tensor) for t in data):
        raise ValueError("allreduce needs a non-empty list of tensors, one per device")
    if len({(t.shape, t.dtype) for t in data}) > 1:
        raise ValueError(f"allreduce needs tensors of one shape and dtype, got "
                         f"{[(tuple(t.shape), t.dtype) for t in data]}")
    if len({id(t) for t in data}) < len(data):
        raise ValueError("a tensor appears twice in the list; each device needs its own")
    first = data[0]
    for t in data[1:]:  # gather: add everything into the first device's tensor ...
        first += t.to(first.device)
    for t in data[1:]:  # ... then broadcast the total back to every other device
        t.copy_(first)


def split_batch(X: torch.Tensor, y: torch.Tensor, devices: Sequence[torch.device | str]
                ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Split X and y along the batch dimension into len(devices) shards, one on each device."""
    if not isinstance(X, torch.Tensor) or not isinstance(y, torch.Tensor):
        raise TypeError(f"split_batch needs tensors, got {type(X).__name__}, {type(y).__name__}")
    if X.dim() == 0 or y.dim() == 0 or X.shape[0] != y.shape[0]:
        raise ValueError(f"X and y must hold the same number of examples, got {X.shape}, {y.shape}")
    devices = _check_devices(devices)
    # Shards differ by at most one (10 over 3: 4, 3, 3); past the last example they are empty.
    return tuple([s.to(d) for s, d in zip(torch.tensor_split(t, len(devices)), devices)]
                 for t in (X, y))


def sgd(params: Iterable[torch.Tensor], lr: float, batch_size: int) -> None:
    """Minibatch SGD on summed gradients: p -= lr * grad / batch_size, then zero the gradient."""
    with torch.no_grad():
        for p in params:
            p -= lr * p.grad / batch_size
            p.grad.zero_()


def train_batch(X: torch.Tensor, y: torch.Tensor, device_params: Sequence[Sequence[torch.Tensor]],
                devices: Sequence[torch.device | str], lr: float, net: Callable = lenet,
                allreduce: Callable[[list[torch.Tensor]], None] = allreduce) -> torch.Tensor:
    """One data-parallel SGD step on (X, y) with `allreduce` summing gradients; the summed loss."""
    if not callable(allreduce):
        raise TypeError(f"allreduce must be a function that sums a list of tensors in place, "
                        f"got {type(allreduce).__name__}")
    X_shards, y_shards = split_batch(X, y, devices)
    if len(device_params) != len(X_shards):
        raise ValueError(f"need one parameter copy per device: {len(device_params)} copies "
                         f"for {len(X_shards)} devices")
    # Each device computes the loss of its shard with its own parameter copy ...
    losses = [F.cross_entropy(net(X_s, params), y_s, reduction="sum")
              for X_s, y_s, params in zip(X_shards, y_shards, device_params)]
    torch.autograd.backward(losses)  # ... and backpropagates it, on that device
    with torch.no_grad():
        for i in range(len(device_params[0])):
            allreduce([params[i].grad for params in device_params])
    for params in device_params:  # one step for all: the copies stay identical, unexchanged
        sgd(params, lr, X.shape[0])  # divide by the global batch size: the mean over all shards
    return sum(loss.detach().to(X_shards[0].device) for loss in losses)


def even_batch_size(batch_size: int, k: int) -> int:
    """Return the smallest multiple of k that is >= batch_size (k processes get equal shares)."""
    batch_size, k = whole_number(batch_size, "batch_size"), whole_number(k, "k")
    return -(-batch_size // k) * k  # equal shares: DDP's mean of means is the global mean


def per_process_batch(batch_size: int, k: int) -> int:
    """Return each of k processes' share of a global batch; say which batch to use if uneven."""
    batch_size, k = whole_number(batch_size, "batch_size"), whole_number(k, "k")
    if batch_size % k:
        raise ValueError(f"--batch-size {batch_size} does not split evenly over {k} processes; "
                         f"use a multiple of {k}, e.g. {even_batch_size(batch_size, k)}")
    return batch_size // k


def _tf32_switches(allowed: bool) -> list[tuple[object, str, object]]:
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    if torch.__version__ < "2.9":  # a TorchVersion: compares 2.10 > 2.9 as numbers
        return [(matmul, "allow_tf32", allowed), (cudnn, "allow_tf32", allowed)]
    # From 2.9 setting allow_tf32 warns, and reading it raises once fp32_precision was set.
    # cuDNN's own value comes first: setting it overrides its convolutions' and recurrent layers'.
    value = "tf32" if allowed else "ieee"
    return [(s, "fp32_precision", value) for s in (matmul, cudnn, cudnn.conv, cudnn.rnn)]


@contextlib.contextmanager
def _switched(switches: list[tuple[object, str, object]]) -> Iterator[None]:
    saved = [getattr(settings, name) for settings, name, _ in switches]
    try:
        for settings, name, value in switches:
            setattr(settings, name, value)
        yield
    finally:  # restored even after an error
        for (settings, name, _), value in zip(switches, saved):
            setattr(settings, name, value)


def allow_tf32(allowed: bool) -> ContextManager[None]:
    """Within the block, CUDA float32 matmuls and cuDNN layers may (True) or may not run as TF32."""
    if not isinstance(allowed, bool):
        raise ValueError(f"allow_tf32() takes True (TF32) or False (true float32), got {allowed!r}")
    return _switched(_tf32_switches(allowed))


def set_float32_precision(tf32: bool) -> str:
    """Choose TF32 (True) or full float32 for CUDA float32 matrix products; say so in words."""
    if not isinstance(tf32, bool):
        raise ValueError(f"set_float32_precision() takes True (TF32) or False, got {tf32!r}")
    # The matmul switch only: cuDNN's, set for good through fp32_precision, makes torch raise
    # wherever its code still reads cudnn.allow_tf32 (torch.export does, 2.14).
    setattr(*_tf32_switches(tf32)[0])
    words = ("float32 matrix products as TF32 (10-bit mantissa, Tensor Cores)" if tf32 else
             "float32 matrix products in full float32 (TF32 off)")
    warnings.filterwarnings("ignore", message=_TF32_HINT)  # chosen: no need to hint again
    if torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 0):
        notice(f"{words} on {torch.cuda.get_device_name()}, chosen with "
               f"dx.set_float32_precision(tf32={tf32})")
    return words


def strict_float32() -> ContextManager[None]:
    """Within the block, GPUs compute float32 in full precision and cuDNN deterministically."""
    # Else TF32, and cuDNN's algorithms chosen by batch size, part k devices from one device.
    cudnn = torch.backends.cudnn
    return _switched(_tf32_switches(False) + [(cudnn, "deterministic", True),
                                              (cudnn, "benchmark", False)])


def replicate(module: nn.Module, devices: Sequence[torch.device | str]) -> list[nn.Module]:
    """Return one independent copy of module on each device (the same device may repeat)."""
    return [copy.deepcopy(module).to(d) for d in _check_devices(devices)]


def evaluate_accuracy(nets: Sequence[Callable[[torch.Tensor], torch.Tensor]],
                      data_iter: Iterable, devices: Sequence[torch.device | str]) -> float:
    """Accuracy with each batch split over devices; nets[i] is the model (replica) on devices[i]."""
    devices = _check_devices(devices)
    if len(nets) != len(devices):
        raise ValueError(f"need one model per device: {len(nets)} models, {len(devices)} devices")
    modes = {net: net.training for net in nets if isinstance(net, nn.Module)}
    correct, total = torch.zeros((), dtype=torch.int64, device=devices[0]), 0
    try:
        for net in modes:
            net.eval()  # BatchNorm uses its running statistics when evaluating
        with torch.no_grad():
            for X, y in data_iter:
                for net, X_s, y_s in zip(nets, *split_batch(X, y, devices)):
                    if len(y_s):
                        correct += (net(X_s).argmax(dim=1) == y_s).sum().to(devices[0])
                total += len(y)
    finally:
        for net, mode in modes.items():
            net.train(mode)
    if total == 0:
        raise ValueError("evaluate_accuracy got no examples from data_iter")
    return correct.item() / total
