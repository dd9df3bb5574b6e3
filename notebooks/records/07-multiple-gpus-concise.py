# What 07-multiple-gpus-concise.ipynb measured, for `make report`: run in its kernel after its
# last cell (tools/report.py; make test runs it too, through nbval).
for key, res in runs.items():
    dx.record(f"ddp_samples_per_s_{key}", res["samples_per_s"], "samples/s",
              f"ResNet-18 width {res['width']}, {names[key]}, "
              f"batch {res['batch_size']}")
if gpu is not None:  # another width and batch than the runs above: not compared
    dx.record("ddp_samples_per_s_gpu", gpu["samples_per_s"], "samples/s",
              f"ResNet-18 width {gpu['width']}, 1 process ({gpu['device']}) "
              f"alone, batch {gpu['batch_size']}")
dx.record("ddp_speedup", speedup.value, "x",
          f"{k} processes / 1, samples per second")
dx.record("ddp_accuracy_gap", abs(acc_k - acc_1), "1", f"final test accuracy, 1 vs {k}")
dx.record("ddp_allreduce_hidden", ov["overlapped_seconds"] / ov["allreduce_seconds"], "1",
          "share of the allreduce time before backward ended")
dx.record("ddp_allreduce_exposed_s", ov["exposed_seconds"], "s", "one step, rank 0")
dx.record("ddp_comm_s", comm.value, "s",
          f"sync step - no_sync step, {k} processes, batch {plan.per_process}")
for s in predicted:
    dx.record(f"ddp_{s}_speedup_predicted", predicted[s], "x",
              f"{s} scaling, {k} processes, from t_compute and the allreduce")
    dx.record(f"ddp_{s}_speedup_measured", measured[s].value, "x",
              f"{s} scaling, {k} processes, timed steps")
for name, part in (("mlp", tp["mlp"]), ("block", tp["block"])):  # tensor parallelism
    what = "MLP d -> 4d -> d" if name == "mlp" else "TinyGPT block"
    dx.record(f"tp_max_diff_{name}", part["max_diff"], "1",
              f"{what}, {tp_k} processes against 1, largest output difference")
    for way in ("forward", "backward"):
        dx.record(f"tp_allreduces_{way}_{name}", part[way].get("all_reduce", 0), "1",
                  f"{what}, {tp_k} processes, CommDebugMode, one {way}")
    dx.record(f"tp_param_share_{name}", part["local_params"] / part["params"], "1",
              f"{what}: parameters one of {tp_k} processes holds")
for key, shape in tp["mlp"]["shards"].items():
    if key.endswith("weight"):
        dx.record(f"tp_shard_{key.replace('.', '_')}", shape[0] * shape[1], "numbers",
                  f"MLP width 64, {tp_k} processes: local shard {shape[0]} x {shape[1]}")
