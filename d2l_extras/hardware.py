"""What is here: CPU, RAM, accelerators, free memory, and n devices (real or simulated)."""
from __future__ import annotations

import importlib.metadata
import json
import math
import numbers
import os
import pathlib
import platform
import re
import subprocess
import sys

from typing import Mapping, Sequence

import psutil
import torch

from .checks import whole_number
from .profiles import DESCRIPTIONS, profile
from .report import notice

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


# A CUDA target in torch.cuda.get_arch_list(): sm_XY is a binary (cubin) for compute capability
# X.Y, compute_XY is PTX; the last digit is the minor (sm_100 is 10.0). Suffix a (sm_90a) marks
# arch-specific code, f (sm_100f) family-specific code (CUDA 12.9+).
_CUDA_ARCH = re.compile(r"(sm|compute)_(\d+)([af]?)")


def _cuda_arch(entry: str) -> tuple[str, int, int, str] | None:
    """(kind, major, minor, suffix) of a CUDA arch name, or None for anything else (gfx90a)."""
    found = _CUDA_ARCH.fullmatch(entry)
    if not found or len(found.group(2)) < 2:
        return None
    digits = found.group(2)
    return found.group(1), int(digits[:-1]), int(digits[-1]), found.group(3)


def cuda_arch_supported(capability: tuple[int, int], arch_list: Sequence[str]) -> bool:
    """True if a GPU of this compute capability runs code built for these CUDA archs."""
    if isinstance(capability, (str, bytes)) or not isinstance(capability, Sequence) \
            or len(capability) != 2 \
            or any(isinstance(c, bool) or not isinstance(c, numbers.Integral) or c < 0
                   for c in capability):
        raise ValueError("cuda_arch_supported(capability, arch_list): capability must be a pair "
                         "of whole numbers such as (8, 6), as torch.cuda.get_device_capability() "
                         f"returns; got {capability!r}")
    if isinstance(arch_list, (str, bytes)) or not isinstance(arch_list, Sequence) \
            or not all(isinstance(a, str) for a in arch_list):
        raise ValueError("cuda_arch_supported(capability, arch_list): arch_list must be a list of "
                         "names such as ['sm_80', 'compute_90'], as torch.cuda.get_arch_list() "
                         f"returns; got {arch_list!r}")
    gpu = (int(capability[0]), int(capability[1]))
    for parsed in map(_cuda_arch, arch_list):
        if parsed is None:  # not a CUDA target (a ROCm build lists gfx names)
            continue
        kind, major, minor, suffix = parsed
        if suffix == "a":  # arch-specific code runs on exactly that capability
            runs = (major, minor) == gpu
        elif kind == "sm" or suffix == "f":  # a binary runs on later minors of its major only
            runs = major == gpu[0] and minor <= gpu[1]
        else:  # the driver compiles PTX for any GPU of its capability or newer
            runs = (major, minor) <= gpu
        if runs:
            return True
    return False


def _cuda_gpus() -> tuple[list[int], list[int]]:
    """Indices of the visible CUDA GPUs this torch build has kernels for, and of the others."""
    if not torch.cuda.is_available():
        return [], []
    usable: list[int] = []
    lacking: list[int] = []
    try:
        archs = torch.cuda.get_arch_list()
        # get_device_properties makes no CUDA context (mem_get_info would).
        capabilities = [(p.major, p.minor) for p in map(torch.cuda.get_device_properties,
                                                        range(torch.cuda.device_count()))]
    except (AssertionError, AttributeError, RuntimeError):
        # torch cannot say (it sees no driver after all): keep every GPU, as before this check;
        # the first kernel then says what is wrong.
        return list(range(torch.cuda.device_count())), []
    for i, capability in enumerate(capabilities):
        # A build that names no CUDA target (an empty list, ROCm's gfx names) tells us nothing:
        # keep the GPU.
        if not any(map(_cuda_arch, archs)) or cuda_arch_supported(capability, archs):
            usable.append(i)
        else:
            lacking.append(i)
    return usable, lacking


def accelerators() -> list[torch.device]:
    """Return the accelerators torch can use: CUDA GPUs it has kernels for, else MPS, else []."""
    if torch.cuda.is_available():
        usable, lacking = _cuda_gpus()
        if lacking:
            _no_kernels_notice(lacking, usable)
        return [torch.device("cuda", i) for i in usable]
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return [torch.device("mps")]
    return []


def _no_kernels_notice(lacking: list[int], usable: list[int]) -> None:
    """Say in one line, once per process, which GPUs torch cannot run on and what runs instead.

    A P100 (6.0) or V100 (7.0) under a wheel without sm_60/sm_70 kernels fails at the first
    kernel with "no kernel image is available"; leaving it out runs the notebooks on the CPU.
    """
    names: dict[str, int] = {}
    for i in lacking:
        props = torch.cuda.get_device_properties(i)
        name = f"{props.name} (compute capability {props.major}.{props.minor})"
        names[name] = names.get(name, 0) + 1
    who = " and ".join(name if n == 1 else f"{n} x {name}" for name, n in names.items())
    it = "it" if len(lacking) == 1 else "them"
    instead = ", ".join(f"cuda:{i}" for i in usable) if usable else "the CPU"
    notice(f"{who} {'has' if len(lacking) == 1 else 'have'} no kernels in this torch build "
           f"({' '.join(torch.cuda.get_arch_list())}): running on {instead} instead; a torch "
           f"wheel built for {it} (e.g. an older CUDA build) would use {it}.")


def cuda_gpus() -> list[torch.device]:
    """Return the CUDA GPUs torch has kernels for (those accelerators() lists), else []."""
    return [d for d in accelerators() if d.type == "cuda"]


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
    """Side n <= wanted so that `count` n x n matrices use at most `fraction` of free memory.

    When memory decides, the side is rounded down to a multiple of 64 (of 8 where that would fall
    below `minimum`): float16 products use cuBLAS's Tensor-Core kernels only for dimensions that
    are multiples of 8 (16 for int8), and a multiple of 64 leaves no tile of the product partly
    filled (NVIDIA's "tile quantization"). A side that `wanted` decides is kept as asked.
    """
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
    if side >= wanted:
        return wanted
    for step in (64, 8):
        if side - side % step >= minimum:
            return side - side % step
    return side


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
        + f", but torch sees {found or 'none'}"
        + (f" it can use and {len(report['unsupported'])} without kernels in this build"
           if report.get("unsupported") else "")
        + f" (torch {report['torch']}, "
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
        free = "free not queried: no context made here" if acc["free"] is None else \
            f"{_gib(acc['free'])} free"
        rows.append((acc["device"], f"{acc['name']}, {_gib(acc['memory'])} ({free}){extra}"))
    for acc in report.get("unsupported", []):
        rows.append((acc["device"], f"{acc['name']}, {_gib(acc['memory'])}, compute capability "
                                    f"{acc['capability']}: not supported by this torch build"))
    if not report["accelerators"]:
        rows.append(("GPU", "none usable" if report.get("unsupported") else "none visible"))
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
        "unsupported": [],
        "torch": torch.__version__,
        "cuda_build": torch.version.cuda,
        "profile": profile(),
        "platform": platform_name(),
        "source": package_source(),
    }
    usable = accelerators()
    # mem_get_info makes a CUDA context on the GPU it asks (0.3-0.5 GB, held until the process
    # ends), which a DDP worker later using that GPU would lack: ask the current GPU only.
    current = torch.cuda.current_device() if any(d.type == "cuda" for d in usable) else None
    for dev in usable:
        if dev.type == "cuda":
            props = torch.cuda.get_device_properties(dev)  # makes no context
            report["accelerators"].append({
                "device": str(dev), "name": props.name, "memory": props.total_memory,
                "free": free_memory(dev) if dev.index == current else None,
                "capability": f"{props.major}.{props.minor}"})
        else:
            report["accelerators"].append({
                "device": str(dev), "name": "Apple GPU (MPS)", "memory": mem.total,
                "free": free_memory(dev), "capability": None})
    # GPUs this torch build has no kernels for: shown, so that "running on the CPU" is explained.
    for i in _cuda_gpus()[1]:
        props = torch.cuda.get_device_properties(i)
        report["unsupported"].append({"device": f"cuda:{i}", "name": props.name,
                                      "memory": props.total_memory,
                                      "capability": f"{props.major}.{props.minor}"})
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
