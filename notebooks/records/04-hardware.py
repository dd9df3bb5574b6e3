# What 04-hardware.ipynb measured, for `make report`: run in its kernel after its
# last cell (tools/report.py; make test runs it too, through nbval).
dx.record("cpu_copy_gbps", copy_gbps.value, "GB/s",
          f"copy of {human(copy_bytes)}, {torch.get_num_threads()} thread(s)")
dx.record("cpu_random_read_ns", random_s.value * 1e9, "ns", "many in flight")
dx.record("storage_sequential_gbps", disk_bytes / whole_s / 1e9, "GB/s", "a file")
dx.record("storage_random_4k_us", block_s.value * 1e6, "us", "one by one")
dx.record("vectorized_speedup", speedup.value, "x", f"2x+y, n={n_axpy}")
for name, value in best.items():
    dx.record(f"cpu_matmul_{name}_gflops", value.value, "GFLOP/s", "best size")
dx.record("cpu_roofline_ridge", roof.ridge, "FLOP/B", "measured together")
dx.record("cpu_dispatch_us", dispatch * 1e6, "us", "tiny operators")
dx.record("loopback_round_trip_us", round_trip.value * 1e6, "us", "1 B")
if tlb_reach:
    dx.record("cpu_tlb_reach_mib", tlb_reach / MiB, "MiB", "4 KiB pages")
gpu = {"gpu_copy_gbps": (gpu_copy, 1, "GB/s"),
       "gpu_launch_queued_us": (queued, 1e6, "us"),
       "gpu_kernel_busy_us": (busy, 1e6, "us"),
       "gpu_launch_waited_us": (waited, 1e6, "us")}
top = {k: max(map(float, v.values())) for k, v in gpu_rates.items()}
gpu.update({f"gpu_matmul_{k}_gflops": (v, 1, "GFLOP/s")
            for k, v in top.items()})
gpu.update({f"h2d_{k}_gbps": (v, 1, "GB/s") for k, v in h2d.items()})
for key, (value, scale, unit) in gpu.items():
    if value is not None:
        dx.record(key, float(value) * scale, unit, str(accel))
if accel is not None:
    dx.record("gpu_roofline_ridge", gpu_roof.ridge, "FLOP/B", str(accel))
