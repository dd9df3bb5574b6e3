"""Short probes of the GPU paths most likely to mislead (make gpu-check): one figure each.

    python -m tools.gpuprobes --out DIR

Each probe prints one line, "probe NAME: FIGURE", and all of them land in DIR/probes.json. Without
CUDA, a GPU probe says "skipped: no CUDA device" and the training-step trace runs on the CPU, so
the harness is tested on any machine. DIR/trace.json.gz is the Kineto trace of one training step.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

import d2l_extras as dx

MiB = 2 ** 20


def _seconds(fn: Callable[[], object]) -> float:
    """Median seconds of a warm call of fn on the GPU (dx.measure: synchronized, repeated)."""
    return dx.measure(fn, devices=[torch.device("cuda")]).median


def tf32() -> tuple[str, dict]:
    """float32 matmul TFLOP/s with TF32 off and on; what cuDNN's TF32 switch says by default."""
    n, dev = 8192, torch.device("cuda")
    a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
    rates = {}
    for allowed in (False, True):
        with dx.allow_tf32(allowed):
            rates["tf32" if allowed else "float32"] = 2 * n ** 3 / _seconds(lambda: a @ b) / 1e12
    cudnn = bool(torch.backends.cudnn.allow_tf32)
    figures = {**rates, "cudnn_allow_tf32": cudnn}
    return (f"{n}^3 float32 {rates['float32']:.1f} TFLOP/s, as TF32 {rates['tf32']:.1f} TFLOP/s "
            f"({rates['tf32'] / rates['float32']:.1f}x); cuDNN TF32 by default: {cudnn}"), figures


def reduce_overhead() -> tuple[str, dict]:
    """A 5-operator MLP at batch 1: eager against mode='reduce-overhead', and the compile time."""
    dev = torch.device("cuda")
    mlp = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                              torch.nn.ReLU(), torch.nn.Linear(256, 256)).to(dev)
    x = torch.randn(1, 256, device=dev)
    compiled = torch.compile(mlp, mode="reduce-overhead")
    start = time.perf_counter()
    with torch.no_grad():
        for _ in range(3):  # CUDA graphs record on the second or third call
            compiled(x)
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - start
        eager = _seconds(lambda: mlp(x))
        graphed = _seconds(lambda: compiled(x))
    figures = {"eager_us": eager * 1e6, "reduce_overhead_us": graphed * 1e6, "compile_s": compile_s}
    return (f"eager {eager * 1e6:.1f} us, reduce-overhead {graphed * 1e6:.1f} us "
            f"({eager / graphed:.2f}x), first calls {compile_s:.1f} s"), figures


def sine() -> tuple[str, dict]:
    """GB/s of torch.sin on 1 M and 64 M floats: is the small one launch-bound?"""
    dev, figures = torch.device("cuda"), {}
    for n in (2 ** 20, 2 ** 26):
        x = torch.randn(n, device=dev)
        y = torch.empty_like(x)
        figures[f"{n // 2 ** 20}M_GBps"] = 8 * n / _seconds(lambda: torch.sin(x, out=y)) / 1e9
    return f"sin 1M {figures['1M_GBps']:.0f} GB/s, 64M {figures['64M_GBps']:.0f} GB/s", figures


def copies() -> tuple[str, dict]:
    """Host-to-device GB/s, 256 MiB from pageable and from pinned memory."""
    dev = torch.device("cuda")
    pageable = dx.transfer_rate(256 * MiB, "cpu", dev, pinned=False).value   # notebook 04's
    pinned = dx.transfer_rate(256 * MiB, "cpu", dev, pinned=True).value
    return (f"H2D 256 MiB pageable {pageable:.1f} GB/s, pinned {pinned:.1f} GB/s",
            {"pageable_GBps": pageable, "pinned_GBps": pinned})


def launches() -> tuple[str, dict]:
    """Tiny kernels: the CPU's time to queue one vs the GPU's time per kernel, from events."""
    dev, n = torch.device("cuda"), 5000
    x = torch.zeros(1, device=dev)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for _ in range(n):
        x.add_(1.0)
    queued = (time.perf_counter() - t0) / n
    end.record()
    end.synchronize()
    gpu = start.elapsed_time(end) / 1e3 / n
    return (f"add_ queued in {queued * 1e6:.2f} us, GPU {gpu * 1e6:.2f} us per kernel",
            {"queue_us": queued * 1e6, "gpu_us": gpu * 1e6})


def resnet_agreement() -> tuple[str, dict]:
    """Largest |CPU - CUDA| of dx.resnet18's output, TF32 off and as torch leaves it."""
    torch.manual_seed(0)
    net, x = dx.resnet18().eval(), torch.randn(8, 1, 96, 96)
    with torch.no_grad():
        ref = net(x).double()
        cuda = net.to("cuda")
        default = (cuda(x.cuda()).double().cpu() - ref).abs().max().item()
        with dx.parallel.strict_float32():
            strict = (cuda(x.cuda()).double().cpu() - ref).abs().max().item()
    return (f"ResNet-18 CPU vs CUDA max |diff| {default:.1e} as set, {strict:.1e} strict float32",
            {"max_diff": default, "max_diff_strict": strict, "scale": ref.abs().max().item()})


def snapshot() -> tuple[str, dict]:
    """Seconds to take a memory snapshot of one step, with stacks='python' (05's exercise)."""
    dev = torch.device("cuda")
    net = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(8)]).to(dev)
    torch.cuda.memory._record_memory_history(max_entries=100000, stacks="python")
    try:
        net(torch.randn(256, 1024, device=dev)).sum().backward()
        start = time.perf_counter()
        snap = torch.cuda.memory._snapshot()
        seconds = time.perf_counter() - start
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    events = sum(len(t) for t in snap.get("device_traces", []))
    return f"snapshot of {events} events in {seconds:.2f} s", {"seconds": seconds, "events": events}


def peers() -> tuple[str, dict]:
    """Peer access as reported, and a 16 MiB copy 0 -> 1 checked, where there are two GPUs."""
    k = torch.cuda.device_count()
    if k < 2:
        return "one GPU: no peers", {"gpus": k}
    reported = torch.cuda.can_device_access_peer(0, 1)  # NVLink or PCIe P2P
    x = torch.arange(4 * MiB, device="cuda:0", dtype=torch.float32)
    ok = bool(torch.equal(x.to("cuda:1").cpu(), x.cpu()))
    return (f"{k} GPUs, peer access 0->1 reported {reported}, a copy 0->1 correct: {ok}",
            {"gpus": k, "reported": reported, "copy_ok": ok})


GPU_PROBES = [tf32, reduce_overhead, sine, copies, launches, resnet_agreement, snapshot, peers]


def training_trace(path: Path) -> tuple[str, dict]:
    """Kineto trace of one TinyGPT training step (after two warm-up steps), gzipped to `path`."""
    dev = dx.default_device()
    d, heads, layers, seq, batch = (384, 6, 6, 256, 64) if dev.type == "cuda" else (64, 4, 2, 64, 8)
    model = dx.TinyGPT(128, seq, d, heads, layers).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    X = torch.randint(0, 128, (batch, seq), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(X).flatten(0, 1).float(), X.flatten()).backward()
        opt.step()

    step(), step()
    start = time.perf_counter()
    trace = dx.profile_trace(step, [dev])  # synchronized; fails if CUDA ran but no kernel shows
    wall = time.perf_counter() - start
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(trace, f)
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    busy = sum(e.get("dur", 0) for e in kernels) / 1e6
    top: dict[str, float] = {}
    for e in kernels:
        top[e["name"][:60]] = top.get(e["name"][:60], 0.0) + e.get("dur", 0) / 1e3
    top5 = sorted(top.items(), key=lambda kv: -kv[1])[:5]
    figures = {"device": str(dev), "shape": [d, heads, layers, seq, batch], "wall_ms": wall * 1e3,
               "kernels": len(kernels), "gpu_busy_ms": busy * 1e3, "top_kernels_ms": top5}
    return (f"one TinyGPT step ({dev}) {wall * 1e3:.1f} ms under the profiler, {len(kernels)} "
            f"kernels busy {busy * 1e3:.1f} ms"), figures


def environment(path: Path) -> None:
    """Write the GPU, driver and software versions, and `nvidia-smi -q`, to `path`."""
    lines = [f"python {sys.version.split()[0]} ({sys.executable})", f"torch {torch.__version__}",
             f"cuda {torch.version.cuda}", f"cuda available {torch.cuda.is_available()}"]
    if torch.cuda.is_available():
        try:
            lines += [f"arch list {torch.cuda.get_arch_list()}",
                      f"cudnn {torch.backends.cudnn.version()}",
                      f"nccl {torch.cuda.nccl.version()}"]
            lines += [f"gpu {i}: {torch.cuda.get_device_name(i)}, capability "
                      f"{torch.cuda.get_device_capability(i)}"
                      for i in range(torch.cuda.device_count())]
        except Exception as err:  # a version the build cannot tell: say so, keep the rest
            lines.append(f"versions: {type(err).__name__}: {err}")
    for module in ("triton", "numpy", "nbclient", "ipykernel"):
        try:
            lines.append(f"{module} {__import__(module).__version__}")
        except Exception as err:  # absent, or broken: say which
            lines.append(f"{module}: {type(err).__name__}")
    smi = shutil.which("nvidia-smi")
    if smi:
        run = subprocess.run([smi, "-q"], capture_output=True, text=True, timeout=60)
        lines += ["", "$ nvidia-smi -q", run.stdout + run.stderr]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def run_probe(name: str, probe: Callable[[], tuple[str, dict]]) -> dict:
    """Run one probe; print and return its line and figures, or its error."""
    start = time.perf_counter()
    try:
        line, figures = probe()
        row = {"probe": name, "line": line, "figures": figures}
    except Exception as err:  # one probe failing must not hide the others
        row = {"probe": name, "line": f"FAILED: {type(err).__name__}: {err}"[:300], "failed": True}
    row["seconds"] = round(time.perf_counter() - start, 2)
    print(f"probe {name}: {row['line']}", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for probes.json etc.")
    out = parser.parse_args(argv).out
    out.mkdir(parents=True, exist_ok=True)
    environment(out / "env.txt")
    cuda = torch.cuda.is_available()
    rows = [run_probe(p.__name__, p) if cuda else
            {"probe": p.__name__, "line": "skipped: no CUDA device", "skipped": True}
            for p in GPU_PROBES]
    rows.append(run_probe("training_trace", lambda: training_trace(out / "trace.json.gz")))
    (out / "probes.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 1 if any(r.get("failed") for r in rows) else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
