"""Models of the multi-GPU notebooks: LeNet from scratch and a small ResNet-18 for 28x28 images."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


def lenet_params(scale: float | None = None, seed: int | None = 0) -> list[torch.Tensor]:
    """Return LeNet's parameters [W1, b1, ..., W4, b4] (CPU); weights N(0, scale^2), default He."""
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    shapes = [(20, 1, 3, 3), (50, 20, 5, 5), (800, 128), (128, 10)]
    params = []
    for shape in shapes:
        fan_in = shape[1] * shape[2] * shape[3] if len(shape) == 4 else shape[0]
        # A layer multiplies the signal's size by about std * sqrt(fan_in): the book's 0.01
        # gives 0.03 to 0.28 per layer here (fan-in 9 to 800), so the output is ~1e-4 of the
        # input and a short run stays at chance. He's sqrt(2 / fan_in) keeps the size (ReLU
        # halves the second moment, the 2 restores it).
        std = scale if scale is not None else (2 / fan_in) ** 0.5
        params.append(torch.randn(shape, generator=gen) * std)
        params.append(torch.zeros(shape[0] if len(shape) == 4 else shape[1]))
    return params


def lenet(X: torch.Tensor, params: list[torch.Tensor]) -> torch.Tensor:
    """LeNet as a plain function of a batch (N, 1, 28, 28) and its eight parameters."""
    h1 = F.avg_pool2d(F.relu(F.conv2d(X, params[0], params[1])), kernel_size=2, stride=2)
    h2 = F.avg_pool2d(F.relu(F.conv2d(h1, params[2], params[3])), kernel_size=2, stride=2)
    h3 = F.relu(h2.flatten(start_dim=1) @ params[4] + params[5])  # flatten: empty shards too
    return h3 @ params[6] + params[7]


class Residual(nn.Module):
    """The book's residual block, with input channels given (no lazy layers: DDP needs shapes)."""

    def __init__(self, in_channels: int, num_channels: int, use_1x1conv: bool = False,
                 strides: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, num_channels, 3, padding=1, stride=strides)
        self.conv2 = nn.Conv2d(num_channels, num_channels, 3, padding=1)
        self.conv3 = nn.Conv2d(in_channels, num_channels, 1, stride=strides) \
            if use_1x1conv else None
        self.bn1 = nn.BatchNorm2d(num_channels)
        self.bn2 = nn.BatchNorm2d(num_channels)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        Y = F.relu(self.bn1(self.conv1(X)))
        Y = self.bn2(self.conv2(Y))
        if self.conv3 is not None:
            X = self.conv3(X)
        return F.relu(Y + X)


def resnet18(num_classes: int = 10, in_channels: int = 1, width: int = 64) -> nn.Sequential:
    """The book's ResNet-18 for small images: a 3x3 stem, no max-pooling; `width` channels first."""
    if width < 1 or num_classes < 1 or in_channels < 1:
        raise ValueError(f"resnet18 needs num_classes, in_channels and width >= 1, got "
                         f"{num_classes}, {in_channels}, {width}")

    def stage(c_in: int, c_out: int, first: bool) -> nn.Sequential:
        # Every stage but the first halves the resolution and doubles the channels.
        return nn.Sequential(
            Residual(c_in, c_out, use_1x1conv=not first, strides=1 if first else 2),
            Residual(c_out, c_out))

    w = width
    return nn.Sequential(
        nn.Conv2d(in_channels, w, kernel_size=3, stride=1, padding=1),
        nn.BatchNorm2d(w), nn.ReLU(),
        stage(w, w, True), stage(w, 2 * w, False), stage(2 * w, 4 * w, False),
        stage(4 * w, 8 * w, False),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8 * w, num_classes))


def init_weights(module: nn.Module, std: float | None = None) -> None:
    """Initialize Linear and Conv2d layers: He (default) or N(0, std^2) weights, zero biases."""
    if isinstance(module, (nn.Linear, nn.Conv2d)):
        if std is None:
            # The book's std=0.01 makes the activations tiny, so BatchNorm's running variance
            # (it starts at 1) needs hundreds of steps to catch up and test accuracy stays at
            # chance on short runs. He initialization keeps the activations near unit scale.
            nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
        else:
            nn.init.normal_(module.weight, std=std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
