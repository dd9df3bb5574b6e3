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
