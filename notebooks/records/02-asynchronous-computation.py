# What 02-asynchronous-computation.ipynb measured, for `make report`: run in its kernel after its
# last cell (tools/report.py; make test runs it too, through nbval).
dx.record("async_returned_s", t_returned, "s", f"{reps} products on {device}")
dx.record("async_finished_s", t_finished, "s", f"{reps} products on {device}")
dx.record("model_returned_share", m_returned / m_finished, "1",
          "model: returned / finished")
dx.record("timer_without_barrier_share", seen, "1", "d2l.Benchmark, model")
dx.record("read_wait_s", t_read, "s", "model: reading one value")
dx.record("barrier_every_step_s", measured["every step"].value, "s",
          f"model, {steps} additions")
dx.record("barrier_at_end_s", measured["at the end"].value, "s",
          f"model, {steps} additions")
dx.record("issue_time_t1_s", t1, "s", "model: queueing one addition")
dx.record("compute_time_t2_s", t2, "s", "model: one addition")
dx.record("barrier_time_t3_s", t3, "s", "model: round trip of an empty job")
if device.type == "cuda":
    dx.record("gpu_timer_share", dev_seen, "1", f"d2l.Benchmark, {device}")
    dx.record("gpu_barrier_cost", dev_gain.speedup.value, "1",
              f"{steps} additions, {device}")
