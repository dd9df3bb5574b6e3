"""Size policy: each experiment's size from the profile, the kind of device, and its free memory.

A size that shows the lesson on a CPU (seconds) hides it on a GPU (microseconds, or everything
inside the 50 MB L2 cache of an H100), and a size that shows it on an H100 runs a 4 GB laptop GPU
out of memory. So each experiment names what it wants per profile on a CPU and on a GPU, what one
unit costs in memory, and how large its working set must be for the effect to show on a GPU;
`problem_size` picks the wanted size and shrinks it to fit the device's free memory.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .hardware import fit_to_memory, square_side
from .profiles import PROFILES, profile

MB = 10 ** 6


@dataclass(frozen=True)
class Experiment:
    """One experiment's wanted sizes (ci, class, full) on a CPU and on a GPU, and its memory."""

    what: str                       # what the size counts, shown in errors and reports
    cpu: tuple[int, int, int]       # wanted size per profile on a CPU: ci, class, full
    gpu: tuple[int, int, int]       # ... and on an accelerator (CUDA or MPS)
    bytes_per_item: int = 4         # linear: bytes per unit; square: bytes per matrix element
    count: int = 1                  # square only: n x n matrices alive at once
    square: bool = False            # True: the size is the side of `count` square matrices
    minimum: int = 1                # smallest size that still shows something
    fraction: float = 0.25          # share of the free memory it may use
    # On a GPU in the class and full profiles, the bytes of one operand must reach this for
    # the effect to be visible (for example well beyond a 50 MB L2 cache). Tested at 16 and 80 GB.
    lesson_bytes: int = 0


# Notebook by notebook. Each notebook's owner tunes its own entries; tests/test_sizes.py checks
# every entry against 4, 16 and 80 GB budgets.
SIZES: dict[str, Experiment] = {
    # 00: the large side of the performance model's matrix product, large enough to reach the
    # machine's peak. The products at n, 3n/4 and n/2 are timed in turns, each with its a, b
    # and c alive: 3 (1 + 9/16 + 1/4) = 5.4 n x n float32 matrices, in half the free memory.
    # The small side is fixed (16): a call of a few microseconds anywhere.
    "model_matmul": Experiment(
        what="side of notebook 00's large matrix product", cpu=(512, 1024, 2048),
        gpu=(4096, 8192, 16384), count=6, square=True, minimum=64, fraction=0.5),
    # 00: the large vector of the add, multiply and sine (x and y alive, and the two buffers of
    # the copy that measures the bandwidth: 16 bytes per element). The notebook raises it to
    # 4x the last-level cache where that is larger (an H100's L2 is 50 MB).
    "model_stream": Experiment(
        what="float32 elements of notebook 00's large vector", cpu=(2 ** 24, 2 ** 25, 2 ** 26),
        gpu=(2 ** 24, 2 ** 26, 2 ** 27), bytes_per_item=16, minimum=2 ** 16,
        lesson_bytes=200 * MB),
    # 01: a chain of 12 elementwise ops on n floats; fused, it reads and writes memory once.
    # On a GPU the operand must be far beyond the L2 cache (50 MB on an H100) for the
    # "memory traffic" explanation to hold: 2**26 floats are 268 MB. On a CPU too, in class: a
    # 16 MB operand beside a 16 MB L3 timed now from the cache, now from RAM (a copy of it
    # took 1.3 ms in one run, 7 ms in the next); 64 MB is beyond most laptops' caches.
    "fusion": Experiment(
        what="elements of the fused elementwise chain", cpu=(1_000_000, 16_000_000, 32_000_000),
        gpu=(2 ** 22, 2 ** 26, 2 ** 27), bytes_per_item=4 * 12, minimum=2 ** 16,
        lesson_bytes=200 * MB),
    # 02: square matrix products queued without a barrier; on a GPU each must run for
    # milliseconds so that "returned" (microseconds) and "finished" differ by orders of magnitude.
    # Even in ci: at 1024 an H100 multiplies in ~40 us, about the time Python takes to queue it,
    # and "returned < half of finished" would fail. 4 matrices alive: a, b and their cached twins.
    "async_matmul": Experiment(
        what="side of the matrices multiplied asynchronously", cpu=(256, 1024, 2048),
        gpu=(4096, 8192, 16384), count=4, square=True, minimum=64, lesson_bytes=200 * MB),
    # 03: two independent workloads of k matrix products (on k GPUs, two streams, or a GPU
    # replicated): 2 x (k products + the input) alive on one GPU; 22 for class's k = 10. At
    # 2048 (ci) each GPU computes for about a millisecond, well above the launch overhead.
    "two_workloads": Experiment(
        what="side of the matrices in each of two independent workloads", cpu=(768, 1024, 2000),
        gpu=(2048, 4096, 8192), count=22, square=True, minimum=64, lesson_bytes=50 * MB),
    # 03: m products computed on the GPU, each copied to pinned host memory while the next one
    # runs: m results + the input + one spare alive (22 for class's m = 20). At 2048 (ci) a
    # product and its 16 MB copy both take a few hundred microseconds on an H100 (copy at
    # 25-50 GB/s), so the overlap dominates the launch overhead.
    "overlap": Experiment(
        what="side of the matrices computed and copied to the host", cpu=(256, 1024, 2048),
        gpu=(2048, 4096, 8192), count=22, square=True, minimum=64, lesson_bytes=50 * MB),
    # 03: on a CPU, one single-threaded worker copies a float32 tensor (source and destination
    # alive: 8 bytes per element) while another multiplies. 2**26 floats are 268 MB: far beyond
    # any CPU cache, so the copy runs at memory speed. Used on the CPU only; the GPU entry
    # mirrors it (a GPU's copy experiment is "overlap").
    "cpu_copy": Experiment(
        what="float32 elements copied by the CPU's copy worker",
        cpu=(2 ** 24, 2 ** 26, 2 ** 26), gpu=(2 ** 24, 2 ** 26, 2 ** 26), bytes_per_item=8,
        minimum=2 ** 16),
    # 04: the roofline's matrix-matrix point needs k large enough to reach the compute roof.
    "roofline_matmul": Experiment(
        what="side of the roofline's matrix-matrix product", cpu=(256, 1024, 2048),
        gpu=(1024, 8192, 16384), count=3, square=True, minimum=64, fraction=0.5,
        lesson_bytes=200 * MB),
    # 04: the roofline's streaming kernels (vector add on n floats, matrix-vector on an m x m
    # matrix with m*m ~ n, and the read/copy probes of the roof). 16 bytes per element: x, y, z
    # and the matrix. On a GPU one vector must be far beyond the L2 cache (50 MB on an H100),
    # or the "memory" roof is the cache's.
    # 04: the largest side of the matmul sweep (GFLOP/s by size and dtype): a, b, c and the
    # float32 original of a converted operand are four n x n float32 matrices, in half the free
    # memory. The sweep takes every power of two from 64 up to this side; none fits: no sweep.
    "matmul_sweep": Experiment(
        what="largest side of the matmul sweep", cpu=(512, 1024, 2048),
        gpu=(2048, 8192, 16384), count=4, square=True, fraction=0.5),
    "roofline_stream": Experiment(
        what="elements of the roofline's vectors", cpu=(2 ** 22, 2 ** 24, 2 ** 25),
        gpu=(2 ** 24, 2 ** 26, 2 ** 27), bytes_per_item=16, minimum=2 ** 12,
        lesson_bytes=200 * MB),
    # 05: the width w of the networks whose memory is counted: an MLP (batch 2w) and a stack of
    # 16 residual blocks w -> 4w -> w (batch 4w) run with and without checkpointing. The stack
    # holds the most, in w x w float32 matrices: 128 of weights, 128 of gradients, 576 of
    # activations (9 per block and 4w rows) and transient gradients: 1024 with some slack.
    "memory_width": Experiment(
        what="width of the networks whose memory notebook 05 counts", cpu=(64, 128, 256),
        gpu=(256, 1024, 2048), count=1024, square=True, minimum=32),
    # 07: the width (channels of the first stage; the book's is 64) of the ResNet-18 that each
    # DDP process trains. Per channel, at the largest batch one process takes (256), about
    # 24 MB: the activations kept for backward (3.5 MB per channel at batch 64, counted with
    # saved-tensor hooks), parameters, gradients and momentum, and the allocator's slack.
    "ddp_width": Experiment(
        what="channels of the ResNet-18 that notebook 07 trains with DDP", cpu=(8, 16, 32),
        gpu=(16, 64, 64), bytes_per_item=24 * MB, minimum=4),
    # 07: the images each GPU process takes per step. At 64 a step of ResNet-18 on 28 x 28
    # images is launch-bound on an A100 or H100 (hundreds of kernels of a few microseconds), so
    # k processes could not show a speed-up; 256 gives each kernel work enough. Their
    # activations (55 KB per channel and image) are counted in ddp_width up to 256.
    "ddp_batch": Experiment(
        what="images per GPU process and step in notebook 07's DDP runs", cpu=(32, 32, 32),
        gpu=(128, 256, 256), bytes_per_item=64 * 55_000, minimum=16),
    # 07: the training images of each DDP run (every process holds them all, float32 28 x 28),
    # on a GPU enough for several steps of k x 256 per epoch.
    "ddp_images": Experiment(
        what="training images of notebook 07's DDP runs", cpu=(256, 256, 4096),
        gpu=(4096, 8192, 60000), bytes_per_item=28 * 28 * 4, minimum=64),
    # 08: the largest message of the ring benchmark, in float32 elements. Each process keeps
    # about 5 copies (input, two results, the timed copy, the receive buffer). On NVLink or
    # NVSwitch the bus bandwidth reaches its plateau only with messages of hundreds of MB.
    "ring_message": Experiment(
        what="float32 elements of the largest ring allreduce message",
        cpu=(2 ** 20, 2 ** 22, 2 ** 25), gpu=(2 ** 22, 2 ** 26, 2 ** 28), bytes_per_item=4 * 5,
        minimum=2 ** 16, lesson_bytes=200 * MB),
}


def device_kind(device: torch.device | str) -> str:
    """Return 'gpu' for CUDA or MPS devices and 'cpu' otherwise (which sizes apply)."""
    return "gpu" if torch.device(device).type in ("cuda", "mps") else "cpu"


def wanted_size(name: str, device: torch.device | str = "cpu",
                profile_name: str | None = None) -> int:
    """Return the size experiment `name` wants on this kind of device, before fitting memory."""
    exp = experiment(name)
    prof = profile() if profile_name is None else profile_name
    if prof not in PROFILES:
        raise ValueError(f"unknown profile {prof!r}; use one of {', '.join(PROFILES)}")
    sizes = exp.gpu if device_kind(device) == "gpu" else exp.cpu
    return sizes[PROFILES.index(prof)]


def experiment(name: str) -> Experiment:
    """Return the registered experiment `name`, or a ValueError listing the known ones."""
    if name not in SIZES:
        raise ValueError(f"no size policy for {name!r}; known experiments: "
                         f"{', '.join(sorted(SIZES))} (add one to d2l_extras/sizes.py)")
    return SIZES[name]


def problem_size(name: str, device: torch.device | str = "cpu", *, count: int | None = None,
                 budget: int | None = None, profile_name: str | None = None) -> int:
    """Size for experiment `name` on `device`: the profile's wanted size, shrunk to free memory.

    `count` overrides how many square matrices are alive at once; `budget` (bytes) replaces the
    device's free memory, so that the policy can be tested for any GPU on any machine.
    """
    exp = experiment(name)
    wanted = wanted_size(name, device, profile_name)
    if exp.square:
        dtype = {1: torch.int8, 2: torch.float16, 4: torch.float32, 8: torch.float64}[
            exp.bytes_per_item]
        return square_side(wanted, count=exp.count if count is None else count, device=device,
                           dtype=dtype, fraction=exp.fraction, minimum=exp.minimum, budget=budget)
    if count is not None:
        raise ValueError(f"count= applies to square experiments only, not {name!r}")
    return fit_to_memory(wanted, exp.bytes_per_item, device, fraction=exp.fraction,
                         minimum=exp.minimum, budget=budget)


def operand_bytes(name: str, size: int) -> int:
    """Bytes of one operand of experiment `name` at `size` (one vector or one n x n matrix)."""
    exp = experiment(name)
    if exp.square:
        return size * size * exp.bytes_per_item
    # A linear experiment's bytes_per_item covers all the tensors it keeps; one operand is a
    # float32 vector of `size` elements.
    return size * 4
