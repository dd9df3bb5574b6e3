# What 09-capstone-fast-transformer.ipynb measured, for `make report`: run in its kernel after its
# last cell (tools/report.py; make test runs it too, through nbval).
dx.record("capstone_baseline_tokens_per_s",
          results["eager fp32"]["rate"].value, "tokens/s", f"{device}")
dx.record("capstone_best_tokens_per_s", results[last]["rate"].value,
          "tokens/s", last)
dx.record("capstone_best_speedup", results[last]["rate"].value
          / results["eager fp32"]["rate"].value, "x", last)
dx.record("capstone_overhead_share", 100 * share["overhead"], "%",
          "baseline")
dx.record("capstone_checkpoint_memory_saving", 100 * saving, "%", "every block")
dx.record("capstone_final_loss", final_loss, "nats", f"{len(curve)} steps")
import re  # MFU per lever, each against the peak of its products' format (peak_of: cached)
for name, r in results.items():
    peak, kind = peak_of(r["cfg"].dtype, r["cfg"].tf32)
    if math.isfinite(peak):   # nan: a GPU without a data sheet in hwbench
        dx.record(f"capstone_mfu_{re.sub(r'[^a-z0-9]+', '_', name.lower()).strip('_')}",
                  100 * flops * r["rate"].value / peak, "%",
                  f"of {peak / 1e9:,.0f} GFLOP/s, {kind} ({where})")
for peak, kind in {peak_of(r["cfg"].dtype, r["cfg"].tf32) for r in results.values()}:
    if math.isfinite(peak):
        dx.record(f"capstone_peak_{str(kind).removeprefix('torch.')}_gflops", peak / 1e9,
                  "GFLOP/s", where)
dx.record("capstone_model_flops_per_token", flops, "FLOP", "6N + 12LdT")
