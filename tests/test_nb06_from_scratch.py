"""Notebook 06 writes lenet, get_params, allreduce, split_batch and train_batch itself: each does
what its tested twin in d2l_extras does on the same input (issue 16: such checks leave the lesson)."""
import pytest
import torch

import d2l_extras as dx
from nbcells import notebook_namespace

NAMES = ["lenet", "get_params", "allreduce", "split_batch", "train_batch"]


@pytest.fixture(scope="module")
def nb():
    return notebook_namespace("06", NAMES)


def batch(n, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, 28, 28, generator=gen), torch.randint(0, 10, (n,), generator=gen)


def test_lenet_equals_dx(nb):
    params = dx.lenet_params(seed=0)
    X, _ = batch(3)
    torch.testing.assert_close(nb["lenet"](X, params), dx.models.lenet(X, params), rtol=0, atol=0)


def test_get_params_equals_dx(nb):
    params = dx.lenet_params(seed=0)
    for d in dx.devices(2):
        mine, ref = nb["get_params"](params, d), dx.parallel.get_params(params, d)
        for p, q, orig in zip(mine, ref, params):
            torch.testing.assert_close(p, q)
            assert p.device == q.device and p.requires_grad and p.is_leaf and p.grad is None
            assert p.data_ptr() != orig.data_ptr(), "a copy, not the original"


@pytest.mark.parametrize("k", [1, 2, 3])
def test_allreduce_equals_dx(nb, k):
    devices = dx.devices(k)
    gen = torch.Generator().manual_seed(0)
    values = [torch.randn(3, 4, generator=gen) for _ in devices]
    mine = [v.to(d, copy=True) for v, d in zip(values, devices)]
    ref = [v.to(d, copy=True) for v, d in zip(values, devices)]
    nb["allreduce"](mine)
    dx.parallel.allreduce(ref)
    for a, b in zip(mine, ref):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("n, k", [(10, 3), (4, 2), (2, 3), (25, 8)])
def test_split_batch_equals_dx(nb, n, k):
    devices = dx.devices(k)
    X, y = torch.arange(2.0 * n).reshape(n, 2), torch.arange(n)
    mine, ref = nb["split_batch"](X, y, devices), dx.split_batch(X, y, devices)
    for a, b in zip(mine[0] + mine[1], ref[0] + ref[1]):
        torch.testing.assert_close(a, b)
        assert a.device == b.device


def test_split_batch_refuses_mismatched_labels(nb):
    with pytest.raises(ValueError, match="10 examples"):
        nb["split_batch"](torch.zeros(10, 1), torch.zeros(9), dx.devices(2))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_train_batch_equals_dx(nb, k):
    devices = dx.devices(k)
    params = dx.lenet_params(seed=0)
    X, y = batch(25)
    with dx.strict_float32():
        mine = [nb["get_params"](params, d) for d in devices]
        ref = [dx.parallel.get_params(params, d) for d in devices]
        torch.testing.assert_close(nb["train_batch"](X, y, mine, devices, lr=0.5),
                                   dx.parallel.train_batch(X, y, ref, devices, lr=0.5))
    for copy_mine, copy_ref in zip(mine, ref):
        for p, q in zip(copy_mine, copy_ref):
            torch.testing.assert_close(p, q)


def test_d2l_try_all_gpus_lists_cuda_gpus_only():
    # Notebook 06 contrasts d2l.try_all_gpus() (CUDA GPUs, none here) with dx.devices().
    from d2l import torch as d2l
    assert len(d2l.try_all_gpus()) == torch.cuda.device_count()
