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
