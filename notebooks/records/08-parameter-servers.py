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

if fsdp_ran:  # FSDP2: rank 0's shards, the collectives of one step, seconds per step
    note = f"{job['world']} processes, {job['backend']}"
    for what, key in (("weights", "weights"), ("gradients", "gradients"),
                      ("Adam's moments", "adam_moments")):
        dx.record(f"fsdp_{key}_bytes_rank0", job["bytes"][what][0], "B", note)
    for op, n in job["collectives"].items():
        dx.record(f"fsdp_{op.strip('_')}_per_step", n, "calls", f"{job['depth']} blocks")
    dx.record("fsdp_max_diff", job["max_diff"], "", "parameters after one AdamW step")
    for how in ("fsdp", "ddp"):
        dx.record(f"fsdp_vs_ddp_{how}_ms_per_step", t[how].value * 1e3, "ms", note)
    if job["cuda_peak_bytes"]:
        dx.record("fsdp_cuda_peak_bytes", job["cuda_peak_bytes"], "B", note)
