"""The sharded key-value store: push/pull semantics, errors, checkpoints, crash and restart."""
import datetime
import json
import os

import pytest
import torch
import torch.distributed as dist

import d2l_extras as dx
from d2l_extras import kvstore as kv
from d2l_extras.distributed import loopback_interface


@pytest.fixture(scope="module")
def one_process_group():
    """A 1-process gloo group in the test process, bound to 127.0.0.1."""
    old = os.environ.get("GLOO_SOCKET_IFNAME")
    lo = loopback_interface()
    if lo:
        os.environ["GLOO_SOCKET_IFNAME"] = lo
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{dx.free_port()}", rank=0,
                            world_size=1, timeout=datetime.timedelta(seconds=30))
    yield
    dist.destroy_process_group()
    if old is None:
        os.environ.pop("GLOO_SOCKET_IFNAME", None)
    else:
        os.environ["GLOO_SOCKET_IFNAME"] = old


def test_store_needs_a_process_group():
    if dist.is_initialized():
        pytest.skip("a process group exists already")
    with pytest.raises(RuntimeError, match="init_worker"):
        kv.KVStore()


def test_push_aggregates_and_pull_retrieves(one_process_group):
    store = kv.KVStore()
    store.init("w", torch.zeros(3))
    store.push("w", torch.tensor([1.0, 2.0, 3.0]))
    torch.testing.assert_close(store.pull("w"), torch.tensor([1.0, 2.0, 3.0]))
    assert store.owner("w") == 0 and store.keys() == ["w"] and store.shard_keys() == ["w"]


def test_pull_returns_a_copy(one_process_group):
    store = kv.KVStore()
    store.init("w", torch.ones(2))
    store.pull("w").zero_()
    torch.testing.assert_close(store.pull("w"), torch.ones(2))


def test_sgd_step_with_mean_gradient(one_process_group):
    store = kv.KVStore(lr=0.1)
    store.init("w", torch.ones(2))
    store.push_all({"w": torch.tensor([1.0, -1.0])})
    torch.testing.assert_close(store.pull_all(["w"])["w"], torch.tensor([0.9, 1.1]))


def test_unknown_key_is_a_clear_error(one_process_group):
    store = kv.KVStore()
    store.init("w", torch.zeros(2))
    with pytest.raises(KeyError, match="pull: unknown key 'b'.*known keys are \\['w'\\]"):
        store.pull("b")
    with pytest.raises(KeyError, match="push: unknown key 'b'"):
        store.push("b", torch.zeros(2))


@pytest.mark.parametrize("value, match", [
    (torch.zeros(3), "holds \\(2,\\) torch.float32, got \\(3,\\) torch.float32"),
    (torch.zeros(2, dtype=torch.float64), "got \\(2,\\) torch.float64"),
    ([0.0, 0.0], "got list"),
])
def test_push_of_a_wrong_value_is_a_clear_error(one_process_group, value, match):
    store = kv.KVStore()
    store.init("w", torch.zeros(2))
    with pytest.raises(ValueError, match=match):
        store.push("w", value)


def test_bad_arguments(one_process_group):
    with pytest.raises(ValueError, match="lr must be > 0"):
        kv.KVStore(lr=0)
    with pytest.raises(ValueError, match="max_staleness"):
        kv.KVStore(max_staleness=-1)
    with pytest.raises(ValueError, match="timeout_s"):
        kv.KVStore(timeout_s=0)
    store = kv.KVStore()
    store.init("w", torch.zeros(1))
    with pytest.raises(ValueError, match="already initialized"):
        store.init("w", torch.zeros(1))
    with pytest.raises(TypeError, match="keys are strings"):
        store.init(3, torch.zeros(1))
    with pytest.raises(TypeError, match="must be a tensor"):
        store.init("v", [1.0])


def test_bounded_staleness_serves_recent_versions(one_process_group):
    store = kv.KVStore(lr=1.0, max_staleness=2)
    store.init("w", torch.zeros(1))
    for _ in range(6):
        store.push("w", -torch.ones(1))  # w counts the updates: 1, 2, ..., 6
    seen = {float(store.pull("w")) for _ in range(50)}
    assert seen == {4.0, 5.0, 6.0}  # never older than 2 updates
    assert float(store.pull("w", latest=True)) == 6.0
    assert max(store.versions_served) == 2


def test_checkpoint_is_atomic_and_loads_with_weights_only(one_process_group, tmp_path):
    store = kv.KVStore()
    store.init("w", torch.arange(3.0))
    assert kv.committed_step(str(tmp_path)) is None and store.load(str(tmp_path)) == 0
    store.save(str(tmp_path), 10)
    store.push("w", torch.full((3,), 7.0))
    store.save(str(tmp_path), 20)
    assert sorted(os.listdir(tmp_path)) == ["acks.log", "committed.json", "shard-0-step20.pt"]
    assert kv.committed_step(str(tmp_path)) == 20
    assert kv.acknowledged_steps(str(tmp_path)) == [10, 20]
    state = torch.load(tmp_path / "shard-0-step20.pt", weights_only=True)
    assert state["step"] == 20 and torch.equal(state["values"]["w"], torch.full((3,), 7.0))
    fresh = kv.KVStore()
    fresh.init("w", torch.zeros(3))
    assert fresh.load(str(tmp_path)) == 20
    torch.testing.assert_close(fresh.pull("w"), torch.full((3,), 7.0))


def test_load_refuses_a_checkpoint_of_other_keys(one_process_group, tmp_path):
    store = kv.KVStore()
    store.init("w", torch.zeros(1))
    store.save(str(tmp_path), 5)
    other = kv.KVStore()
    other.init("v", torch.zeros(1))
    with pytest.raises(RuntimeError, match="holds keys \\['w'\\]"):
        other.load(str(tmp_path))


def test_batches_do_not_depend_on_the_rank_count_split():
    whole = kv.batch_of(3, 0, 1, 8, 100)
    halves = torch.cat([kv.batch_of(3, r, 2, 4, 100) for r in range(2)])
    assert torch.equal(whole, halves)


def _check_result_is_good(result: dict, nproc: int) -> None:
    assert result["ok"]
    assert set(result["owners"].values()) == set(range(nproc))  # every rank holds a shard
    assert "pull: unknown key 'nope'" in result["errors"]["unknown"]
    assert "push: key 'b' holds (3, 7)" in result["errors"]["shape"]


@pytest.mark.timeout(150)
def test_push_pull_equals_all_reduce_on_3_processes():
    # The worker asserts pull(push) == all_reduce, with and without an SGD step, twice.
    run = dx.launch("d2l_extras.kvstore", 3, ["--task", "check", "--timeout", 60],
                    timeout=120, echo=False)
    _check_result_is_good(run.result["check"], 3)


def _reference_params(steps: int, batch: int, lr: float, world: int) -> dict:
    # What the 2 workers must compute together: SGD on the mean of their gradients.
    X, y = kv.make_problem(0)
    net = kv.make_net(0)
    for step in range(steps):
        grads = [kv._grads(net, X[i], y[i])
                 for i in (kv.batch_of(step, r, world, batch, len(X)) for r in range(world))]
        with torch.no_grad():
            for name, p in net.named_parameters():
                p -= lr * sum(g[name] for g in grads) / world
    return {name: p.detach() for name, p in net.named_parameters()}


@pytest.mark.timeout(170)
def test_2_processes_push_pull_then_kill_and_restart_loses_nothing(tmp_path):
    # One job (two launches share the cost of starting processes): task check on 2 processes,
    # then checkpointed training that rank 1 kills; the same command again resumes it.
    steps = 30
    args = ["--task", "check", "fault", "--workdir", str(tmp_path), "--steps", steps,
            "--ckpt-every", 5, "--kill-at", 13, "--lr", 0.5, "--batch", 16, "--timeout", 30]
    with pytest.raises(dx.WorkerError) as crash:
        dx.launch("d2l_extras.kvstore", 2, args, timeout=75, echo=False)
    assert "failed (exit code" in str(crash.value)
    assert (tmp_path / kv.KILLED_MARK).read_text() == "rank 1 killed at step 13"
    with open(tmp_path / "check.json", encoding="utf-8") as f:
        _check_result_is_good(json.load(f), 2)
    before = kv.acknowledged_steps(str(tmp_path))
    assert before == [5, 10] and kv.committed_step(str(tmp_path)) == 10
    # The same command again: the crash happens only once; training resumes from step 10.
    result = dx.launch("d2l_extras.kvstore", 2, args, timeout=75, echo=False).result["fault"]
    assert result["resumed_from"] == 10 >= max(before)   # nothing acknowledged was lost
    assert kv.acknowledged_steps(str(tmp_path)) == [5, 10, 15, 20, 25]
    assert not [f for f in os.listdir(tmp_path) if ".tmp" in f]
    expected = _reference_params(steps, 16, 0.5, 2)
    for name, values in result["params"].items():
        torch.testing.assert_close(torch.tensor(values).reshape(expected[name].shape),
                                   expected[name])
