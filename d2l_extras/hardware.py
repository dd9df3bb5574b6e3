"""What is here: CPU, RAM, accelerators, free memory, and n devices (real or simulated)."""
from __future__ import annotations

import importlib.metadata
import json
import math
import numbers
import os
import pathlib
import platform
import subprocess
import sys

from typing import Mapping

import psutil
import torch

from .profiles import DESCRIPTIONS, profile

MiB, GiB = 1024 ** 2, 1024 ** 3


def cpu_name() -> str:
    """Return the CPU's model name as the operating system reports it."""
    if sys.platform.startswith("linux"):
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as f:
                for line in f:
                    if line.startswith("model name"):
                        return line.split(":", 1)[1].strip()
        except OSError:
            pass
    elif sys.platform == "darwin":
        try:
            out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"],
                                 capture_output=True, text=True, timeout=5)
            if out.stdout.strip():
                return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine() or "unknown CPU"


def accelerators() -> list[torch.device]:
    """Return every visible accelerator: all CUDA GPUs, else Apple's MPS device, else []."""
    if torch.cuda.is_available():
        return [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return [torch.device("mps")]
    return []


def default_device() -> torch.device:
    """Return the first accelerator, or the CPU when there is none."""
    found = accelerators()
    return found[0] if found else torch.device("cpu")


def free_memory(device: torch.device | str | None = None) -> int:
    """Return the bytes free on a device (for the CPU: the RAM available to processes)."""
    device = torch.device(device) if device is not None else default_device()
    if device.type == "cuda":
        # The driver's figure counts the blocks PyTorch's caching allocator keeps for reuse as
        # used, so it shrinks after every large tensor freed; they are free to this process.
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return torch.cuda.mem_get_info(device)[0] + cached
    if device.type == "mps":
        return max(0, torch.mps.recommended_max_memory() - torch.mps.driver_allocated_memory())
    if device.type == "cpu":
        return psutil.virtual_memory().available
    raise ValueError(f"free_memory() knows cpu, cuda and mps devices, not {device.type!r}")


def fit_to_memory(n: int, bytes_per_item: float, device: torch.device | str | None = None,
                  fraction: float = 0.25, minimum: int = 1, budget: int | None = None) -> int:
    """Shrink n so that n * bytes_per_item uses at most `fraction` of the free (or `budget`) bytes."""
    if n < 1 or bytes_per_item <= 0 or not 0 < fraction <= 1 or minimum < 1:
        raise ValueError("fit_to_memory needs n >= 1, bytes_per_item > 0, "
                         f"0 < fraction <= 1 and minimum >= 1; got n={n}, "
                         f"bytes_per_item={bytes_per_item}, fraction={fraction}, minimum={minimum}")
    available = free_memory(device) if budget is None else budget
    fitting = int(available * fraction // bytes_per_item)
    if fitting < minimum:
        raise ValueError(
            f"Even the smallest useful size ({minimum} x {bytes_per_item:.0f} bytes) does not fit in "
            f"{fraction:.0%} of {available / GiB:.2f} GiB free. Free memory (close other notebooks) "
            "or run on a device with more memory.")
    return min(n, fitting)


def square_side(wanted: int, count: int = 1, device: torch.device | str | None = None,
                dtype: torch.dtype = torch.float32, fraction: float = 0.25, minimum: int = 64,
                budget: int | None = None) -> int:
    """Side n <= wanted so that `count` n x n matrices use at most `fraction` of free memory."""
    if wanted < 1 or count < 1 or minimum < 1 or not 0 < fraction <= 1:
        raise ValueError("square_side needs wanted >= 1, count >= 1, minimum >= 1 and "
                         f"0 < fraction <= 1; got wanted={wanted}, count={count}, "
                         f"minimum={minimum}, fraction={fraction}")
    available = free_memory(device) if budget is None else budget
    item = torch.empty((), dtype=dtype).element_size()
    side = math.isqrt(max(0, int(available * fraction // (count * item))))
    if side < min(minimum, wanted):
        need = count * minimum ** 2 * item
        raise ValueError(
            f"{count} matrices of {minimum} x {minimum} {dtype} (the smallest size that still "
            f"shows something) need {need / 2**20:.1f} MiB, more than {fraction:.0%} of "
            f"{available / GiB:.2f} GiB free. Free memory (close other notebooks), use fewer "
            "matrices, or run on a device with more memory.")
    return min(wanted, side)


def whole_number(value: object, what: str, minimum: int = 1) -> int:
    """Return value as an int if it is a whole number >= minimum; else a ValueError naming `what`."""
    # bool is an int subclass, but devices(True) is surely a mistake.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{what} must be a whole number >= {minimum}, got {value!r}")
    return int(value)


def positive_number(value: object, what: str, zero: bool = False) -> float:
    """Return value as a float if it is finite and > 0 (>= 0 if zero); else a ValueError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isinf(value) \
            or not (value >= 0 if zero else value > 0):
        raise ValueError(f"{what} must be a finite number {'>=' if zero else '>'} 0, "
                         f"got {value!r}")
    return float(value)


def devices(n: int) -> list[torch.device]:
    """Return exactly n devices: real GPUs first, the missing ones simulated as replicas."""
    n = whole_number(n, "devices(n): the number of devices n")
    real = accelerators() or [torch.device("cpu")]
    chosen = [real[i % len(real)] for i in range(n)]
    if n > len(real):
        kinds = ", ".join(sorted({str(d) for d in real}))
        _simulation_notice(f"devices({n}): {len(real)} real, {n - len(real)} simulated as "
                           f"replicas on {kinds} (same arithmetic; no parallel speed-up, since "
                           "they share the hardware).")
    return chosen


_last_simulation_notice: str | None = None


def _simulation_notice(line: str) -> None:
    """Print devices()'s notice in one line, unless it is the one printed last.

    A notebook asks for the same devices in many cells: it is told once, and again only when
    what is simulated changes (another n, or other real devices).
    """
    global _last_simulation_notice
    if line != _last_simulation_notice:
        _last_simulation_notice = line
        print(f"notice: {line}")


def _gib(n_bytes: float) -> str:
    return f"{n_bytes / GiB:.1f} GiB"


# On a GPU test runner, D2L_EXPECT_GPUS=N turns "fewer than N GPUs visible" from a quiet
# simulation into an error, so a runner that lost a GPU cannot pass by skipping or simulating
# the GPU, NCCL and peer-to-peer paths; D2L_EXPECT_GPU=1 is the same as D2L_EXPECT_GPUS=1.
EXPECT_GPU_VAR, EXPECT_GPUS_VAR = "D2L_EXPECT_GPU", "D2L_EXPECT_GPUS"


def expected_gpus(environ: Mapping[str, str] | None = None) -> int:
    """The CUDA GPUs this machine must show: D2L_EXPECT_GPUS=N, 1 for D2L_EXPECT_GPU=1, else 0."""
    environ = os.environ if environ is None else environ
    raw = environ.get(EXPECT_GPUS_VAR, "").strip()
    if raw:
        if not raw.isdigit():
            raise ValueError(f"{EXPECT_GPUS_VAR}={raw!r}: set it to the number of CUDA GPUs "
                             "this machine must show (0 for none required), or unset it")
        return int(raw)
    raw = environ.get(EXPECT_GPU_VAR, "")
    value = raw.strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return 0
    if value in ("1", "true", "yes", "on"):
        return 1
    raise ValueError(f"{EXPECT_GPU_VAR}={raw!r}: set it to 1 (a CUDA GPU must be visible) or 0 "
                     "(run on whatever is there), or unset it")


def _check_expected_gpu(report: dict) -> None:
    wanted = expected_gpus()
    found = sum(a["device"].startswith("cuda") for a in report["accelerators"])
    if found >= wanted:
        return
    var = f"{EXPECT_GPUS_VAR}={wanted}" if os.environ.get(EXPECT_GPUS_VAR, "").strip() \
        else f"{EXPECT_GPU_VAR}=1"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    raise RuntimeError(
        f"{var} says this machine has "
        + ("a CUDA GPU" if wanted == 1 else f"{wanted} CUDA GPUs")
        + f", but torch sees {found or 'none'} (torch {report['torch']}, "
        + (f"CUDA build {report['cuda_build']}" if report["cuda_build"] else
           "a CPU-only build: install a CUDA build of torch")
        + (f", CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else "")
        + f"). Check `nvidia-smi` and the driver, or set {EXPECT_GPUS_VAR} to the number of GPUs "
        "the machine has (fewer GPUs: the multi-GPU paths are simulated).")


def platform_name(environ: Mapping[str, str] | None = None, home: str | None = None) -> str:
    """Name the hosted platform this runs on (Colab, Kaggle, Studio Lab), else 'local'."""
    environ = os.environ if environ is None else environ
    home = os.path.expanduser("~") if home is None else home
    if any(key.startswith("COLAB_") for key in environ):  # COLAB_RELEASE_TAG, COLAB_GPU, ...
        return "Colab"
    if "KAGGLE_KERNEL_RUN_TYPE" in environ or "KAGGLE_URL_BASE" in environ:
        return "Kaggle"
    if "studio-lab-user" in home:  # Studio Lab's one user
        return "SageMaker Studio Lab"
    return "local"


def package_source(package_dir: str | None = None) -> str:
    """Where d2l_extras was imported from: this repository's checkout, or an installed copy."""
    here = pathlib.Path(package_dir or pathlib.Path(__file__).parent).resolve()
    if (here.parent / "pyproject.toml").is_file() and (here.parent / "notebooks").is_dir():
        return f"from the checkout {here.parent}"
    try:  # pip records where an install came from (PEP 610)
        origin = json.loads(importlib.metadata.distribution("d2l-extras")
                            .read_text("direct_url.json") or "{}").get("url")
    except (importlib.metadata.PackageNotFoundError, ValueError):
        origin = None
    return f"installed from {origin}" if origin else f"installed in {here.parent}"


def hardware_rows(report: dict) -> list[tuple[str, str]]:
    """(label, text) rows that describe a hardware_report() dictionary, for a printout or a table."""
    rows = [("CPU", f"{report['cpu']}, {report['cores']} cores ({report['logical_cores']} "
                    f"logical, torch uses {report['torch_threads']} threads)"),
            ("RAM", f"{_gib(report['ram_total'])} total, {_gib(report['ram_available'])} available")]
    for acc in report["accelerators"]:
        extra = f", compute capability {acc['capability']}" if acc["capability"] else \
            " (shares system RAM)"
        rows.append((acc["device"], f"{acc['name']}, {_gib(acc['memory'])} "
                                    f"({_gib(acc['free'])} free){extra}"))
    if not report["accelerators"]:
        rows.append(("GPU", "none visible"))
    build = f"CUDA build {report['cuda_build']}" if report["cuda_build"] else "CPU build"
    rows.append(("torch", f"{report['torch']}, {build}"))
    rows.append(("profile", report["profile"]))
    if "platform" in report:
        rows.append(("platform", f"{report['platform']}, d2l_extras {report['source']}"))
    return rows


def hardware_report(verbose: bool = True) -> dict:
    """Print (and return) CPU, RAM, GPUs, torch and profile; raise if expected GPUs are missing."""
    mem = psutil.virtual_memory()
    report: dict = {
        "cpu": cpu_name(),
        "cores": psutil.cpu_count(logical=False) or os.cpu_count(),
        "logical_cores": psutil.cpu_count(logical=True),
        "torch_threads": torch.get_num_threads(),
        "ram_total": mem.total,
        "ram_available": mem.available,
        "accelerators": [],
        "torch": torch.__version__,
        "cuda_build": torch.version.cuda,
        "profile": profile(),
        "platform": platform_name(),
        "source": package_source(),
    }
    for dev in accelerators():
        if dev.type == "cuda":
            props = torch.cuda.get_device_properties(dev)
            report["accelerators"].append({
                "device": str(dev), "name": props.name, "memory": props.total_memory,
                "free": free_memory(dev), "capability": f"{props.major}.{props.minor}"})
        else:
            report["accelerators"].append({
                "device": str(dev), "name": "Apple GPU (MPS)", "memory": mem.total,
                "free": free_memory(dev), "capability": None})
    if verbose:
        lines = []
        for label, text in hardware_rows(report):
            if label == "GPU":
                text += "; GPU-only demonstrations are simulated or explained instead"
            elif label == "profile":
                text += f" ({DESCRIPTIONS[text]}); set D2L_PROFILE=ci|class|full to change"
            lines.append(f"{label:<8}: {text}")
        print("\n".join(lines))
    _check_expected_gpu(report)  # after printing, so the error follows what was found
    return report
