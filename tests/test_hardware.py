import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import torch

import d2l_extras as dx
from d2l_extras import hardware


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
    monkeypatch.setattr(hardware, "free_memory", lambda dev: 3 * 1024 ** 3)
    report = dx.hardware_report()
    assert report["accelerators"][0]["name"] == "Fake GPU"
    assert "cuda:0  : Fake GPU, 4.0 GiB (3.0 GiB free), compute capability 8.6" in \
        capsys.readouterr().out


def test_cpu_name():
    assert dx.cpu_name()


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
    assert dev in dx.accelerators() or dev == torch.device("cpu")
    assert dx.free_memory("cpu") > 0


def test_free_memory_counts_the_allocators_cache_as_free(monkeypatch):
    # The driver sees 2 GiB free; PyTorch reserved 6 GiB, of which live tensors use 1 GiB. The
    # other 5 GiB, cached from tensors already freed, are this process's to reuse: 7 GiB free.
    GiB, asked = 1024 ** 3, []

    def answer(value):
        return lambda device=None: asked.append(device) or value

    monkeypatch.setattr(torch.cuda, "mem_get_info", answer((2 * GiB, 16 * GiB)))
    monkeypatch.setattr(torch.cuda, "memory_reserved", answer(6 * GiB))
    monkeypatch.setattr(torch.cuda, "memory_allocated", answer(1 * GiB))
    assert dx.free_memory("cuda:1") == 7 * GiB
    assert set(asked) == {torch.device("cuda", 1)}  # every figure is that GPU's
    assert dx.fit_to_memory(10 ** 12, 1, "cuda:1", fraction=1) == 7 * GiB


def test_free_memory_rejects_unknown_device():
    with pytest.raises(ValueError, match="cpu, cuda and mps"):
        dx.free_memory("meta")


def test_fit_to_memory_shrinks_to_budget():
    assert dx.fit_to_memory(10_000, 100, budget=1_000_000, fraction=0.5) == 5_000
    assert dx.fit_to_memory(10, 100, budget=1_000_000) == 10  # fits already: unchanged


def test_fit_to_memory_uses_free_memory_by_default():
    assert 1 <= dx.fit_to_memory(10 ** 15, 4, device="cpu") < 10 ** 15


def test_fit_to_memory_too_small_budget_says_so():
    with pytest.raises(ValueError, match="does not fit"):
        dx.fit_to_memory(100, 1000, budget=1000, minimum=10)


@pytest.mark.parametrize("kwargs", [dict(n=0), dict(bytes_per_item=0), dict(fraction=0),
                                    dict(fraction=2), dict(minimum=0)])
def test_fit_to_memory_bad_arguments(kwargs):
    args = dict(n=10, bytes_per_item=4, budget=10 ** 6) | kwargs
    with pytest.raises(ValueError, match="fit_to_memory needs"):
        dx.fit_to_memory(**args)


@pytest.mark.parametrize("value", [1, 7, np.int64(3)])
def test_whole_number_accepts_counts(value):
    assert dx.whole_number(value, "k") == int(value)


@pytest.mark.parametrize("bad", [0, -2, 2.0, "3", None, True])
def test_whole_number_names_what_was_wrong(bad):
    with pytest.raises(ValueError, match="k must be a whole number >= 1"):
        dx.whole_number(bad, "k")


class _FakeGPU:
    name, total_memory, major, minor = "Fake GPU", 8 * 1024 ** 3, 9, 0


@pytest.fixture(autouse=True)
def no_gpu_promised(monkeypatch):
    """Each test sets what it expects; a GPU runner's own D2L_EXPECT_GPU(S) stays out."""
    monkeypatch.delenv("D2L_EXPECT_GPU", raising=False)
    monkeypatch.delenv("D2L_EXPECT_GPUS", raising=False)


@pytest.mark.parametrize("environ, expected", [
    ({}, 0), ({"D2L_EXPECT_GPU": "0"}, 0), ({"D2L_EXPECT_GPU": "1"}, 1),
    ({"D2L_EXPECT_GPUS": "4"}, 4), ({"D2L_EXPECT_GPUS": " 2 ", "D2L_EXPECT_GPU": "1"}, 2),
    ({"D2L_EXPECT_GPUS": "0", "D2L_EXPECT_GPU": "1"}, 0), ({"D2L_EXPECT_GPUS": ""}, 0)])
def test_expected_gpus_reads_the_count_or_the_flag(environ, expected):
    assert dx.expected_gpus(environ) == expected


@pytest.mark.parametrize("value", ["two", "-1", "1.5"])
def test_expected_gpus_rejects_what_is_not_a_count(value):
    with pytest.raises(ValueError, match=r"D2L_EXPECT_GPUS='.*': set it to the number"):
        dx.expected_gpus({"D2L_EXPECT_GPUS": value})


def _fake_gpus(monkeypatch, n):
    monkeypatch.setattr(hardware, "accelerators", lambda: [torch.device("cuda", i)
                                                           for i in range(n)])
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev: _FakeGPU)
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


@pytest.mark.parametrize("value", ["1", "true", "YES", " on "])
def test_expected_gpu_missing_is_an_error(monkeypatch, value):
    monkeypatch.setenv("D2L_EXPECT_GPU", value)
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
    monkeypatch.setattr(hardware, "free_memory", lambda dev: 1024 ** 3)
    assert dx.hardware_report(verbose=False)["accelerators"][0]["name"] == "Fake GPU"


@pytest.mark.parametrize("value", ["", "0", "false", "off"])
def test_no_gpu_is_fine_unless_expected(monkeypatch, value):
    monkeypatch.setenv("D2L_EXPECT_GPU", value)
    monkeypatch.setattr(hardware, "accelerators", lambda: [])
    assert dx.hardware_report(verbose=False)["accelerators"] == []


def test_expected_gpu_rejects_unclear_values(monkeypatch):
    monkeypatch.setenv("D2L_EXPECT_GPU", "maybe")
    with pytest.raises(ValueError, match=r"D2L_EXPECT_GPU='maybe': set it to 1"):
        dx.hardware_report(verbose=False)


FAKE = {"cpu": "Fake CPU", "cores": 4, "logical_cores": 8, "torch_threads": 4,
        "ram_total": 16 * 2 ** 30, "ram_available": 12 * 2 ** 30, "torch": "2.6.0+cu124",
        "cuda_build": "12.4", "profile": "class",
        "accelerators": [{"device": "cuda:0", "name": "Fake GPU", "memory": 24 * 2 ** 30,
                          "free": 20 * 2 ** 30, "capability": "8.9"},
                         {"device": "mps", "name": "Apple GPU (MPS)", "memory": 16 * 2 ** 30,
                          "free": 8 * 2 ** 30, "capability": None}]}


def test_hardware_rows_describe_every_part():
    assert dx.hardware_rows(FAKE) == [
        ("CPU", "Fake CPU, 4 cores (8 logical, torch uses 4 threads)"),
        ("RAM", "16.0 GiB total, 12.0 GiB available"),
        ("cuda:0", "Fake GPU, 24.0 GiB (20.0 GiB free), compute capability 8.9"),
        ("mps", "Apple GPU (MPS), 16.0 GiB (8.0 GiB free) (shares system RAM)"),
        ("torch", "2.6.0+cu124, CUDA build 12.4"),
        ("profile", "class")]
    cpu_only = dict(FAKE, accelerators=[], cuda_build=None)
    assert ("GPU", "none visible") in dx.hardware_rows(cpu_only)
    assert ("torch", "2.6.0+cu124, CPU build") in dx.hardware_rows(cpu_only)


def test_the_printed_report_is_its_rows(capsys, monkeypatch):
    monkeypatch.delenv("D2L_EXPECT_GPU", raising=False)
    report = dx.hardware_report()
    printed = capsys.readouterr().out.splitlines()
    rows = dx.hardware_rows(report)
    assert len(printed) == len(rows)
    for line, (label, text) in zip(printed, rows):
        assert line.startswith(f"{label:<8}: {text}"), (line, label, text)


def test_whole_number_takes_a_minimum():
    assert dx.whole_number(0, "gpus", minimum=0) == 0
    with pytest.raises(ValueError, match=r"gpus must be a whole number >= 0, got -1"):
        dx.whole_number(-1, "gpus", minimum=0)
    with pytest.raises(ValueError, match=r"n must be a whole number >= 1, got 0"):
        dx.whole_number(0, "n")


def test_positive_number_refuses_what_cannot_be_measured():
    assert dx.positive_number(3, "size") == 3.0
    for bad in (0, -1.5, float("nan"), float("inf"), True, "3", None):
        with pytest.raises(ValueError, match="size must be a finite number > 0"):
            dx.positive_number(bad, "size")


def test_positive_number_with_zero_accepts_none_of_an_amount_only():
    assert dx.positive_number(0, "work", zero=True) == 0.0
    assert dx.positive_number(2.5, "work", zero=True) == 2.5
    for bad in (-1e-9, float("nan"), float("inf"), False, "0", None):
        with pytest.raises(ValueError, match="work must be a finite number >= 0"):
            dx.positive_number(bad, "work", zero=True)


@pytest.mark.parametrize("environ,home,name", [
    ({"COLAB_RELEASE_TAG": "release-colab-1"}, "/root", "Colab"),
    ({"KAGGLE_KERNEL_RUN_TYPE": "Interactive"}, "/root", "Kaggle"),
    ({}, "/home/studio-lab-user", "SageMaker Studio Lab"),
    ({"HOME": "/home/ann"}, "/home/ann", "local"),
])
def test_platform_is_recognised(environ, home, name):
    assert dx.platform_name(environ, home) == name


def test_report_names_the_platform_and_where_d2l_extras_comes_from(capsys):
    report = dx.hardware_report()
    assert report["platform"] == dx.platform_name()
    assert f"platform: {report['platform']}, d2l_extras from the checkout" in \
        capsys.readouterr().out
    assert ("platform", "Colab, d2l_extras installed from https://x/y.zip") in \
        dx.hardware_rows(dict(FAKE, platform="Colab", source="installed from https://x/y.zip"))


def test_package_source_tells_a_checkout_from_an_install(tmp_path):
    assert dx.package_source().startswith("from the checkout ")
    installed = tmp_path / "site-packages" / "d2l_extras"
    installed.mkdir(parents=True)
    # Not a checkout: pip's record of the origin (or the folder, where there is none).
    assert dx.package_source(str(installed)).startswith(("installed from ", "installed in "))
