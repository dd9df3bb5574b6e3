# What 03-automatic-parallelism.ipynb measured, for `make report`, and what it claims of a GPU,
# checked where one ran: run in its kernel after its last cell (tools/report.py; make test runs
# it too, through nbval, so a GPU runner's make test fails when a claim does not hold there).
ratio_devices = t_once.band / t_turn.band        # together / in turn
dx.record("independent_work_ratio", ratio_devices.value, "1",
          f"{len(xs)} workloads together / one after the other "
          f"({'GPUs' if on_gpus else 'two 1-thread CPU workers'})")
dx.record("independent_work_speedup", independent_speedup.value, "x",
          f"in turn / together, at most {len(xs)}x")
dx.record("cpu_threads_speedup", threads_speedup.value, "x",
          f"{threads} intra-op threads vs one")
t_once_cpu = overlap["at once"]
dx.record("cpu_overlap_efficiency", t_once_cpu.median / t_max, "1",
          "two 1-thread CPU workers (matmul, copy) at once / longer alone")
hidden = (t_sum - t_once_cpu.band) / (t_sum - t_max)   # share of the shorter hidden
dx.record("cpu_overlap_hidden_share", hidden.value, "1",
          "share of the shorter CPU worker hidden under the longer")
if gpus:
    dx.record("gpu_cpu_ratio", ratio_gpu_cpu.value, "1",
              "GPU + CPU together / sum alone, balanced")
    dx.record("overlap_efficiency", efficiency.value, "1",
              f"T_both / max(T_compute, T_copy) on {g}")
    # From the profiler: the kernels' and the copies' busy times, less the time both streams'
    # work spans, is time they ran at once (at least: gaps where neither ran count against it).
    kernels = [e for e in gpu_events if e.kind == "kernel"]
    copies = [e for e in gpu_events if e.kind == "copy"]
    if kernels and copies:
        k_busy, c_busy = (sum(dx.busy_time(ev).values()) for ev in (kernels, copies))
        hidden_gpu = (k_busy + c_busy - span) / min(k_busy, c_busy)
        dx.record("overlap_hidden_share", hidden_gpu, "1",
                  "share of the shorter activity overlapped (profiler, at least)")

if on_gpus:  # the GPUs worked at the same time
    assert ratio_devices.high < 0.9, \
        f"{len(xs)} GPUs together took {ratio_devices} of their time in turn"
if gpus:  # the CPU computed while the GPU did
    assert ratio_gpu_cpu.high < 0.9, \
        f"GPU + CPU took {ratio_gpu_cpu} of their sum: was the CPU work issued first?"
    # the side stream hid most of the shorter activity
    assert efficiency.low <= 1.15, f"overlap efficiency {efficiency} > 1.15"
    # copies on their own stream, under the products
    assert kernels and copies, "no kernel or copy traced: is CUPTI usable?"
    copy_lanes = {e.lane for e in copies}
    assert copy_lanes.isdisjoint(e.lane for e in kernels), copy_lanes
    assert hidden_gpu > 0.5, f"only {hidden_gpu:.0%} of the shorter overlapped"
