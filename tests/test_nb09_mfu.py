"""Notebook 09's MFU: the model FLOPs a token (`model_flops_per_token`, saved as dx's) against a
hand count and torch's own count of the products that run, and the peak each lever's MFU is
read against (`peak_of`: the data sheet's for the products' format on a GPU)."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

import d2l_extras as dx
from nbcells import notebook_namespace


def test_the_formula_by_hand():
    # L = 2 blocks of d = 64, T = 64, V = 70 (the CPU's ci model): N = 12 L d^2 + d V = 102,784
    # weights, 6N = 616,704, attention 12 L d T = 98,304.
    assert dx.model_flops_per_token(2, 64, 64, 70) == 616_704 + 98_304


def test_the_formula_is_what_flop_counter_counts():
    # An independent count: torch's FlopCounterMode over one forward and backward of TinyGPT
    # (odd sizes, so that no two terms can trade places).
    L, d, h, T, V, B = 3, 48, 3, 20, 11, 2
    torch.manual_seed(0)
    model = dx.TinyGPT(V, T, d, h, L)
    X = torch.randint(0, V, (B, T))
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(model(X).flatten(0, 1), X.flatten()).backward()
    assert counter.get_total_flops() == B * T * dx.model_flops_per_token(L, d, T, V)


@pytest.mark.parametrize("sizes", [(0, 64, 64, 70), (2, -64, 64, 70), (2, 64, 64, 0)])
def test_sizes_below_one_are_refused_by_name(sizes):
    with pytest.raises(ValueError, match=r"layers, width, length, vocabulary >= 1.*'d'"):
        dx.model_flops_per_token(*sizes)


@pytest.fixture
def nb():
    return notebook_namespace("09", ["peak_of"])


def test_on_a_cpu_the_peak_is_measured_in_the_format(nb):
    nb["device"] = torch.device("cpu")
    peak, kind = nb["peak_of"](torch.float32, False)
    assert kind == "torch.float32" and 1e8 < peak < 1e14   # FLOP/s: a CPU's range


@pytest.mark.parametrize("dtype, tf32, tflops", [
    (torch.float32, False, 67), (torch.float32, True, 494.7),
    (torch.bfloat16, True, 989.4),   # autocast's products are 16-bit: TF32 plays no part
    (torch.float16, False, 989.4)])
def test_on_a_gpu_the_data_sheet_gives_the_formats_peak(nb, monkeypatch, dtype, tf32, tflops):
    nb["device"] = torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "NVIDIA H100 80GB HBM3")
    peak, kind = nb["peak_of"](dtype, tf32)
    assert peak == pytest.approx(tflops * 1e12)
    assert kind == ("tfloat32" if tf32 and dtype == torch.float32 else str(dtype))


def test_a_gpu_without_a_data_sheet_has_no_peak(nb, monkeypatch):
    nb["device"] = torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "Imaginary GPU 9000")
    assert math.isnan(nb["peak_of"](torch.float32, False)[0])
