# What 00-performance-model.ipynb measured, for `make report`: run in its kernel after its
# last cell (tools/report.py; make test runs it too, through nbval).
source = f"best measured at n = {others[0]} and {others[1]}"
dx.record("model_small_matmul_share", 100 * flops[small] / peak, "%",
          f"n={small}; peak: {source}")
dx.record("model_large_matmul_share", 100 * flops[large] / peak, "%",
          f"n={large}; peak: {source}")
dx.record("model_bandwidth_gbps", bandwidth / 1e9, "GB/s",
          f"copy of {x.nbytes >> 20} MiB")
dx.record("model_call_overhead_us", overhead.median * 1e6, "us",
          "add of one number")
dx.record("model_sine_over_add", sine_over_add, "x",
          f"{n} floats on {device}")
dx.record("model_sine_peak_gflops", sine_peak / 1e9, "GFLOP/s",
          f"at least: the faster of the sine of {n_in} floats (in the cache) and of {n}")
