# What 01-compilers-and-interpreters.ipynb measured, for `make report`: run in its kernel after its
# last cell (tools/report.py; make test runs it too, through nbval).
dx.record("mlp_eager_s", mlp["eager"].median, "s",
          "MLP 512-256-128-2, batch 1, eager, median per call")
if compiles:
    dx.record("mlp_compiled_s", mlp["compiled"].median, "s",
              "same MLP, torch.compile default mode")
    dx.record("mlp_compile_ratio", mlp["eager"].median / mlp["compiled"].median, "x",
              "eager time / compiled time (above 1: faster)")
    dx.record("mlp_first_call_s", mlp["compiled"].cold, "s",
              "first compiled call (capture and compile), in a process compiled before")
if chain_compiled is not chain:
    dx.record("fusion_speedup", speedup, "x",
              f"{len(ops)} elementwise ops, {n:,} floats, eager / compiled")
    dx.record("fusion_fused_vs_copy", fused["compiled"].median / fused["copy of x"].median,
              "x", "fused time / time of a copy of x (the same bytes)")
if device.type == "cuda" and compiles:  # the CUDA graph cell ran
    dx.record("chain_reduce_overhead_ratio", graph.speedup.value, "x",
              "eager time / CUDA-graph time, 20 layers at batch 1 (40 launches)")
    dx.record("chain_graph_capture_s", runs["graph"].cold, "s",
              "the graphed model's second call, which records the CUDA graph")
for name in ("eager", "compiled", "copy of x"):
    dx.record(f"fusion_rate_{name.split()[0]}_GBps", rate[name], "GB/s",
              f"{name}: bytes of the tensors it moves / median time")
