"""The DDP job of notebook 07 (d2l_extras.ddp_job and ddp.py): trains under torchrun with gloo,
fails fast, reads its timelines."""
import json
import subprocess
import sys
import time

import pytest
import torch

import d2l_extras as dx
from d2l_extras import ddp, ddp_job

# gloo on the CPU even where GPUs exist, one thread per process: fast and the same everywhere.
GLOO = {"D2L_BACKEND": "gloo", "CUDA_VISIBLE_DEVICES": ""}


def test_help_shows_the_torchrun_commands():
    out = subprocess.run([sys.executable, "-m", "d2l_extras.ddp_job", "--help"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "torch.distributed.run" in out.stdout and "--nnodes=2" in out.stdout
    assert "--sync-bn" in out.stdout


def test_bad_arguments_are_refused():
    with pytest.raises(SystemExit):
        ddp.parse_args(["--epochs", "0"])
    with pytest.raises(SystemExit):
        ddp.parse_args(["--bucket-mb", "0"])
    for bad in (["--time-comm", "-1"], ["--max-steps", "-1"],
                ["--time-comm", "2", "--time-batches", "8", "0"]):
        with pytest.raises(SystemExit):
            ddp.parse_args(bad)
    assert ddp.parse_args(["--time-comm", "3", "--time-batches", "8", "4"]).time_batches == [8, 4]


GB = 10 ** 9


@pytest.mark.parametrize("n_gpus", range(0, 9))
def test_run_plan_for_every_gpu_count(monkeypatch, n_gpus):
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: True)  # as on Linux
    monkeypatch.delenv("D2L_BACKEND", raising=False)
    for batch in (64, 128, 256):
        plan = ddp.run_plan(n_gpus, batch, budget=80 * GB)
        assert plan.k == (n_gpus if n_gpus >= 2 else 2)
        if n_gpus >= 2:  # each GPU gets work enough not to be launch-bound
            assert plan.per_process == dx.problem_size("ddp_batch", "cuda", budget=80 * GB)
        else:  # the global batch asked for, split evenly
            assert plan.batch_size % plan.k == 0 and batch <= plan.batch_size < batch + plan.k
        assert plan.per_process * plan.k == plan.batch_size
        assert plan.device == ("cuda" if n_gpus >= 2 else "cpu")
        assert plan.gpu_alone == (n_gpus == 1)
        assert ("--threads" in plan.args) == (n_gpus < 2)
        for args in (plan.args, plan.gpu_args):  # valid commands
            ddp.parse_args(["--batch-size", str(plan.batch_size), *args])


@pytest.mark.parametrize("n_gpus", [0, 1, 2, 4])
@pytest.mark.parametrize("prof", ["ci", "class", "full"])
def test_every_run_of_notebook_07_is_sized_for_the_device_it_uses(monkeypatch, n_gpus, prof):
    # 07 plans with the GPUs it sees; each run must get the sizes of the device its workers
    # will pick (init_worker): one GPU leaves the 1- and 2-process runs on the CPU.
    monkeypatch.setenv("D2L_PROFILE", prof)
    monkeypatch.delenv("D2L_BACKEND", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: n_gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: n_gpus)
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: True)  # as on Linux
    plan = ddp.run_plan(torch.cuda.device_count(), 64, budget=80 * GB)
    with monkeypatch.context() as env:  # both runs start with plan.env
        for name, value in plan.env.items():
            env.setenv(name, value)
        assert {dx.distributed.worker_device(n).type for n in (1, plan.k)} == {plan.device}
    cpu, gpu = {"ci": (8, 192), "class": (16, 192), "full": (32, 4096)}[prof], \
        {"ci": (16, 4096), "class": (64, 8192), "full": (64, 60000)}[prof]
    sizes = lambda args: (ddp.parse_args(args).width, ddp.parse_args(args).n_train)  # noqa: E731
    assert sizes(plan.args) == (gpu if n_gpus >= 2 else cpu)
    assert plan.width == sizes(plan.args)[0]
    per_gpu = {"ci": 128, "class": 256, "full": 256}[prof]
    if n_gpus >= 2:
        assert plan.per_process == per_gpu
    if n_gpus == 1:  # the lone GPU's run: on the GPU, at its sizes
        assert dx.distributed.worker_device(1).type == "cuda" and sizes(plan.gpu_args) == gpu
        assert ddp.parse_args(plan.gpu_args).batch_size == per_gpu
    else:
        assert plan.gpu_args == []


def test_run_sizes_fit_the_memory_of_the_device(monkeypatch):
    monkeypatch.setenv("D2L_PROFILE", "class")
    assert ddp.run_sizes("cuda", budget=80 * GB) == ["--width", "64", "--n-train", "8192"]
    assert ddp.run_sizes("cpu", budget=80 * GB) == ["--width", "16", "--n-train", "192"]
    # A quarter of 2 GB holds 20 channels of 24 MB: a narrower network, not an error.
    assert ddp.run_sizes("cuda", budget=2 * GB)[:2] == ["--width", "20"]


@pytest.mark.parametrize("world", range(1, 9))
def test_shard_loaders_split_every_epoch_over_world_processes(world):
    from torch.utils.data import TensorDataset

    n_train, n_test = 103, 37  # divisible by no world > 1
    train = TensorDataset(torch.arange(n_train))
    test = TensorDataset(torch.arange(n_test))
    batch = dx.parallel.even_batch_size(16, world)
    seen, tested = [], []
    for rank in range(world):
        loader, sampler, test_loader = ddp.shard_loaders(train, test, batch, world, rank)
        sampler.set_epoch(0)
        batches = [b[0] for b in loader]
        assert all(len(b) == batch // world for b in batches[:-1])
        seen += torch.cat(batches).tolist()
        tested += torch.cat([b[0] for b in test_loader]).tolist() if n_test >= world else []
    assert set(seen) == set(range(n_train))  # every image, padded to a multiple of world
    assert len(seen) == world * -(-n_train // world)
    assert sorted(tested) == list(range(n_test))  # the test set exactly once


def test_shard_loaders_rejects_uneven_batches():
    from torch.utils.data import TensorDataset

    data = TensorDataset(torch.arange(10))
    with pytest.raises(ValueError, match="use a multiple of 3, e.g. 66"):
        ddp.shard_loaders(data, data, 64, 3, 0)


def test_comm_overlap_reads_a_timeline():
    ev = lambda kind, start, dur: {"name": kind, "lane": "x", "start": start, "duration": dur,
                                   "kind": kind}
    timeline = [ev("forward", 0.0, 1.0), ev("backward", 1.0, 2.0), ev("allreduce", 2.0, 0.5),
                ev("allreduce", 2.8, 0.4)]
    out = ddp.comm_overlap(timeline)
    assert out["backward_end"] == 3.0 and out["first_allreduce"] == 2.0
    assert out["allreduces"] == 2
    assert out["overlapped_seconds"] == pytest.approx(0.7)  # 0.5 + 0.2 of the second
    assert out["allreduce_seconds"] == pytest.approx(0.9)
    assert out["exposed_seconds"] == pytest.approx(0.2)  # the second's part after backward
    # All hidden is exactly 0, where (0.1 + 0.2) - 0.1 overlapped would leave -3e-17 s.
    hidden = ddp.comm_overlap(timeline[:2] + [ev("allreduce", 0.1, 0.2)])
    assert hidden["exposed_seconds"] == 0.0
    assert hidden["allreduce_seconds"] - hidden["overlapped_seconds"] < 0  # what it avoids
    with pytest.raises(ValueError, match="backward and allreduce"):
        ddp.comm_overlap(timeline[:2])


@pytest.mark.parametrize("name, kind", [
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "allreduce"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "allreduce"),  # NCCL before 2.19
    ("ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "broadcast"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     "reducescatter"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "allgather"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "sendrecv"),
    ("ncclDevKernel_Reduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "reduce"),
    ("ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)", "communication"),
    ("nccl:all_reduce", "allreduce"), ("nccl:broadcast", "broadcast"),
    ("nccl:_reduce_scatter_base", "reducescatter"), ("nccl:recv 0<-1", "recv"),
    ("gloo:all_reduce", "allreduce"), ("gloo:broadcast", "broadcast"),
    ("c10d::allreduce_", "allreduce"), ("c10d::broadcast_", "broadcast"),
    ("record_param_comms", "communication"),
    ("aten::broadcast_tensors", None), ("autograd::engine::evaluate_function: SumBackward0", None),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>(...)", None),
])
def test_collective_reads_the_collective_from_the_name(name, kind):
    assert ddp.collective(name) == kind


US = 1e-6
BROADCAST = "ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def ddp_gpu_trace(allreduce_at, broadcast=BROADCAST, allreduce=ALLREDUCE):
    """One DDP step on cuda:0 as Kineto records it, times in us.

    The main thread runs forward, where DDP broadcasts the buffers (NCCL, stream 20, while the
    forward kernel runs on stream 7), and the optimizer; autograd's thread runs backward and
    launches the bucket's allreduce (stream 20) at `allreduce_at` (None: no allreduce). The CPU
    runs ahead: its backward ops end at 380 us, the GPU's backward kernel at 745 us.
    """
    events = []

    def op(name, tid, ts, dur, cat="cpu_op"):
        events.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts,
                       "dur": dur, "args": {}})

    def launch(correlation, tid, ts, kernel, stream, start, dur):
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                       "tid": tid, "ts": ts, "dur": 3, "args": {"correlation": correlation}})
        events.append({"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": stream,
                       "ts": start, "dur": dur,
                       "args": {"device": 0, "stream": stream, "correlation": correlation}})

    main, autograd = 31337, 31400
    op("DistributedDataParallel.forward", main, 0, 300)
    op("c10d::broadcast_", main, 10, 30)
    op("record_param_comms", main, 12, 26)
    op("nccl:broadcast", main, 14, 22, "user_annotation")
    launch(1, main, 20, broadcast, 20, 25, 130)
    op("aten::conv2d", main, 50, 50)
    launch(2, main, 60, "sm90_xmma_fprop_implicit_gemm_f32f32", 7, 70, 200)
    op("aten::cross_entropy_loss", main, 300, 20)
    launch(3, main, 310, "nll_loss_forward_reduce_cuda_kernel_2d", 7, 320, 20)
    op("autograd::engine::evaluate_function: ConvolutionBackward0", autograd, 330, 30)
    launch(4, autograd, 340, "sm90_xmma_dgrad_implicit_gemm_f32f32", 7, 345, 400)
    op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", autograd, 360, 20)
    op("c10d::allreduce_", autograd, 365, 13)
    op("record_param_comms", autograd, 366, 11)
    op("nccl:all_reduce", autograd, 367, 9, "user_annotation")
    if allreduce_at is not None:
        launch(5, autograd, 370, allreduce, 20, allreduce_at, 200)
    op("Optimizer.step#SGD.step", main, 400, 50)
    launch(6, main, 420, "multi_tensor_apply_kernel", 7, 960, 50)  # after DDP's wait
    return {"traceEvents": events}


def gpu_timeline(monkeypatch, trace):
    monkeypatch.setattr(ddp, "profile_trace", lambda step, devices: trace)
    return ddp.step_timeline(lambda: None, torch.device("cuda", 0))


@pytest.mark.parametrize("broadcast, allreduce", [
    (BROADCAST, ALLREDUCE),
    ("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclWorkElem)",  # NCCL before 2.19
     "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"),
    # a generic kernel: the op that launched it (nccl:broadcast, nccl:all_reduce) says which
    ("ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)",) * 2,
])
def test_a_gpu_step_reads_overlap_from_allreduce_kernels_only(monkeypatch, broadcast, allreduce):
    # The allreduce runs (400-600 us) while the GPU still computes backward (345-745 us),
    # although the CPU launched all of backward by 380 us.
    timeline = gpu_timeline(monkeypatch, ddp_gpu_trace(400, broadcast, allreduce))
    kinds = {round(ev["start"] / US): ev["kind"] for ev in timeline
             if ev["lane"].startswith("cuda")}  # each kernel, by its start in us
    assert kinds == {25: "broadcast", 70: "forward", 320: "forward", 345: "backward",
                     400: "allreduce", 960: "optimizer"}
    assert {ev["lane"] for ev in timeline} >= {"cuda:0 stream 7 (forward, backward)",
                                               "cuda:0 stream 20"}
    overlap = ddp.comm_overlap(timeline)
    assert overlap["allreduces"] == 1  # the broadcast is no allreduce
    assert overlap["backward_end"] == pytest.approx(745 * US)  # the GPU's, not the CPU's
    assert overlap["first_allreduce"] == pytest.approx(400 * US)
    assert overlap["overlapped_seconds"] == pytest.approx(200 * US)

    # The allreduce after backward (750 us): no overlap, though the broadcast overlapped forward.
    overlap = ddp.comm_overlap(gpu_timeline(monkeypatch, ddp_gpu_trace(750, broadcast, allreduce)))
    assert overlap["first_allreduce"] >= overlap["backward_end"]
    assert overlap["overlapped_seconds"] == 0.0
    assert overlap["exposed_seconds"] == pytest.approx(overlap["allreduce_seconds"])
    # Broadcasts alone are no allreduce to read overlap from.
    with pytest.raises(ValueError, match="backward and allreduce"):
        ddp.comm_overlap(gpu_timeline(monkeypatch, ddp_gpu_trace(None, broadcast, allreduce)))


def test_two_gloo_processes_train_above_chance(monkeypatch):
    monkeypatch.setenv("D2L_PROFILE", "ci")
    run = dx.launch("d2l_extras.ddp_job", 2, ["--epochs", "2", "--threads", "1", "--profile",
                                          "--check-no-sync", "--bucket-mb", "1",
                                          "--time-comm", "2"],
                    timeout=240, echo=False, env=GLOO)
    res = run.result
    assert res["processes"] == 2 and res["pids"] == 2 and res["backend"] == "gloo"
    # each epoch, the two processes together see every image once (the sampler pads to 2 x 512)
    assert res["samples_seen"] == 2 * 2 * -(-res["n_train"] // 2)
    # no_sync: unsynced gradients differ between ranks; accumulated ones equal the big batch's
    assert res["no_sync"]["unsynced_difference"] > 1e-3
    assert res["no_sync"]["max_error"] < 1e-5 * max(1.0, res["no_sync"]["grad_scale"])
    timeline = res["timeline"]
    kinds = {ev["kind"] for ev in timeline}
    assert {"forward", "backward", "allreduce"} <= kinds, kinds
    overlap = ddp.comm_overlap(timeline)
    assert overlap["allreduces"] >= 2  # 1 MB buckets: several allreduces per step
    assert res["accuracy"] > 0.2, run.output[-5:]  # chance is 0.1 with 10 classes
    assert res["samples_per_s"] > 0 and len(res["test_acc"]) == 2
    assert any(line.startswith("epoch 2/2") for line in run.output)  # rank 0's progress
    comm = res["comm"]  # --time-comm: each process's share of the batch, both ways
    assert comm["batches"] == [res["batch_size"] // 2] and comm["steps"] == 2
    assert all(0 < t < 60 for t in comm["sync_s"] + comm["no_sync_s"] + [comm["allreduce_s"]])
    params = sum(p.numel() for p in dx.resnet18(10, 1, res["width"]).parameters())
    assert comm["grad_bytes"] == 4 * params  # float32


def test_a_crashing_worker_ends_the_run_quickly_with_its_message(monkeypatch):
    monkeypatch.setenv("D2L_PROFILE", "ci")
    start = time.perf_counter()
    with pytest.raises(dx.distributed.WorkerError, match="failed on purpose"):
        dx.launch("d2l_extras.ddp_job", 2, ["--epochs", "1", "--threads", "1", "--crash-rank", "1",
                                        "--n-train", "256"], timeout=120, echo=False, env=GLOO)
    assert time.perf_counter() - start < 60


def train_alone(monkeypatch, argv):
    """What `python -m d2l_extras.ddp_job ARGV` does by itself: train in a process group of one."""
    monkeypatch.setenv("D2L_PROFILE", "ci")
    monkeypatch.setenv("D2L_BACKEND", "gloo")
    for name, value in dict(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                            MASTER_ADDR="127.0.0.1", MASTER_PORT=str(dx.distributed.free_port())).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("D2L_RESULT_FILE", raising=False)
    threads = torch.get_num_threads()
    try:
        ddp_job.main(["--epochs", "1", "--n-train", "64", "--n-test", "32", "--width", "4",
                  "--batch-size", "16", "--threads", "1", "--data", "digits", *argv])
    finally:
        torch.set_num_threads(threads)


def test_one_process_without_torchrun(monkeypatch, capsys):
    train_alone(monkeypatch, ["--max-steps", "2"])
    out = capsys.readouterr().out
    assert '"processes": 1' in out and '"steps": 2' in out


def test_the_training_loop_never_waits_for_the_device(monkeypatch, capsys):
    # On a GPU the host waits for the stream when it copies a tensor made from host data to the
    # device (torch.tensor(..., device=cuda)) and when it reads one back (.item()). The loop
    # (notebook 07's, and the job's loader around it) must do neither per step.
    calls = {"tensor on a device": 0, "item": 0}
    real_tensor, real_item = torch.tensor, torch.Tensor.item

    def tensor(*args, **kwargs):
        calls["tensor on a device"] += kwargs.get("device") is not None
        return real_tensor(*args, **kwargs)

    def item(self):
        calls["item"] += 1
        return real_item(self)

    monkeypatch.setattr(torch, "tensor", tensor)
    monkeypatch.setattr(torch.Tensor, "item", item)

    def calls_in(argv):
        before = dict(calls)
        train_alone(monkeypatch, argv)
        assert f'"steps": {argv[1]}' in capsys.readouterr().out
        return {key: calls[key] - before[key] for key in calls}

    two = calls_in(["--max-steps", "2"])
    four = calls_in(["--max-steps", "4"])  # 2 more steps, no more waits
    assert four["tensor on a device"] == two["tensor on a device"], (two, four)
    assert four["item"] == two["item"], (two, four)


def test_step_timeline_names_rows_and_kinds_in_one_process():
    net = dx.resnet18(10, 1, 4)
    X = torch.rand(4, 1, 28, 28)
    events = ddp.step_timeline(lambda: net(X).sum().backward(), torch.device("cpu"))
    kinds = {ev["kind"] for ev in events}
    assert {"forward", "backward"} <= kinds and "allreduce" not in kinds, kinds
    lanes = {ev["lane"] for ev in events}
    assert any(lane.endswith("(forward, backward)") for lane in lanes), lanes
    assert all(set(ev) == {"name", "lane", "start", "duration", "kind"} for ev in events)


def test_time_comm_times_every_batch_in_one_process(monkeypatch, capsys):
    train_alone(monkeypatch, ["--max-steps", "1", "--time-comm", "2", "--time-batches", "16", "8"])
    result = json.loads(next(line for line in capsys.readouterr().out.splitlines()
                             if line.startswith("{")))
    comm = result["comm"]
    assert comm["batches"] == [16, 8] and comm["steps"] == 2
    assert len(comm["sync_s"]) == len(comm["no_sync_s"]) == 2
    assert all(0 < t < 60 for t in comm["sync_s"] + comm["no_sync_s"] + [comm["allreduce_s"]])
    # every timed pass kept, in pairs (synced, then no_sync, in turns): a band, and differences
    assert [len(r) for r in comm["sync_runs"] + comm["no_sync_runs"]] == [2] * 4
    assert len(comm["allreduce_runs"]) == 2
    assert comm["sync_s"][0] == dx.Band.of(comm["sync_runs"][0]).value
    assert comm["grad_bytes"] == 4 * sum(p.numel() for p in dx.resnet18(10, 1, 4).parameters())


def test_no_comm_timing_unless_asked(monkeypatch, capsys):
    train_alone(monkeypatch, ["--max-steps", "1"])
    assert '"comm": null' in capsys.readouterr().out


@pytest.mark.parametrize("width", [4, 8])
def test_resnet18_as_the_job_initializes_it(width):
    net = dx.resnet18(10, 1, width)
    net.apply(ddp.init_weights)
    assert net(torch.rand(2, 1, 28, 28)).shape == (2, 10)
    convs = [m for m in net.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) == 1 + 16 + 3  # stem, 8 blocks of 2 convs, 3 shortcut 1x1 convs
    assert net[-1].in_features == 8 * width


def test_init_weights_is_he_with_zero_biases():
    layer = torch.nn.Linear(1000, 10)
    torch.nn.init.normal_(layer.bias)
    ddp.init_weights(layer)  # He: std = sqrt(2 / fan_in)
    assert abs(layer.weight.std().item() - (2 / 1000) ** 0.5) < 0.01 and not layer.bias.any()
