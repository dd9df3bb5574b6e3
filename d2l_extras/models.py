"""How the multi-GPU notebooks initialize their models (07 saves its ResNet-18 in ddp_job)."""
import torch
from torch import nn




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
