import sys
import textwrap
import time

import pytest

import d2l_extras as dx


@pytest.fixture
def worker_dir(tmp_path, monkeypatch):
    """A folder on sys.path (for torchrun's -m) holding small worker modules."""
    (tmp_path / "ok_worker.py").write_text(textwrap.dedent("""
        import torch, torch.distributed as dist
        import d2l_extras as dx
        rank, world, device = dx.init_worker(timeout_s=30)
        t = torch.full((3,), float(rank + 1))
        dist.all_reduce(t)
        print(f"rank {rank} of {world}: {t.tolist()}", flush=True)
        if rank == 0:
            dx.save_result({"sum": t.tolist(), "world": world})
        dist.destroy_process_group()
    """))
    (tmp_path / "bad_worker.py").write_text(textwrap.dedent("""
        import torch, torch.distributed as dist
        import d2l_extras as dx
        rank, world, device = dx.init_worker(timeout_s=30)
        if rank == 1:
            raise ValueError("rank 1 cannot go on")
        dist.all_reduce(torch.ones(1))  # rank 0 waits here for a peer that is gone
    """))
    (tmp_path / "slow_worker.py").write_text("import time\ntime.sleep(600)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return tmp_path


def test_free_port_is_bindable():
    import socket
    port = dx.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_torchrun_command():
    cmd = dx.torchrun_command("pkg.mod", 2, ["--epochs", 3], master_port=1234)
    assert cmd[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert "--nproc-per-node=2" in cmd and "--master-addr=127.0.0.1" in cmd
    assert "--master-port=1234" in cmd and cmd[-4:] == ["-m", "pkg.mod", "--epochs", "3"]


@pytest.mark.parametrize("kwargs", [dict(nproc=0), dict(nproc=1.5), dict(nproc=True),
                                    dict(nnodes=0), dict(node_rank=2, nnodes=2)])
def test_torchrun_command_rejects_bad_input(kwargs):
    args = dict(module="m", nproc=2) | kwargs
    with pytest.raises(ValueError):
        dx.torchrun_command(**args)


def test_launch_returns_output_and_result(worker_dir):
    run = dx.launch("ok_worker", 2, timeout=120, echo=False)
    assert run.result == {"sum": [3.0, 3.0, 3.0], "world": 2}
    assert any("rank 1 of 2" in line for line in run.output)


def test_failing_worker_fails_fast_with_its_message(worker_dir):
    start = time.perf_counter()
    with pytest.raises(dx.WorkerError, match="ValueError: rank 1 cannot go on"):
        dx.launch("bad_worker", 2, timeout=120, echo=False)
    assert time.perf_counter() - start < 60


def test_hanging_run_is_stopped_at_the_timeout(worker_dir):
    start = time.perf_counter()
    with pytest.raises(dx.WorkerError, match="did not finish within 15 s"):
        dx.launch("slow_worker", 1, timeout=15, echo=False)
    assert time.perf_counter() - start < 40


def test_env_reaches_the_workers_and_wins_over_defaults(worker_dir):
    (worker_dir / "env_worker.py").write_text(textwrap.dedent("""
        import os
        import d2l_extras as dx
        rank, world, device = dx.init_worker(timeout_s=30)
        if rank == 0:
            dx.save_result({k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "D2L_TEST_FLAG")})
    """))
    run = dx.launch("env_worker", 1, timeout=120, echo=False,
                    env={"OMP_NUM_THREADS": "3", "D2L_TEST_FLAG": "yes"})
    assert run.result == {"OMP_NUM_THREADS": "3", "D2L_TEST_FLAG": "yes"}
