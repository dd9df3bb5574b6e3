"""The ring's torchrun job (notebook 08's ring_allreduce_dist against dist.all_reduce), and the
bus bandwidth that notebooks 07, 08 and 09 read from it."""
import pytest
import torch

import d2l_extras as dx
from d2l_extras.ring import bus_bandwidth


def test_bus_bandwidth():
    algbw, busbw = bus_bandwidth(1e9, 0.5, 4)
    assert algbw == 2e9 and busbw == pytest.approx(3e9)
    assert bus_bandwidth(1e9, 0.5, 1) == (2e9, 0.0)  # one node: no link carries anything


def expected_check(n: int) -> torch.Tensor:
    # rank r adds (r + 1) * (0, 1, ..., 1000): computed here term by term, not by the formula
    return sum((r + 1) * torch.arange(1001.0) for r in range(n))


@pytest.mark.timeout(150)
@pytest.mark.gpu
@pytest.mark.skipif(dx.hardware.expected_gpus() < 2, reason="a GPU runner's test (D2L_EXPECT_GPUS >= 2)")
def test_dist_ring_runs_on_nccl_over_every_gpu_promised():
    # On a runner that promises N GPUs, the ring runs on all N with NCCL, not gloo on the CPU.
    n = dx.hardware.expected_gpus()
    run = dx.launch("d2l_extras.ring", n, ["--sizes-mb", 1, "--repeats", 1], timeout=120,
                    echo=False)
    assert run.result["world"] == n and run.result["backend"] == "nccl"
    torch.testing.assert_close(torch.tensor(run.result["check"]), expected_check(n))


@pytest.mark.timeout(150)
def test_dist_ring_equals_the_one_process_sum():
    # The worker asserts ring == dist.all_reduce for each size; here its answer on the check
    # input is compared with the sum computed in this process. 0.001 MB = 262 floats, not
    # divisible by 3. One tiny launch keeps the test short (every process imports torch).
    n = 3
    run = dx.launch("d2l_extras.ring", n, ["--sizes-mb", 0.001, 0.01, "--repeats", 1],
                    timeout=120, echo=False)
    result = run.result
    assert result["world"] == n and result["backend"] in ("gloo", "nccl")
    torch.testing.assert_close(torch.tensor(result["check"]), expected_check(n))
    assert result["sizes_bytes"] == [262 * 4, 2621 * 4]
    assert [len(r) for r in result["ring_runs"] + result["allreduce_runs"]] == [1] * 4
    assert all(t > 0 for r in result["ring_runs"] + result["allreduce_runs"] for t in r)
