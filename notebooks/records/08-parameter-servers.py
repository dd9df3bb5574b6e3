# What 08-parameter-servers.ipynb measured, for `make report`, and where its jobs ran, checked:
# run in its kernel after its last cell (tools/report.py; make test runs it too, through nbval).
for n, bench in benches.items():
    (alg, bus), mb = at_largest(n), bench["sizes_bytes"][-1] / 2**20
    note = f"{bench['backend']}, {mb:.0f} MB"
    dx.record(f"ring_algbw_{n}proc", alg.value / 1e9, "GB/s",
              f"our ring, {note}")
    dx.record(f"ring_busbw_{n}proc", bus.value / 1e9, "GB/s",
              f"our ring, {note}")
    dx.record(f"allreduce_busbw_{n}proc",
              at_largest(n, "allreduce")[1].value / 1e9, "GB/s",
              f"dist.all_reduce, {note}")
for how, seconds in per_step.items():
    dx.record(f"{how}_ms_per_step", seconds.value * 1e3, "ms",
              f"{steps} steps, {nproc} processes, {compare['backend']}")

for n, bench in benches.items():  # each job ran where dx.init_worker puts n processes
    assert bench["backend"] == ("nccl" if dx.distributed.worker_device(n).type == "cuda"
                                else "gloo"), n
