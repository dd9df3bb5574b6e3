"""Data parallelism's helpers: accuracy over (simulated) devices, batch shares, float32
switches. Notebook 06's own functions are tested in test_nb06_from_scratch.py."""
import copy
import warnings
from types import SimpleNamespace

import pytest
import torch

import d2l_extras as dx
from d2l_extras import parallel

CPU = torch.device("cpu")


# Every test here on one thread (tests/conftest.py says why).
pytestmark = pytest.mark.usefixtures("one_thread")


def _batch(n=24, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, 28, 28, generator=gen), torch.randint(0, 10, (n,), generator=gen)


@pytest.mark.parametrize("k", range(1, 9))
def test_even_batch_size(k):
    for batch in (1, 64, 128, 256):
        even = dx.parallel.even_batch_size(batch, k)
        assert even % k == 0 and batch <= even < batch + k


def test_per_process_batch_splits_evenly_or_names_a_batch_that_does():
    assert dx.parallel.per_process_batch(64, 4) == 16 and dx.parallel.per_process_batch(7, 1) == 7
    with pytest.raises(ValueError, match="does not split evenly over 3 processes; "
                                         "use a multiple of 3, e.g. 66"):
        dx.parallel.per_process_batch(64, 3)


class NewTF32:
    """A settings object of torch >= 2.9: fp32_precision; the deprecated allow_tf32 flag raises
    when read after fp32_precision was set (as torch does), and must not be set at all."""

    def __init__(self, precision):
        self.fp32_precision = precision

    @property
    def allow_tf32(self):
        raise RuntimeError("you have used mix of the legacy and new APIs to set the TF32 status")

    @allow_tf32.setter
    def allow_tf32(self, value):
        raise AssertionError("the deprecated allow_tf32 was set")


def fake_backends(monkeypatch, version):
    """torch.backends.cuda.matmul and torch.backends.cudnn as torch `version` has them."""
    from torch.torch_version import TorchVersion
    monkeypatch.setattr(torch, "__version__", TorchVersion(version))
    if torch.__version__ >= "2.9":
        matmul, cudnn = NewTF32("none"), NewTF32("none")
        cudnn.conv, cudnn.rnn = NewTF32("tf32"), NewTF32("tf32")
    else:  # no fp32_precision: a test fails if the new API is used here
        matmul, cudnn = SimpleNamespace(allow_tf32=False), SimpleNamespace(allow_tf32=True)
    cudnn.deterministic, cudnn.benchmark = False, True
    monkeypatch.setattr(torch.backends.cuda, "matmul", matmul)
    monkeypatch.setattr(torch.backends, "cudnn", cudnn)
    return matmul, cudnn


def tf32_state(matmul, cudnn):
    if hasattr(matmul, "fp32_precision"):
        return (matmul.fp32_precision, cudnn.fp32_precision, cudnn.conv.fp32_precision,
                cudnn.rnn.fp32_precision)
    return matmul.allow_tf32, cudnn.allow_tf32


@pytest.mark.parametrize("version, off, on", [
    ("2.6.0+cu124", (False, False), (True, True)), ("2.8.1", (False, False), (True, True)),
    ("2.9.0+cu128", ("ieee",) * 4, ("tf32",) * 4), ("2.10.0", ("ieee",) * 4, ("tf32",) * 4),
    ("2.15.0", ("ieee",) * 4, ("tf32",) * 4)])
def test_allow_tf32_sets_and_restores_through_this_torchs_api(monkeypatch, version, off, on):
    matmul, cudnn = fake_backends(monkeypatch, version)
    before = tf32_state(matmul, cudnn)
    with pytest.raises(RuntimeError, match="inside"):
        with dx.allow_tf32(False):
            assert tf32_state(matmul, cudnn) == off
            raise RuntimeError("inside")
    assert tf32_state(matmul, cudnn) == before  # restored, even after an error
    with dx.allow_tf32(True):
        assert tf32_state(matmul, cudnn) == on
    assert tf32_state(matmul, cudnn) == before


@pytest.mark.parametrize("version", ["2.6.0", "2.9.0", "2.14.1+cu130"])
def test_strict_float32_restores_the_settings(monkeypatch, version):
    matmul, cudnn = fake_backends(monkeypatch, version)
    before = tf32_state(matmul, cudnn)
    with pytest.raises(RuntimeError, match="inside"):
        with dx.parallel.strict_float32():
            assert tf32_state(matmul, cudnn) in {(False, False), ("ieee",) * 4}
            assert cudnn.deterministic and not cudnn.benchmark
            raise RuntimeError("inside")
    assert tf32_state(matmul, cudnn) == before and cudnn.benchmark and not cudnn.deterministic


def test_allow_tf32_on_this_torch_warns_nothing_and_restores():
    def state():
        return [getattr(settings, name) for settings, name, _ in parallel._tf32_switches(False)]

    def wanted(allowed):
        return [value for *_, value in parallel._tf32_switches(allowed)]

    before = state()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a deprecation warning fails the test
        with dx.allow_tf32(True):
            assert state() == wanted(True)
        with dx.parallel.strict_float32():
            assert state() == wanted(False)
    assert state() == before
    # nothing left half set: the legacy flags still read (torch raises on a mix of both APIs)
    assert isinstance(torch.backends.cuda.matmul.allow_tf32 + torch.backends.cudnn.allow_tf32, int)
    with pytest.raises(ValueError, match="True .* or False"):
        with dx.allow_tf32("off"):
            pass


@pytest.mark.parametrize("k", range(1, 9))
def test_evaluate_accuracy_on_k_devices(k):
    W = torch.randn(784, 10, generator=torch.Generator().manual_seed(0))
    X, y = _batch(21)  # 21 test images: uneven over most k, fewer than 8 per slice
    batches = [(X[:13], y[:13]), (X[13:], y[13:])]
    expected = (X.flatten(1) @ W).argmax(1).eq(y).float().mean().item()
    nets = [lambda X: X.flatten(1) @ W] * k  # a plain function works like a module
    assert dx.evaluate_accuracy(nets, batches, [CPU] * k) == pytest.approx(expected)


def test_evaluate_accuracy_split_equals_single():
    net = dx.resnet18(10, 1, 4)
    X, y = _batch(20)
    batches = [(X[:13], y[:13]), (X[13:], y[13:])]
    single = dx.evaluate_accuracy([net], batches, [CPU])
    expected = (net.eval()(X).argmax(1) == y).float().mean().item()
    net.train()
    assert single == pytest.approx(expected)
    replicas = [copy.deepcopy(net) for _ in range(3)]
    assert dx.evaluate_accuracy(replicas, batches, [CPU] * 3) == pytest.approx(expected)
    assert net.training  # the mode is restored
    with pytest.raises(ValueError, match="one model per device"):
        dx.evaluate_accuracy([net], batches, [CPU] * 2)
