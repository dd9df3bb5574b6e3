"""Probes of the GPU paths most likely to mislead: tests marked `gpu`, run by make gpu-check.

Each probe measures one thing and reports one line, printed and attached to the JUnit XML as the
property "probe" (gpu-check's summary lists them); what a probe can check, it asserts. Without
CUDA they skip, except the training-step trace, which runs on the CPU too and writes
trace.json.gz (Kineto) to GPU_CHECK_TRACE_DIR when set, else to the test's tmp_path.
"""
import gzip
import json
import os
import time
from collections import Counter

import pytest
import torch
import torch.nn.functional as F

import d2l_extras as dx

MiB = 2 ** 20
CUDA = torch.device("cuda")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
pytestmark = pytest.mark.gpu


@pytest.fixture
def probe(record_property):
    """probe(line): print a probe's one-line figure and record it as the property "probe"."""
    def report(line: str) -> None:
        print(f"probe: {line}")
        record_property("probe", line)
    return report


def _seconds(fn) -> float:
    """Median seconds of a warm call of fn on the GPU (dx.measure: synchronized, repeated)."""
    return dx.measure(fn, devices=[CUDA]).median


@needs_cuda
def test_tf32(probe):
    """float32 matmul TFLOP/s with TF32 off and on; what cuDNN's TF32 switch says by default."""
    n = 8192
    a, b = torch.randn(n, n, device=CUDA), torch.randn(n, n, device=CUDA)
    rates, cudnn = {}, bool(torch.backends.cudnn.allow_tf32)  # as torch leaves it
    for allowed in (False, True):
        with dx.allow_tf32(allowed):
            rates[allowed] = 2 * n ** 3 / _seconds(lambda: a @ b) / 1e12
    probe(f"{n}^3 float32 {rates[False]:.1f} TFLOP/s, as TF32 {rates[True]:.1f} TFLOP/s "
          f"({rates[True] / rates[False]:.1f}x); cuDNN TF32 by default: {cudnn}")


@needs_cuda
def test_reduce_overhead(probe):
    """A 5-operator MLP at batch 1: eager against mode='reduce-overhead', and the compile time."""
    mlp = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                              torch.nn.ReLU(), torch.nn.Linear(256, 256)).to(CUDA)
    x = torch.randn(1, 256, device=CUDA)
    compiled = torch.compile(mlp, mode="reduce-overhead")
    start = time.perf_counter()
    with torch.no_grad():
        for _ in range(3):  # CUDA graphs record on the second or third call
            compiled(x)
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - start
        eager, graphed = _seconds(lambda: mlp(x)), _seconds(lambda: compiled(x))
    probe(f"eager {eager * 1e6:.1f} us, reduce-overhead {graphed * 1e6:.1f} us "
          f"({eager / graphed:.2f}x), first calls {compile_s:.1f} s")


@needs_cuda
def test_sine(probe):
    """GB/s of torch.sin on 1 M and 64 M floats: is the small one launch-bound?"""
    rates = []
    for n in (2 ** 20, 2 ** 26):
        x = torch.randn(n, device=CUDA)
        y = torch.empty_like(x)
        rates.append(8 * n / _seconds(lambda: torch.sin(x, out=y)) / 1e9)
    probe(f"sin 1M {rates[0]:.0f} GB/s, 64M {rates[1]:.0f} GB/s")


@needs_cuda
def test_copies(probe):
    """Host-to-device GB/s, 256 MiB from pageable and from pinned memory (notebook 04's)."""
    pageable, pinned = (dx.transfer_rate(256 * MiB, "cpu", CUDA, pinned=p).value
                        for p in (False, True))
    probe(f"H2D 256 MiB pageable {pageable:.1f} GB/s, pinned {pinned:.1f} GB/s")


@needs_cuda
def test_launches(probe):
    """Tiny kernels: the CPU's time to queue one vs the GPU's time per kernel, from events."""
    n, x = 5000, torch.zeros(1, device=CUDA)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for _ in range(n):
        x.add_(1.0)
    queued = (time.perf_counter() - t0) / n
    end.record()
    end.synchronize()
    assert x.item() == n
    probe(f"add_ queued in {queued * 1e6:.2f} us, GPU "
          f"{start.elapsed_time(end) * 1e3 / n:.2f} us per kernel")


@needs_cuda
def test_resnet_agreement(probe):
    """dx.resnet18 on CPU and CUDA agree to float32 under strict float32; as set, it is shown."""
    torch.manual_seed(0)
    net, x = dx.resnet18().eval(), torch.randn(8, 1, 96, 96)
    with torch.no_grad():
        ref = net(x).double()
        cuda = net.to(CUDA)
        default = (cuda(x.cuda()).double().cpu() - ref).abs().max().item()
        with dx.parallel.strict_float32():
            strict = (cuda(x.cuda()).double().cpu() - ref).abs().max().item()
    scale = ref.abs().max().item()
    probe(f"ResNet-18 CPU vs CUDA max |diff| {default:.1e} as set, {strict:.1e} strict float32 "
          f"(outputs up to {scale:.2f})")
    # float32 on the CPU is within about 1e-7 of the outputs' scale, TF32 about 1e-4 of it
    assert strict <= 3e-5 * scale, "strict float32 differs as TF32 would: TF32 stayed on"


@needs_cuda
def test_snapshot(probe):
    """Seconds to take a memory snapshot of one step, with stacks='python' (05's exercise)."""
    net = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(8)]).to(CUDA)
    torch.cuda.memory._record_memory_history(max_entries=100000, stacks="python")
    try:
        net(torch.randn(256, 1024, device=CUDA)).sum().backward()
        start = time.perf_counter()
        snap = torch.cuda.memory._snapshot()
        seconds = time.perf_counter() - start
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    events = sum(len(t) for t in snap.get("device_traces", []))
    probe(f"snapshot of {events} events in {seconds:.2f} s")
    assert events > 0, "the snapshot recorded no allocation of the step"


@needs_cuda
def test_peers(probe):
    """Peer access as reported, and a 16 MiB copy 0 -> 1 checked, where there are two GPUs."""
    k = torch.cuda.device_count()
    if k < 2:
        pytest.skip("needs two CUDA GPUs: one GPU has no peers")
    reported = torch.cuda.can_device_access_peer(0, 1)  # NVLink or PCIe P2P
    x = torch.arange(4 * MiB, device="cuda:0", dtype=torch.float32)
    probe(f"{k} GPUs, peer access 0->1 reported {reported}")
    assert torch.equal(x.to("cuda:1").cpu(), x.cpu()), "a copy from GPU 0 to GPU 1 came out wrong"


def test_training_trace(probe, tmp_path):
    """Kineto trace of one TinyGPT training step (after two warm-up steps), gzipped."""
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
    path = os.path.join(os.environ.get("GPU_CHECK_TRACE_DIR") or tmp_path, "trace.json.gz")
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(trace, f)
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    busy = Counter()
    for e in kernels:
        busy[e["name"][:60]] += e.get("dur", 0) / 1e3
    top = ", ".join(f"{name} {ms:.1f} ms" for name, ms in busy.most_common(3))
    probe(f"one TinyGPT step ({dev}) {wall * 1e3:.1f} ms under the profiler, {len(kernels)} "
          f"kernels busy {sum(busy.values()):.1f} ms{': ' + top if top else ''}")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    assert any(e.get("cat") == "cpu_op" for e in events), "the trace holds no operator"
