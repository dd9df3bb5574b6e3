import logging
from types import SimpleNamespace

import pytest
import torch

import d2l_extras as dx
from d2l_extras import compiler


def test_compile_support_reports_a_reason():
    works, reason = dx.compile_support()
    assert isinstance(works, bool) and reason


def test_maybe_compile_is_the_same_function():
    fn = dx.maybe_compile(lambda x: torch.sin(x) + 1)
    x = torch.randn(10)
    torch.testing.assert_close(fn(x), torch.sin(x) + 1)


def test_maybe_compile_falls_back_with_a_notice(monkeypatch, capsys):
    from d2l_extras import report
    monkeypatch.setattr(report, "_NOTICED", set())
    monkeypatch.setattr(compiler, "compile_support", lambda: (False, "no C++ compiler"))
    def f(x):
        return x + 1
    assert dx.maybe_compile(f) is f
    out = capsys.readouterr().out
    assert out.startswith("notice: ") and "no C++ compiler" in out and out.count("\n") == 1
    assert dx.maybe_compile(f) is f  # a second model falls back silently: said once
    assert capsys.readouterr().out == ""


# --- the false CUDA alarm is dropped, nothing else

def _emitted(monkeypatch, cuda_available, message, *args, level=logging.WARNING):
    """Log one record through torch.utils.cpp_extension's logger; return what a handler saw."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda_available)
    log = logging.getLogger("torch.utils.cpp_extension")
    seen = []
    handler = logging.Handler()
    handler.emit = seen.append
    log.addHandler(handler)
    try:
        log.log(level, message, *args)
    finally:
        log.removeHandler(handler)
    return [r.getMessage() for r in seen]


def test_the_cpu_only_cuda_home_notice_is_dropped(monkeypatch):
    assert _emitted(monkeypatch, False, "No CUDA runtime is found, using CUDA_HOME='%s'",
                    "/usr/local") == []


def test_other_messages_and_real_gpu_machines_keep_their_notices(monkeypatch):
    assert _emitted(monkeypatch, False, "Error building extension 'x'",
                    level=logging.ERROR) == ["Error building extension 'x'"]
    # With a GPU, "no CUDA runtime" would be a real problem: it must show.
    assert _emitted(monkeypatch, True, "No CUDA runtime is found, using CUDA_HOME='%s'",
                    "/usr/local") == ["No CUDA runtime is found, using CUDA_HOME='/usr/local'"]


def test_a_module_that_prints_the_notice_is_imported_quietly(tmp_path, monkeypatch, capsys):
    # torch < 2.7 prints the notice when torch.utils.cpp_extension is imported.
    (tmp_path / "noisy_ext.py").write_text(
        "import sys\nprint(\"No CUDA runtime is found, using CUDA_HOME='/usr'\", file=sys.stderr)\n"
        "print('a real warning', file=sys.stderr)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    compiler._quiet_import("noisy_ext")
    assert capsys.readouterr().err == "a real warning\n"


def test_the_filter_is_installed_once():
    compiler._install_filter()
    compiler._install_filter()
    filters = logging.getLogger("torch.utils.cpp_extension").filters
    assert sum(isinstance(f, compiler._NoFalseCudaAlarm) for f in filters) == 1


# --- reading measurements

@pytest.mark.parametrize("baseline, other, verdict", [
    (2.0, 1.0, "faster"), (1.0, 2.0, "slower"), (1.0, 1.02, "as fast"), (1.02, 1.0, "as fast"),
    (23.7e-6, 28.7e-6, "slower"), (1.0, 0.9, "faster")])
def test_speed_verdict(baseline, other, verdict):
    assert dx.speed_verdict(baseline, other) == verdict


def test_speed_verdict_tolerance():
    assert dx.speed_verdict(1.0, 0.97, tolerance=0.0) == "faster"
    assert dx.speed_verdict(1.0, 0.8, tolerance=0.5) == "as fast"


@pytest.mark.parametrize("args", [(0.0, 1.0), (1.0, -1.0), (float("nan"), 1.0),
                                  (1.0, float("inf")), (True, 1.0), ("1", 1.0)])
def test_speed_verdict_refuses_what_is_not_a_time(args):
    with pytest.raises(ValueError, match="measured time in seconds"):
        dx.speed_verdict(*args)


def test_speed_verdict_refuses_a_bad_tolerance():
    with pytest.raises(ValueError, match="tolerance"):
        dx.speed_verdict(1.0, 1.0, tolerance=1.5)


MB = 10 ** 6


@pytest.mark.parametrize("operand, cache, regime", [
    (268 * MB, 50 * MB, "memory"),     # H100, class size: far beyond L2
    (16 * MB, 50 * MB, "cache"),       # H100, ci size: input, temporary and result fit in L2
    (20 * MB, 50 * MB, "mixed"),       # one fits, three do not
    (16 * MB, 32 * 2 ** 20, "mixed"),  # 16 MB on a laptop CPU with a 32 MiB L3
    (16 * MB, 480 * 2 ** 20, "cache"),
    (16 * MB, None, "unknown")])
def test_memory_regime(operand, cache, regime):
    assert dx.memory_regime(operand, cache) == regime


def test_memory_regime_live_operands():
    assert dx.memory_regime(20 * MB, 50 * MB, live=2) == "cache"


@pytest.mark.parametrize("kwargs", [dict(operand_bytes=0, cache_bytes=1),
                                    dict(operand_bytes=1.5, cache_bytes=1),
                                    dict(operand_bytes=1, cache_bytes=0),
                                    dict(operand_bytes=1, cache_bytes="50MB"),
                                    dict(operand_bytes=1, cache_bytes=1, live=0)])
def test_memory_regime_refuses_bad_sizes(kwargs):
    with pytest.raises(ValueError, match="whole number"):
        dx.memory_regime(**kwargs)


def test_last_level_cache_on_this_cpu_is_the_largest_reported(monkeypatch):
    monkeypatch.setattr("d2l_extras.hwbench.cache_sizes",
                        lambda: {"L1d": 48 * 1024, "L2": 2 ** 21, "L3": 32 * 2 ** 20})
    assert dx.last_level_cache("cpu") == ("L3 of the CPU", 32 * 2 ** 20)
    monkeypatch.setattr("d2l_extras.hwbench.cache_sizes", lambda: None)
    assert dx.last_level_cache("cpu") is None


def test_last_level_cache_of_a_simulated_gpu(monkeypatch):
    h100 = SimpleNamespace(name="NVIDIA H100 80GB HBM3", L2_cache_size=50 * 2 ** 20)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: h100)
    assert dx.last_level_cache("cuda:0") == ("L2 of the NVIDIA H100 80GB HBM3", 50 * 2 ** 20)
    old_torch = SimpleNamespace(name="GPU without the field")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: old_torch)
    assert dx.last_level_cache("cuda") is None


def test_last_level_cache_unknown_devices():
    assert dx.last_level_cache("meta") is None
    with pytest.raises(RuntimeError):
        dx.last_level_cache("not-a-device")
