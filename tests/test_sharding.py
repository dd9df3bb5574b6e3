"""Notebook 08's FSDP2 job (`#@save sharding`, measured by d2l_extras/fsdp.py): one launch of 2
processes against one process's step, its shards' bytes and its collectives; bad input refused
with what to do; on a torch whose CPU streams cannot run FSDP2, one line that says so."""
import pytest
import torch

import d2l_extras as dx
from d2l_extras import fsdp
from d2l_extras.distributed import WorkerError

ARGS = ["--width", 64, "--depth", 3, "--batch-size", 8, "--runs", 2]
GLOO_ONLY = {"D2L_BACKEND": "gloo"}  # the CPU path, where the job's figures are exact


@pytest.fixture(scope="module")
def two_processes():
    return dx.launch("d2l_extras.sharding", 2, ARGS, timeout=180, echo=False,
                     env=GLOO_ONLY).result


def test_the_job_matches_one_process_and_shards_every_byte_once(two_processes):
    job = two_processes
    if "skipped" in job:  # the same reason the notebook prints
        assert job["skipped"] == fsdp.cpu_support() != ""
        pytest.skip(job["skipped"])
    assert job["world"] == 2 and job["backend"] == "gloo"
    assert job["max_diff"] < 1e-5, job["max_diff"]  # weights and gradients after one step
    params = 3 * (64 * 64 + 64)
    assert job["params"] == params and job["block_params"] == params // 3
    for what, per_param in {"weights": 4, "gradients": 4, "Adam's moments": 8}.items():
        assert job["bytes"][what] == [per_param * params // 2] * 2, what  # half on each rank
    # per block: an all-gather in the forward and one in the backward, one reduce-scatter
    assert job["collectives"] == {"_allgather_base_": 6, "_reduce_scatter_base_": 3}
    assert job["cuda_peak_bytes"] is None
    for how in ("fsdp", "ddp"):
        assert len(job[f"{how}_runs"]) == 2 and all(t > 0 for t in job[f"{how}_runs"])


def test_a_batch_that_does_not_split_is_refused_with_one_that_does():
    with pytest.raises(WorkerError, match=r"does not split evenly over 2 .*multiple of 2"):
        dx.launch("d2l_extras.sharding", 2, ["--batch-size", 7], timeout=120, echo=False,
                  env=GLOO_ONLY)


def test_one_process_is_refused_since_it_would_shard_nothing():
    with pytest.raises(WorkerError, match="at least 2 processes, got 1"):
        dx.launch("d2l_extras.sharding", 1, ARGS, timeout=120, echo=False, env=GLOO_ONLY)


@pytest.mark.parametrize("argv, message", [
    (["--bogus", "1"], "unrecognized arguments: --bogus"),
    (["--width", "0"], "must be a whole number >= 1"),
    (["--lr", "-1"], "must be a finite number > 0"),
])
def test_bad_options_name_what_is_wrong(capsys, argv, message):
    with pytest.raises(SystemExit):
        fsdp.parse_args(argv)
    assert message in capsys.readouterr().err


def test_options_have_the_notebooks_defaults():
    args = fsdp.parse_args([])
    assert (args.width, args.depth, args.batch_size, args.runs) == (256, 4, 64, 8)


def test_cpu_support_names_the_release_that_added_what_fsdp2_needs(monkeypatch):
    class OldStream:  # torch 2.6's CPU stream: no record_event
        pass

    monkeypatch.setattr(torch.cpu, "Stream", OldStream)
    monkeypatch.setattr(torch, "__version__", "2.6.0+cu124")
    assert fsdp.cpu_support() == "FSDP2 on a CPU needs torch >= 2.7; this is 2.6.0: skipped"
    OldStream.record_event = lambda self: None
    assert fsdp.cpu_support() == ""


def test_the_saved_model_is_the_same_in_every_process():
    a, b = dx.block_stack(8, 2), dx.block_stack(8, 2)
    assert len(a) == 2 and [type(m).__name__ for m in a[0]] == ["Linear", "GELU"]
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
