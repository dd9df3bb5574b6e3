"""Problem sizes per profile and device kind (a CPU's would hide a lesson on an H100), fitted."""
from dataclasses import dataclass

import torch

from .hardware import fit_to_memory, square_side
from .profiles import PROFILES, profile

MB = 10 ** 6


@dataclass(frozen=True)
class Experiment:
    """One experiment's wanted sizes (ci, class, full) on a CPU and on a GPU, and its memory."""

    cpu: tuple[int, int, int]       # wanted size per profile on a CPU: ci, class, full
    gpu: tuple[int, int, int]       # ... and on an accelerator (CUDA or MPS)
    bytes_per_item: int = 4         # linear: bytes per unit; square matrices hold float32
    count: int = 0                  # > 0: the size is the side of `count` n x n matrices alive
    minimum: int = 1                # smallest size that still shows something
    fraction: float = 0.25          # share of the free memory it may use
    lesson_bytes: int = 0           # one operand's bytes on a GPU (class, full) for the effect


# Per notebook: what the size counts, and why. tests/test_sizes.py checks 4, 16 and 80 GB GPUs.
SIZES: dict[str, Experiment] = {
    # 00: side of the large product; at n, 3n/4 and n/2 timed in turns: 5.4 n x n matrices alive.
    "model_matmul": Experiment((512, 1024, 2048), (4096, 8192, 16384), count=6,
                               minimum=64, fraction=0.5),
    # 00: elements of the large vector; x, y and the copy's two buffers: 16 bytes each.
    "model_stream": Experiment((2 ** 24, 2 ** 25, 2 ** 26), (2 ** 24, 2 ** 26, 2 ** 27),
                               bytes_per_item=16, minimum=2 ** 16, lesson_bytes=200 * MB),
    # 01: elements of 12 fused ops; far beyond the cache (16 MB beside a 16 MB L3 was erratic).
    "fusion": Experiment((1_000_000, 16_000_000, 32_000_000), (2 ** 22, 2 ** 26, 2 ** 27),
                         bytes_per_item=4 * 12, minimum=2 ** 16, lesson_bytes=200 * MB),
    # 02: side of products queued asynchronously (a, b and cached twins); milliseconds each even
    # in ci: at 1024 an H100 takes ~40 us, as long as Python takes to queue a product.
    "async_matmul": Experiment((256, 1024, 2048), (4096, 8192, 16384), count=4,
                               minimum=64, lesson_bytes=200 * MB),
    # 03: side in two workloads of k products and their input (class: k_gpu = 10); ~1 ms at 2048.
    "two_workloads": Experiment((768, 1024, 2000), (2048, 4096, 8192), count=22,
                                minimum=64, lesson_bytes=50 * MB),
    # 03: side of m products copied to the host, m + 2 alive (class: m = 20); ~0.3 ms at 2048.
    "overlap": Experiment((256, 1024, 2048), (2048, 4096, 8192), count=22,
                          minimum=64, lesson_bytes=50 * MB),
    # 03, CPU only: float32 elements copied (source and destination), beyond any CPU cache.
    "cpu_copy": Experiment((2 ** 24, 2 ** 26, 2 ** 26), (2 ** 24, 2 ** 26, 2 ** 26),
                           bytes_per_item=8, minimum=2 ** 16),
    # 04: side of the roofline's product: large enough to reach the compute roof.
    "roofline_matmul": Experiment((256, 1024, 2048), (1024, 8192, 16384), count=3,
                                  minimum=64, fraction=0.5, lesson_bytes=200 * MB),
    # 04: the sweep's largest side: a, b, c and a converted operand's float32 original.
    "matmul_sweep": Experiment((512, 1024, 2048), (2048, 8192, 16384), count=4, fraction=0.5),
    # 04: elements of x, y, z and the matrix; beyond L2, or the "memory" roof is the cache's.
    "roofline_stream": Experiment((2 ** 22, 2 ** 24, 2 ** 25), (2 ** 24, 2 ** 26, 2 ** 27),
                                  bytes_per_item=16, minimum=2 ** 12, lesson_bytes=200 * MB),
    # 05: width w. 16 residual blocks w -> 4w -> w hold the most w x w float32 matrices: 128 of
    # weights, 128 of gradients, 576 of activations, and transient gradients: 1024.
    "memory_width": Experiment((64, 128, 256), (256, 1024, 2048), count=1024, minimum=32),
    # 07: channels of the DDP ResNet-18; ~24 MB each at batch 256: saved activations (measured
    # with saved-tensor hooks), parameters, gradients, momentum and the allocator's slack.
    "ddp_width": Experiment((8, 16, 32), (16, 64, 64), bytes_per_item=24 * MB, minimum=4),
    # 07: images per process and step; at 64 a step is launch-bound on an A100 or H100.
    "ddp_batch": Experiment((32, 32, 32), (128, 256, 256), bytes_per_item=64 * 55_000, minimum=16),
    # 07: training images, all held by every process; on a GPU several steps per epoch.
    "ddp_images": Experiment((192, 192, 4096), (4096, 8192, 60000), bytes_per_item=28 * 28 * 4,
                             minimum=64),
    # 08: elements of the largest ring message (~5 copies); NVLink plateaus at hundreds of MB.
    "ring_message": Experiment((2 ** 20, 2 ** 22, 2 ** 25), (2 ** 22, 2 ** 26, 2 ** 28),
                               bytes_per_item=4 * 5, minimum=2 ** 16, lesson_bytes=200 * MB),
}


def device_kind(device: torch.device | str) -> str:
    """Return 'gpu' for CUDA or MPS devices and 'cpu' otherwise (which sizes apply)."""
    return "gpu" if torch.device(device).type in ("cuda", "mps") else "cpu"


def problem_size(name: str, device: torch.device | str = "cpu", *, count: int | None = None,
                 budget: int | None = None, profile_name: str | None = None) -> int:
    """Size for `name` on `device`: the wanted size, shrunk to free memory (or `budget` bytes)."""
    if name not in SIZES:
        raise ValueError(f"no size policy for {name!r}; known experiments: "
                         f"{', '.join(sorted(SIZES))} (add one to d2l_extras/sizes.py)")
    exp = SIZES[name]
    wanted = getattr(exp, device_kind(device))[PROFILES.index(profile_name or profile())]
    if exp.count:
        return square_side(wanted, count=exp.count if count is None else count, device=device,
                           fraction=exp.fraction, minimum=exp.minimum, budget=budget)
    return fit_to_memory(wanted, exp.bytes_per_item, device, fraction=exp.fraction,
                         minimum=exp.minimum, budget=budget)
