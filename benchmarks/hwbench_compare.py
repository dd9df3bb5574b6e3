"""Compare notebook 04's measurements with independent ones; print and record, never fail on a ratio.

    python benchmarks/hwbench_compare.py [--out build/bench] [--rounds 3]

Each row runs one of notebook 04's own functions (its #@save cells: dx.copy_rate, dx.gather_times,
...) beside a plainer measurement of the same work (NumPy, timeit, a loop timed by hand, a GPU's
data sheet). The unit tests check what those functions count, on a fake clock; a ratio of two
timings depends on the hardware and the load, not on the code, so it is shown here, interleaved
(ours, independent, ours, ...) so that a burst of load hits both, and written to hwbench.json
and hwbench.md under --out. It exits 0 whatever the ratios are; it fails only if one crashes.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import timeit
from pathlib import Path

import numpy as np
import torch

import d2l_extras as dx

MiB = 1024 ** 2


def best_time(fn, repeats=5):
    """Fastest of `repeats` timed calls after one untimed call (load only ever adds time)."""
    fn()
    return min(timeit.repeat(fn, number=1, repeat=repeats))


def interleaved(ours, theirs, rounds):
    """Alternate the two measurements `rounds` times; return both medians."""
    pairs = [(ours(), theirs()) for _ in range(rounds)]
    return tuple(statistics.median(column) for column in zip(*pairs))


def plain_file_read(n_bytes):
    """GB/s of one f.read() of a fresh file whose cached pages were dropped (Linux)."""
    with tempfile.NamedTemporaryFile(prefix="d2l-bench-") as f:
        f.write(os.urandom(n_bytes))
        f.flush()
        os.fsync(f.fileno())
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        with open(f.name, "rb", buffering=0) as g:
            start = time.perf_counter()
            g.read()
            return n_bytes / (time.perf_counter() - start) / 1e9


def comparisons(rounds):
    """Yield (name, ours, independent, unit, how the independent figure was measured)."""
    src = np.ones(64 * MiB // 4, dtype=np.float32)
    dst = np.empty_like(src)
    yield "copy 64 MiB", *interleaved(
        lambda: dx.copy_rate(64 * MiB).value,
        lambda: 2 * src.nbytes / best_time(lambda: np.copyto(dst, src)) / 1e9, rounds), \
        "GB/s", "numpy.copyto, best of 5"

    idx = np.random.default_rng(0).integers(0, src.size, 2 ** 20)
    out = np.empty(2 ** 20, dtype=np.float32)
    yield "random gather from 64 MiB", *interleaved(
        lambda: dx.gather_times(2 ** 20, 64 * MiB)[0].value * 1e9,
        lambda: best_time(lambda: np.take(src, idx, out=out)) / 2 ** 20 * 1e9, rounds), \
        "ns/element", "numpy.take, best of 5"

    n = 200_000
    xs, ys = [0.5] * n, [0.25] * n
    yield "Python loop step", *interleaved(
        lambda: dx.axpy_times(n)[0].value * 1e9,
        lambda: best_time(lambda: [2.0 * a + b for a, b in zip(xs, ys)], 3) / n * 1e9, rounds), \
        "ns/element", "timeit, best of 3"

    a, b, c = torch.rand(256, 256), torch.rand(256, 256), torch.empty(256, 256)
    twenty = lambda: [torch.mm(a, b, out=c) for _ in range(20)]  # noqa: E731
    yield "matmul 256 float32", *interleaved(
        lambda: dx.matmul_gflops(256).value,
        lambda: 20 * 2 * 256 ** 3 / best_time(twenty) / 1e9, rounds), \
        "GFLOP/s", "20 products timed by hand"

    yield "storage sequential 16 MiB", *interleaved(
        lambda: 16 * MiB / dx.read_times(16 * MiB, reads=50)[1] / 1e9,
        lambda: plain_file_read(16 * MiB), rounds), "GB/s", "one f.read() of our own file"

    x = torch.zeros(1)
    many = lambda: [x.add_(1.0) for _ in range(2000)]  # noqa: E731
    yield "CPU dispatch per tiny op", *interleaved(
        lambda: dx.tiny_op_time("cpu", n=2000).value * 1e6,
        lambda: best_time(many) / 2000 * 1e6, rounds), "us", "2000 ops timed by hand"

    if not torch.cuda.is_available():
        return
    dev = torch.device("cuda", 0)
    name = torch.cuda.get_device_name(dev)
    pinned, pageable = (dx.transfer_rate(256 * MiB, "cpu", dev, p).value for p in (True, False))
    yield "h2d pinned vs pageable", pinned, pageable, "GB/s", "pageable host memory"
    queued, waited = (dx.tiny_op_time(dev, wait_each=w).value * 1e6 for w in (False, True))
    yield "GPU launch: queued vs waited", queued, waited, "us", "synchronize after each"
    peak = dx.hwbench.published_peak(name)
    if peak is None:
        return
    yield f"{name}: h2d pinned", pinned, peak.host_link_gbps, "GB/s", peak.source
    copy = dx.copy_rate(dx.hardware.fit_to_memory(1024 * MiB, 2, dev), dev).value
    yield f"{name}: copy", copy, peak.memory_gbps, "GB/s", peak.source
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        top = peak.matmul_tflops(dtype)
        if top and dx.dtype_supported(dtype, dev):
            with dx.allow_tf32(False):  # float32 in float32: the data sheet's FP32
                tflops = dx.matmul_gflops(8192, dtype, dev).value / 1e3
            yield f"{name}: matmul 8192 {str(dtype)[6:]}", tflops, top, "TFLOP/s", peak.source


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="build/bench", help="folder for hwbench.json/.md")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per comparison")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # NumPy copies and takes on one core: compare like with like
    started, rows = time.time(), []
    print(f"{'measurement':44s} {'ours':>10s} {'independent':>12s} {'ratio':>7s}  unit")
    for name, ours, theirs, unit, how in comparisons(args.rounds):
        rows.append({"name": name, "ours": ours, "independent": theirs, "ratio": ours / theirs,
                     "unit": unit, "independent_is": how})
        print(f"{name:44s} {ours:10.4g} {theirs:12.4g} {ours / theirs:7.2f}  {unit}  ({how})",
              flush=True)
    meta = {"cpu": dx.hardware.cpu_name(), "torch": torch.__version__,
            "profile": dx.profiles.profile(), "threads": 1, "seconds": time.time() - started,
            "load_per_core": os.getloadavg()[0] / os.cpu_count() if hasattr(os, "getloadavg")
            else None, "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "hwbench.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = ["# notebook 04's measurements against independent ones", "",
             f"{meta['cpu']}, torch {meta['torch']}, GPU: {meta['gpu'] or 'none'}, profile "
             f"{meta['profile']}, load per core after: {meta['load_per_core'] or 0:.2f}", "",
             "| measurement | ours | independent | ratio | unit | independent is |",
             "| --- | ---: | ---: | ---: | --- | --- |"]
    lines += [f"| {r['name']} | {r['ours']:.4g} | {r['independent']:.4g} | {r['ratio']:.2f} | "
              f"{r['unit']} | {r['independent_is']} |" for r in rows]
    (out / "hwbench.md").write_text("\n".join(lines) + "\n")
    print(f"written: {out / 'hwbench.json'} and {out / 'hwbench.md'} "
          f"({meta['seconds']:.0f} s; ratios are information, never a failure)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
