"""Models of the multi-GPU notebooks: LeNet from scratch (07 saves its ResNet-18 in ddp_job)."""
import torch
from torch import nn


def lenet_params(scale: float | None = None, seed: int | None = 0) -> list[torch.Tensor]:
    """Return LeNet's parameters [W1, b1, ..., W4, b4] (CPU); weights N(0, scale^2), default He."""
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    params = []
    # The book's std 0.01 scales the signal by 0.03 to 0.28 per layer (std * sqrt(fan-in)): a short
    # run stays at chance. He's sqrt(2 / fan-in) keeps its size. Convolutions: (out, in, k, k).
    for shape, fan_in, outputs in [((20, 1, 3, 3), 9, 20), ((50, 20, 5, 5), 500, 50),
                                   ((800, 128), 800, 128), ((128, 10), 128, 10)]:
        std = scale if scale is not None else (2 / fan_in) ** 0.5
        params += [torch.randn(shape, generator=gen) * std, torch.zeros(outputs)]
    return params


def init_weights(module: nn.Module, std: float | None = None) -> None:
    """Initialize Linear and Conv2d layers: He (default) or N(0, std^2) weights, zero biases."""
    if isinstance(module, (nn.Linear, nn.Conv2d)):
        # The book's std=0.01 leaves the activations tiny: BatchNorm's running variance (from 1)
        # lags for hundreds of steps and short runs stay at chance. He keeps them near 1.
        if std is None:
            nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
        else:
            nn.init.normal_(module.weight, std=std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
