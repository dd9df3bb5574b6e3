"""Notebook 07's tensor-parallel job (d2l_extras.tensor_parallel, ddp.tp_entry): k processes
compute one process's output, hold 1/k of each split matrix, and send the predicted all-reduces."""
import json

import pytest
import torch
from torch import nn

import d2l_extras as dx
from d2l_extras import ddp, tensor_parallel
from d2l_extras.distributed import WorkerError

# gloo on the CPU even where GPUs exist: fast and the same everywhere.
GLOO = {"D2L_BACKEND": "gloo", "CUDA_VISIBLE_DEVICES": ""}
D = 32  # width: the MLP is 32 -> 128 -> 32, the block has 4 heads of 8


@pytest.fixture(scope="module")
def two():
    return dx.launch("d2l_extras.tensor_parallel", 2, ["--width", str(D)], timeout=120,
                     echo=False, env=GLOO).result


def test_two_processes_compute_what_one_does(two):
    assert two["processes"] == 2 and two["pids"] == 2 and two["backend"] == "gloo"
    torch.manual_seed(0)  # the job's seed: an MLP written out here, not the notebook's
    one = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))
    x, y = (torch.tensor(two["mlp"][key]) for key in ("x", "y"))
    assert x.shape == (2, 8, D)
    with torch.no_grad():
        torch.testing.assert_close(y, one(x))
    assert two["mlp"]["max_diff"] < 1e-5 and two["block"]["max_diff"] < 1e-5


def test_each_process_holds_its_share_of_the_split_matrices(two):
    assert two["mlp"]["shards"] == {"0.weight": [2 * D, D], "0.bias": [2 * D],
                                    "2.weight": [D, 2 * D]}  # 2.bias: a copy on each
    block = two["block"]["shards"]
    assert block["attn.qkv.weight"] == [3 * D // 2, D] and block["attn.proj.weight"] == [D, D // 2]
    for part in ("mlp", "block"):  # about half, plus the copies (LayerNorms, row-split biases)
        assert 0.5 < two[part]["local_params"] / two[part]["params"] < 0.52


def test_one_all_reduce_per_split_pair_each_way(two):
    for part, n in (("mlp", 1), ("block", 2)):
        assert two[part]["forward"] == two[part]["backward"] == {"all_reduce": n}


def test_one_process_alone_without_torchrun(monkeypatch, capsys):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT", "D2L_RESULT_FILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("D2L_BACKEND", "gloo")
    tensor_parallel.main(["--width", "16", "--heads", "2"])
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["processes"] == 1 and res["mlp"]["shards"] == {}
    # torch 2.6 all-reduces over a mesh of one too; newer releases skip it
    assert res["mlp"]["forward"] in ({}, {"all_reduce": 1})
    assert res["block"]["forward"] in ({}, {"all_reduce": 2})
    assert res["mlp"]["max_diff"] < 1e-5 and res["block"]["max_diff"] < 1e-5


def test_heads_that_do_not_split_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="multiple of 2"):
        ddp.tp_options(["--heads", "3", "--width", "48"], k=2)
    with pytest.raises(ValueError, match="multiple of --heads 4"):
        ddp.tp_options(["--width", "30"])
    with pytest.raises(WorkerError, match="pick --heads a multiple of 2"):  # before any waits
        dx.launch("d2l_extras.tensor_parallel", 2, ["--heads", "3", "--width", "48"],
                  timeout=60, echo=False, env=GLOO)


@pytest.mark.parametrize("argv, what", [(["--width", "0"], "--width"),
                                        (["--bogus", "1"], "unrecognized arguments: --bogus")])
def test_bad_options_are_refused_with_their_name(capsys, argv, what):
    with pytest.raises(SystemExit):
        ddp.tp_options(argv)
    assert what in capsys.readouterr().err
