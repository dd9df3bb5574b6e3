"""Shared helpers for the Computational Performance notebooks (d2l, chapter 12).

`import d2l_extras as dx`, then `dx.NAME`: each public name below is imported from its module
on first use. Importing lazily keeps `import d2l_extras` fast for every torchrun worker, and
lets `python -m d2l_extras.ring` (or .kvstore, .ddp) run a module that the package has not
already imported (Python warns about that case).
"""
import importlib

# One module per concept, and its public names.
_EXPORTS = {
    # argument checks, used inside the package
    "checks": [],
    # the set-up cell's second half: versions checked, what is missing installed
    "bootstrap": ["setup"],
    "profiles": ["by_profile", "profile"],
    # problem sizes per experiment, device kind and free memory
    "sizes": ["problem_size"],
    # figures a notebook measured, collected by `make report`
    "report": ["record"],
    "hardware": ["accelerators", "cpu_name", "cuda_arch_supported", "cuda_gpus", "default_device",
                 "devices", "fit_to_memory", "hardware_report", "square_side"],
    # measurements with their noise: one way to time, one comparison, predictions in a band
    "timing": ["Benchmark", "format_seconds", "max_time", "measure", "measure_interleaved",
               "synchronize"],
    "bands": ["Band", "check_prediction", "compare", "errorbars"],
    "plotting": ["MIN_POINTS", "bar_chart", "log_axis", "plot_memory_timeline", "plot_roofline",
                 "plot_timeline", "seconds_axis", "use_slide_style"],
    "compiler": ["compile_support", "fresh_compile_cache", "gpu_compile_rule", "last_level_cache",
                 "maybe_compile"],
    "distributed": ["WorkerError", "init_worker", "launch", "torchrun_command",
                    "worker_device"],
    # asynchronous computation, automatic parallelism: profiler timelines
    "profiling": ["TimelineEvent", "busy_time", "launch_stacks", "overlap_time", "profile_trace",
                  "record_timeline", "trace_events"],
    # hardware: measurements of this machine
    "hwbench": ["cache_sizes", "default_matmul_sizes", "default_sweep_sizes",
                "dtype_supported", "host_device_bandwidth", "launch_overhead", "loopback_network",
                "machine_load", "matmul_rate", "one_thread_if_busy", "p2p_access", "peer_bandwidth",
                "published_peak", "roofline", "storage_reads",
                "tensor_core_dtypes"],
    # models of compute: t = max(overhead, bytes / bandwidth, flops / peak), the roofline
    "perfmodel": ["PerformanceModel", "REGIMES", "Roof", "memory_regime", "roof_violations"],
    # memory and precision: where training's memory goes, counted and followed over a step
    "memory": ["CachingAllocatorModel", "SavedTensors", "memory_timeline",
               "model_state_bytes", "peak_memory", "snapshot_series", "training_state_bytes"],
    # ... and number formats, float32 to fp8, by bits, range and step, measured by casting
    "precision": ["FLOAT_FORMATS", "format_limits", "measure_format", "plot_formats",
                  "round_mantissa"],
    # multiple GPUs: data, models, data parallelism (ddp.py runs under torchrun)
    "data": ["book_fashion_mnist", "load_images"],
    "models": ["init_weights", "lenet_params", "resnet18"],
    "parallel": ["allow_tf32", "evaluate_accuracy", "even_batch_size", "replicate",
                 "set_float32_precision", "sgd", "strict_float32"],
    # parameter servers: cost model, ring allreduce, sharded key-value store
    "communication": ["SCALINGS", "plot_sync_costs", "ring_time", "server_time", "speedup",
                      "sync_time", "transfer_time"],
    "ring": ["bus_bandwidth", "check_input", "message_sizes_mb", "process_counts",
             "ring_allreduce"],
    "kvstore": ["acknowledged_steps", "committed_step"],
    # capstone: a character-level transformer on The Time Machine (notebook 09, its DDP worker)
    "transformer": ["TinyGPT", "capstone_sizes", "lm_loss", "load_text"],
    # exercises: a one-line check of a student's answer (worked solutions, make student)
    "exercises": ["check"],
}
_OWNER = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_OWNER)


def __getattr__(name: str):
    """Import a public name (or a module, as in dx.kvstore) the first time it is used."""
    if name in _EXPORTS:
        return importlib.import_module(f".{name}", __name__)
    if name not in _OWNER:
        raise AttributeError(f"module 'd2l_extras' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_OWNER[name]}", __name__), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_OWNER) | set(_EXPORTS))
