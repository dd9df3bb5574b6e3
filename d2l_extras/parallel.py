"""What data parallelism uses besides what notebook 06 teaches: accuracy, batch shares, TF32."""
import contextlib
from typing import Callable, ContextManager, Iterable, Iterator, Sequence

import torch
from torch import nn

import d2l_extras as dx


def even_batch_size(batch_size: int, k: int) -> int:
    """Return the smallest multiple of k that is >= batch_size (k processes get equal shares)."""
    return -(-batch_size // k) * k  # equal shares: DDP's mean of means is the global mean


def per_process_batch(batch_size: int, k: int) -> int:
    """Return each of k processes' share of a global batch; say which batch to use if uneven."""
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


def strict_float32() -> ContextManager[None]:
    """Within the block, GPUs compute float32 in full precision and cuDNN deterministically."""
    # Else TF32, and cuDNN's algorithms chosen by batch size, part k devices from one device.
    cudnn = torch.backends.cudnn
    return _switched(_tf32_switches(False) + [(cudnn, "deterministic", True),
                                              (cudnn, "benchmark", False)])


def evaluate_accuracy(nets: Sequence[Callable[[torch.Tensor], torch.Tensor]],
                      data_iter: Iterable, devices: Sequence[torch.device | str]) -> float:
    """Accuracy with each batch split over devices; nets[i] is the model (replica) on devices[i]."""
    if len(nets) != len(devices):  # zip() would quietly drop the extra ones
        raise ValueError(f"need one model per device: {len(nets)} models, {len(devices)} devices")
    modes = {net: net.training for net in nets if isinstance(net, nn.Module)}
    correct, total = torch.zeros((), dtype=torch.int64, device=devices[0]), 0
    try:
        for net in modes:
            net.eval()  # BatchNorm uses its running statistics when evaluating
        with torch.no_grad():
            for X, y in data_iter:  # notebook 06's split: 10 over 3 devices is 4, 3, 3
                for net, X_s, y_s in zip(nets, *dx.split_batch(X, y, devices)):
                    if len(y_s):  # no wait for each batch: the count stays on the device
                        correct += (net(X_s).argmax(dim=1) == y_s).sum().to(correct.device)
                total += len(y)
    finally:
        for net, mode in modes.items():
            net.train(mode)
    return correct.item() / total
