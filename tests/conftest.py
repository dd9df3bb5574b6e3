"""Shared test set-up: a headless matplotlib backend, and a profile the tests control.

Two checks: no test leaves torchrun's variables (RANK, MASTER_PORT...) changed, since a later
worker started as a subprocess would inherit a rank and a used port; and the suite leaves no
process behind: at the end of the session every process that the tests started and that still
runs is listed, killed, and the run fails.
"""
import contextlib
import ctypes
import os
import sys
import time

import matplotlib
import psutil
import pytest

matplotlib.use("Agg")

# What torchrun tells a worker; set in the test process, they make every later worker a rank.
TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT")


@pytest.fixture(autouse=True)
def torchrun_env_unchanged(request):
    """Fail a test that leaves torchrun's variables other than it found them; restore them."""
    before = {name: os.environ.get(name) for name in TORCHRUN_ENV}
    yield
    after = {name: os.environ.get(name) for name in TORCHRUN_ENV}
    changed = {name: after[name] for name in TORCHRUN_ENV if after[name] != before[name]}
    for name in changed:
        if before[name] is None:
            del os.environ[name]
        else:
            os.environ[name] = before[name]
    if changed:
        pytest.fail(f"{request.node.name} left torchrun's variables set: {changed}",
                    pytrace=False)


@pytest.fixture
def one_thread():
    """Run a test's torch work on one thread, restoring the count afterwards.

    For tiny tensors on a busy 2-core runner, two threads only wait for each other; and a
    comparison with NumPy on one core is then a comparison of code, not of thread counts.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)

# GPUs as torch.cuda describes them, name -> compute capability: tests fake them on any machine.
GPUS = {"Tesla T4": (7, 5), "Tesla P100-PCIE-16GB": (6, 0),
        "NVIDIA GeForce RTX 3060 Laptop GPU": (8, 6),
        "NVIDIA GeForce RTX 4090 Laptop GPU": (8, 9), "NVIDIA H100 80GB HBM3": (9, 0),
        "NVIDIA H100 NVL": (9, 0)}


@pytest.fixture
def fake_gpu(monkeypatch):
    """use(name): torch.cuda then describes that GPU of GPUS as cuda:0, which it returns."""
    import types

    import torch

    def use(name):
        capability = GPUS[name]
        props = types.SimpleNamespace(name=name, major=capability[0], minor=capability[1])
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.version, "hip", None)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
        # as torch's own: a T4 can hold bfloat16 tensors, so "supported, including emulation"
        monkeypatch.setattr(torch.cuda, "is_bf16_supported",
                            lambda including_emulation=True: True if including_emulation
                            else capability >= (8, 0))
        return torch.device("cuda", 0)
    return use


_PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def pytest_configure(config):
    # A process whose parent dies (a torchrun worker) is adopted by init and would escape the
    # check below; as a "subreaper" this pytest process adopts such orphans instead (Linux).
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # A GPU runner short of the GPUs it promises (D2L_EXPECT_GPUS=N, D2L_EXPECT_GPU=1) stops
    # here, before any test can skip or simulate its way to a pass: every notebook's first
    # cell makes the same check.
    import d2l_extras as dx

    try:
        dx.hardware_report(verbose=False)
    except (RuntimeError, ValueError) as err:
        raise pytest.UsageError(str(err)) from None


def _running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _reap_zombies() -> None:
    # Orphans adopted by this process end as its zombies: collect their exit status.
    for p in psutil.Process().children():
        with contextlib.suppress(psutil.Error, ChildProcessError, OSError):
            if p.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(p.pid, os.WNOHANG)


def leftover_processes(wait: float = 5.0) -> list[psutil.Process]:
    """Processes started by this session that still run after `wait` s (zombies excluded)."""
    # Helpers that Python and torch start for this process and end with it: end them now.
    if "torch._inductor.async_compile" in sys.modules:  # torch.compile's worker pool
        with contextlib.suppress(Exception):
            sys.modules["torch._inductor.async_compile"].shutdown_compile_workers()
    if "multiprocessing.resource_tracker" in sys.modules:  # torch.multiprocessing starts it
        with contextlib.suppress(Exception):
            sys.modules["multiprocessing.resource_tracker"]._resource_tracker._stop()
    end = time.monotonic() + wait  # a notebook kernel may still be shutting down
    while True:
        alive = [p for p in psutil.Process().children(recursive=True) if _running(p)]
        if not alive or time.monotonic() > end:
            return alive
        time.sleep(0.1)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """Fail the run loudly if a process that the tests started is still running, and kill it."""
    # D2L_LEAK_WAIT_S: how long a process may take to end; a test of this check shortens it.
    alive = leftover_processes(float(os.environ.get("D2L_LEAK_WAIT_S", 5)))
    if alive:
        lines = []
        for p in alive:
            with contextlib.suppress(psutil.Error):
                lines.append(f"  pid {p.pid} (parent {p.ppid()}): {' '.join(p.cmdline())[:200]}")
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(alive, timeout=10)
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = (f"{len(alive)} process(es) started by the tests were still running at the "
                   "end (now killed):\n" + "\n".join(lines))
        if reporter is not None:
            reporter.write_sep("=", "LEAKED PROCESSES", red=True, bold=True)
            reporter.write_line(message)
        else:
            print(message, file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    _reap_zombies()
