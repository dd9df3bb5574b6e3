# What 06-multiple-gpus-from-scratch.ipynb measured, for `make report`: run in its kernel after its
# last cell (tools/report.py; make test runs it too, through nbval).
kind = ("GPUs" if real else "CPU threads as simulated devices" if cpu
        else "simulated devices")
dx.record("lenet_k_devices_time_ratio", 1 / speedup.value, "x",
          f"epoch time, {k} {kind} / 1 device")
dx.record("lenet_k_devices_drift", drift_k[-1], "",
          f"parameter drift after {num_epochs} epochs, {k} devices vs 1")
dx.record("lenet_reversed_drift", drift_r[-1], "",
          f"parameter drift after {num_epochs} epochs, 1 device, "
          "each batch reversed")
dx.record("lenet_predicted_speedup", predicted, "x",
          f"scaling model, {k} {kind}, from one device's steps")
dx.record("lenet_slice_time_share", t_b / t_B, "1",
          f"t_compute(B/{k}) / t_compute(B), B = {batch_size}, one device")
dx.record("lenet_slices_at_once", slices_at_once(k), "1",
          f"slices computed at once, {k} devices ({cores} cores here)")
dx.record("lenet_load_average", load, "1",
          f"1-minute load average after the {k}-device run, {cores} cores")
