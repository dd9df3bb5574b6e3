"""The sharded key-value store: push/pull semantics, errors, checkpoints, crash and restart."""
import datetime
import os
import re

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
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{dx.distributed.free_port()}", rank=0,
                            world_size=1, timeout=datetime.timedelta(seconds=30))
    yield
    dx.distributed.finish_worker()
    if old is None:
        os.environ.pop("GLOO_SOCKET_IFNAME", None)
    else:
        os.environ["GLOO_SOCKET_IFNAME"] = old


def test_a_step_is_committed_only_once_every_shard_is_on_disk(one_process_group, monkeypatch,
                                                                tmp_path):
    # save() meets the other ranks twice: after writing its shard (before rank 0 commits) and
    # after the commit (before old shards go); at each, the files are as that step needs.
    store, seen, real = kv.KVStore(), [], dist.barrier

    def barrier(*args, **kwargs):
        seen.append(sorted(os.listdir(tmp_path)))
        return real(*args, **kwargs)

    monkeypatch.setattr(dist, "barrier", barrier)
    store.init("w", torch.zeros(3))
    store.save(str(tmp_path), step=1)
    store.save(str(tmp_path), step=2)
    assert seen == [["shard-0-step1.pt"], ["acks.log", "committed.json", "shard-0-step1.pt"],
                    ["acks.log", "committed.json", "shard-0-step1.pt", "shard-0-step2.pt"],
                    ["acks.log", "committed.json", "shard-0-step1.pt", "shard-0-step2.pt"]]
    assert kv.committed_step(str(tmp_path)) == 2 and acked(tmp_path) == [1, 2]


def test_push_aggregates_and_pull_retrieves(one_process_group):
    store = kv.KVStore()  # no learning rate: the notebook's push, a sum
    store.init("w", torch.zeros(3))
    store.init("b", torch.zeros(1))
    store.push_all({"w": torch.tensor([1.0, 2.0, 3.0]), "b": torch.ones(1)})
    pulled = store.pull_all(["w", "b"])
    torch.testing.assert_close(pulled["w"], torch.tensor([1.0, 2.0, 3.0]))
    torch.testing.assert_close(pulled["b"], torch.ones(1))
    assert store.owner == {"w": 0, "b": 0}


def test_pull_returns_a_copy(one_process_group):
    store = kv.KVStore()
    store.init("w", torch.ones(2))
    store.pull_all(["w"])["w"].zero_()
    torch.testing.assert_close(store.pull_all(["w"])["w"], torch.ones(2))


def test_sgd_step_with_mean_gradient(one_process_group):
    store = kv.KVStore(lr=0.1)
    store.init("w", torch.ones(2))
    store.push_all({"w": torch.tensor([1.0, -1.0])})
    torch.testing.assert_close(store.pull_all(["w"])["w"], torch.tensor([0.9, 1.1]))


def test_bounded_staleness_serves_recent_versions(one_process_group):
    store = kv.KVStore(lr=1.0, max_staleness=2)
    store.init("w", torch.zeros(1))
    for _ in range(6):
        store.push_all({"w": -torch.ones(1)})  # w counts the updates: 1, 2, ..., 6
    seen = {float(store.pull_all(["w"])["w"]) for _ in range(50)}
    assert seen == {4.0, 5.0, 6.0}  # never older than 2 updates
    assert float(store.pull_all(["w"], latest=True)["w"]) == 6.0
    assert max(store.versions_served) == 2


def test_checkpoint_is_atomic_and_loads_with_weights_only(one_process_group, tmp_path):
    store = kv.KVStore()
    store.init("w", torch.arange(3.0))
    assert kv.committed_step(str(tmp_path)) is None and store.restore(str(tmp_path)) == 0
    store.save(str(tmp_path), 10)
    store.push_all({"w": torch.full((3,), 7.0)})
    store.save(str(tmp_path), 20)
    assert sorted(os.listdir(tmp_path)) == ["acks.log", "committed.json", "shard-0-step20.pt"]
    assert kv.committed_step(str(tmp_path)) == 20
    assert acked(tmp_path) == [10, 20]
    state = torch.load(tmp_path / "shard-0-step20.pt", weights_only=True)
    assert state["step"] == 20 and torch.equal(state["values"]["w"], torch.full((3,), 7.0))
    fresh = kv.KVStore()
    fresh.init("w", torch.zeros(3))
    assert fresh.restore(str(tmp_path)) == 20
    torch.testing.assert_close(fresh.pull_all(["w"])["w"], torch.full((3,), 7.0))


def test_load_refuses_a_checkpoint_of_another_process_count(one_process_group, tmp_path):
    store = kv.KVStore()
    store.init("w", torch.zeros(1))
    store.save(str(tmp_path), 5)
    state = torch.load(tmp_path / "shard-0-step5.pt", weights_only=True)
    torch.save({**state, "world": 2}, tmp_path / "shard-0-step5.pt")  # as 2 processes wrote
    with pytest.raises(RuntimeError, match="of 2 processes, not 1: give this job a new"):
        store.restore(str(tmp_path))


def test_the_directory_is_fsynced_after_the_rename(monkeypatch, tmp_path):
    import stat

    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append("fsync dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file")
        real_fsync(fd)

    def replace(src, dst):
        events.append("rename")
        real_replace(src, dst)

    monkeypatch.setattr(kv.os, "fsync", fsync)
    monkeypatch.setattr(kv.os, "replace", replace)
    kv._atomic_write(str(tmp_path / "x.json"), lambda f: f.write(b"{}"))
    if os.name == "posix":
        assert events == ["fsync file", "rename", "fsync dir"]
    else:  # Windows: no directory handle to sync
        assert events == ["fsync file", "rename"]
    assert (tmp_path / "x.json").read_bytes() == b"{}"
    assert os.listdir(tmp_path) == ["x.json"]


def test_a_failed_write_leaves_no_temporary_file(tmp_path):
    def broken(f):
        f.write(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        kv._atomic_write(str(tmp_path / "x.json"), broken)
    assert os.listdir(tmp_path) == []


def test_a_crash_between_write_and_rename_is_cleaned_up_by_the_restart(
        one_process_group, tmp_path, monkeypatch):
    store = kv.KVStore()
    store.init("w", torch.arange(3.0))
    store.save(str(tmp_path), 10)
    store.push_all({"w": torch.ones(3)})

    def power_cut(src, dst):  # the process dies after writing the temporary file
        raise SystemExit("power cut before the rename")

    monkeypatch.setattr(kv.os, "replace", power_cut)
    with pytest.raises(SystemExit):
        store.save(str(tmp_path), 20)
    monkeypatch.undo()
    left = [f for f in os.listdir(tmp_path) if ".tmp" in f]
    assert len(left) == 1 and left[0].startswith("shard-0-step20.pt.tmp")  # the crash's debris
    assert kv.committed_step(str(tmp_path)) == 10
    # Only NAME.tmp<pid> files are debris: others that merely look alike stay.
    for name in ["committed.json.tmp77", "shard-1-step5.pt.tmp9", "notes.tmp", "x.tmpabc"]:
        (tmp_path / name).write_text("x")
    # The restart: a fresh store loads the last committed step and removes the debris.
    fresh = kv.KVStore()
    fresh.init("w", torch.zeros(3))
    assert fresh.restore(str(tmp_path)) == 10
    torch.testing.assert_close(fresh.pull_all(["w"])["w"], torch.arange(3.0))
    assert sorted(os.listdir(tmp_path)) == ["acks.log", "committed.json", "notes.tmp",
                                            "shard-0-step10.pt", "x.tmpabc"]


@pytest.mark.parametrize("argv, match", [(["--task", "fault"], "needs --workdir"),
                                         (["--staleness", "4", "-1"], "whole number >= 0")])
def test_bad_worker_arguments_are_refused_with_what_to_do(argv, match, capsys):
    with pytest.raises(SystemExit):
        kv.main(argv)
    assert match in capsys.readouterr().err


def test_batches_do_not_depend_on_the_rank_count_split():
    whole = kv.batch_of(3, 0, 1, 8, 100)
    halves = torch.cat([kv.batch_of(3, r, 2, 4, 100) for r in range(2)])
    assert torch.equal(whole, halves)


def acked(directory) -> list[int]:
    """Every step acknowledged in directory, oldest first, over all runs."""
    path = directory / kv.ACK_LOG
    return [int(s) for s in path.read_text(encoding="utf-8").split()] if path.exists() else []


def _reference_params(steps: int, batch: int, lr: float, world: int) -> dict:
    # What the workers must compute together, in one process: SGD on the mean of their gradients.
    X, y = kv.make_problem(0)
    net = kv.make_net(0)
    for step in range(steps):
        grads = [kv.gradients(net, X[i], y[i])
                 for i in (kv.batch_of(step, r, world, batch, len(X)) for r in range(world))]
        with torch.no_grad():
            for name, p in net.named_parameters():
                p -= lr * sum(g[name] for g in grads) / world
    return {name: p.detach() for name, p in net.named_parameters()}


def _assert_params_equal(got: dict, expected: dict) -> None:
    assert set(got) == set(expected)
    for name, values in got.items():
        torch.testing.assert_close(torch.tensor(values).reshape(expected[name].shape),
                                   expected[name], rtol=1e-4, atol=1e-5)


@pytest.mark.timeout(150)
def test_3_processes_push_pull_compare_and_staleness():
    # One job (every process imports torch): training through the store and with allreduce,
    # both against a one-process reference; then stale pulls, which must stay within their bound.
    steps, batch, lr = 12, 8, 0.5
    run = dx.launch("d2l_extras.kvstore", 3,
                    ["--task", "compare", "staleness", "--timeout", 60, "--steps", steps,
                     "--batch", batch, "--lr", lr, "--staleness", 0, 3, "--eval-every", 4],
                    timeout=120, echo=False)
    compare = run.result["compare"]
    expected = _reference_params(steps, batch, lr, 3)
    _assert_params_equal(compare["store"], expected)
    _assert_params_equal(compare["allreduce"], expected)
    owners = dx.ShardedStore(servers=3)  # the notebook's rule, in one process
    for name, t in expected.items():
        owners.init(name, t)
    assert compare["owners"] == owners.owner
    assert set(compare["owners"].values()) == {0, 1, 2}  # every rank holds a shard
    # trained in 5 chunks of 2 steps (the first timed apart) and 2 untimed: 4 runs of each
    assert len(compare["store_runs"]) == len(compare["allreduce_runs"]) == 4
    assert min(compare["store_runs"] + compare["allreduce_runs"]) > 0
    stale = run.result["staleness"]
    assert [step for step, _ in stale["curves"]["0"]] == [0, 4, 8, 12]
    assert stale["served"]["0"] == {"max": 0, "stale_share": 0}
    assert 0 < stale["served"]["3"]["max"] <= 3 and stale["served"]["3"]["stale_share"] > 0


@pytest.mark.timeout(170)
def test_2_processes_push_pull_then_kill_and_restart_loses_nothing(tmp_path):
    # Checkpointed training that rank 1 kills; the same command again resumes it.
    steps = 30
    args = ["--task", "fault", "--workdir", str(tmp_path), "--steps", steps,
            "--ckpt-every", 5, "--kill-at", 13, "--lr", 0.5, "--batch", 16, "--timeout", 30]
    with pytest.raises(dx.distributed.WorkerError) as crash:
        dx.launch("d2l_extras.kvstore", 2, args, timeout=75, echo=False)
    assert re.search(r"kvstore failed( on rank 1)? \(exit code", str(crash.value))
    # torchrun's report names the rank that died and its exit code
    assert re.search(rf"rank\s*:\s*1 \(local_rank: 1\)\s*exitcode\s*:\s*{kv.CRASH_EXIT_CODE}\b",
                     str(crash.value))
    assert crash.value.exit_codes.get(1) == kv.CRASH_EXIT_CODE  # the same, as data
    assert crash.value.returncode != 0
    assert (tmp_path / kv.KILLED_MARK).read_text() == "rank 1 killed at step 13"
    before = acked(tmp_path)
    assert before == [5, 10] and kv.committed_step(str(tmp_path)) == 10
    # The same command again: the crash happens only once; training resumes from step 10.
    result = dx.launch("d2l_extras.kvstore", 2, args, timeout=75, echo=False).result["fault"]
    assert result["resumed_from"] == 10 >= max(before)   # nothing acknowledged was lost
    assert acked(tmp_path) == [5, 10, 15, 20, 25]
    assert not [f for f in os.listdir(tmp_path) if ".tmp" in f]
    _assert_params_equal(result["params"], _reference_params(steps, 16, 0.5, 2))
