"""Alarm lines: text in a notebook's output that looks like a failure to a student but is not one.

Each sends a student hunting for a problem that does not exist. tests/nbval_plugin.py fails the
nbval cell that prints one; tools/report.py lists them for every executed notebook.
"""
from __future__ import annotations

import re
from typing import Iterable, Mapping

# One entry per known alarm line: (name, pattern, why it appears). Patterns match one line.
ALARM_PATTERNS: list[tuple[str, re.Pattern, str]] = [
    # "ERROR:... DeviceProperties.cpp:56] gpuGetDeviceCount failed with code 35" (02, torch 2.14.1)
    ("profiler-gpu-count", re.compile(r"^ERROR:.*gpuGetDeviceCount failed"),
     "torch.profiler (CUDA build) asked CUPTI for GPUs on a machine without one: do not "
     "request CUDA profiling, or Kineto's set-up, when no CUDA device is visible"),
    # Kineto's and logging's error format; not glog's "E1122 ..." (07 and 08 show torchrun's).
    ("error-line", re.compile(r"^ERROR:"),
     "a library logged an error line; either something is wrong, or the call that logs it "
     "should not be made on this hardware"),
    # "USDT:... SyncActivityProfilerHandler.cpp:39] profiler_start"
    ("profiler-usdt", re.compile(r"^USDT:"),
     "Kineto's tracepoint notice at a profiler session's start and stop (CUDA build of torch)"),
    # dx.check under a stored worked solution, which must pass: "Exercise 2: not yet: ..."
    ("exercise-check", re.compile(r"^Exercise [\w.]+: not yet\b"),
     "a worked solution fails its own check: fix the solution, or the check if the exercise "
     "has more than one right answer"),
    # the first torch.compile on a CPU: "No CUDA runtime is found, using CUDA_HOME='/usr/...'"
    ("cuda-home", re.compile(r"No CUDA runtime is found, using CUDA_HOME"),
     "torch.utils.cpp_extension looked for a CUDA toolkit on a machine without a GPU; import it "
     "quietly (or skip it) when no CUDA device is visible"),
]


def output_texts(outputs: Iterable[Mapping], streams=("stdout", "stderr"), results: bool = True,
                 errors: bool = True) -> list[str]:
    """Return the text a student sees in a cell's outputs: the `streams`, the text/plain of its
    `results` (not of a plot: a Figure's repr) and, with `errors`, the tracebacks."""
    texts = []
    for out in outputs:
        kind, data = out.get("output_type"), out.get("data", {})
        if kind == "stream" and out.get("name") in streams:
            text = out.get("text", "")
        elif kind in ("display_data", "execute_result") and results and "image/png" not in data:
            text = data.get("text/plain", "")
        elif kind == "error" and errors:
            text = "\n".join(out.get("traceback", []))
        else:
            continue
        texts.append("".join(text) if isinstance(text, list) else str(text))
    return texts


def alarm_lines(outputs: Iterable[Mapping]) -> list[tuple[str, str]]:
    """Return (pattern name, line) for every alarm line in a cell's outputs, in order."""
    found = []
    for text in output_texts(outputs):
        for line in text.splitlines():
            for name, pattern, _ in ALARM_PATTERNS:
                if pattern.search(line.strip()):
                    found.append((name, line.strip()))
                    break  # one name per line: the first (most specific) pattern wins
    return found
