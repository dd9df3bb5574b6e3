"""DDP training module: trains under torchrun with gloo, fails fast, syncs BatchNorm on CPU."""
import subprocess
import sys
import time

import pytest
import torch
import torch.multiprocessing as mp

import d2l_extras as dx
from d2l_extras import ddp

# gloo on the CPU even where GPUs exist, one thread per process: fast and the same everywhere.
GLOO = {"D2L_BACKEND": "gloo", "CUDA_VISIBLE_DEVICES": ""}


def test_help_shows_the_torchrun_commands():
    out = subprocess.run([sys.executable, "-m", "d2l_extras.ddp", "--help"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "torch.distributed.run" in out.stdout and "--nnodes=2" in out.stdout
    assert "--sync-bn" in out.stdout


def test_bad_arguments_are_refused():
    with pytest.raises(SystemExit):
        ddp.parse_args(["--epochs", "0"])


def test_two_gloo_processes_train_above_chance(monkeypatch):
    monkeypatch.setenv("D2L_PROFILE", "ci")
    run = dx.launch("d2l_extras.ddp", 2, ["--epochs", "2", "--threads", "1"], timeout=240,
                    echo=False, env=GLOO)
    res = run.result
    assert res["processes"] == 2 and res["backend"] == "gloo"
    assert res["accuracy"] > 0.2, run.output[-5:]  # chance is 0.1 with 10 classes
    assert res["samples_per_s"] > 0 and len(res["test_acc"]) == 2
    assert any(line.startswith("epoch 2/2") for line in run.output)  # rank 0's progress


def test_a_crashing_worker_ends_the_run_quickly_with_its_message(monkeypatch):
    monkeypatch.setenv("D2L_PROFILE", "ci")
    start = time.perf_counter()
    with pytest.raises(dx.WorkerError, match="failed on purpose"):
        dx.launch("d2l_extras.ddp", 2, ["--epochs", "1", "--threads", "1", "--crash-rank", "1",
                                        "--n-train", "256"], timeout=120, echo=False, env=GLOO)
    assert time.perf_counter() - start < 60


def _sync_bn_worker(rank, world, port, queue):
    import torch.distributed as dist
    from torch import nn

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    torch.manual_seed(0)  # the same batch, weights and upstream gradient on every rank
    X, W = torch.randn(8, 3, 4, 4) * 3 + 1, torch.randn(8, 3, 4, 4)
    net = nn.Sequential(nn.BatchNorm2d(3))
    net[0].weight.data.uniform_(0.5, 1.5)
    ref = nn.BatchNorm2d(3)
    ref.load_state_dict(net[0].state_dict())
    synced = ddp.sync_batchnorm(net, torch.device("cpu"))[0]
    X_ref = X.clone().requires_grad_()
    ref_out = ref(X_ref)  # once: every training-mode call updates the running statistics
    (ref_out * W).sum().backward()
    rows = slice(rank * 8 // world, (rank + 1) * 8 // world)
    X_mine = X[rows].clone().requires_grad_()
    out = synced(X_mine)
    (out * W[rows]).sum().backward()
    dist.all_reduce(synced.weight.grad)  # what DDP does (up to its division by world)
    queue.put((rank, [(out - ref_out[rows]).abs().max().item(),
                      (X_mine.grad - X_ref.grad[rows]).abs().max().item(),
                      (synced.weight.grad - ref.weight.grad).abs().max().item(),
                      (synced.running_var - ref.running_var).abs().max().item(),
                      float(type(synced).__name__ == "GlooSyncBatchNorm2d")]))
    dist.destroy_process_group()


def test_gloo_sync_batchnorm_equals_batchnorm_on_the_whole_batch():
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = dx.free_port()
    procs = [ctx.Process(target=_sync_bn_worker, args=(r, 2, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    try:
        results = [queue.get(timeout=60) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    for rank, (out, grad_x, grad_w, running_var, converted) in results:
        assert converted == 1.0
        assert max(out, grad_x, grad_w, running_var) < 1e-4, (rank, out, grad_x, grad_w)


def test_sync_batchnorm_converts_every_batchnorm():
    net = ddp.sync_batchnorm(dx.resnet18(10, 1, 4), torch.device("cpu"))
    kinds = [type(m).__name__ for m in net.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert kinds == ["GlooSyncBatchNorm2d"] * 17  # the stem and two per residual block


def test_one_process_without_torchrun(monkeypatch, capsys):
    # What `python -m d2l_extras.ddp` does by itself: a process group of one.
    monkeypatch.setenv("D2L_PROFILE", "ci")
    monkeypatch.setenv("D2L_BACKEND", "gloo")
    for name, value in dict(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                            MASTER_ADDR="127.0.0.1", MASTER_PORT=str(dx.free_port())).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("D2L_RESULT_FILE", raising=False)
    threads = torch.get_num_threads()
    try:
        ddp.main(["--epochs", "1", "--n-train", "64", "--n-test", "32", "--width", "4",
                  "--batch-size", "16", "--max-steps", "2", "--threads", "1"])
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert '"processes": 1' in out and '"steps": 2' in out
