"""torchrun from Python: timeouts, clear errors, nothing left running, loopback only on one host."""
import atexit
import collections
import contextlib
import datetime
import gc
import ipaddress
import json
import logging
import os
import pathlib
import re
import runpy
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from typing import Any, Callable, Iterator, Mapping, Sequence
from unittest import mock

import psutil
import torch
import torch.distributed as dist

from .checks import whole_number
from .hardware import _cuda_gpus
from .report import notice

RESULT_ENV = "D2L_RESULT_FILE"
# "1": torchrun forks its workers from its own process (Linux only); launch sets it without CUDA.
FORK_ENV = "D2L_FORK_WORKERS"
# What a stuck NCCL collective leaves in a worker's output before its watchdog ends the process.
NCCL_TIMEOUT_LINE = re.compile(r"Watchdog caught collective operation timeout"
                               r"|NCCL.*(?i:timeout|timed out)")


class WorkerError(RuntimeError):
    """A failed or timed-out run: its last output; torchrun's returncode, exit_codes, output."""

    def __init__(self, message: str, returncode: int | None = None,
                 exit_codes: dict[int, int] | None = None, output: Sequence[str] = ()):
        super().__init__(message)
        self.returncode, self.exit_codes, self.output = returncode, exit_codes or {}, list(output)


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that is free on host right now (the OS picks it)."""
    with socket.create_server((host, 0)) as s:
        return s.getsockname()[1]


def loopback_interface() -> str | None:
    """Return the name of the network interface that carries 127.0.0.1 (lo, lo0), if any."""
    return next((name for name, addrs in psutil.net_if_addrs().items() if any(
        a.family == socket.AF_INET and a.address == "127.0.0.1" for a in addrs)), None)


def is_loopback(host: str) -> bool:
    """True if host is this machine only: 127.x.x.x, ::1, ::ffff:127.x.x.x or localhost."""
    with contextlib.suppress(ValueError):  # ::ffff:127.0.0.1 is IPv4's loopback as IPv6 shows it
        address = ipaddress.ip_address(host)
        return (getattr(address, "ipv4_mapped", None) or address).is_loopback
    return host == "localhost"


# What a finished run gave back: its output lines and rank 0's result.
LaunchResult = collections.namedtuple("LaunchResult", "output result")


def _running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE  # a zombie has ended
    except psutil.Error:
        return False


def _wait(proc: subprocess.Popen, known: set[psutil.Process], seconds: float) -> None:
    # torchrun starts each worker in a session of its own (a signal to torchrun's group misses
    # them) and once it is gone they belong to init: remember them while waiting, end each.
    end = time.monotonic() + seconds
    while proc.poll() is None and time.monotonic() < end:  # once reaped, the pid may be reused
        with contextlib.suppress(psutil.Error):
            known.update(psutil.Process(proc.pid).children(recursive=True))
        time.sleep(0.05)


def _stop(proc: subprocess.Popen, known: set[psutil.Process], grace: float) -> list[psutil.Process]:
    # End torchrun (SIGTERM; SIGKILL after grace s) and all it started; return the survivors.
    proc.send_signal(signal.SIGTERM)  # torchrun stops its workers itself
    _wait(proc, known, grace)
    # torchrun and each worker lead a session, whose id is not reused while it has a process:
    # all in it are their offspring, even unseen ones. A pid now another's leads none.
    sessions = {p.pid for p in known if p.is_running() or not psutil.pid_exists(p.pid)}
    for p in psutil.process_iter():
        with contextlib.suppress(AttributeError, OSError):  # Windows has no sessions
            if os.getsid(p.pid) in sessions:
                known.add(p)
    victims = {p for p in known if _running(p)}
    for p in victims:
        with contextlib.suppress(psutil.Error):
            p.kill()
    end = time.monotonic() + 10
    while any(map(_running, victims)) and time.monotonic() < end:
        time.sleep(0.05)
    return [p for p in victims if _running(p)]


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    # A second interrupt while stopping the workers would leave them running: hold it till then.
    hits, main = [], threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, lambda *_: hits.append(1)) if main else None
    try:
        yield
    finally:
        if main:  # only the main thread may set a handler
            signal.signal(signal.SIGINT, previous)
    if hits:
        raise KeyboardInterrupt


def launch(module: str, nproc: int, args: Sequence[str] = (), timeout: float = 300,
           echo: bool = True, env: dict[str, str] | None = None,
           grace: float = 5.0) -> LaunchResult:
    """Run `module` under torchrun in nproc processes; stream output, end it all on any exit."""
    nproc = whole_number(nproc, "nproc")
    # torchrun through main below: its store and sockets on loopback, on a port it binds itself
    cmd = [sys.executable, "-m", __name__, "--nnodes=1", f"--nproc-per-node={nproc}",
           "--master-addr=127.0.0.1", "--max-restarts=0", "-m", module, *map(str, args)]
    with tempfile.TemporaryDirectory(prefix="d2l-launch-") as tmp:
        result_file = pathlib.Path(tmp, "result.json")
        # OMP_NUM_THREADS unless set: else each of the k processes starts a thread per core.
        # Forked workers start with torch imported, a second or more sooner each; CUDA wants
        # fresh processes, so only where no GPU is in reach.
        run_env = {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // nproc)),
                   FORK_ENV: "0" if torch.cuda.is_available() else "1", **os.environ,
                   **(env or {}), RESULT_ENV: str(result_file), "PYTHONUNBUFFERED": "1"}
        run_env.update(peer_env(nproc, run_env))  # NCCL_P2P_DISABLE=1 where peer copies fail
        lines: list[str] = []

        def read() -> None:  # in a thread, so that this one stays interruptible
            with proc.stdout:  # closed once every process that holds it is gone
                for line in proc.stdout:
                    lines.append(line.rstrip("\n"))
                    if echo:
                        print(lines[-1], flush=True)

        # A session of its own: an interrupt does not reach torchrun half-way; launch stops it.
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, text=True, env=run_env,
                                start_new_session=(os.name == "posix"))
        known = {psutil.Process(proc.pid)}
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            _wait(proc, known, timeout)
            timed_out = proc.poll() is None
        finally:  # also on KeyboardInterrupt: nothing outlives the call
            with _sigint_deferred():
                survivors = _stop(proc, known, grace)
                reader.join(timeout=5)
        if survivors:
            warnings.warn(f"processes {[p.pid for p in survivors]} of {module} survived SIGKILL",
                          RuntimeWarning, stacklevel=2)
        failed = timed_out or proc.poll() != 0  # reaped now, if not yet
        hint = nccl_hint(nproc, run_env, lines, timed_out) if failed else ""
        if timed_out:
            raise WorkerError(f"{module} did not finish within {timeout:.0f} s and was stopped. "
                              + (f"{hint}\n" if hint else "") + "Last output:\n"
                              + "\n".join(lines[-20:]), output=lines)
        if failed:
            codes = worker_exit_codes(lines)  # torchrun's report ends with the root cause
            rank = f" on rank {list(codes)[-1]}" if codes else ""
            why = " ".join(filter(None, (_first_error(lines), hint)))
            raise WorkerError(f"{module} failed{rank} (exit code {proc.returncode}). {why}\n"
                              "Last output:\n" + "\n".join(lines[-25:]),
                              proc.returncode, codes, lines)
        result = json.loads(result_file.read_text("utf-8")) if result_file.exists() else None
        return LaunchResult(lines, result)


def joins_nccl(nproc: int, env: Mapping[str, str]) -> bool:
    """Whether nproc workers on this machine, started with env, would join NCCL on GPUs."""
    # As worker_device decides in each worker, with the GPUs CUDA_VISIBLE_DEVICES leaves them.
    if nproc < 2:
        return False
    n = len(_cuda_gpus()[0])
    if (visible := env.get("CUDA_VISIBLE_DEVICES")) is not None:  # the workers see these only
        n = min(n, len([d for d in visible.split(",") if d.strip()]))
    return _nccl_on(n, nproc, env)


def _nccl_on(n_gpus: int, local_world: int, env: Mapping[str, str]) -> bool:
    # A GPU each (one this build has kernels for) where torch has NCCL (not Windows, macOS),
    # unless D2L_BACKEND=gloo asks for the CPU.
    return n_gpus >= local_world and env.get("D2L_BACKEND") != "gloo" and dist.is_nccl_available()


def nccl_hint(nproc: int, env: Mapping[str, str], lines: Sequence[str] = (),
              timed_out: bool = True) -> str:
    """The likely cause of a hung NCCL run and its fix, in a sentence; '' where NCCL did not run."""
    # A hang: the launch's timeout, or a worker's watchdog that ended it.
    if not joins_nccl(nproc, env) or not (timed_out or any(map(NCCL_TIMEOUT_LINE.search, lines))):
        return ""
    if env.get("NCCL_P2P_DISABLE", "0").strip() not in ("", "0"):
        return ("NCCL hung with NCCL_P2P_DISABLE=1 already: add NCCL_IB_DISABLE=1, or run the "
                "processes on the CPU with D2L_BACKEND=gloo.")
    return ("NCCL may hang where peer access is reported but broken (e.g. Kaggle's 2 x T4): "
            "rerun with NCCL_P2P_DISABLE=1 (env={'NCCL_P2P_DISABLE': '1'} in dx.launch, or "
            "os.environ), and NCCL_IB_DISABLE=1 too if it still hangs.")


def broken_peer_pairs(gpus: Sequence[int]) -> list[tuple[int, int]]:
    """The pairs (i, j) of gpus that report peer access but whose copies i -> j arrive wrong."""
    return [(i, j) for i in gpus for j in gpus if i != j
            and torch.cuda.can_device_access_peer(i, j) and not _peer_copy_arrives(i, j)]


def _peer_copy_arrives(i: int, j: int, n: int = 1 << 18) -> bool:
    # Where torch enabled peer access, a contiguous copy is the copy engine's, a strided one a
    # kernel's reading the other GPU's memory, as NCCL's do. Both must arrive whole.
    src = torch.arange(n, dtype=torch.float32, device=torch.device("cuda", i))
    copies = [src.to(torch.device("cuda", j)), src[::2].to(torch.device("cuda", j))]
    want = src.cpu()  # .cpu() waits for each copy
    return torch.equal(copies[0].cpu(), want) and torch.equal(copies[1].cpu(), want[::2])


_PEER_CHECKS: dict[str | None, dict | str | None] = {}


def _peer_check(nproc: int, env: Mapping[str, str], timeout: float = 60) -> list[str] | None:
    # The failed copies between the GPUs of nproc workers ("0 -> 1"). All GPUs (those workers
    # use, in rank order) are checked once a process, in a process of its own: a copy that
    # never ends cannot hang this one. None: the check itself failed, which proves nothing.
    key = env.get("CUDA_VISIBLE_DEVICES")
    if key not in _PEER_CHECKS:
        code = (f"import json; from {__name__} import _cuda_gpus, broken_peer_pairs as b; "
                "g = _cuda_gpus()[0]; print(json.dumps({'gpus': g, 'broken': b(g)}))")
        try:
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 env=dict(env), timeout=timeout, stdin=subprocess.DEVNULL)
            last = out.stdout.strip().splitlines()[-1:] if out.returncode == 0 else []
            _PEER_CHECKS[key] = json.loads(last[0]) if last else None
        except subprocess.TimeoutExpired:  # a copy that never arrives is broken too
            _PEER_CHECKS[key] = f"none finished within {timeout:.0f} s"
        except (OSError, ValueError):
            _PEER_CHECKS[key] = None
    found = _PEER_CHECKS[key]
    if not isinstance(found, dict):
        return None if found is None else [found]
    used = found["gpus"][:nproc]
    return [f"{i} -> {j}" for i, j in found["broken"] if i in used and j in used]


def peer_env(nproc: int, env: Mapping[str, str]) -> dict[str, str]:
    """{'NCCL_P2P_DISABLE': '1'} for NCCL workers on GPUs whose peer copies fail, else {}."""
    # NCCL's peer transport waits forever there; through the host it works. A choice made stays.
    if "NCCL_P2P_DISABLE" in env or "NCCL_P2P_LEVEL" in env or not joins_nccl(nproc, env):
        return {}
    broken = _peer_check(nproc, env)
    if not broken:
        return {}
    notice(f"NCCL_P2P_DISABLE=1 for the processes launched from here: the GPUs report peer "
           f"access, but copies between them did not arrive intact ({', '.join(broken)}), as "
           "on Kaggle's 2 x T4, where NCCL would hang.")
    return {"NCCL_P2P_DISABLE": "1"}


def _first_error(lines: list[str]) -> str:
    # The worker's own exception line ("[rank1]: ValueError: ...") is what a student needs first.
    errors = (re.match(r"(?:\[rank\d+\]:\s*)?([A-Za-z_][\w.]*(?:Error|Exception)): (.*)$",
                       line.strip()) for line in lines)
    error = next((m for m in errors if m and "ChildFailedError" not in m[1]), None)
    return f"Worker error: {error[1]}: {error[2]}" if error else ""


def worker_exit_codes(lines: Sequence[str]) -> dict[int, int]:
    """{rank: exit code} of the failed workers in torchrun's failure report, first seen first."""
    # Each failed worker: "rank : R (local_rank: L)", then "exitcode : C (pid: P)"; C < 0: a signal.
    codes: dict[int, int] = {}
    for first, second in zip(lines, lines[1:]):
        if match := re.match(r"\s*rank\s*:\s*(\d+)\s*\(local_rank:.*?\)\s*exitcode\s*:\s*(-?\d+)",
                             f"{first} {second}"):
            codes.setdefault(int(match[1]), int(match[2]))
    return codes


def worker_device(local_world: int, local_rank: int = 0, n_gpus: int | None = None) -> torch.device:
    """The device of worker local_rank of local_world on one machine (see init_worker)."""
    gpus = _cuda_gpus()[0] if n_gpus is None else range(n_gpus)
    if _nccl_on(len(gpus), local_world, os.environ):
        return torch.device("cuda", gpus[local_rank])
    return torch.device("cpu")


def init_worker(timeout_s: float = 60) -> tuple[int, int, torch.device]:
    """In a torchrun worker: join the group (NCCL on GPUs, else gloo); return rank, size, device."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = worker_device(int(os.environ.get("LOCAL_WORLD_SIZE", world)),
                           int(os.environ.get("LOCAL_RANK", 0)))
    if gpu := device.type == "cuda":
        torch.cuda.set_device(device)
        # A collective stuck past timeout_s ends this process (torch's default since 2.2; an
        # older name or a choice already made is kept): dx.launch then names the cause.
        if "NCCL_ASYNC_ERROR_HANDLING" not in os.environ:
            os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")
    if not dist.is_initialized():
        dist.init_process_group("nccl" if gpu else "gloo", device_id=device if gpu else None,
                                timeout=datetime.timedelta(seconds=timeout_s))
    return rank, world, device


def distinct_processes() -> int:
    """In a worker: how many processes the group's ranks run in (a check that k really ran)."""
    pids: list = [None] * dist.get_world_size()
    dist.all_gather_object(pids, os.getpid())
    return len(set(pids))


def comm_counts(mode: Any) -> dict[str, int]:
    """A CommDebugMode's counts by collective: {"all_reduce": 1}, not {op object: 1}."""
    return {str(op).rsplit(".", 1)[-1]: n for op, n in mode.get_comm_counts().items()}


def finish_worker() -> None:
    """In a worker: leave torch.distributed (free the process group); no-op when not in one."""
    if dist.is_initialized():
        # Before torch 2.8 (pytorch/pytorch#154976) freeing a group joined gloo's threads holding
        # the GIL, which a thread freeing a sent tensor waits for; the backend's object does not.
        group, backend = dist.group.WORLD, None
        with contextlib.suppress(AttributeError, RuntimeError):  # NCCL only: no CPU backend
            backend = group._get_backend(torch.device("cpu"))
        dist.destroy_process_group()
        del group, backend


def _exit_quickly() -> None:
    # At exit Python collects every object once more: with torch loaded, about 1 s a process
    # (0.2 s frozen). A worker or torchrun has nothing left to free; the OS takes it all back.
    atexit.register(gc.freeze)


def run_worker(work: Callable[[], Any]) -> None:
    """Run a worker's `work()` (alone without torchrun); rank 0 hands its result back; leave."""
    _exit_quickly()
    alone = {} if "RANK" in os.environ else dict(
        RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    # Restored afterwards: a caller's later subprocesses must not inherit a rank and a used port.
    with mock.patch.dict(os.environ, alone):
        try:
            result = work()
            if int(os.environ["RANK"]) == 0:
                save_result(result)
        finally:
            # Free reference cycles now (DDP's reducer holds the group): at exit, gloo may abort.
            gc.collect()
            finish_worker()  # a no-op where work() failed before joining


def save_result(obj: Any) -> None:
    """In a worker (rank 0): hand a JSON-able result back to launch() in the notebook."""
    if path := os.environ.get(RESULT_ENV):
        pathlib.Path(path + ".tmp").write_text(json.dumps(obj), encoding="utf-8")
        os.replace(path + ".tmp", path)  # atomic: launch() never reads half a file
    else:
        print(json.dumps(obj))


def _loopback_store(host: str, port: int) -> "dist.TCPStore":
    # TCPStore's server listens on every interface, but takes a socket bound here (libuv from
    # torch 2.8); torchrun's own TCPStore on the port (multi_tenant) shares it. 0: any port.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.create_server((host, port), family=family, backlog=128) as sock:
        store = dist.TCPStore(host, sock.getsockname()[1], None, True,
                              datetime.timedelta(seconds=900), wait_for_workers=False,
                              multi_tenant=True, master_listen_fd=sock.fileno(),
                              use_libuv=torch.__version__ >= (2, 8))
        sock.detach()  # the store owns it now; on an error it is closed here
    return store


def _run_module(module: str, *args: str) -> None:
    # A forked worker runs `python -m module args` in the process torchrun forked it into.
    signal.signal(signal.SIGINT, signal.default_int_handler)  # torchrun's handlers stay behind:
    for sig in (signal.SIGTERM, signal.SIGHUP):               # a signal ends it, as a fresh one
        signal.signal(sig, signal.SIG_DFL)
    sys.argv = [module, *args]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except Exception:
        traceback.print_exc()  # where a fresh worker prints it; torchrun's report repeats it
        raise


def _forking(config_from_args: Callable) -> Callable:
    # torchrun's config, with `-m module` run by forks of this process (its choice for functions).
    def config(args: Any) -> tuple:
        config, cmd, cmd_args = config_from_args(args)
        if not args.module or args.no_python or getattr(args, "run_path", False):
            return config, cmd, cmd_args
        config.start_method = "fork"
        return config, _run_module, [args.training_script, *args.training_script_args]
    return config


def main(argv: Sequence[str] | None = None) -> None:
    """torchrun (same arguments); on one machine its store listens on --master-addr only."""
    from torch.distributed import run as torchrun

    argv = list(sys.argv[1:] if argv is None else argv)
    args = torchrun.parse_args(argv)
    _exit_quickly()
    # A port asked for? Where none is, torchrun 2.6 fills in 29500 and newer leaves None.
    asked = "PET_MASTER_PORT" in os.environ or any(
        a.split("=")[0] in ("--master-port", "--master_port") for a in argv)
    store = None
    if args.rdzv_backend == "static" and not args.rdzv_endpoint and not args.standalone \
            and str(args.nnodes).split(":")[-1] == "1" and is_loopback(args.master_addr):
        # gloo and NCCL pick an interface from the host name (a public address) unless told.
        if lo := loopback_interface():
            os.environ.setdefault("GLOO_SOCKET_IFNAME", lo)
            os.environ.setdefault("NCCL_SOCKET_IFNAME", "=" + lo)  # "=": exactly this one
        try:  # a port picked now and bound later could be taken meanwhile: the store holds it
            store = _loopback_store(args.master_addr, int(args.master_port) if asked else 0)
        except (OSError, RuntimeError, TypeError, ValueError) as err:
            print(f"d2l_extras: torchrun's store listens on every interface ({err})", flush=True)
        if not asked:  # newer torchrun would switch to a c10d store on 0.0.0.0, older use 29500
            port = free_port(args.master_addr) if store is None else store.port
            argv.insert(0, f"--master-port={port}")
    fork = os.environ.get(FORK_ENV) == "1" and sys.platform == "linux"
    if fork:  # its log of a failed fork repeats the traceback that its report prints below,
        # formatted by torch._logging, which imports torch._dynamo for that: a second or two
        logging.getLogger("torch.distributed.elastic.multiprocessing.api").addFilter(
            lambda record: not record.exc_info)
    with mock.patch.object(torchrun, "config_from_args", _forking(torchrun.config_from_args)) \
            if fork else contextlib.nullcontext():
        torchrun.main(argv)
    del store  # served until torchrun is done


if __name__ == "__main__":
    main()
