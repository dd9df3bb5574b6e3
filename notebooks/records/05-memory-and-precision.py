# What 05-memory-and-precision.ipynb measured, for `make report`: run in its kernel after its
# last cell (tools/report.py; make test runs it too, through nbval).
dx.record("state_bytes_per_param", sum(measured[k] for k in (
    "parameters", "gradients", "optimizer state")) / n_params, "B",
          "float32 Adam, measured")
dx.record("fp16_zero_gradients", 100 * fp16_zeros, "%", "logits, no scaling")
dx.record("fp16_scaled_zero_gradients", 100 * scaled_zeros, "%", "GradScaler")
dx.record(f"{name16}_step_speedup", times["float32"].median / times[name16].median, "x",
          f"MLP on {device}")
dx.record("fp16_product_slowdown", times["float16 + scaler product"].median
          / times["float32 product"].median, "x", f"a layer's product on {device}")
dx.record("checkpoint_time_vs_model", step_s[1].median / model[1], "x",
          "every block, measured / (none + half a forward)")
dx.record("checkpoint_memory_saving", peak[0] / peak[1], "x",
          f"{n_blocks} blocks, every block")
dx.record("checkpoint_time_cost", step_s[1].median / step_s[0].median, "x",
          "every block")
dx.record("accumulation_memory_saving", accum[1] / accum[4], "x",
          "4 micro-batches")
