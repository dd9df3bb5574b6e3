# What 03-automatic-parallelism.ipynb measured, for `make report`, and what it claims of a GPU,
# checked where one ran: run in its kernel after its last cell (tools/report.py; make test runs
# it too, through nbval, so a GPU runner's make test fails when a claim does not hold there).
dx.record("independent_work_ratio", ratio_devices.value, "1",
          f"{len(xs)} workloads together / one after the other "
          f"({'GPUs' if on_gpus else 'two 1-thread CPU workers'})")
dx.record("independent_work_speedup", independent_speedup.value, "x",
          f"predicted {predicted:.2f}x"
          + ("" if on_gpus else f", {held:.1f} of {cores} cores held by others"))
dx.record("cpu_threads_speedup", speedup.speedup.value, "x",
          f"{threads} intra-op threads vs one")
dx.record("cpu_overlap_efficiency", t_once.median / t_max, "1",
          "two 1-thread CPU workers (matmul, copy) at once / longer alone")
dx.record("cpu_overlap_hidden_share", hidden.value, "1",
          "share of the shorter CPU worker hidden under the longer")
if one_gpu:
    dx.record("gpu_cpu_ratio", ratio_gpu_cpu.value, "1",
              "GPU + CPU together / sum alone, balanced")
    dx.record("two_streams_speedup", streams.speedup.value, "x",
              "one stream / two streams, large products")
if gpu_copy:
    dx.record("overlap_efficiency", efficiency.value, "1",
              f"T_both / max(T_compute, T_copy) on {accel}")
    dx.record("naive_copy_efficiency", naive_efficiency.value, "1",
              "same, one stream, pageable memory")
if on_cuda and kernels and copies:
    dx.record("overlap_hidden_share", hidden_gpu, "1",
              "share of the shorter activity overlapped (profiler)")

if on_gpus:  # the GPUs worked at the same time
    assert ratio_devices.high < 0.9, \
        f"{len(xs)} GPUs together took {ratio_devices} of their sum"
if one_gpu:  # the CPU computed while the GPU did
    assert ratio_gpu_cpu.high < 0.9, \
        f"GPU + CPU took {ratio_gpu_cpu} of their sum: was the CPU work issued first?"
if gpu_copy:  # the side stream hid most of the shorter activity
    assert efficiency.low <= 1.15, f"overlap efficiency {efficiency} > 1.15"
if on_cuda:  # copies on their own stream, under the products
    assert kernels and copies, "no kernel or copy traced: is CUPTI usable?"
    copy_lanes = {e.lane for e in copies}
    assert copy_lanes.isdisjoint(e.lane for e in kernels), copy_lanes
    assert hidden_gpu > 0.5, f"only {hidden_gpu:.0%} of the shorter overlapped"
