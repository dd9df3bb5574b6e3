import math
import os
import pathlib
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import d2l_extras as dx
from d2l_extras import hardware, report


def test_report_has_the_essentials(capsys):
    report = dx.hardware_report()
    out = capsys.readouterr().out
    for key in ("cpu", "cores", "ram_total", "accelerators", "torch", "profile"):
        assert key in report
    assert report["ram_total"] > 0 and report["cores"] >= 1
    assert "CPU" in out and "RAM" in out and torch.__version__ in out and "profile" in out


def test_report_quiet():
    assert isinstance(dx.hardware_report(verbose=False)["cpu"], str)


def test_report_lists_each_gpu(monkeypatch, capsys):
    class Props:
        name, total_memory, major, minor = "Fake GPU", 4 * 1024 ** 3, 8, 6
    monkeypatch.setattr(hardware, "accelerators", lambda: [torch.device("cuda", 0)])
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev: Props)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(hardware, "free_memory", lambda dev: 3 * 1024 ** 3)
    report = dx.hardware_report()
    assert report["accelerators"][0]["name"] == "Fake GPU"
    assert "cuda:0  : Fake GPU, 4.0 GiB (3.0 GiB free), compute capability 8.6" in \
        capsys.readouterr().out


def test_cpu_name():
    assert dx.hardware.cpu_name()


@pytest.mark.parametrize("n", [1, 2, 3, 8, np.int64(2)])
def test_devices_gives_exactly_n(n):
    got = dx.devices(n)
    assert len(got) == n and all(isinstance(d, torch.device) for d in got)


def test_devices_real_first_then_replicas(monkeypatch, capsys):
    gpus = [torch.device("cuda", 0), torch.device("cuda", 1)]
    monkeypatch.setattr(hardware, "accelerators", lambda: gpus)
    assert dx.devices(2) == gpus and capsys.readouterr().out == ""  # nothing simulated
    assert dx.devices(3) == gpus + [gpus[0]]
    assert "2 real, 1 simulated" in capsys.readouterr().out


def test_devices_simulates_on_cpu(monkeypatch, capsys):
    monkeypatch.setattr(hardware, "accelerators", lambda: [])
    assert dx.devices(3) == [torch.device("cpu")] * 3
    assert capsys.readouterr().out.count("\n") == 1  # a one-line notice


@pytest.mark.parametrize("bad", [0, -1, 1.5, 2.0, "2", None, True])
def test_devices_rejects_bad_counts(bad):
    with pytest.raises(ValueError, match=r"number of devices n must be a whole number >= 1"):
        dx.devices(bad)


def test_default_device_and_free_memory():
    dev = dx.default_device()
    assert dev in dx.hardware.accelerators() or dev == torch.device("cpu")
    assert dx.hardware.free_memory("cpu") > 0


def test_free_memory_counts_the_allocators_cache_as_free(monkeypatch):
    # The driver sees 2 GiB free; PyTorch reserved 6 GiB, of which live tensors use 1 GiB. The
    # other 5 GiB, cached from tensors already freed, are this process's to reuse: 7 GiB free.
    GiB, asked = 1024 ** 3, []

    def answer(value):
        return lambda device=None: asked.append(device) or value

    monkeypatch.setattr(torch.cuda, "mem_get_info", answer((2 * GiB, 16 * GiB)))
    monkeypatch.setattr(torch.cuda, "memory_reserved", answer(6 * GiB))
    monkeypatch.setattr(torch.cuda, "memory_allocated", answer(1 * GiB))
    assert dx.hardware.free_memory("cuda:1") == 7 * GiB
    assert set(asked) == {torch.device("cuda", 1)}  # every figure is that GPU's
    assert dx.hardware.fit_to_memory(10 ** 12, 1, "cuda:1", fraction=1) == 7 * GiB


def test_free_memory_rejects_unknown_device():
    with pytest.raises(ValueError, match="cpu, cuda and mps"):
        dx.hardware.free_memory("meta")


def test_fit_to_memory_shrinks_to_budget():
    assert dx.hardware.fit_to_memory(10_000, 100, budget=1_000_000, fraction=0.5) == 5_000
    assert dx.hardware.fit_to_memory(10, 100, budget=1_000_000) == 10  # fits already: unchanged


def test_fit_to_memory_uses_free_memory_by_default():
    assert 1 <= dx.hardware.fit_to_memory(10 ** 15, 4, device="cpu") < 10 ** 15


def test_fit_to_memory_too_small_budget_says_so():
    with pytest.raises(ValueError, match="does not fit"):
        dx.hardware.fit_to_memory(100, 1000, budget=1000, minimum=10)


class _FakeGPU:
    name, total_memory, major, minor = "Fake GPU", 8 * 1024 ** 3, 9, 0


@pytest.fixture(autouse=True)
def no_gpu_promised(monkeypatch):
    """Each test sets what it expects; a GPU runner's own D2L_EXPECT_GPU(S) stays out."""
    monkeypatch.delenv("D2L_EXPECT_GPU", raising=False)
    monkeypatch.delenv("D2L_EXPECT_GPUS", raising=False)


@pytest.mark.parametrize("environ, expected", [
    ({}, 0), ({"D2L_EXPECT_GPU": "0"}, 0), ({"D2L_EXPECT_GPU": " 1"}, 1),
    ({"D2L_EXPECT_GPUS": "4"}, 4), ({"D2L_EXPECT_GPUS": " 2 ", "D2L_EXPECT_GPU": "1"}, 2),
    ({"D2L_EXPECT_GPUS": "0", "D2L_EXPECT_GPU": "1"}, 0), ({"D2L_EXPECT_GPUS": ""}, 0)])
def test_expected_gpus_reads_the_count_or_the_flag(monkeypatch, environ, expected):
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert dx.hardware.expected_gpus() == expected


@pytest.mark.parametrize("value", ["two", "-1", "1.5"])
def test_expected_gpus_rejects_what_is_not_a_count(monkeypatch, value):
    monkeypatch.setenv("D2L_EXPECT_GPUS", value)
    with pytest.raises(ValueError, match=r"D2L_EXPECT_GPUS='.*': set it to the number"):
        dx.hardware.expected_gpus()


def _fake_gpus(monkeypatch, n):
    monkeypatch.setattr(hardware, "accelerators", lambda: [torch.device("cuda", i)
                                                           for i in range(n)])
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev: _FakeGPU)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(hardware, "free_memory", lambda dev: 1024 ** 3)


@pytest.mark.parametrize("visible", [0, 1, 3])
def test_a_runner_with_fewer_gpus_than_promised_is_refused(monkeypatch, visible):
    # D2L_EXPECT_GPUS=4 on a machine that shows fewer: the NCCL and peer-to-peer paths would
    # otherwise be simulated on the GPUs there are, and the run would pass.
    monkeypatch.setenv("D2L_EXPECT_GPUS", "4")
    _fake_gpus(monkeypatch, visible)
    with pytest.raises(RuntimeError, match=rf"D2L_EXPECT_GPUS=4 says this machine has 4 CUDA "
                                           rf"GPUs, but torch sees {visible or 'none'}"):
        dx.hardware_report(verbose=False)


@pytest.mark.parametrize("visible", [4, 8])
def test_a_runner_with_the_gpus_promised_passes(monkeypatch, visible):
    monkeypatch.setenv("D2L_EXPECT_GPUS", "4")
    _fake_gpus(monkeypatch, visible)
    assert len(dx.hardware_report(verbose=False)["accelerators"]) == visible


def test_the_test_suite_refuses_a_runner_short_of_gpus(tmp_path):
    # tests/conftest.py checks before any test runs: none can pass by skipping.
    (tmp_path / "conftest.py").write_text(
        (pathlib.Path(__file__).parent / "conftest.py").read_text(encoding="utf-8"))
    (tmp_path / "test_gpu.py").write_text("def test_skipped_without_a_gpu():\n    pass\n")
    env = {**os.environ, "D2L_EXPECT_GPUS": "1", "CUDA_VISIBLE_DEVICES": ""}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "."],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, run.stdout + run.stderr
    assert "D2L_EXPECT_GPUS=1 says this machine has a CUDA GPU" in run.stderr
    assert "1 passed" not in run.stdout


def test_expected_gpu_missing_is_an_error(monkeypatch):
    monkeypatch.setenv("D2L_EXPECT_GPU", "1")
    monkeypatch.setattr(hardware, "accelerators", lambda: [])
    with pytest.raises(RuntimeError, match=r"D2L_EXPECT_GPU=1 says this machine has a CUDA GPU"):
        dx.hardware_report(verbose=False)


def test_expected_gpu_error_follows_the_printed_report(monkeypatch, capsys):
    monkeypatch.setenv("D2L_EXPECT_GPU", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(hardware, "accelerators", lambda: [torch.device("mps")])  # not CUDA
    monkeypatch.setattr(hardware, "free_memory", lambda dev: 1024 ** 3)
    with pytest.raises(RuntimeError, match=r"CUDA_VISIBLE_DEVICES=''.*nvidia-smi"):
        dx.hardware_report()
    assert "mps" in capsys.readouterr().out


def test_expected_gpu_present_passes(monkeypatch):
    monkeypatch.setenv("D2L_EXPECT_GPU", "1")
    monkeypatch.setattr(hardware, "accelerators", lambda: [torch.device("cuda", 0)])
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev: _FakeGPU)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(hardware, "free_memory", lambda dev: 1024 ** 3)
    assert dx.hardware_report(verbose=False)["accelerators"][0]["name"] == "Fake GPU"


@pytest.mark.parametrize("value", ["", "0", " "])
def test_no_gpu_is_fine_unless_expected(monkeypatch, value):
    monkeypatch.setenv("D2L_EXPECT_GPU", value)
    monkeypatch.setattr(hardware, "accelerators", lambda: [])
    assert dx.hardware_report(verbose=False)["accelerators"] == []


def test_expected_gpu_rejects_unclear_values(monkeypatch):
    monkeypatch.setenv("D2L_EXPECT_GPU", "maybe")
    with pytest.raises(ValueError, match=r"D2L_EXPECT_GPU='maybe': set it to the number"):
        dx.hardware_report(verbose=False)


FAKE = {"cpu": "Fake CPU", "cores": 4, "logical_cores": 8, "torch_threads": 4,
        "ram_total": 16 * 2 ** 30, "ram_available": 12 * 2 ** 30, "torch": "2.6.0+cu124",
        "cuda_build": "12.4", "profile": "class",
        "accelerators": [{"device": "cuda:0", "name": "Fake GPU", "memory": 24 * 2 ** 30,
                          "free": 20 * 2 ** 30, "capability": "8.9"},
                         {"device": "mps", "name": "Apple GPU (MPS)", "memory": 16 * 2 ** 30,
                          "free": 8 * 2 ** 30, "capability": None}]}


def test_hardware_rows_describe_every_part():
    assert dx.hardware.hardware_rows(FAKE) == [
        ("CPU", "Fake CPU, 4 cores (8 logical, torch uses 4 threads)"),
        ("RAM", "16.0 GiB total, 12.0 GiB available"),
        ("cuda:0", "Fake GPU, 24.0 GiB (20.0 GiB free), compute capability 8.9"),
        ("mps", "Apple GPU (MPS), 16.0 GiB (8.0 GiB free) (shares system RAM)"),
        ("torch", "2.6.0+cu124, CUDA build 12.4"),
        ("profile", "class")]
    cpu_only = dict(FAKE, accelerators=[], cuda_build=None)
    assert ("GPU", "none visible") in dx.hardware.hardware_rows(cpu_only)
    assert ("torch", "2.6.0+cu124, CPU build") in dx.hardware.hardware_rows(cpu_only)


def test_the_printed_report_is_its_rows(capsys, monkeypatch):
    monkeypatch.delenv("D2L_EXPECT_GPU", raising=False)
    report = dx.hardware_report()
    printed = capsys.readouterr().out.splitlines()
    rows = dx.hardware.hardware_rows(report)
    assert len(printed) == len(rows)
    for line, (label, text) in zip(printed, rows):
        assert line.startswith(f"{label:<8}: {text}"), (line, label, text)


@pytest.mark.parametrize("environ,home,name", [
    ({"COLAB_RELEASE_TAG": "release-colab-1"}, "/root", "Colab"),
    ({"KAGGLE_KERNEL_RUN_TYPE": "Interactive"}, "/root", "Kaggle"),
    ({}, "/home/studio-lab-user", "SageMaker Studio Lab"),
    ({"HOME": "/home/ann"}, "/home/ann", "local"),
])
def test_platform_is_recognised(monkeypatch, environ, home, name):
    for key in [k for k in os.environ if k.startswith(("COLAB_", "KAGGLE_"))]:
        monkeypatch.delenv(key)
    for key, value in {**environ, "HOME": home}.items():
        monkeypatch.setenv(key, value)
    assert dx.hardware.platform_name() == name


def test_report_names_the_platform_and_where_d2l_extras_comes_from(capsys):
    report = dx.hardware_report()
    assert report["platform"] == dx.hardware.platform_name()
    assert f"platform: {report['platform']}, d2l_extras from the checkout" in \
        capsys.readouterr().out
    assert ("platform", "Colab, d2l_extras installed from https://x/y.zip") in \
        dx.hardware.hardware_rows(dict(FAKE, platform="Colab", source="installed from https://x/y.zip"))


def test_package_source_tells_a_checkout_from_an_install(tmp_path):
    assert dx.hardware.package_source().startswith("from the checkout ")
    installed = tmp_path / "site-packages" / "d2l_extras"
    installed.mkdir(parents=True)
    # Not a checkout: pip's record of the origin (or the folder, where there is none).
    assert dx.hardware.package_source(str(installed)).startswith(("installed from ", "installed in "))


# --- GPUs the installed torch has no kernels for

# torch.cuda.get_arch_list() of the pinned wheel, torch 2.14.1+cu130.
PINNED = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
GiB = 1024 ** 3
P100, V100 = ("Tesla P100-PCIE-16GB", (6, 0)), ("Tesla V100-SXM2-16GB", (7, 0))
A100, H100 = ("NVIDIA A100-SXM4-40GB", (8, 0)), ("NVIDIA H100 80GB HBM3", (9, 0))


@pytest.mark.parametrize("capability, arch_list, runs", [
    ((6, 0), PINNED, False), ((7, 0), PINNED, False),  # P100 (Kaggle), V100
    ((7, 5), PINNED, True), ((8, 0), PINNED, True), ((9, 0), PINNED, True),
    ((8, 9), PINNED, True),    # an L4 runs the sm_86 binaries: a later minor, same major
    ((10, 0), PINNED, True), ((10, 3), PINNED, True), ((12, 1), PINNED, True),  # sm_100 is 10.0
    ((11, 0), PINNED, False),  # a newer major runs no binary of an older one
    ((8, 5), ["sm_86"], False),  # nor an earlier minor
    ((6, 0), ["sm_75", "compute_75"], False), ((7, 0), ["compute_75"], False),
    ((9, 0), ["sm_75", "compute_75"], True), ((12, 0), ["compute_80"], True),  # PTX: newer GPUs
    ((9, 0), ["sm_90a"], True), ((10, 0), ["sm_90a", "compute_90a"], False),  # exactly 9.0
    ((10, 3), ["sm_100f"], True), ((12, 0), ["sm_100f"], False),
    ((8, 0), [], False), ((9, 0), ["gfx90a", "gfx942"], False),  # no CUDA target at all
    ([8, 6], ("sm_86",), True),
])
def test_cuda_arch_supported(capability, arch_list, runs):
    assert dx.hardware.cuda_arch_supported(capability, arch_list) is runs


@pytest.fixture
def cuda(monkeypatch):
    """Make torch see the given (name, capability) GPUs, built for `archs` (default PINNED)."""
    def pretend(*gpus, archs=PINNED):
        props = [SimpleNamespace(name=name, major=cap[0], minor=cap[1], total_memory=16 * GiB)
                 for name, cap in gpus]
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: len(props))
        monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: list(archs))
        monkeypatch.setattr(torch.cuda, "get_device_properties",
                            lambda dev: props[torch.device("cuda", dev).index
                                              if isinstance(dev, int) else dev.index])
        monkeypatch.setattr(report, "_NOTICED", set())  # a fresh process: no notice given yet
    return pretend


def test_a_gpu_without_kernels_is_left_out_and_said_once(cuda, capsys):
    cuda(P100)
    assert dx.hardware.accelerators() == []
    out = capsys.readouterr().out
    assert out == ("notice: Tesla P100-PCIE-16GB (compute capability 6.0) has no kernels in this "
                   "torch build (sm_75 sm_80 sm_86 sm_90 sm_100 sm_120): running on the CPU "
                   "instead; a torch wheel built for it (e.g. an older CUDA build) would use it.\n")
    # Every later look-up falls back to the CPU, silently.
    assert dx.hardware.accelerators() == [] and dx.default_device() == torch.device("cpu")
    assert dx.devices(1) == [torch.device("cpu")]
    assert capsys.readouterr().out == ""


def test_gpus_with_kernels_are_kept(cuda, capsys):
    cuda(A100, H100)
    assert dx.hardware.accelerators() == [torch.device("cuda", 0), torch.device("cuda", 1)]
    assert dx.default_device() == torch.device("cuda", 0)
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("gpu, archs, kept", [
    (P100, ["compute_75"], False), (V100, ["sm_75", "compute_75"], False),
    (H100, ["compute_75"], True),    # PTX only: the driver compiles it for the newer GPU
    (H100, ["sm_90a"], True), (A100, ["sm_90a"], False),
    (P100, [], True),                # an empty list says nothing: keep the GPU
    (P100, ["gfx90a"], True),        # nor does a ROCm build's list
])
def test_what_is_kept_follows_the_arch_list(cuda, capsys, gpu, archs, kept):
    cuda(gpu, archs=archs)
    assert dx.hardware.accelerators() == ([torch.device("cuda", 0)] if kept else [])
    assert ("has no kernels" in capsys.readouterr().out) is not kept


def test_only_the_gpus_without_kernels_are_left_out(cuda, capsys):
    cuda(P100, P100, A100)
    assert dx.hardware.accelerators() == [torch.device("cuda", 2)]
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert out.startswith("notice: 2 x Tesla P100-PCIE-16GB (compute capability 6.0) have no "
                          "kernels") and "running on cuda:2 instead" in out
    assert "built for them (e.g. an older CUDA build) would use them." in out


def test_the_report_shows_a_gpu_without_kernels(cuda, capsys, monkeypatch):
    cuda(P100)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda dev=None: pytest.fail("a context"))
    report = dx.hardware_report()
    assert report["accelerators"] == []
    assert report["unsupported"] == [{"device": "cuda:0", "name": "Tesla P100-PCIE-16GB",
                                      "memory": 16 * GiB, "capability": "6.0"}]
    rows = dx.hardware.hardware_rows(report)
    assert ("cuda:0", "Tesla P100-PCIE-16GB, 16.0 GiB, compute capability 6.0: not supported by "
                      "this torch build") in rows
    assert ("GPU", "none usable") in rows and ("GPU", "none visible") not in rows
    printed = capsys.readouterr().out.splitlines()
    # The notice, then one line per row: the GPU's once.
    assert printed[0].startswith("notice: Tesla P100") and len(printed) == len(rows) + 1
    assert sum("Tesla P100" in line for line in printed[1:]) == 1
    assert "GPU     : none usable; GPU-only demonstrations are simulated or explained " \
           "instead" in printed


def test_a_runner_whose_gpu_has_no_kernels_is_refused(cuda, monkeypatch):
    monkeypatch.setenv("D2L_EXPECT_GPU", "1")
    cuda(V100)
    with pytest.raises(RuntimeError, match=r"has a CUDA GPU, but torch sees none it can use "
                                           r"and 1 without kernels in this build \(torch "):
        dx.hardware_report(verbose=False)


# --- free memory: asked of the current GPU only (mem_get_info makes a context)

def test_the_report_makes_no_context_on_the_other_gpus(cuda, monkeypatch, capsys):
    cuda(H100, H100)
    asked = []
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "mem_get_info",
                        lambda dev=None: asked.append(dev) or (70 * GiB, 80 * GiB))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda dev=None: 0)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda dev=None: 0)
    report = dx.hardware_report()
    assert asked == [torch.device("cuda", 1)]
    assert [acc["free"] for acc in report["accelerators"]] == [None, 70 * GiB]
    out = capsys.readouterr().out
    assert "cuda:0  : NVIDIA H100 80GB HBM3, 16.0 GiB (free not queried: no context made here), " \
           "compute capability 9.0" in out
    assert "cuda:1  : NVIDIA H100 80GB HBM3, 16.0 GiB (70.0 GiB free), compute capability 9.0" \
        in out


# --- square_side: memory-limited sides are multiples of 64

def test_square_side_rounds_a_memory_limited_side_down_to_a_multiple_of_64():
    # notebook 05's 1024 matrices of float32 on a T4 (14.6 GB free) gave 943: no Tensor-Core
    # float16 kernel takes a dimension that is not a multiple of 8.
    budget = int(14.6e9)
    assert math.isqrt(int(budget * 0.25 // (1024 * 4))) == 943  # the side before rounding
    assert dx.hardware.square_side(2048, count=1024, budget=budget) == 896


@pytest.mark.parametrize("count", [1, 3, 22, 51, 1024])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("budget", [int(3.9e9), int(14.6e9), 79 * GiB])
def test_square_side_is_a_multiple_of_64_when_memory_decides(count, dtype, budget):
    item = torch.empty((), dtype=dtype).element_size()
    fitting = math.isqrt(int(budget * 0.25 // (count * item)))
    side = dx.hardware.square_side(10 ** 6, count=count, dtype=dtype, budget=budget)
    assert side % 64 == 0 and fitting - 64 < side <= fitting


def test_square_side_keeps_what_fits_and_never_goes_below_minimum():
    assert dx.hardware.square_side(1000, budget=GiB) == 1000  # wanted decides: unchanged, not 960
    assert dx.hardware.square_side(100, budget=100 ** 2 * 4, fraction=1) == 100  # fits exactly
    # The side memory allows is 100: 64 is below these minimums, so a multiple of 8, or 100.
    assert dx.hardware.square_side(1000, budget=100 ** 2 * 4, fraction=1, minimum=64) == 64
    assert dx.hardware.square_side(1000, budget=100 ** 2 * 4, fraction=1, minimum=72) == 96
    assert dx.hardware.square_side(1000, budget=100 ** 2 * 4, fraction=1, minimum=99) == 100
    with pytest.raises(ValueError, match="smallest size"):
        dx.hardware.square_side(1000, budget=100 ** 2 * 4, fraction=1, minimum=101)


def test_cuda_gpus_are_the_cuda_accelerators(monkeypatch):
    devices = [torch.device("cuda", 0), torch.device("cuda", 2)]
    monkeypatch.setattr(hardware, "accelerators", lambda: devices)
    assert dx.cuda_gpus() == devices
    monkeypatch.setattr(hardware, "accelerators", lambda: [torch.device("mps")])
    assert dx.cuda_gpus() == []
