import concurrent.futures
import datetime
import inspect
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest
import torch

import d2l_extras as dx
from d2l_extras.distributed import is_loopback

LIMIT = datetime.timedelta(seconds=7)


@pytest.fixture
def worker_dir(tmp_path, monkeypatch):
    """A folder on sys.path (for torchrun's -m) holding small worker modules."""
    (tmp_path / "ok_worker.py").write_text(textwrap.dedent("""
        import multiprocessing, os, time, torch, torch.distributed as dist
        import d2l_extras as dx
        rank, world, device = dx.distributed.init_worker(timeout_s=30)
        t = torch.full((3,), float(rank + 1))
        dist.all_reduce(t)
        print(f"rank {rank} of {world}: {t.tolist()}", flush=True)
        if rank == 1:
            time.sleep(1)  # rank 0 leaves while its all_reduce still waits for rank 1
        dist.all_reduce(torch.ones(1000), async_op=True)  # only gloo's thread holds the tensor
        dx.distributed.finish_worker()
        if rank == 0:
            env = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "D2L_TEST_FLAG")}
            dx.distributed.save_result({"sum": t.tolist(), "world": world, "env": env,
                                        "left": not dist.is_initialized(),
                                        "forked": multiprocessing.parent_process() is not None})
    """))
    # Each worker starts a child that ignores SIGTERM (as a slow daemon might), writes both
    # pids with their start times to D2L_PID_DIR, then sleeps, fails (rank 1) or exits.
    (tmp_path / "pid_worker.py").write_text(textwrap.dedent("""
        import os, pathlib, signal, subprocess, sys, time
        import psutil
        folder, rank = pathlib.Path(os.environ["D2L_PID_DIR"]), int(os.environ["RANK"])
        mode = os.environ.get("D2L_MODE", "sleep")
        if os.environ.get("D2L_IGNORE_TERM"):
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen([sys.executable, "-c", "import signal, time; "
                                  "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
        for name, pid in ((f"worker{rank}", os.getpid()), (f"child{rank}", child.pid)):
            tmp = folder / f"{name}.tmp"
            tmp.write_text(f"{pid} {psutil.Process(pid).create_time()}")
            tmp.rename(folder / f"{name}.pid")
        print(f"rank {rank} ready", flush=True)
        if mode == "exit":
            sys.exit(0)  # leaves its child behind
        if mode == "fail" and rank == 1:
            end = time.monotonic() + 120  # fail once rank 0 has written its pids
            while not (folder / "child0.pid").exists() and time.monotonic() < end:
                time.sleep(0.05)
            raise ValueError("rank 1 cannot go on")
        time.sleep(600)
    """))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return tmp_path


def _wait_for(condition, seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return False


def _recorded(folder):
    """The processes a pid_worker run wrote down: name -> (pid, start time)."""
    return {f.stem: tuple(float(x) for x in f.read_text().split()) for f in folder.glob("*.pid")}


def _still_running(processes):
    """Those of the recorded processes that still run (same pid and start time, no zombie)."""
    alive = []
    for name, (pid, started) in processes.items():
        try:
            p = psutil.Process(int(pid))
            if p.create_time() == started and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{name} (pid {int(pid)}: {' '.join(p.cmdline())})")
        except psutil.NoSuchProcess:
            pass
    return alive


def _running_children(before=frozenset()):
    """This process's descendants that still run, apart from `before` (pids that ran before
    the launch, such as multiprocessing's resource tracker that an earlier test started);
    tests/conftest.py adopts orphans, so a leaked worker is a descendant too."""
    alive = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"pid {p.pid}: {' '.join(p.cmdline())}")
        except psutil.NoSuchProcess:
            pass
    return alive


def _children_now(before=frozenset()):
    found = {}
    for p in psutil.Process().children(recursive=True):
        try:
            if p.pid not in before:
                found[f"launched {p.pid}"] = (p.pid, p.create_time())
        except psutil.NoSuchProcess:  # ended between the listing and the question
            pass
    return found


def _pids_now():
    return frozenset(p.pid for p in psutil.Process().children(recursive=True))


@pytest.fixture
def pid_dir(tmp_path):
    folder = tmp_path / "pids"
    folder.mkdir()
    return folder


def test_free_port_is_bindable():
    port = dx.distributed.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_finish_worker_outside_a_group_does_nothing():
    assert not torch.distributed.is_initialized()
    assert dx.distributed.finish_worker() is None


@pytest.fixture
def gpus(monkeypatch):
    """Make this machine look as if it had n CUDA GPUs (call the fixture with n)."""
    monkeypatch.delenv("D2L_BACKEND", raising=False)

    def pretend(n, nccl=True):  # nccl=False: torch's Windows and macOS builds
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
        monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: nccl)
    return pretend


@pytest.mark.parametrize("n_gpus", [0, 1, 2, 4])
def test_worker_device_is_a_gpu_only_when_every_worker_has_one(gpus, monkeypatch, n_gpus):
    gpus(n_gpus)
    for local_world in (1, 2, 4):
        want = "cuda" if n_gpus >= local_world else "cpu"
        for rank in range(local_world):
            device = dx.distributed.worker_device(local_world, rank)
            assert device.type == want and device == dx.distributed.worker_device(local_world, rank, n_gpus)
            assert device.index == (rank if want == "cuda" else None)
    monkeypatch.setenv("D2L_BACKEND", "gloo")  # asked for the CPU
    assert dx.distributed.worker_device(1).type == "cpu"


def test_worker_device_without_nccl_is_the_cpu(gpus):
    # On Windows torch has no NCCL: two GPUs there still run their workers on gloo, on the CPU.
    gpus(2, nccl=False)
    assert [dx.distributed.worker_device(2, r).type for r in range(2)] == ["cpu", "cpu"]


def test_launch_returns_output_and_result_and_passes_env(worker_dir):
    run = dx.launch("ok_worker", 2, timeout=120, echo=False,
                    env={"OMP_NUM_THREADS": "3", "D2L_TEST_FLAG": "yes"})
    assert run.result["sum"] == [3.0, 3.0, 3.0] and run.result["world"] == 2
    assert any("rank 1 of 2" in line for line in run.output)
    # env reaches the workers and wins over launch's defaults (one OpenMP thread each).
    assert run.result["env"] == {"OMP_NUM_THREADS": "3", "D2L_TEST_FLAG": "yes"}
    # finish_worker left while gloo's thread still held a tensor, which it frees taking the
    # GIL: torch < 2.8 froze there with a plain destroy_process_group (pytorch/pytorch#154976).
    assert run.result["left"] is True


def test_launch_forks_the_workers_only_on_linux_without_cuda(worker_dir):
    # A fork starts with torch imported (a second or more sooner); CUDA needs fresh processes.
    forks = sys.platform == "linux" and not torch.cuda.is_available()
    assert dx.launch("ok_worker", 2, timeout=120, echo=False).result["forked"] is forks
    fresh = dx.launch("ok_worker", 2, timeout=120, echo=False,
                      env={dx.distributed.FORK_ENV: "0"})  # the user's choice wins
    assert fresh.result["forked"] is False and fresh.result["sum"] == [3.0, 3.0, 3.0]


def test_forking_runs_a_module_in_forks_and_leaves_anything_else_to_torchrun():
    from torch.distributed import run as torchrun
    from d2l_extras.distributed import _forking, _run_module
    config = _forking(torchrun.config_from_args)
    launch, entry, args = config(torchrun.parse_args(
        ["--nproc-per-node=2", "-m", "pkg.job", "--steps", "3"]))
    assert (launch.start_method, entry, args) == ("fork", _run_module, ["pkg.job", "--steps", "3"])
    launch, entry, args = config(torchrun.parse_args(["--nproc-per-node=2", "job.py", "-v"]))
    assert (launch.start_method, entry) == ("spawn", sys.executable)
    assert args[-2:] == ["job.py", "-v"]


TORCHRUN_REPORT = """\
[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:561] Connection closed
============================================================
d2l_extras.kvstore FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2025-01-01_00:00:01
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 4321)
  error_file: <N/A>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2025-01-01_00:00:00
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 86 (pid: 1234)
  error_file: <N/A>
============================================================"""


def test_worker_exit_codes_read_torchruns_report():
    from d2l_extras.distributed import worker_exit_codes
    assert worker_exit_codes(TORCHRUN_REPORT.splitlines()) == {0: -15, 1: 86}
    assert worker_exit_codes(["rank : 1 (local_rank: 1)"]) == {}
    assert worker_exit_codes([]) == {}


def test_hanging_run_is_stopped_at_the_timeout(worker_dir, pid_dir):
    # Workers and their children ignore SIGTERM: torchrun would wait 30 s for them, launch
    # kills them all after `grace` s.
    before = _pids_now()
    for timeout in (5, 25):  # 25 s only where the workers took longer to start: a busy machine
        for f in pid_dir.glob("*.pid"):
            f.unlink()
        start = time.perf_counter()
        with pytest.raises(dx.distributed.WorkerError, match=f"did not finish within {timeout} s"):
            dx.launch("pid_worker", 2, timeout=timeout, echo=False, grace=2,
                      env={"D2L_PID_DIR": str(pid_dir), "D2L_IGNORE_TERM": "1"})
        assert time.perf_counter() - start < timeout + 2 + 30
        started = _recorded(pid_dir)
        assert _still_running(started) == []
        if len(started) == 4:
            break
    assert sorted(started) == ["child0", "child1", "worker0", "worker1"], \
        "the workers did not start within the timeout: nothing was checked"
    assert _running_children(before) == []


@pytest.mark.parametrize("fork", ["1", "0"])  # forked workers, and fresh ones
def test_failing_worker_fails_fast_with_its_message_and_leaves_no_process_behind(worker_dir,
                                                                                 pid_dir, fork):
    # Rank 1 fails while rank 0 would sleep for 10 minutes: torchrun stops rank 0 with SIGTERM
    # to its process group; the children ignore it.
    start = time.perf_counter()
    with pytest.raises(dx.distributed.WorkerError, match="failed on rank 1 .*ValueError: rank 1 cannot go") \
            as failure:
        dx.launch("pid_worker", 2, timeout=120, echo=False, env={
            "D2L_PID_DIR": str(pid_dir), "D2L_MODE": "fail", dx.distributed.FORK_ENV: fork})
    assert time.perf_counter() - start < 60
    # The same, as data: torchrun's exit code, each failed rank's own, every line printed.
    assert failure.value.returncode != 0 and failure.value.exit_codes.get(1) == 1
    assert any("cannot go" in line for line in failure.value.output)
    started = _recorded(pid_dir)
    assert sorted(started) == ["child0", "child1", "worker0", "worker1"]
    assert _still_running(started) == []


def test_finished_run_leaves_no_process_behind(worker_dir, pid_dir):
    # The workers exit 0 and leave their children running: the job is over, so are they.
    run = dx.launch("pid_worker", 2, timeout=120, echo=False,
                    env={"D2L_PID_DIR": str(pid_dir), "D2L_MODE": "exit"})
    assert any("rank 1 ready" in line for line in run.output)
    started = _recorded(pid_dir)
    assert sorted(started) == ["child0", "child1", "worker0", "worker1"]
    assert _still_running(started) == []


@pytest.fixture
def kernels_sigint():
    # A kernel turns SIGINT into KeyboardInterrupt. Pytest started by a script as `make test &`
    # inherits SIGINT ignored (POSIX, for background jobs without job control): the interrupt
    # below would be lost and launch would wait out its timeout.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_second_interrupt_waits_until_the_workers_are_stopped(kernels_sigint):
    # launch stops the workers inside _sigint_deferred: an interrupt meanwhile must not cut that
    # short; it is raised once the block is done, and the handler is the kernel's again.
    done = []
    with pytest.raises(KeyboardInterrupt):
        with dx.distributed._sigint_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)  # the signal arrives here and is held
            done.append(True)
    assert done == [True] and signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_interrupt_ends_torchrun_and_every_worker(worker_dir, pid_dir, kernels_sigint):
    # What stopping a notebook cell does: SIGINT to this process, KeyboardInterrupt in launch.
    seen = {}
    before = _pids_now()

    def interrupt_when_all_run():
        if _wait_for(lambda: len(_recorded(pid_dir)) == 4, 120):
            try:
                seen.update(_children_now(before))  # torchrun and the workers, while they run
            finally:  # interrupt whatever happened: an error here must not become a timeout
                os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_when_all_run, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        dx.launch("pid_worker", 2, timeout=150, echo=False, grace=2,
                  env={"D2L_PID_DIR": str(pid_dir), "D2L_IGNORE_TERM": "1"})
    started = _recorded(pid_dir)
    assert sorted(started) == ["child0", "child1", "worker0", "worker1"]
    assert len(seen) >= 5  # torchrun, 2 workers, 2 children
    assert _still_running({**started, **seen}) == []


def _inet_sockets(processes):
    found = []
    for p in processes:
        try:
            found += [(p.pid, c.status, c.laddr) for c in p.net_connections(kind="inet")]
        except psutil.NoSuchProcess:
            pass
    return found


def test_loopback_store_listens_on_127_0_0_1_only():
    from d2l_extras.distributed import _loopback_store

    port = dx.distributed.free_port()
    store = _loopback_store("127.0.0.1", port)
    store.set("key", "value")
    listening = [c.laddr for c in psutil.Process().net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
    del store
    assert [a.ip for a in listening] == ["127.0.0.1"]


def test_loopback_store_on_port_0_holds_a_port_the_os_chose():
    from d2l_extras.distributed import _loopback_store

    store = _loopback_store("127.0.0.1", 0)
    assert store.port > 0 and [a.ip for a in _listening(store.port)] == ["127.0.0.1"]
    with socket.socket() as other, pytest.raises(OSError):  # nobody else can take it
        other.bind(("127.0.0.1", store.port))
    port = store.port
    del store
    assert _listening(port) == []


def _listening(port=None):
    return [c.laddr for c in psutil.Process().net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN and port in (None, c.laddr.port)]


@pytest.mark.parametrize("argv, store", [
    (["--nproc-per-node=2", "-m", "mod", "--x", "1"], True),  # torchrun's defaults
    (["--master-addr=127.0.0.1", "--master-port=PORT", "-m", "mod"], True),
    (["--nnodes=2", "--node-rank=0", "--master-addr=10.0.0.1", "--master-port=PORT",
      "-m", "mod"], False),
    (["--standalone", "--nproc-per-node=2", "-m", "mod"], False)])
def test_main_serves_torchruns_store_on_loopback_on_one_machine(monkeypatch, argv, store):
    import torch.distributed.run as torchrun
    from d2l_extras import distributed

    for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        monkeypatch.delenv(name, raising=False)  # restored afterwards
    argv = [a.replace("PORT", str(dx.distributed.free_port())) for a in argv]
    seen = {}

    def fake_torchrun(args):  # what torchrun would find when it starts its store
        parsed = torchrun.parse_args(args)
        seen.update(args=args, port=int(parsed.master_port or 29500),
                    listening=_listening(int(parsed.master_port or 29500)),
                    gloo=os.environ.get("GLOO_SOCKET_IFNAME"))

    monkeypatch.setattr(torchrun, "main", fake_torchrun)
    distributed.main(argv)
    assert seen["args"][-len(argv):] == argv  # the user's arguments, unchanged
    if store:
        assert [a.ip for a in seen["listening"]] == ["127.0.0.1"]
        assert seen["gloo"] == distributed.loopback_interface()
    else:
        assert seen["args"] == argv and seen["listening"] == [] and seen["gloo"] is None
    assert _listening(seen["port"]) == []  # the store ended with torchrun


def old_port_default(parse):
    """torchrun's parse_args as torch 2.6 to 2.11 have it: a missing --master-port is 29500."""
    def parse_args(args):
        parsed = parse(args)
        if parsed.master_port is None:
            parsed.master_port = 29500
        return parsed
    return parse_args


def test_main_picks_a_free_port_where_torchrun_fills_in_29500(monkeypatch):
    # torchrun 2.6 parses a missing --master-port as 29500: a port another job may hold.
    # The wrapper must still let the OS pick one, hold it, and tell torchrun which.
    import torch.distributed.run as torchrun
    from d2l_extras import distributed

    as_in_2_6 = old_port_default(torchrun.parse_args)
    for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "PET_MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(torchrun, "parse_args", as_in_2_6)
    seen = {}
    monkeypatch.setattr(torchrun, "main", lambda args: seen.update(args=args))
    with socket.socket() as blocker:   # 29500 taken, as by another job
        blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            blocker.bind(("127.0.0.1", 29500))
            blocker.listen(1)
        except OSError:
            pass                       # taken already: the same test
        distributed.main(["--nproc-per-node=2", "-m", "mod"])
    ports = [int(a.split("=")[1]) for a in seen["args"] if a.startswith("--master-port=")]
    assert len(ports) == 1 and ports[0] != 29500, seen["args"]


def test_two_launches_at_once_with_torchruns_old_port_default(worker_dir, monkeypatch):
    # torchrun 2.6 to 2.11 parse a missing --master-port as 29500 (2.14: None). Every launch
    # then bound 29500, and a second one at the same time (07 and 08 side by side, or CI)
    # failed with EADDRINUSE. Here every torchrun started parses as those releases do.
    (worker_dir / "sitecustomize.py").write_text(inspect.getsource(old_port_default)
                                                  + textwrap.dedent("""
        import os
        if os.environ.get("D2L_TEST_OLD_PORT_DEFAULT"):
            import torch.distributed.run as run
            run.parse_args = old_port_default(run.parse_args)
    """))
    # The workers only report the port: the clash was torchrun's own store, before any worker.
    (worker_dir / "port_worker.py").write_text(textwrap.dedent(f"""
        import json, os, pathlib
        pathlib.Path(os.environ["{dx.distributed.RESULT_ENV}"]).write_text(
            json.dumps(os.environ["MASTER_PORT"]))
    """))
    monkeypatch.setenv("D2L_TEST_OLD_PORT_DEFAULT", "1")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(dx.launch, "port_worker", 1, timeout=120, echo=False)
                for _ in range(2)]
        ports = [run.result().result for run in runs]
    assert len(set(ports)) == 2 and "29500" not in ports, ports


def test_single_machine_run_listens_on_loopback_only(worker_dir):
    # torchrun's store and gloo's sockets, seen while the workers wait for a file.
    (worker_dir / "net_worker.py").write_text(textwrap.dedent("""
        import os, pathlib, time
        import torch.distributed as dist
        import d2l_extras as dx
        rank, world, device = dx.distributed.init_worker(timeout_s=120)
        dist.barrier()
        folder = pathlib.Path(os.environ["D2L_NET_DIR"])
        (folder / f"ready{rank}").write_text("")
        end = time.monotonic() + 120
        while not (folder / "done").exists() and time.monotonic() < end:
            time.sleep(0.05)
        dist.barrier()
        dx.distributed.finish_worker()
    """))
    sockets = []

    def inspect_when_ready():
        ready = lambda: all((worker_dir / f"ready{r}").exists() for r in range(2))
        if _wait_for(ready, 150):
            sockets.extend(_inet_sockets(psutil.Process().children(recursive=True)))
        (worker_dir / "done").write_text("")

    threading.Thread(target=inspect_when_ready, daemon=True).start()
    dx.launch("net_worker", 2, timeout=180, echo=False, env={"D2L_NET_DIR": str(worker_dir)})
    listening = [s for s in sockets if s[1] == psutil.CONN_LISTEN]
    assert len(listening) >= 2, f"expected the store and gloo listening, saw {sockets}"
    assert [s for s in sockets if not is_loopback(s[2].ip)] == []


@pytest.mark.parametrize("host, expected", [("127.0.0.1", True), ("127.1.2.3", True),
                                            ("::1", True), ("localhost", True),
                                            ("::ffff:127.0.0.1", True), ("::ffff:10.0.0.1", False),
                                            ("0.0.0.0", False), ("10.0.0.1", False),
                                            ("::", False), ("node1", False)])
def test_is_loopback(host, expected):
    assert is_loopback(host) is expected


def test_suite_fails_when_a_test_leaves_a_process_behind(tmp_path):
    # tests/conftest.py's end-of-session check, run on a small suite whose test leaves an
    # orphan behind (its parent exits at once, as torchrun did before launch ended workers).
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(
        (Path(__file__).parent / "conftest.py").read_text(encoding="utf-8"))
    pid_file = tmp_path / "orphan.pid"
    (suite / "test_leak.py").write_text(textwrap.dedent(f"""
        import subprocess, sys
        def test_leaves_an_orphan():
            code = ("import subprocess, sys, pathlib; p = subprocess.Popen([sys.executable, '-c', "
                    "'import time; time.sleep(600)']); pathlib.Path({str(pid_file)!r})"
                    ".write_text(str(p.pid))")
            subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    """))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "."],
                         cwd=suite, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "D2L_LEAK_WAIT_S": "0.5"})
    assert run.returncode == 1, run.stdout + run.stderr
    assert "LEAKED PROCESSES" in run.stdout and "time.sleep(600)" in run.stdout
    orphan = int(pid_file.read_text())
    assert not psutil.pid_exists(orphan) or \
        psutil.Process(orphan).status() == psutil.STATUS_ZOMBIE


def test_run_worker_alone_is_a_group_of_one_and_prints_its_result(monkeypatch, capsys):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT", dx.distributed.RESULT_ENV):
        monkeypatch.delenv(key, raising=False)
    seen = {}

    def work():
        seen.update(os.environ)
        return {"answer": 42}
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.9")  # the caller's own setting
    dx.distributed.run_worker(work)
    assert seen["RANK"] == "0" and seen["WORLD_SIZE"] == "1"
    assert seen["MASTER_ADDR"] == "127.0.0.1"
    assert json.loads(capsys.readouterr().out) == {"answer": 42}
    # Afterwards the process is as before: a later subprocess inherits no stale rank or port.
    assert "RANK" not in os.environ and "MASTER_PORT" not in os.environ
    assert os.environ["MASTER_ADDR"] == "10.0.0.9"


def test_run_worker_passes_a_failure_on(monkeypatch):
    monkeypatch.setenv("RANK", "0")

    def fail():
        raise RuntimeError("broken on purpose")
    with pytest.raises(RuntimeError, match="on purpose"):
        dx.distributed.run_worker(fail)


@pytest.fixture
def built_for(monkeypatch):
    """Give the GPUs of the `gpus` fixture these compute capabilities, under the pinned wheel."""
    def pretend(*capabilities, archs=("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")):
        monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: list(archs))
        monkeypatch.setattr(torch.cuda, "get_device_properties",
                            lambda i: type("Props", (), dict(zip(("major", "minor"),
                                                                 capabilities[i]))))
    return pretend


def test_worker_device_counts_only_gpus_this_torch_has_kernels_for(gpus, built_for):
    gpus(2)
    built_for((6, 0), (6, 0))  # two P100s (Kaggle) under a cu130 wheel: no sm_60 kernels
    assert [dx.distributed.worker_device(2, r) for r in range(2)] == [torch.device("cpu")] * 2
    assert dx.distributed.worker_device(1) == torch.device("cpu")
    assert dx.distributed.worker_device(2, 1, n_gpus=2) == torch.device("cuda", 1)  # told: taken as said
    built_for((8, 0), (8, 0))  # two A100s
    assert [dx.distributed.worker_device(2, r) for r in range(2)] == [torch.device("cuda", r) for r in (0, 1)]


def test_worker_device_skips_a_gpu_without_kernels(gpus, built_for):
    gpus(3)
    built_for((7, 0), (9, 0), (8, 6))  # a V100 beside an H100 and an A10G
    assert [dx.distributed.worker_device(2, r) for r in range(2)] == [torch.device("cuda", 1),
                                                          torch.device("cuda", 2)]
    assert dx.distributed.worker_device(3, 0) == torch.device("cpu")  # two usable GPUs for three workers
    built_for((7, 0), (9, 0), (8, 6), archs=())  # a build that names no arch: keep them all
    assert dx.distributed.worker_device(3, 0) == torch.device("cuda", 0)


# NCCL where peer access is reported but broken (Kaggle's 2 x T4): a hang, then a message that
# names the cause and the fix, or NCCL_P2P_DISABLE=1 set before it can hang.
WATCHDOG = ("[rank0]:[E101 00:00:00.000 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE) ran for 60000 "
            "milliseconds before timing out.")


def test_joins_nccl_only_with_a_gpu_for_every_worker(gpus):
    gpus(2)
    joins = dx.distributed.joins_nccl
    assert joins(2, {}) and joins(2, {"CUDA_VISIBLE_DEVICES": "0,1"})
    assert not joins(1, {}) and not joins(3, {})  # one process: no peer; three: the CPU
    assert not joins(2, {"D2L_BACKEND": "gloo"})
    assert not any(joins(2, {"CUDA_VISIBLE_DEVICES": seen}) for seen in ("", "1", " "))
    gpus(2, nccl=False)
    assert not joins(2, {})


def test_nccl_hint_names_the_cause_and_the_fix_only_where_nccl_hung(gpus):
    gpus(2)
    hint = dx.distributed.nccl_hint
    for said in (hint(2, {}), hint(2, {}, ["rank 0 ready", WATCHDOG], timed_out=False)):
        assert "Kaggle's 2 x T4" in said and "NCCL_P2P_DISABLE=1" in said
    # Not a hang: the worker's own error says why. Not NCCL: nothing to say about it.
    assert hint(2, {}, ["ValueError: bad input"], timed_out=False) == ""
    assert hint(2, {"D2L_BACKEND": "gloo"}) == hint(1, {}) == hint(3, {}) == ""
    already = hint(2, {"NCCL_P2P_DISABLE": "1"})
    assert "NCCL_IB_DISABLE=1" in already and "already" in already
    assert "Kaggle" in hint(2, {"NCCL_P2P_DISABLE": "0"})


def test_broken_peer_pairs_are_those_that_claim_access_and_copy_wrong(monkeypatch):
    tried = []

    def arrives(i, j):
        tried.append((i, j))
        return (i, j) != (0, 1)
    monkeypatch.setattr(dx.distributed, "_peer_copy_arrives", arrives)
    # nobody claims access to GPU 2
    monkeypatch.setattr(torch.cuda, "can_device_access_peer", lambda i, j: j != 2)
    assert dx.distributed.broken_peer_pairs([0, 1, 2]) == [(0, 1)]
    assert sorted(tried) == [(0, 1), (1, 0), (2, 0), (2, 1)]  # only pairs that claim access
    assert dx.distributed.broken_peer_pairs([0]) == []


def test_peer_env_disables_p2p_only_where_the_check_found_broken_copies(gpus, capsys,
                                                                       monkeypatch):
    gpus(2)
    monkeypatch.setattr(dx.report, "_NOTICED", set())  # a fresh process: no notice given yet
    calls = []

    def found(result):
        def check(nproc, env):
            calls.append(nproc)
            return result
        monkeypatch.setattr(dx.distributed, "_peer_check", check)
    peer_env = dx.distributed.peer_env
    found(["0 -> 1"])
    assert peer_env(2, {}) == {"NCCL_P2P_DISABLE": "1"}
    assert "NCCL_P2P_DISABLE=1" in capsys.readouterr().out  # said once, as a notice
    for result in ([], None):
        found(result)
        assert peer_env(2, {}) == {}
    assert len(calls) == 3
    # A choice already made, or no NCCL between GPUs: nothing checked.
    found(["0 -> 1"])
    for n, env in ((2, {"NCCL_P2P_DISABLE": "0"}), (2, {"NCCL_P2P_LEVEL": "PIX"}),
                   (2, {"D2L_BACKEND": "gloo"}), (1, {}), (3, {})):
        assert peer_env(n, env) == {}
    assert len(calls) == 3


def test_peer_check_runs_once_in_a_process_of_its_own(monkeypatch):
    monkeypatch.setattr(dx.distributed, "_PEER_CHECKS", {})
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # the real child: no GPU, nothing broken
    assert dx.distributed._peer_check(2, env) == []
    runs = []

    def fake_run(cmd, **kwargs):
        runs.append(kwargs["env"].get("CUDA_VISIBLE_DEVICES"))
        if kwargs["env"]["CUDA_VISIBLE_DEVICES"] == "hang":
            raise subprocess.TimeoutExpired(cmd, kwargs["timeout"])
        out = json.dumps({"gpus": [0, 1, 2, 3], "broken": [[0, 1], [2, 3]]})
        return subprocess.CompletedProcess(cmd, 0, out + "\n", "")
    monkeypatch.setattr(dx.distributed.subprocess, "run", fake_run)
    check = dx.distributed._peer_check
    four = {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    assert check(2, four) == ["0 -> 1"] and check(4, four) == ["0 -> 1", "2 -> 3"]
    assert runs == ["0,1,2,3"]  # checked once for the machine's GPUs
    assert check(2, {"CUDA_VISIBLE_DEVICES": "hang"}) == ["none finished within 60 s"]


@pytest.fixture
def nccl_worker(worker_dir, monkeypatch):
    """A worker module that hangs or dies as NCCL's watchdog ends it, launch believing in NCCL."""
    (worker_dir / "nccl_worker.py").write_text(textwrap.dedent(f"""
        import os, sys, time
        print("P2P disabled:", os.environ.get("NCCL_P2P_DISABLE"), flush=True)
        if os.environ.get("D2L_MODE") == "hang":
            time.sleep(600)
        print({WATCHDOG!r}, flush=True)
        sys.exit(1)
    """))
    monkeypatch.setattr(dx.distributed, "joins_nccl", lambda *args, **kwargs: True)

    def found(result):
        monkeypatch.setattr(dx.distributed, "_peer_check", lambda nproc, env: result)
    return found


def test_launch_names_the_cause_of_a_hung_nccl_run(nccl_worker):
    nccl_worker([])  # the copies arrived: NCCL_P2P_DISABLE is not set
    with pytest.raises(dx.distributed.WorkerError, match="did not finish within 3 s") as hung:
        dx.launch("nccl_worker", 2, timeout=3, echo=False, grace=2, env={"D2L_MODE": "hang"})
    first = str(hung.value).splitlines()[0]
    assert "Kaggle's 2 x T4" in first and "rerun with NCCL_P2P_DISABLE=1" in first


def test_launch_disables_p2p_where_copies_fail_and_says_what_next(nccl_worker, capsys,
                                                                  monkeypatch):
    nccl_worker(["0 -> 1"])
    monkeypatch.setattr(dx.report, "_NOTICED", set())
    with pytest.raises(dx.distributed.WorkerError, match="failed on rank") as failed:
        dx.launch("nccl_worker", 2, timeout=120, echo=False)
    assert any("P2P disabled: 1" in line for line in failed.value.output)  # the workers' env
    assert "NCCL_P2P_DISABLE=1 already: add NCCL_IB_DISABLE=1" in str(failed.value)
    assert "0 -> 1" in capsys.readouterr().out  # the notice says which copy failed


def test_init_worker_lets_a_stuck_nccl_collective_end_its_process(monkeypatch):
    joined = {}
    for key in ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING"):
        monkeypatch.setenv(key, "")  # restored after the test, whatever init_worker sets
        monkeypatch.delenv(key)
    for key, value in dict(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0",
                           LOCAL_WORLD_SIZE="2").items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(dx.distributed, "worker_device", lambda *a: torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda backend, **kw:
                        joined.update(backend=backend, **kw, handling=os.environ.get(
                            "TORCH_NCCL_ASYNC_ERROR_HANDLING")))
    assert dx.distributed.init_worker(timeout_s=7)[2] == torch.device("cuda", 0)
    assert joined["backend"] == "nccl" and joined["timeout"] == LIMIT
    assert joined["handling"] == "3"  # the watchdog ends the process after the timeout
    monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")  # a choice already made stays
    dx.distributed.init_worker(timeout_s=7)
    assert joined["handling"] == "1"


def test_comm_counts_name_each_collective_by_its_op():
    # CommDebugMode keys its counts by op objects (torch.ops.c10d._allgather_base_); the jobs
    # hand back plain names, the same for the c10d and the functional collectives.
    from torch.distributed import _functional_collectives  # noqa: F401 (registers the ops)

    class Mode:
        def get_comm_counts(self):
            return {torch.ops.c10d._allgather_base_: 8,
                    torch.ops._c10d_functional.all_reduce: 1}

    assert dx.distributed.comm_counts(Mode()) == {"_allgather_base_": 8, "all_reduce": 1}
