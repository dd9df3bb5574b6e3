"""Data parallelism's helpers (notebook 06 writes what it teaches itself): replicas, accuracy."""
import contextlib
import copy
import warnings
from typing import Callable, ContextManager, Iterable, Iterator, Sequence

import torch
from torch import nn

from .checks import whole_number
from .report import notice

# Inductor's hint when it compiles float32 matmuls for an Ampere or later GPU with TF32 off.
_TF32_HINT = "TensorFloat32 tensor cores for float32 matrix multiplication available"


def _check_devices(devices: Sequence[torch.device | str]) -> list[torch.device]:
    # Devices may repeat: dx.devices(k) simulates missing GPUs, with the same arithmetic.
    if isinstance(devices, (str, torch.device)) or not isinstance(devices, Sequence) or not devices:
        raise ValueError(f"need a non-empty list of devices such as dx.devices(2), got {devices!r}")
    return [torch.device(d) for d in devices]


def sgd(params: Iterable[torch.Tensor], lr: float, batch_size: int) -> None:
    """Minibatch SGD on summed gradients: p -= lr * grad / batch_size, then zero the gradient."""
    with torch.no_grad():
        for p in params:
            p -= lr * p.grad / batch_size
            p.grad.zero_()


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
               f"dx.parallel.set_float32_precision(tf32={tf32})")
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
                k = len(devices)  # shards as even as can be: 10 over 3 is 4, 3, 3
                for net, X_s, y_s, d in zip(nets, X.tensor_split(k), y.tensor_split(k), devices):
                    if len(y_s):
                        right = net(X_s.to(d)).argmax(dim=1) == y_s.to(d)
                        correct += right.sum().to(devices[0])
                total += len(y)
    finally:
        for net, mode in modes.items():
            net.train(mode)
    if total == 0:
        raise ValueError("evaluate_accuracy got no examples from data_iter")
    return correct.item() / total
