# What 01-compilers-and-interpreters.ipynb measured, for `make report`: run in its kernel after its
# last cell (tools/report.py; make test runs it too, through nbval).
dx.record("mlp_eager_s", base.median, "s",
          "MLP 512-256-128-2, batch 1, eager, median per call")
if compiles:
    dx.record("mlp_compiled_s", mlp["compiled"].median, "s",
              "same MLP, torch.compile default mode")
    dx.record("mlp_compile_ratio", base.median / mlp["compiled"].median, "x",
              "eager time / compiled time (above 1: faster)")
    dx.record("mlp_first_call_s", cold["compiled"], "s",
              "first compiled call, empty cache, process compiled before")
    dx.record("mlp_first_call_cached_s", cached["compiled"], "s",
              "first compiled call, compiling with the cache filled")
    dx.record("fusion_speedup", speedup.speedup.value, "x", f"{chain_ops} "
              f"elementwise ops, {n:,} floats, eager / compiled ({regime})")
    dx.record("fusion_fused_vs_copy", fused["compiled"].median / copy_x, "x",
              "fused time / time of a copy of x (the same bytes)")
if "reduce-overhead" in mlp:
    dx.record("mlp_reduce_overhead_s", mlp["reduce-overhead"].median, "s",
              "same MLP, mode='reduce-overhead' (CUDA graphs), replays")
    dx.record("mlp_graph_capture_s", mlp["reduce-overhead"].cold, "s",
              "its second call, which records the CUDA graph")
    dx.record("mlp_reduce_overhead_ratio",
              dx.compare(mlp["reduce-overhead"], vs_eager["reduce-overhead"]).speedup.value,
              "x", "eager time / CUDA-graph time, the 5-operator MLP")
    dx.record("chain_reduce_overhead_ratio", graph.speedup.value, "x",
              "eager time / CUDA-graph time, 20 layers at batch 1 (40 launches)")
dx.record("fusion_eager_vs_traffic", checks["eager"].ratio, "x",
          f"eager time / time of its {streams} tensors at the copy's rate")
