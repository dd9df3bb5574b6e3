"""The initialization of the ResNet-18 that notebook 07 saves (dx.resnet18)."""
import pytest
import torch
from torch import nn

import d2l_extras as dx


@pytest.mark.parametrize("width", [4, 8])
def test_resnet18(width):
    net = dx.resnet18(10, 1, width)
    net.apply(dx.models.init_weights)
    assert net(torch.rand(2, 1, 28, 28)).shape == (2, 10)
    convs = [m for m in net.modules() if isinstance(m, nn.Conv2d)]
    assert len(convs) == 1 + 16 + 3  # stem, 8 blocks of 2 convs, 3 shortcut 1x1 convs
    assert net[-1].in_features == 8 * width


def test_init_weights():
    layer = nn.Linear(1000, 10)
    dx.models.init_weights(layer, std=0.01)
    assert abs(layer.weight.std().item() - 0.01) < 0.002 and not layer.bias.any()
    dx.models.init_weights(layer)  # He: std = sqrt(2 / fan_in)
    assert abs(layer.weight.std().item() - (2 / 1000) ** 0.5) < 0.01
