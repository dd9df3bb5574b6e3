"""Start torch.distributed workers with torchrun from Python, with timeouts and clear errors.

One machine, 2 processes (what the notebooks do):
    python -m torch.distributed.run --nproc-per-node=2 --master-addr=127.0.0.1 \
        --master-port=29500 -m d2l_extras.ddp --epochs 2
Two machines, 2 processes each: run on every machine, with --node-rank 0 or 1 and the first
machine's reachable address (on a trusted network only: the store has no authentication):
    python -m torch.distributed.run --nnodes=2 --node-rank=0 --nproc-per-node=2 \
        --master-addr=10.0.0.1 --master-port=29500 -m d2l_extras.ddp --epochs 2

`launch` runs the first kind from a notebook. Everything it starts ends with it: on success, on a
worker's error, at the timeout and when the cell is interrupted (KeyboardInterrupt). On one
machine nothing it starts listens on an address other than 127.0.0.1: torchrun's rendezvous
store (a TCPStore without authentication) would otherwise listen on every interface, so
`python -m d2l_extras.distributed ARGS` runs torchrun with its store bound to loopback; the
same from a terminal: python -m d2l_extras.distributed --nproc-per-node=2 -m d2l_extras.ddp
"""
from __future__ import annotations

import contextlib
import datetime
import gc
import ipaddress
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, MutableMapping, Sequence

import psutil
import torch

from .checks import whole_number
from .hardware import _cuda_gpus

RESULT_ENV = "D2L_RESULT_FILE"
# Seconds torchrun gets to stop its workers after SIGTERM before everything gets SIGKILL.
STOP_GRACE_S = 5.0


class WorkerError(RuntimeError):
    """A distributed run failed or timed out; the message holds the workers' last output.

    Also, as attributes: `returncode`, torchrun's own exit code (None after a timeout; torchrun
    exits with 1 whatever code a worker died with), `exit_codes`, each failed rank's exit code
    as torchrun reported it ({rank: code}), and `output`, every line the run printed.
    """

    def __init__(self, message: str, returncode: int | None = None,
                 exit_codes: dict[int, int] | None = None, output: Sequence[str] = ()):
        super().__init__(message)
        self.returncode = returncode
        self.exit_codes = dict(exit_codes or {})
        self.output = list(output)


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that is free on host right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def loopback_interface() -> str | None:
    """Return the name of the network interface that carries 127.0.0.1 (lo, lo0), if any."""
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == "127.0.0.1" for a in addrs):
            return name
    return None


def is_loopback(host: str) -> bool:
    """True if host is this machine only: 127.x.x.x, ::1, ::ffff:127.x.x.x or localhost."""
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)  # how an IPv6 socket shows 127.0.0.1
    return (mapped or address).is_loopback


@dataclass
class LaunchResult:
    """What a finished run gave back: its output lines, seconds taken and rank 0's result."""

    output: list[str]
    seconds: float
    result: Any = None
    command: list[str] = field(default_factory=list)


def torchrun_command(module: str, nproc: int, args: Sequence[str] = (), nnodes: int = 1,
                     node_rank: int = 0, master_addr: str = "127.0.0.1",
                     master_port: int | None = None) -> list[str]:
    """Return the torchrun command line (as a list) that starts `module` in nproc processes.

    No master_port: a free one is chosen now. 0: none is given, for `python -m
    d2l_extras.distributed`, whose store binds a free port itself and holds it.
    """
    nproc = whole_number(nproc, "nproc")
    if nnodes < 1 or not 0 <= node_rank < nnodes:
        raise ValueError(f"need nnodes >= 1 and 0 <= node_rank < nnodes, "
                         f"got nnodes={nnodes}, node_rank={node_rank}")
    if master_port is None:
        master_port = free_port(master_addr if nnodes == 1 else "0.0.0.0")
    port = [f"--master-port={master_port}"] if master_port else []
    return [sys.executable, "-m", "torch.distributed.run",
            f"--nnodes={nnodes}", f"--node-rank={node_rank}", f"--nproc-per-node={nproc}",
            f"--master-addr={master_addr}", *port, "--max-restarts=0",
            "-m", module, *map(str, args)]


def _loopback_env(env: MutableMapping[str, str]) -> None:
    # gloo and NCCL pick an interface from the host name (a public address) unless told;
    # the user's own settings win. The workers inherit torchrun's environment.
    lo = loopback_interface()
    if lo:
        env.setdefault("GLOO_SOCKET_IFNAME", lo)
        env.setdefault("NCCL_SOCKET_IFNAME", "=" + lo)  # "=": exactly this interface


class _ProcessTree:
    """torchrun and every process it started, remembered while they run, so all can be ended.

    torchrun starts each worker in a session of its own (start_new_session=True), so a signal
    to torchrun's process group misses them, and once torchrun is gone they belong to init.
    Hence: collect the descendants while waiting, then end them one by one.
    """

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.known: set[psutil.Process] = set()
        self.leaders: set[psutil.Process] = set()  # each leads a session: torchrun, workers
        try:
            self.root: psutil.Process | None = psutil.Process(proc.pid)
            self.leaders.add(self.root)  # start_new_session=True
        except psutil.NoSuchProcess:
            self.root = None

    def collect(self) -> None:
        """Remember torchrun's descendants (workers and their children) as they are now."""
        if self.root is None or self.proc.poll() is not None:
            return
        try:
            children = self.root.children(recursive=True)
        except psutil.NoSuchProcess:
            return
        for child in children:
            if child not in self.known:
                self.known.add(child)
                with contextlib.suppress(OSError):
                    if hasattr(os, "getsid") and os.getsid(child.pid) == child.pid:
                        self.leaders.add(child)  # a worker: its own children share it

    def _session_members(self) -> list[psutil.Process]:
        # A session id is not reused while any process is in the session, so every process
        # still in a worker's session is that worker's offspring, even one we never saw.
        if not hasattr(os, "getsid"):
            return []
        sessions = set()
        for leader in self.leaders:
            try:  # the leader runs (same start time) or is gone: its session id is still ours
                if psutil.Process(leader.pid).create_time() == leader.create_time():
                    sessions.add(leader.pid)
            except psutil.NoSuchProcess:
                sessions.add(leader.pid)
        found = []
        for p in psutil.process_iter():
            with contextlib.suppress(OSError, psutil.Error):
                if p.pid != os.getpid() and os.getsid(p.pid) in sessions:
                    found.append(p)
        return found

    def stop(self, grace: float = STOP_GRACE_S) -> list[psutil.Process]:
        """End torchrun (SIGTERM; SIGKILL after grace s) and all it started; return survivors."""
        self.collect()
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.proc.send_signal(signal.SIGTERM)  # torchrun stops its workers itself
            end = time.monotonic() + grace
            while self.proc.poll() is None and time.monotonic() < end:
                self.collect()
                time.sleep(0.05)
        victims = {p for p in self.known | set(self._session_members()) if _running(p)}
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                if os.name == "posix":
                    os.killpg(self.proc.pid, signal.SIGKILL)
                else:
                    self.proc.kill()
        for p in victims:
            with contextlib.suppress(psutil.Error):
                p.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        end = time.monotonic() + 10
        while any(_running(p) for p in victims) and time.monotonic() < end:
            time.sleep(0.05)
        return [p for p in victims if _running(p)]


def _running(p: psutil.Process) -> bool:
    # A zombie has ended; it only waits for its parent (or init) to collect its exit status.
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    # A second interrupt while the workers are being stopped would leave them running: hold it
    # until they are gone, then raise it.
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    hits: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: hits.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if hits:
        raise KeyboardInterrupt


def launch(module: str, nproc: int, args: Sequence[str] = (), timeout: float = 300,
           echo: bool = True, nnodes: int = 1, node_rank: int = 0,
           master_addr: str = "127.0.0.1", master_port: int | None = None,
           env: dict[str, str] | None = None, grace: float = STOP_GRACE_S) -> LaunchResult:
    """Run `module` under torchrun in nproc processes; stream output, end it all on any exit."""
    local = nnodes == 1 and is_loopback(master_addr)
    if local and master_port is None:
        master_port = 0  # main below binds a free port itself, and holds it
    cmd = torchrun_command(module, nproc, args, nnodes, node_rank, master_addr, master_port)
    if local:  # the same torchrun, with its store and sockets on loopback (see main below)
        cmd = [sys.executable, "-m", __name__, *cmd[3:]]
    with tempfile.TemporaryDirectory(prefix="d2l-launch-") as tmp:
        result_file = os.path.join(tmp, "result.json")
        run_env = {**os.environ, **(env or {}), RESULT_ENV: result_file, "PYTHONUNBUFFERED": "1"}
        # k processes share the cores: without a limit each would start one thread per core.
        run_env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
        lines: list[str] = []
        pipe: queue.Queue = queue.Queue()

        def take_lines(wait: float = 0.0) -> None:
            # Wait up to `wait` s (interruptibly) for a first line, then take what is there.
            while True:
                try:
                    line = pipe.get(timeout=wait) if wait else pipe.get_nowait()
                except queue.Empty:
                    return
                wait = 0.0
                line = line.rstrip("\n")
                lines.append(line)
                if echo:
                    print(line, flush=True)

        start = time.perf_counter()
        # A session of its own: an interrupt meant for the notebook does not reach torchrun
        # half-way; launch stops it in order instead.
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, text=True, env=run_env,
                                start_new_session=(os.name == "posix"))
        tree = _ProcessTree(proc)
        reader = threading.Thread(target=lambda: [pipe.put(l) for l in proc.stdout] and None,
                                  daemon=True)
        reader.start()
        timed_out = False
        try:
            while proc.poll() is None:
                take_lines(wait=0.1)
                tree.collect()
                if time.perf_counter() > start + timeout:
                    timed_out = True
                    break
            seconds = time.perf_counter() - start
        finally:  # also on KeyboardInterrupt: nothing outlives the call
            with _sigint_deferred():
                survivors = tree.stop(grace)
                reader.join(timeout=5)  # the pipe closes once every worker is gone
                if not reader.is_alive():
                    proc.stdout.close()
        take_lines()
        if survivors:
            warnings.warn(f"processes {[p.pid for p in survivors]} of {module} survived SIGKILL",
                          RuntimeWarning, stacklevel=2)
        if timed_out:
            tail = "\n".join(lines[-20:])
            raise WorkerError(f"{module} did not finish within {timeout:.0f} s and was "
                              f"stopped. Last output:\n{tail}", output=lines)
        if proc.returncode != 0:
            raise WorkerError(f"{module} failed{_failed_rank(lines)} (exit code "
                              f"{proc.returncode}). {_first_error(lines)}\nLast output:\n"
                              + "\n".join(lines[-25:]), returncode=proc.returncode,
                              exit_codes=worker_exit_codes(lines), output=lines)
        result = None
        if os.path.exists(result_file):
            with open(result_file, encoding="utf-8") as f:
                result = json.load(f)
        return LaunchResult(lines, seconds, result, cmd)


def _first_error(lines: list[str]) -> str:
    # The worker's own exception line ("[rank1]: ValueError: ...") is what a student needs first.
    for line in lines:
        match = _ERROR_LINE.match(line.strip())
        if match and "ChildFailedError" not in match.group(1):
            return f"Worker error: {match.group(1)}: {match.group(2)}"
    return ""


def _failed_rank(lines: list[str]) -> str:
    # torchrun's summary ends with "Root Cause (first observed failure):" and that rank.
    for i, line in enumerate(lines):
        if line.startswith("Root Cause"):
            for later in lines[i + 1:i + 6]:
                match = re.match(r"\s*rank\s*:\s*(\d+)", later)
                if match:
                    return f" on rank {match.group(1)}"
    return ""


_REPORTED = re.compile(r"\s*rank\s*:\s*(\d+)\s*\(local_rank:.*?\)\s*exitcode\s*:\s*(-?\d+)")


def worker_exit_codes(lines: Sequence[str]) -> dict[int, int]:
    """{rank: exit code} of the failed workers in torchrun's failure report, first seen first.

    torchrun prints, for every failed worker, a "rank : R (local_rank: L)" line followed by an
    "exitcode : C (pid: P)" line; a negative C is the signal that ended the worker.
    """
    codes: dict[int, int] = {}
    for i in range(len(lines) - 1):
        match = _REPORTED.match(f"{lines[i]} {lines[i + 1]}")
        if match:
            codes.setdefault(int(match.group(1)), int(match.group(2)))
    return codes


_ERROR_LINE = re.compile(r"^(?:\[rank\d+\]:\s*)?([A-Za-z_][\w.]*(?:Error|Exception)): (.*)$")


def worker_device(local_world: int, local_rank: int = 0,
                  n_gpus: int | None = None) -> torch.device:
    """The device worker local_rank of local_world on one machine uses (see init_worker).

    Its own GPU when there are at least local_world GPUs (n_gpus; default: those visible that
    this torch build has kernels for) and torch has NCCL (not on Windows or macOS), else the CPU;
    D2L_BACKEND=gloo asks for the CPU.
    """
    import torch.distributed as dist

    local_world = whole_number(local_world, "local_world")
    if not 0 <= local_rank < local_world:
        raise ValueError(f"local_rank must be in 0..{local_world - 1}, got {local_rank}")
    # A GPU without kernels in this build (a P100 under a cu130 wheel) would fail at the first
    # kernel: count only the others, and give worker k the k-th of them.
    gpus = _cuda_gpus()[0] if n_gpus is None else \
        list(range(whole_number(n_gpus, "n_gpus", minimum=0)))
    # NCCL needs one GPU per process; with fewer GPUs than processes we fall back to gloo on CPU.
    if len(gpus) >= local_world \
            and os.environ.get("D2L_BACKEND", "") != "gloo" and dist.is_nccl_available():
        return torch.device("cuda", gpus[local_rank])
    return torch.device("cpu")


def init_worker(timeout_s: float = 60) -> tuple[int, int, torch.device]:
    """In a torchrun worker: join the group (NCCL on GPUs, else gloo); return rank, size, device."""
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    device = worker_device(local_world, local_rank)
    use_gpu = device.type == "cuda"
    if use_gpu:
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if use_gpu else "gloo",
                                timeout=datetime.timedelta(seconds=timeout_s),
                                **({"device_id": device} if use_gpu else {}))
    return rank, world, device


def wait_for(work: Any, timeout: datetime.timedelta) -> None:
    """Wait for an async collective or send/recv: stream-ordered on NCCL, at most `timeout` else."""
    import torch.distributed as dist

    # NCCL's wait(timeout) keeps the host polling the GPU, with a sleep of 1 to 10 ms between
    # polls (WorkNCCL::wait in ProcessGroupNCCL.cpp), so every step would cost a sleep; without
    # a timeout it only makes the current stream wait for the collective. A dead peer still
    # cannot hang NCCL: the group's own timeout (init_worker) aborts it, and dx.launch stops the
    # job at its timeout. gloo's wait(timeout) sleeps on a condition variable: keep the bound.
    if dist.get_backend() == "nccl":
        work.wait()
    else:
        work.wait(timeout)


def finish_worker() -> None:
    """In a worker: leave torch.distributed (free the process group); no-op when not in one."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return
    group = dist.group.WORLD
    # Before torch 2.8 (pytorch/pytorch#154976), freeing a ProcessGroup held the GIL while it
    # joined gloo's threads, and a thread still freeing the last tensors it sent waits for the
    # GIL: a deadlock, about one run in six under load. A backend's own Python object frees it
    # with the GIL released, so we hold that object until the group is gone, and drop it last.
    try:
        backend = group._get_backend(torch.device("cpu"))
    except (AttributeError, RuntimeError):  # an NCCL-only group has no CPU backend to hold
        backend = None
    dist.destroy_process_group()
    del group
    del backend  # the last reference: joins gloo's threads with the GIL released


def run_worker(work: Callable[[], Any]) -> None:
    """Run a torchrun worker's `work()`; rank 0 hands its result back; always leave the group.

    Started without torchrun, the process is a group of one (the variables torchrun sets),
    for the length of the call only.
    """
    if not callable(work):
        raise TypeError(f"run_worker() needs a function to run, got {type(work).__name__}")
    alone = {} if "RANK" in os.environ else dict(
        RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    before = {name: os.environ.get(name) for name in alone}
    os.environ.update(alone)
    try:
        result = work()
        if int(os.environ["RANK"]) == 0:
            save_result(result)
    finally:
        # Free what work() left in reference cycles (DDP's reducer holds the process group)
        # now: freed at interpreter exit instead, gloo's threads may abort the process.
        gc.collect()
        finish_worker()  # a no-op where work() failed before joining
        # Left set, a caller's later subprocesses would inherit a rank and a used port.
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def save_result(obj: Any) -> None:
    """In a worker (rank 0): hand a JSON-able result back to launch() in the notebook."""
    path = os.environ.get(RESULT_ENV)
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(obj, f)
        os.replace(tmp, path)  # atomic: launch() never reads half a file
    else:
        print(json.dumps(obj))


def _loopback_store(host: str, port: int) -> Any:
    """Serve torchrun's rendezvous store on host:port (a loopback address) only; port 0: any.

    The store's `port` says which port it holds.
    """
    from torch.distributed import TCPStore

    # TCPStore's server listens on every interface; given a socket that is already bound it
    # takes that one. torchrun's own TCPStore on the same port (multi_tenant) then shares this
    # server instead of starting one. libuv takes such a socket from torch 2.8 on.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, port))
        sock.listen(128)
        port = sock.getsockname()[1]  # the OS's choice where port was 0
        fd = sock.detach()  # the store owns it from here
    libuv = tuple(int(x) for x in re.findall(r"\d+", torch.__version__)[:2]) >= (2, 8)
    try:
        return TCPStore(host, port, None, True, datetime.timedelta(seconds=900),
                        wait_for_workers=False, multi_tenant=True, master_listen_fd=fd,
                        use_libuv=libuv)
    except Exception:
        with contextlib.suppress(OSError):
            os.close(fd)  # else torchrun could not bind the port
        raise


def main(argv: Sequence[str] | None = None) -> None:
    """torchrun (same arguments); on one machine its store listens on --master-addr only.

    From a terminal: python -m d2l_extras.distributed --nproc-per-node=2 -m d2l_extras.ddp
    """
    from torch.distributed import run as torchrun

    argv = list(sys.argv[1:] if argv is None else argv)
    args = torchrun.parse_args(argv)
    # Whether a port was asked for (an option, or torchrun's PET_ variable): where none is,
    # older torchrun (2.6) fills in 29500 and newer leaves None; the OS picks one below.
    asked = "PET_MASTER_PORT" in os.environ or any(
        a.split("=")[0] in ("--master-port", "--master_port") for a in argv)
    store = None
    if args.rdzv_backend == "static" and not args.rdzv_endpoint and not args.standalone \
            and str(args.nnodes).split(":")[-1] == "1" and is_loopback(args.master_addr):
        _loopback_env(os.environ)
        try:
            # Port 0 (none given): the OS picks a free one, which the store holds from then
            # on; a port picked here and bound later could be taken by another job meanwhile.
            store = _loopback_store(args.master_addr, int(args.master_port) if asked else 0)
        except (OSError, RuntimeError, TypeError, ValueError) as err:
            print(f"d2l_extras: torchrun's store listens on every interface ({err})", flush=True)
        if not asked:  # newer torchrun would switch to a c10d store on 0.0.0.0, older use 29500
            port = store.port if store is not None else free_port(args.master_addr)
            argv.insert(0, f"--master-port={port}")
    torchrun.main(argv)
    del store  # served until torchrun is done


if __name__ == "__main__":
    main()
