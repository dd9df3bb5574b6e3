"""The capstone's DDP job: notebook 09's step (capstone.py) in k processes takes one's steps."""
import json

import pytest
import torch

import d2l_extras as dx
from d2l_extras import capstone

# gloo on the CPU even where GPUs exist, one thread per process: fast and the same everywhere.
GLOO = {"D2L_BACKEND": "gloo", "CUDA_VISIBLE_DEVICES": ""}
TINY = ["--batch", "8", "--seq_len", "16", "--d_model", "16", "--n_heads", "2",
        "--n_layers", "1", "--threads", "1", "--lr", "0.01"]


@pytest.mark.parametrize("argv, what", [
    (["--steps", "0"], "steps"), (["--batch", "-4"], "batch"), (["--lr", "0"], "lr"),
    (["--comm_steps", "-1"], "comm_steps"), (["--share", "0"], "share")])
def test_bad_arguments_are_refused_with_their_name(capsys, argv, what):
    with pytest.raises(SystemExit):
        dx.transformer.parse_args(argv)
    assert what in capsys.readouterr().err


def test_the_job_reads_the_sizes_the_notebook_passes():
    sizes = dx.TinyGPT.sizes("cpu")
    args = dx.transformer.parse_args([f"--{key}={value}" for key, value in sizes.items()])
    assert {key: getattr(args, key) for key in sizes} == sizes


def test_one_process_without_torchrun(monkeypatch, capsys):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT", "D2L_RESULT_FILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("D2L_BACKEND", "gloo")
    threads = torch.get_num_threads()
    try:
        dx.capstone_job(capstone.ddp_trainer,
                        [*TINY, "--steps", "3", "--comm_steps", "1", "--share", "2"])
    finally:
        torch.set_num_threads(threads)
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["processes"] == 1 and len(res["losses"]) == 3
    assert len(res["share_runs"]) >= 4 and min(res["share_runs"] + res["step_runs"]) > 0


def test_two_processes_take_the_steps_of_one_and_time_their_allreduce():
    args = [*TINY, "--steps", "6", "--comm_steps", "2"]
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
