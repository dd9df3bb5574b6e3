"""Notebook 06 writes what it teaches (lenet, init_params, get_params, allreduce, split_batch,
map_devices, loss_and_grad, train_batch); the notebook is their only source, and `#@save` makes
allreduce and split_batch `dx.allreduce` and `dx.split_batch` (tested here as such). Here they are
checked against independent references (the sum, torch.cat, one full-batch SGD step by autograd)
and on the inputs the lesson does not show: uneven shards, one device, up to eight devices."""
import threading

import pytest
import torch
from torch.nn import functional as F

import d2l_extras as dx
from nbcells import notebook_namespace

NAMES = ["lenet", "init_params", "get_params", "allreduce", "split_batch", "map_devices",
         "loss_and_grad", "train_batch"]
CPU = torch.device("cpu")

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py says why


@pytest.fixture(scope="module")
def nb():
    return notebook_namespace("06", NAMES)


def batch(n, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, 28, 28, generator=gen), torch.randint(0, 10, (n,), generator=gen)


def test_lenet_takes_a_batch_and_an_empty_shard(nb):
    params = nb["init_params"]()
    for n in (4, 0):  # 2 examples over 3 devices leave one shard empty
        assert nb["lenet"](torch.rand(n, 1, 28, 28), params).shape == (n, 10)


def test_init_params_draws_he_weights_or_the_books_and_zero_biases(nb):
    he, book = nb["init_params"](), nb["init_params"](std=0.01)
    shapes = [(20, 1, 3, 3), (20,), (50, 20, 5, 5), (50,), (800, 128), (128,), (128, 10), (10,)]
    assert [tuple(p.shape) for p in he] == shapes == [tuple(p.shape) for p in book]
    for W, fan_in in zip(he[::2], [9, 500, 800, 128]):  # He: std sqrt(2 / fan-in)
        assert abs(W.std().item() / (2 / fan_in) ** 0.5 - 1) < 0.1
    assert all(abs(W.std().item() / 0.01 - 1) < 0.1 for W in book[::2])
    assert all(not b.any() for b in he[1::2])
    torch.testing.assert_close(nb["init_params"](seed=3)[0], nb["init_params"](seed=3)[0])
    assert not torch.equal(nb["init_params"](seed=3)[0], he[0]), "the seed matters"


def test_get_params_copies_leaves_that_record_gradients(nb):
    params = nb["init_params"]()
    for d in dx.devices(2):
        for p, orig in zip(nb["get_params"](params, d), params):
            torch.testing.assert_close(p.detach().cpu(), orig)
            assert p.device == torch.device(d) and p.requires_grad and p.is_leaf
            assert p.grad is None and p.data_ptr() != orig.data_ptr(), "a copy, not a view"


@pytest.mark.parametrize("k", [1, 2, 3])
def test_allreduce_leaves_the_sum_on_every_device(k):
    devices = dx.devices(k)
    values = [torch.randn(3, 4, generator=torch.Generator().manual_seed(i)) for i in range(k)]
    data = [v.to(d, copy=True) for v, d in zip(values, devices)]
    dx.allreduce(data)
    for t, d in zip(data, devices):
        torch.testing.assert_close(t.cpu(), sum(values))
        assert t.device == torch.device(d)


@pytest.mark.parametrize("n, k, sizes", [(4, 2, [2, 2]), (10, 3, [4, 3, 3]),
                                         (7, 4, [2, 2, 2, 1]), (2, 3, [1, 1, 0])])
def test_split_batch_keeps_order_and_differs_by_one_at_most(n, k, sizes):
    devices = dx.devices(k)
    X, y = torch.arange(2.0 * n).reshape(n, 2), torch.arange(n)
    X_shards, y_shards = dx.split_batch(X, y, devices)
    assert [len(s) for s in X_shards] == sizes == [len(s) for s in y_shards]
    assert [s.device for s in X_shards] == [torch.device(d) for d in devices]
    torch.testing.assert_close(torch.cat([s.cpu() for s in X_shards]), X)
    torch.testing.assert_close(torch.cat([s.cpu() for s in y_shards]), y)


def test_split_batch_refuses_mismatched_labels():
    with pytest.raises(ValueError, match="X has 10 examples, y 9 labels"):
        dx.split_batch(torch.zeros(10, 1), torch.zeros(9), dx.devices(2))


def test_map_devices_runs_cpu_devices_at_once_one_core_each(nb):
    # Each call waits at a barrier for the others: in turn, the first would time out.
    k, before = 3, torch.get_num_threads()
    meet = threading.Barrier(k, timeout=20)

    def call(device, i):
        meet.wait()
        return i, threading.get_ident(), torch.get_num_threads()

    out = nb["map_devices"](call, [CPU] * k, [CPU] * k, range(k))
    assert [i for i, _, _ in out] == list(range(k)), "results in the devices' order"
    assert len({ident for _, ident, _ in out}) == k, "a thread per device"
    assert all(n == 1 for _, _, n in out), "one torch thread (a core) per device"
    assert torch.get_num_threads() == before, "the thread count restored"


def test_map_devices_calls_other_devices_in_turn_in_this_thread(nb):
    # GPUs queue their kernels and return: no threads needed. "meta" stands in for them here.
    meta, calls = torch.device("meta"), []
    out = nb["map_devices"](lambda i: calls.append(threading.get_ident()) or i * i,
                            [meta, meta], [2, 3])
    assert out == [4, 9] and calls == [threading.get_ident()] * 2


def test_map_devices_restores_the_thread_count_when_a_call_fails(nb):
    before = torch.get_num_threads()

    def fail(_):
        raise RuntimeError("out of memory")

    with pytest.raises(RuntimeError, match="out of memory"):
        nb["map_devices"](fail, [CPU] * 2, [0, 1])
    assert torch.get_num_threads() == before


def sgd_reference(nb, X, y, params, lr):
    # One SGD step on the whole batch, on one device: the mean gradient, by autograd.
    p = [q.detach().clone().requires_grad_() for q in params]
    F.cross_entropy(nb["lenet"](X, p), y).backward()
    return [q.detach() - lr * q.grad for q in p]


@pytest.mark.parametrize("k", range(1, 9))  # every GPU count of a one-machine server
@pytest.mark.parametrize("n", [24, 25])  # 25 splits evenly over no k > 1 but 5
def test_k_devices_take_the_one_device_step(nb, k, n):
    X, y = batch(n)
    params = nb["init_params"]()
    with dx.allow_tf32(False):
        copies = [nb["get_params"](params, CPU) for _ in range(k)]
        nb["train_batch"](X, y, copies, [CPU] * k, lr=0.5)
        expected = sgd_reference(nb, X, y, params, lr=0.5)
    for copy in copies:  # every replica holds the one-device result
        for p, q in zip(copy, expected):
            torch.testing.assert_close(p.detach(), q)


def test_train_batch_sums_gradients_with_the_allreduce_it_is_given(nb):
    X, y = batch(12)
    params, calls = nb["init_params"](), []

    def counting(data):
        calls.append(len(data))
        nb["allreduce"](data)

    copies = [nb["get_params"](params, CPU) for _ in range(3)]
    nb["train_batch"](X, y, copies, [CPU] * 3, lr=0.5, allreduce=counting)
    assert calls == [3] * len(params)  # once per parameter, one tensor per device
    # An allreduce that does nothing leaves each copy with its own shard's gradient.
    lazy = [nb["get_params"](params, CPU) for _ in range(3)]
    nb["train_batch"](X, y, lazy, [CPU] * 3, lr=0.5, allreduce=lambda data: None)
    assert not torch.allclose(lazy[0][0], lazy[1][0])

