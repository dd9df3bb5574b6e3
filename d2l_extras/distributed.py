"""Start torch.distributed workers with torchrun from Python, with timeouts and clear errors.

One machine, 2 processes (what the notebooks do):
    python -m torch.distributed.run --nproc-per-node=2 --master-addr=127.0.0.1 \
        --master-port=29500 -m d2l_extras.ddp --epochs 2
Two machines, 2 processes each: run on every machine, with --node-rank 0 or 1 and the first
machine's reachable address:
    python -m torch.distributed.run --nnodes=2 --node-rank=0 --nproc-per-node=2 \
        --master-addr=10.0.0.1 --master-port=29500 -m d2l_extras.ddp --epochs 2
"""
from __future__ import annotations

import datetime
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
from dataclasses import dataclass, field
from typing import Any, Sequence

import psutil
import torch

from .hardware import whole_number

RESULT_ENV = "D2L_RESULT_FILE"


class WorkerError(RuntimeError):
    """A distributed run failed or timed out; the message holds the workers' last output."""


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
    """Return the torchrun command line (as a list) that starts `module` in nproc processes."""
    nproc = whole_number(nproc, "nproc")
    if nnodes < 1 or not 0 <= node_rank < nnodes:
        raise ValueError(f"need nnodes >= 1 and 0 <= node_rank < nnodes, "
                         f"got nnodes={nnodes}, node_rank={node_rank}")
    port = master_port or free_port(master_addr if nnodes == 1 else "0.0.0.0")
    return [sys.executable, "-m", "torch.distributed.run",
            f"--nnodes={nnodes}", f"--node-rank={node_rank}", f"--nproc-per-node={nproc}",
            f"--master-addr={master_addr}", f"--master-port={port}", "--max-restarts=0",
            "-m", module, *map(str, args)]


def _kill_tree(proc: subprocess.Popen) -> None:
    # torchrun's workers are its children: end the whole group, not only torchrun.
    try:
        if os.name == "posix":
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            for child in psutil.Process(proc.pid).children(recursive=True):
                child.kill()
            proc.kill()
    except (ProcessLookupError, psutil.NoSuchProcess):
        pass
    proc.wait()


def launch(module: str, nproc: int, args: Sequence[str] = (), timeout: float = 300,
           echo: bool = True, nnodes: int = 1, node_rank: int = 0,
           master_addr: str = "127.0.0.1", master_port: int | None = None,
           env: dict[str, str] | None = None) -> LaunchResult:
    """Run `module` under torchrun in nproc processes; stream output, end it all on timeout."""
    cmd = torchrun_command(module, nproc, args, nnodes, node_rank, master_addr, master_port)
    with tempfile.TemporaryDirectory(prefix="d2l-launch-") as tmp:
        result_file = os.path.join(tmp, "result.json")
        run_env = {**os.environ, **(env or {}), RESULT_ENV: result_file, "PYTHONUNBUFFERED": "1"}
        # k processes share the cores: without a limit each would start one thread per core.
        run_env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
        if master_addr.startswith("127.") and "GLOO_SOCKET_IFNAME" not in run_env:
            lo = loopback_interface()  # keep gloo's traffic on this machine
            if lo:
                run_env["GLOO_SOCKET_IFNAME"] = lo
        lines: list[str] = []
        pipe: queue.Queue = queue.Queue()
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, text=True, env=run_env,
                                start_new_session=(os.name == "posix"))
        reader = threading.Thread(target=lambda: [pipe.put(l) for l in proc.stdout] and None,
                                  daemon=True)
        reader.start()
        deadline = start + timeout
        while True:
            try:
                line = pipe.get(timeout=0.1).rstrip("\n")
                lines.append(line)
                if echo:
                    print(line, flush=True)
                continue
            except queue.Empty:
                pass
            if proc.poll() is not None and not reader.is_alive() and pipe.empty():
                break
            if time.perf_counter() > deadline:
                _kill_tree(proc)
                tail = "\n".join(lines[-20:])
                raise WorkerError(f"{module} did not finish within {timeout:.0f} s and was "
                                  f"stopped. Last output:\n{tail}")
        seconds = time.perf_counter() - start
        if proc.returncode != 0:
            raise WorkerError(f"{module} failed (exit code {proc.returncode}). "
                              f"{_first_error(lines)}\nLast output:\n" + "\n".join(lines[-25:]))
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


_ERROR_LINE = re.compile(r"^(?:\[rank\d+\]:\s*)?([A-Za-z_][\w.]*(?:Error|Exception)): (.*)$")


def init_worker(timeout_s: float = 60) -> tuple[int, int, torch.device]:
    """In a torchrun worker: join the process group (NCCL on GPUs, else gloo); rank, size, device."""
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    # NCCL needs one GPU per process; with fewer GPUs than processes we fall back to gloo on CPU.
    use_gpu = torch.cuda.is_available() and torch.cuda.device_count() >= local_world \
        and os.environ.get("D2L_BACKEND", "") != "gloo"
    device = torch.device("cuda", local_rank) if use_gpu else torch.device("cpu")
    if use_gpu:
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if use_gpu else "gloo",
                                timeout=datetime.timedelta(seconds=timeout_s),
                                **({"device_id": device} if use_gpu else {}))
    return rank, world, device


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
