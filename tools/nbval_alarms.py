"""pytest plugin (loaded by the root conftest.py): nbval fails a notebook cell that prints an alarm line.

An alarm line (tools/alarms.py: "ERROR: ... gpuGetDeviceCount failed", "USDT: ...",
"No CUDA runtime is found, using CUDA_HOME=...") looks like a failure to a student although the
notebook worked. The check reads the outputs nbval has already collected: no extra run.
"""
from __future__ import annotations

import functools
import os

import pytest

from tools.alarms import alarm_lines, explain

# ipykernel forwards what C++ code writes to file descriptors 1 and 2 (the profiler's "USDT:" and
# "ERROR:" lines) into the cell's output, as Jupyter shows it to a student, except when it sees
# PYTEST_CURRENT_TEST in its environment (ipykernel/iostream.py). nbval starts its kernel from
# inside a test, so the kernel inherits that variable; we start it without.
HIDDEN_FROM_KERNEL = ("PYTEST_CURRENT_TEST",)


def kernel_env(environ: dict | None = None) -> dict:
    """Return the environment for a notebook kernel: this one, less what hides fd output."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items() if k not in HIDDEN_FROM_KERNEL}


def pytest_configure(config):
    try:
        import nbval.kernel
    except ImportError:  # nbval absent: no notebooks run, nothing to patch
        return
    start = nbval.kernel.start_new_kernel
    if getattr(start, "_d2l_env_patched", False):
        return

    @functools.wraps(start)
    def start_new_kernel(*args, **kwargs):
        kwargs.setdefault("env", kernel_env())
        return start(*args, **kwargs)

    start_new_kernel._d2l_env_patched = True
    nbval.kernel.start_new_kernel = start_new_kernel


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield  # the cell ran without error (an error would have been raised here)
    # nbval's IPyNbCell keeps the cell's outputs (stdout, stderr, displays) in test_outputs.
    outputs = getattr(item, "test_outputs", None)
    if outputs and hasattr(item, "raise_cell_error"):
        found = alarm_lines(outputs)
        if found:
            item.raise_cell_error(
                f"The cell printed {len(found)} alarm line(s): text that looks like a failure "
                "to a student. Stop the cause (patterns and reasons: tools/alarms.py):",
                "\n" + explain(found))
    return result
