# What 03-automatic-parallelism.ipynb measured, for `make report`: run in its kernel after its
# last cell (tools/report.py; make test runs it too, through nbval).
dx.record("independent_work_ratio", ratio_devices.value, "1",
          f"{len(xs)} workloads together / sum alone "
          f"({'replicas' if simulated else 'GPUs'})")
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
