import functools
import json
import logging
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import d2l_extras as dx
from d2l_extras import compiler, timing


def test_compile_support_reports_a_reason():
    works, reason = dx.compiler.compile_support()
    assert isinstance(works, bool) and reason


def test_maybe_compile_is_the_same_function():
    fn = dx.maybe_compile(lambda x: torch.sin(x) + 1)
    x = torch.randn(10)
    torch.testing.assert_close(fn(x), torch.sin(x) + 1)


def test_maybe_compile_falls_back_with_a_notice(monkeypatch, capsys):
    from d2l_extras import report
    monkeypatch.setattr(report, "_NOTICED", set())
    monkeypatch.setattr(compiler, "compile_support",
                        lambda device=None, dtype=None: (False, "no C++ compiler"))
    def f(x):
        return x + 1
    assert dx.maybe_compile(f) is f
    out = capsys.readouterr().out
    assert out.startswith("notice: ") and "no C++ compiler" in out and out.count("\n") == 1
    assert dx.maybe_compile(f) is f  # a second model falls back silently: said once
    assert capsys.readouterr().out == ""


def test_the_cpu_is_probed_once_whatever_it_is_called():
    # dx.compiler.compile_support() and the notebooks' compile_support(device) share one cached probe.
    assert {compiler._probe_device(d) for d in (None, "cpu", "cpu:0", torch.device("cpu"))} \
        == {torch.device("cpu")}
    assert dx.compiler.compile_support() == dx.compiler.compile_support("cpu", torch.float32)


# --- GPUs: the known rules first, then a tiny compile on the GPU itself

@pytest.mark.parametrize("capability, platform, dtype, works, words", [
    ((6, 0), "linux", None, False, "needs compute capability 7.0+, this GPU has 6.0"),  # P100
    ((6, 1), "linux", None, False, "has 6.1"),                      # GTX 10xx laptop
    ((6, 0), "windows", None, False, "7.0+"),                       # the GPU, before Triton
    ((7, 5), "linux", None, True, "Triton builds"),                 # T4
    ((7, 5), "linux", torch.bfloat16, False, "bfloat16 needs compute capability 8.0+"),
    ((7, 5), "linux", torch.float16, True, "Triton builds"),
    ((8, 6), "windows", None, False, "pip install triton-windows"),  # RTX 30xx laptop
    ((9, 0), "linux", torch.bfloat16, True, "Triton builds")])      # H100
def test_gpu_compile_rule(capability, platform, dtype, works, words):
    got, reason = dx.compiler.gpu_compile_rule(capability, platform, dtype)
    assert got is works and words in reason


def test_gpu_compile_rule_with_triton_installed_or_missing():
    assert dx.compiler.gpu_compile_rule((8, 6), "windows", triton=True)[0]
    assert dx.compiler.gpu_compile_rule((9, 0), "linux", triton=False) == \
        (False, "Triton is not installed (pip install triton)")


# Short names for conftest's GPUS.
NAMES = {"P100": "Tesla P100-PCIE-16GB", "T4": "Tesla T4",
         "laptop": "NVIDIA GeForce RTX 3060 Laptop GPU", "H100": "NVIDIA H100 80GB HBM3"}


@pytest.fixture
def fake_gpu(fake_gpu, monkeypatch):
    """Pretend GPU 0 is one of NAMES on Linux with Triton; return the tiny compiles run."""
    probes = []
    monkeypatch.setattr(compiler, "_PLATFORM", "linux")
    monkeypatch.setattr(compiler, "_TRITON", True)
    # a cache of its own: the real CPU result stays cached for the other tests
    monkeypatch.setattr(compiler, "_support", functools.cache(compiler._support.__wrapped__))
    monkeypatch.setattr(compiler, "_compile_probe",
                        lambda device, dtype: probes.append((str(device), dtype)) or
                        (True, f"torch.compile works on {device}"))

    def use(gpu):
        fake_gpu(NAMES[gpu])
        return probes
    return use


def test_a_gpu_too_old_for_triton_is_not_compiled_for(fake_gpu):
    probes = fake_gpu("P100")
    assert dx.compiler.compile_support("cuda") == (
        False, "Tesla P100-PCIE-16GB: Triton needs compute capability 7.0+, this GPU has 6.0")
    assert probes == []  # known without compiling: the first compiled call would raise


def test_bfloat16_on_a_t4_falls_back_and_float32_is_probed_on_the_gpu(fake_gpu):
    probes = fake_gpu("T4")
    works, reason = dx.compiler.compile_support("cuda", torch.bfloat16)
    assert not works and reason.startswith("Tesla T4: Triton's bfloat16 needs")
    assert dx.compiler.compile_support("cuda") == (True, "torch.compile works on cuda:0")
    assert probes == [("cuda:0", torch.float32)]


def test_an_h100_compiles_a_tiny_function_on_the_gpu_once_per_dtype(fake_gpu):
    probes = fake_gpu("H100")
    for _ in range(2):
        assert dx.compiler.compile_support("cuda:0", torch.bfloat16)[0]
        assert dx.compiler.compile_support(torch.device("cuda"))[0]
    assert probes == [("cuda:0", torch.bfloat16), ("cuda:0", torch.float32)]


def test_windows_without_triton(fake_gpu, monkeypatch):
    probes = fake_gpu("laptop")
    monkeypatch.setattr(compiler, "_PLATFORM", "windows")
    monkeypatch.setattr(compiler, "_TRITON", False)
    works, reason = dx.compiler.compile_support("cuda")
    assert not works and "pip install triton-windows" in reason and probes == []


def test_maybe_compile_on_an_old_gpu_falls_back_with_the_reason(fake_gpu, monkeypatch, capsys):
    from d2l_extras import report
    monkeypatch.setattr(report, "_NOTICED", set())
    fake_gpu("P100")
    def f(x):
        return x + 1
    assert dx.maybe_compile(f, device="cuda") is f
    assert dx.maybe_compile(f, device="cuda", mode="reduce-overhead") is f
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "cuda:0" in out and "compute capability 7.0+" in out
    assert "MSVC" not in out  # the C++ compiler advice is for the CPU


def test_maybe_compile_on_a_gpu_that_works_compiles(fake_gpu):
    fake_gpu("H100")
    def f(x):
        return x + 1
    assert dx.maybe_compile(f, device="cuda", dtype=torch.bfloat16) is not f


def _calls(text, name):
    """The argument text of every call `name(...)` in text (parentheses balanced)."""
    found = []
    for start in (m.end() for m in re.finditer(rf"\b{name}\(", text)):
        depth, end = 1, start
        while depth:
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            end += 1
        found.append(text[start:end - 1])
    return found


def test_notebooks_probe_the_device_they_compile_for():
    # Probing the CPU says nothing about a GPU: a P100 would raise at the first compiled call.
    for path in sorted((Path(__file__).parents[1] / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        for call in _calls(code, "maybe_compile") + _calls(code, "compile_support"):
            assert "device" in call, f"{path.name}: pass the device: ...({call})"


def test_notebook_01_times_the_cuda_graph_capture_apart():
    # mode="reduce-overhead" records its CUDA graph at the second call: not a warm call. The
    # first call (compiling) checks the answer; dx.measure_interleaved then times its own first
    # call (the second of the model, the capture) apart as `cold`, which the records report.
    path = Path(__file__).parents[1] / "notebooks" / "01-compilers-and-interpreters.ipynb"
    code = ["".join(c["source"]) for c in
            json.loads(path.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]
    timing = next(c for c in code if 'mode="reduce-overhead"' in c)
    first = timing.index("assert_close(graphed(x64)")
    assert first < timing.index("dx.measure_interleaved(") and "lambda: graphed(x64)" in timing
    records = Path(__file__).parents[1] / "notebooks" / "records" / f"{path.stem}.py"
    assert 'runs["graph"].cold' in records.read_text(encoding="utf-8")


def test_calls_are_found_with_their_arguments():
    assert _calls("dx.maybe_compile(\n net, mode=f(1)) + compile_support()",
                  "maybe_compile") == ["\n net, mode=f(1)"]


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
    timing._quiet_import("noisy_ext")
    assert capsys.readouterr().err == "a real warning\n"


def test_the_filter_is_installed_once():
    filters = logging.getLogger("torch.utils.cpp_extension").filters
    assert filters.count(timing._no_false_cuda_alarm) == 1


# --- reading measurements


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
