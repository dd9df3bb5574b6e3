"""LeNet's parameters and the small ResNet-18 (saved from notebook 07)."""
import pytest
import torch
from torch import nn

import d2l_extras as dx


def test_lenet_params_shapes_and_seed():
    params = dx.models.lenet_params()  # notebook 06's lenet runs them: tests/test_nb06_from_scratch.py
    assert [tuple(p.shape) for p in params][::2] == [(20, 1, 3, 3), (50, 20, 5, 5), (800, 128),
                                                     (128, 10)]
    torch.testing.assert_close(dx.models.lenet_params(seed=3)[0], dx.models.lenet_params(seed=3)[0])
    assert dx.models.lenet_params(scale=0.01)[0].std() < 0.02  # the book's initialization


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
