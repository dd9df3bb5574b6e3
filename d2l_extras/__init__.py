"""Shared helpers for the Computational Performance notebooks (d2l, chapter 12)."""
# Each block re-exports one module's public names; keep one module per concept.
from .profiles import PROFILES, by_profile, profile
from .hardware import (accelerators, cpu_name, default_device, devices, fit_to_memory,
                       free_memory, hardware_report)
from .timing import Benchmark, Measurement, format_seconds, synchronize
from .plotting import bar_chart
from .compiler import compile_support, maybe_compile
from .launch import (LaunchResult, WorkerError, free_port, init_worker, launch, save_result,
                     torchrun_command)
# issue 3 (asynchronous computation, automatic parallelism): timelines and matrix sizing
from .hardware import square_side
from .plotting import plot_timeline
from .profiling import TimelineEvent, busy_time, profile_trace, record_timeline, trace_events
# issue 4 (hardware): measurements of this machine and the roofline picture
from .hwbench import (Gather, Kernel, Loopback, LoopVsVector, Rate, StorageReads, attainable,
                      cache_sizes, cache_sweep, copy_bandwidth, dtype_supported, gather_time,
                      host_device_bandwidth, launch_overhead, loop_vs_vectorized,
                      loopback_network, machine_load, matmul_rate, matmul_sweep, p2p_access,
                      peer_bandwidth, roofline_kernels, storage_reads)
from .plotting import plot_roofline
# issue 5 (multiple GPUs, DDP): data, models, data parallelism; ddp.py runs under torchrun
from .data import ImageData, data_dir, load_data, load_images, read_idx
from .models import Residual, init_weights, lenet, lenet_params, resnet18
from .parallel import (allreduce, evaluate_accuracy, get_params, replicate, sgd, split_batch,
                       train_batch)
# issue 6 (parameter servers): sync cost model, ring allreduce, sharded key-value store
from .costmodel import plot_sync_costs, ring_time, server_time, sync_time, transfer_time
from .ring import (RingStats, bus_bandwidth, reduce_reference, ring_allreduce,
                   ring_allreduce_dist)
from .kvstore import KVStore, acknowledged_steps, committed_step
