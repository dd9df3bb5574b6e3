"""The small ResNet-18 of the multi-GPU notebooks, for 28x28 images (06 writes its LeNet)."""
import torch
from torch import nn
from torch.nn import functional as F


class Residual(nn.Module):
    """The book's residual block, with input channels given (no lazy layers: DDP needs shapes)."""

    def __init__(self, in_channels: int, num_channels: int, use_1x1conv: bool = False,
                 strides: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, num_channels, 3, padding=1, stride=strides)
        self.conv2 = nn.Conv2d(num_channels, num_channels, 3, padding=1)
        self.conv3 = nn.Conv2d(in_channels, num_channels, 1, stride=strides) \
            if use_1x1conv else None
        self.bn1, self.bn2 = nn.BatchNorm2d(num_channels), nn.BatchNorm2d(num_channels)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        Y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(X)))))
        return F.relu(Y + (X if self.conv3 is None else self.conv3(X)))


def resnet18(num_classes: int = 10, in_channels: int = 1, width: int = 64) -> nn.Sequential:
    """The book's ResNet-18 for small images: a 3x3 stem, no max-pooling; `width` channels first."""
    if width < 1 or num_classes < 1 or in_channels < 1:
        raise ValueError(f"resnet18 needs num_classes, in_channels and width >= 1, got "
                         f"{num_classes}, {in_channels}, {width}")
    c = [width, width, 2 * width, 4 * width, 8 * width]
    return nn.Sequential(
        nn.Conv2d(in_channels, width, kernel_size=3, stride=1, padding=1),
        nn.BatchNorm2d(width), nn.ReLU(),
        # Every stage but the first halves the resolution and doubles the channels.
        *(nn.Sequential(Residual(a, b, use_1x1conv=a != b, strides=1 if a == b else 2),
                        Residual(b, b)) for a, b in zip(c, c[1:])),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8 * width, num_classes))


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
