"""What is here: CPU, RAM, accelerators, free memory, and n devices (real or simulated)."""
import collections
import contextlib
import importlib.metadata
import json
import math
import os
import pathlib
import platform
import re
import subprocess
import sys
from typing import Sequence

import psutil
import torch

from .checks import whole_number
from .profiles import DESCRIPTIONS, profile
from .report import notice

MiB, GiB = 1024 ** 2, 1024 ** 3


def cpu_name() -> str:
    """Return the CPU's model name as the operating system reports it."""
    name = ""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        if sys.platform.startswith("linux"):
            info = pathlib.Path("/proc/cpuinfo").read_text(encoding="utf-8")
            name = "".join(re.findall(r"^model name\s*:(.*)", info, re.MULTILINE)[:1])
        elif sys.platform == "darwin":
            name = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"],
                                  capture_output=True, text=True, timeout=5).stdout
    return name.strip() or platform.processor() or platform.machine() or "unknown CPU"


# In torch.cuda.get_arch_list(), sm_XY is a binary for compute capability X.Y (sm_100: 10.0),
# compute_XY is PTX; suffix a (sm_90a) marks arch-specific code, f (sm_100f) family code.
_CUDA_ARCH = re.compile(r"(sm|compute)_(\d+)(\d)([af]?)")


def cuda_arch_supported(capability: tuple[int, int], arch_list: Sequence[str]) -> bool:
    """True if a GPU of this compute capability runs code built for these CUDA archs."""
    gpu = tuple(map(int, capability))

    def runs(kind: str, major: str, minor: str, suffix: str) -> bool:
        arch = (int(major), int(minor))
        if suffix == "a":  # arch-specific code runs on exactly that capability
            return arch == gpu
        if kind == "sm" or suffix == "f":  # a binary runs on later minors of its major only
            return arch[0] == gpu[0] and arch <= gpu
        return arch <= gpu  # the driver compiles PTX for any GPU of its capability or newer
    return any(runs(*found.groups()) for found in map(_CUDA_ARCH.fullmatch, arch_list) if found)


def _cuda_gpus() -> list[list[int]]:
    # Indices of the visible CUDA GPUs this torch build has kernels for, and of the others.
    if not torch.cuda.is_available():
        return [], []
    try:
        archs = torch.cuda.get_arch_list()
        # get_device_properties makes no CUDA context (mem_get_info would).
        props = list(map(torch.cuda.get_device_properties, range(torch.cuda.device_count())))
    except (AssertionError, AttributeError, RuntimeError):
        # torch cannot say (it sees no driver after all): keep every GPU; the first kernel says why.
        return list(range(torch.cuda.device_count())), []
    # A build that names no CUDA target (an empty list, ROCm's gfx names) tells nothing: keep all.
    known = any(map(_CUDA_ARCH.fullmatch, archs))
    runs = [not known or cuda_arch_supported((p.major, p.minor), archs) for p in props]
    return [[i for i, ok in enumerate(runs) if ok is want] for want in (True, False)]


def accelerators() -> list[torch.device]:
    """Return the accelerators torch can use: CUDA GPUs it has kernels for, else MPS, else []."""
    if not torch.cuda.is_available():
        return [torch.device("mps")] if torch.backends.mps.is_available() else []
    usable, lacking = _cuda_gpus()
    if lacking:  # a P100 or V100 under a wheel without their kernels would fail at the first one
        names = collections.Counter(f"{p.name} (compute capability {p.major}.{p.minor})"
                                    for p in map(torch.cuda.get_device_properties, lacking))
        who = " and ".join(name if n == 1 else f"{n} x {name}" for name, n in names.items())
        it, has = ("it", "has") if len(lacking) == 1 else ("them", "have")
        instead = ", ".join(f"cuda:{i}" for i in usable) or "the CPU"
        notice(f"{who} {has} no kernels in this torch build ({' '.join(torch.cuda.get_arch_list())}"
               f"): running on {instead} instead; a torch wheel built for {it} (e.g. an older CUDA "
               f"build) would use {it}.")
    return [torch.device("cuda", i) for i in usable]


def cuda_gpus() -> list[torch.device]:
    """Return the CUDA GPUs torch has kernels for (those accelerators() lists), else []."""
    return [d for d in accelerators() if d.type == "cuda"]


def default_device() -> torch.device:
    """Return the first accelerator, or the CPU when there is none."""
    return (accelerators() or [torch.device("cpu")])[0]


def free_memory(device: torch.device | str | None = None) -> int:
    """Return the bytes free on a device (for the CPU: the RAM available to processes)."""
    device = torch.device(device) if device is not None else default_device()
    if device.type == "cuda":  # the blocks PyTorch caches for reuse are free to this process
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return torch.cuda.mem_get_info(device)[0] + cached
    if device.type == "mps":
        return max(0, torch.mps.recommended_max_memory() - torch.mps.driver_allocated_memory())
    if device.type == "cpu":
        return psutil.virtual_memory().available
    raise ValueError(f"free_memory() knows cpu, cuda and mps devices, not {device.type!r}")


def fit_to_memory(n: int, bytes_per_item: float, device: torch.device | str | None = None,
                  fraction: float = 0.25, minimum: int = 1, budget: int | None = None) -> int:
    """Shrink n so that n * bytes_per_item fits in `fraction` of the free (or `budget`) bytes."""
    available = free_memory(device) if budget is None else budget
    fitting = int(available * fraction // bytes_per_item)
    if fitting < minimum:
        raise ValueError(f"{minimum} x {bytes_per_item:.0f} bytes does not fit in {fraction:.0%} "
                         f"of {available / GiB:.2f} GiB free: close other notebooks, or use a "
                         "device with more memory.")
    return min(n, fitting)


def square_side(wanted: int, count: int = 1, device: torch.device | str | None = None,
                dtype: torch.dtype = torch.float32, fraction: float = 0.25, minimum: int = 64,
                budget: int | None = None) -> int:
    """Side n <= wanted so that `count` n x n matrices use at most `fraction` of free memory."""
    available = free_memory(device) if budget is None else budget
    item = torch.empty((), dtype=dtype).element_size()
    side = math.isqrt(max(0, int(available * fraction // (count * item))))
    if side < min(minimum, wanted):
        raise ValueError(f"{count} {minimum} x {minimum} {dtype} matrices (the smallest size) do "
                         f"not fit in {fraction:.0%} of {available / GiB:.2f} GiB free: close "
                         "other notebooks, use fewer matrices, or a device with more memory.")
    # Where memory decides: a multiple of 64 (of 8 below `minimum`): float16 products use
    # Tensor-Core kernels only for multiples of 8, and 64 leaves no tile partly filled.
    rounded = (side - side % step for step in (64, 8))
    return wanted if side >= wanted else next((s for s in rounded if s >= minimum), side)


_last_simulation_notice: str | None = None


def devices(n: int) -> list[torch.device]:
    """Return exactly n devices: real GPUs first, the missing ones simulated as replicas."""
    global _last_simulation_notice
    n = whole_number(n, "devices(n): the number of devices n")
    real = accelerators() or [torch.device("cpu")]
    line = (f"devices({n}): {len(real)} real, {n - len(real)} simulated as replicas on "
            f"{', '.join(sorted({str(d) for d in real}))} "
            "(same arithmetic; they share its cores or its one GPU).")
    # Notebooks ask in many cells: told again only when what is simulated changes.
    if n > len(real) and line != _last_simulation_notice:
        _last_simulation_notice = line
        print(f"notice: {line}")
    return [real[i % len(real)] for i in range(n)]


# D2L_EXPECT_GPUS=N (D2L_EXPECT_GPU=1: N=1) makes fewer than N GPUs an error, so that a GPU test
# runner that lost a GPU cannot pass by skipping or simulating the GPU, NCCL and P2P paths.
def _expect_var() -> str:
    return "D2L_EXPECT_GPUS" if os.environ.get("D2L_EXPECT_GPUS", "").strip() else "D2L_EXPECT_GPU"


def expected_gpus() -> int:
    """The CUDA GPUs this machine must show: D2L_EXPECT_GPUS=N (or D2L_EXPECT_GPU=N), else 0."""
    var = _expect_var()
    count = os.environ.get(var, "").strip() or "0"
    if not count.isdigit():  # a typo must not pass as "no GPU required"
        raise ValueError(f"{var}={count!r}: set it to the number of CUDA GPUs "
                         "this machine must show (0 for none required), or unset it")
    return int(count)


def _check_expected_gpu(report: dict) -> None:
    wanted, lacking = expected_gpus(), len(report["unsupported"])
    found = sum(a["device"].startswith("cuda") for a in report["accelerators"])
    if found < wanted:
        gpus = "a CUDA GPU" if wanted == 1 else f"{wanted} CUDA GPUs"
        build = report["cuda_build"] or "none: install a CUDA build of torch"
        raise RuntimeError(
            f"{_expect_var()}={wanted} says this machine has {gpus}, but torch sees {found or 'none'}"
            f"{f' it can use and {lacking} without kernels in this build' if lacking else ''} "
            f"(torch {report['torch']}, CUDA build {build}, "
            f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}). Check `nvidia-smi` "
            "and the driver, or set D2L_EXPECT_GPUS to the GPUs there are.")


def platform_name() -> str:
    """Name the hosted platform this runs on (Colab, Kaggle, Studio Lab), else 'local'."""
    if any(key.startswith("COLAB_") for key in os.environ):  # COLAB_RELEASE_TAG, COLAB_GPU, ...
        return "Colab"
    if "KAGGLE_KERNEL_RUN_TYPE" in os.environ or "KAGGLE_URL_BASE" in os.environ:
        return "Kaggle"
    return "SageMaker Studio Lab" if "studio-lab-user" in os.path.expanduser("~") else "local"


def package_source(package_dir: str | None = None) -> str:
    """Where d2l_extras was imported from: this repository's checkout, or an installed copy."""
    here = pathlib.Path(package_dir or pathlib.Path(__file__).parent).resolve()
    if (here.parent / "pyproject.toml").is_file() and (here.parent / "notebooks").is_dir():
        return f"from the checkout {here.parent}"
    origin = None  # pip records where an install came from (PEP 610)
    with contextlib.suppress(importlib.metadata.PackageNotFoundError, ValueError):
        origin = json.loads(importlib.metadata.distribution("d2l-extras")
                            .read_text("direct_url.json") or "{}").get("url")
    return f"installed from {origin}" if origin else f"installed in {here.parent}"


def _gib(n_bytes: float) -> str:
    return f"{n_bytes / GiB:.1f} GiB"


def hardware_rows(report: dict) -> list[tuple[str, str]]:
    """(label, text) rows that describe a hardware_report() dictionary, for a print or a table."""
    rows = [("CPU", f"{report['cpu']}, {report['cores']} cores ({report['logical_cores']} "
                    f"logical, torch uses {report['torch_threads']} threads)"),
            ("RAM", f"{_gib(report['ram_total'])} total, "
                    f"{_gib(report['ram_available'])} available")]
    for acc in report["accelerators"]:
        free = "free not queried: no context made here" if acc["free"] is None else \
            f"{_gib(acc['free'])} free"
        extra = f", compute capability {acc['capability']}" if acc["capability"] else \
            " (shares system RAM)"
        rows.append((acc["device"], f"{acc['name']}, {_gib(acc['memory'])} ({free}){extra}"))
    rows += [(acc["device"], f"{acc['name']}, {_gib(acc['memory'])}, compute capability "
                             f"{acc['capability']}: not supported by this torch build")
             for acc in report.get("unsupported", [])]
    if not report["accelerators"]:
        rows.append(("GPU", "none usable" if report.get("unsupported") else "none visible"))
    build = f"CUDA build {report['cuda_build']}" if report["cuda_build"] else "CPU build"
    rows += [("torch", f"{report['torch']}, {build}"), ("profile", report["profile"])]
    if "platform" in report:
        rows.append(("platform", f"{report['platform']}, d2l_extras {report['source']}"))
    return rows


def _gpu(index: int) -> dict:
    props = torch.cuda.get_device_properties(index)  # makes no context
    return {"device": f"cuda:{index}", "name": props.name, "memory": props.total_memory,
            "capability": f"{props.major}.{props.minor}"}


def hardware_report(verbose: bool = True) -> dict:
    """Print (and return) CPU, RAM, GPUs, torch and profile; raise if expected GPUs are missing."""
    mem, usable = psutil.virtual_memory(), accelerators()
    # mem_get_info makes a CUDA context (0.3-0.5 GB, held until the process ends) on the GPU it
    # asks, which a DDP worker later using that GPU would lack: ask the current GPU only.
    current = torch.cuda.current_device() if any(d.type == "cuda" for d in usable) else None
    found = [{**_gpu(d.index), "free": free_memory(d) if d.index == current else None}
             if d.type == "cuda" else {"device": str(d), "name": "Apple GPU (MPS)",
                                       "memory": mem.total, "capability": None,
                                       "free": free_memory(d)} for d in usable]
    report = {
        "cpu": cpu_name(), "cores": psutil.cpu_count(logical=False) or os.cpu_count(),
        "logical_cores": psutil.cpu_count(logical=True), "torch_threads": torch.get_num_threads(),
        "ram_total": mem.total, "ram_available": mem.available, "accelerators": found,
        # GPUs without kernels in this build: shown, so that "running on the CPU" is explained.
        "unsupported": [_gpu(i) for i in _cuda_gpus()[1]],
        "torch": torch.__version__, "cuda_build": torch.version.cuda, "profile": profile(),
        "platform": platform_name(), "source": package_source()}
    if verbose:
        more = {"GPU": "; GPU-only demonstrations are simulated or explained instead",
                "profile": f" ({DESCRIPTIONS[report['profile']]}); set D2L_PROFILE=ci|class|full "
                           "to change"}
        print("\n".join(f"{label:<8}: {text}{more.get(label, '')}"
                        for label, text in hardware_rows(report)))
    _check_expected_gpu(report)  # after printing, so the error follows what was found
    return report
