"""The capstone's DDP worker: k processes take one process's steps; it times what it sends."""
import json

import pytest
import torch

import d2l_extras as dx
from d2l_extras import capstone

# gloo on the CPU even where GPUs exist, one thread per process: fast and the same everywhere.
GLOO = {"D2L_BACKEND": "gloo", "CUDA_VISIBLE_DEVICES": ""}
TINY = ["--batch-size", "8", "--seq-len", "16", "--d-model", "16", "--heads", "2",
        "--layers", "1", "--threads", "1", "--lr", "0.01"]


@pytest.mark.parametrize("argv, what", [
    (["--steps", "0"], "steps"), (["--batch-size", "-4"], "batch-size"),
    (["--lr", "0"], "lr"), (["--d-model", "30", "--heads", "4"], "multiple of --heads"),
    (["--comm-steps", "-1"], "comm-steps"), (["--share", "0"], "share")])
def test_bad_arguments_are_refused_with_their_name(capsys, argv, what):
    with pytest.raises(SystemExit):
        capstone.parse_args(argv)
    assert what in capsys.readouterr().err


def test_every_process_count_draws_the_same_global_batches():
    text = dx.load_text(max_chars=5000)
    args = capstone.parse_args(TINY)
    X1, Y1 = capstone.global_batch(text, 3, args)
    X2, Y2 = capstone.global_batch(text, 3, args)
    assert torch.equal(X1, X2) and torch.equal(Y1, Y2)
    assert not torch.equal(X1, capstone.global_batch(text, 4, args)[0])  # a new step, new rows
    assert X1.shape == (8, 16)


def test_one_process_without_torchrun(monkeypatch, capsys):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT", "D2L_RESULT_FILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("D2L_BACKEND", "gloo")
    wrapped = []

    def ddp(*args, **kwargs):  # DDP as it is, its options kept
        wrapped.append(kwargs)
        return capstone_ddp(*args, **kwargs)
    capstone_ddp = capstone.DistributedDataParallel
    monkeypatch.setattr(capstone, "DistributedDataParallel", ddp)
    threads = torch.get_num_threads()
    try:
        capstone.main([*TINY, "--steps", "3", "--comm-steps", "1", "--share", "2"])
    finally:
        torch.set_num_threads(threads)
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["processes"] == 1 and len(res["losses"]) == 3
    # The causal masks are constant buffers: no broadcast of them at every step, under the
    # switch's name in this torch (forward_sync_buffers from 2.15).
    switches = [{k: v for k, v in kw.items() if k in ("broadcast_buffers",
                                                      "forward_sync_buffers")}
                for kw in wrapped]
    assert switches == [capstone._NO_BUFFER_SYNC] and False in switches[0].values()
    assert len(res["share_runs"]) >= 4 and min(res["share_runs"] + res["step_runs"]) > 0


def test_two_processes_take_the_steps_of_one_and_time_their_allreduce():
    args = [*TINY, "--steps", "6", "--comm-steps", "2"]
    one = dx.launch("d2l_extras.capstone", 1, [*args, "--share", "2"], timeout=240,
                    echo=False, env=GLOO).result
    two = dx.launch("d2l_extras.capstone", 2, args, timeout=240, echo=False, env=GLOO).result
    assert two["processes"] == 2 and two["pids"] == 2 and two["backend"] == "gloo"
    # The same global batches, the gradient averaged over the halves: the same training.
    torch.testing.assert_close(torch.tensor(two["losses"]), torch.tensor(one["losses"]),
                               rtol=1e-4, atol=1e-4)
    assert one["losses"][-1] < one["losses"][0], "it learns"
    model = dx.TinyGPT(len(dx.load_text().vocab), 16, 16, 2, 1)  # TINY's shape
    params = sum(p.numel() for p in model.parameters())
    assert two["grad_bytes"] == one["grad_bytes"] == 4 * params
    # every timed step kept, for bands: the training steps after the first, the timed pairs
    assert len(two["step_runs"]) == len(two["losses"]) - 1
    assert len(two["synced_runs"]) == len(two["no_sync_runs"]) > 0
    for key in ("synced_runs", "no_sync_runs", "step_runs"):
        assert min(two[key]) > 0, key
    assert len(one["share_runs"]) >= 4 and min(one["share_runs"]) > 0
    assert "share_runs" not in two
    # A step allocates activations and gradients above the state held before it.
    assert min(one["peak_bytes"], two["peak_bytes"]) > one["grad_bytes"]
    # beta, from an allreduce of the gradients' size: busbw = 2 (k-1)/k N / t, with k = 2
    assert two["busbw"] == pytest.approx(two["grad_bytes"] / two["allreduce_s"])
    assert "busbw" not in one  # nothing to send alone
