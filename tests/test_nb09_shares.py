"""Notebook 09 splits a profiled step into matrix products, other operators and overhead
(`time_shares`). On a GPU a kernel counts as a matrix product when a product's operator
launched it (the trace gives a kernel its operator's External id): Hopper's cuBLAS kernels are
named nvjet_*, not *gemm*, so names cannot tell."""
import pytest
import torch

from nbcells import notebook_namespace


@pytest.fixture(scope="module")
def nb():
    return notebook_namespace("09", ["MATMUL", "Bar", "time_shares"])


def x(name, cat, ts, dur, tid=1, **args):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": tid,
            "args": args}


# One marked step of 100 us on a GPU: a product whose kernel is nvjet_*, then an add.
GPU_STEP = {"traceEvents": [
    x("step", "user_annotation", 0, 100),
    x("aten::mm", "cpu_op", 5, 10, **{"External id": 11}),
    x("cudaLaunchKernel", "cuda_runtime", 8, 2, correlation=1, **{"External id": 11}),
    x("aten::add", "cpu_op", 20, 10, **{"External id": 12}),
    x("cudaLaunchKernel", "cuda_runtime", 22, 2, correlation=2, **{"External id": 12}),
    x("nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NNN", "kernel", 30, 40, tid=7, device=0, stream=7,
      correlation=1, **{"External id": 11}),
    x("void at::native::vectorized_elementwise_kernel<4>", "kernel", 70, 10, tid=7, device=0,
      stream=7, correlation=2, **{"External id": 12})]}


def test_a_kernel_is_a_product_when_a_product_launched_it(nb):
    nb["device"] = torch.device("cuda")
    shares = nb["time_shares"](GPU_STEP)
    got = {part: round(share, 6) for part, share in shares.items()}
    assert got == {"matrix products": 0.4, "other operators": 0.1, "overhead": 0.5}


def test_on_a_cpu_the_operators_themselves_count(nb):
    nb["device"] = torch.device("cpu")
    trace = {"traceEvents": [
        x("step", "user_annotation", 0, 100), x("aten::addmm", "cpu_op", 10, 30),
        x("aten::mm", "cpu_op", 15, 20),  # nested inside addmm: counted once
        x("aten::gelu", "cpu_op", 50, 20),
        x("## Call CompiledFxGraph fx1 ##", "cpu_op", 72, 6),  # compiled loops: work
        x("aten::mm", "cpu_op", 73, 2),   # a product inside compiled code
        x("Optimizer.step#AdamW.step", "user_annotation", 80, 15)]}  # Python: overhead
    shares = nb["time_shares"](trace)
    got = {part: round(share, 6) for part, share in shares.items()}
    assert got == {"matrix products": 0.32, "other operators": 0.24, "overhead": 0.44}
