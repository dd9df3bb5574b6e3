"""Shared helpers for the Computational Performance notebooks (d2l, chapter 12)."""
# Each block re-exports one module's public names; keep one module per concept.
from .profiles import PROFILES, by_profile, profile
from .hardware import (accelerators, cpu_name, default_device, devices, fit_to_memory,
                       free_memory, hardware_report)
from .timing import Benchmark, Measurement, format_seconds, synchronize
from .plotting import bar_chart
from .compiler import compile_support, maybe_compile
from .launch import (LaunchResult, WorkerError, free_port, init_worker, launch, save_result,
                     torchrun_command)
