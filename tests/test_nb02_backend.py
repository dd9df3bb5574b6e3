"""Notebook 02 writes `work` and `Backend`, a model of a GPU's queue (a thread that runs queued
jobs in order). The lesson rests on what the model does, so these tests pin it down without
timing anything: each job's cost is an Event the test controls, never a ratio of two timings.
"""
import concurrent.futures
import json
import pathlib
import queue
import tempfile
import threading
import time

import pytest

from nbcells import notebook_namespace, notebook_path

WAIT = 10.0     # seconds a test waits for something that must happen (never reached if it does)
BRIEFLY = 0.05  # seconds a test gives something that must NOT happen


@pytest.fixture(scope="module")
def Backend():
    ns = notebook_namespace("02", ["work", "Stream", "Backend"])
    # The notebook imports these in its set-up cell, which also prints the hardware report.
    ns.update(concurrent=concurrent, queue=queue, threading=threading, time=time)
    return ns["Backend"]


@pytest.fixture
def gpu(Backend):
    before = set(threading.enumerate())
    backend = Backend()
    yield backend
    backend.close()
    assert not backend.thread.is_alive()
    assert set(threading.enumerate()) <= before, "a thread outlived its backend"


def blocked_job(log=None, name="job"):
    """A job that runs until the test sets `release`; `started` says the backend picked it up."""
    started, release = threading.Event(), threading.Event()

    def job():
        started.set()
        assert release.wait(WAIT), "the test never released the job"
        if log is not None:
            log.append(name)
        return name
    return job, started, release


def test_submit_returns_before_the_job_finishes(gpu):
    job, started, release = blocked_job()
    future = gpu.submit("slow", job)        # returns while the job cannot finish
    assert started.wait(WAIT), "the backend thread never ran the job"
    assert not future.done()
    release.set()
    assert future.result(timeout=WAIT) == "job"


def test_jobs_run_in_order_on_one_thread(gpu):
    threads, order = [], []
    for i in range(5):
        gpu.submit(f"job {i}", lambda i=i: (threads.append(threading.get_ident()),
                                           order.append(i)))
    gpu.synchronize()
    assert order == list(range(5))
    assert set(threads) == {gpu.thread.ident} != {threading.get_ident()}
    assert [name for name, _, _ in gpu.log] == [f"job {i}" for i in range(5)]
    assert all(start <= end for _, start, end in gpu.log)


def test_synchronize_waits_for_every_queued_job(gpu):
    done = []
    first, started, release_first = blocked_job(done, "first")
    second, _, release_second = blocked_job(done, "second")
    gpu.submit("first", first)
    gpu.submit("second", second)
    assert started.wait(WAIT)
    barrier = threading.Thread(target=gpu.synchronize)
    barrier.start()
    barrier.join(BRIEFLY)
    assert barrier.is_alive(), "synchronize returned with jobs still queued"
    release_first.set()
    barrier.join(BRIEFLY)
    assert barrier.is_alive(), "synchronize returned before the last job"
    release_second.set()
    barrier.join(WAIT)
    assert not barrier.is_alive() and done == ["first", "second"]


def test_an_error_surfaces_at_the_frontend_not_in_the_worker(gpu):
    future = gpu.submit("bad", lambda: 1 / 0)     # submit itself does not raise
    with pytest.raises(ZeroDivisionError):
        future.result(timeout=WAIT)               # reading the result raises it
    with pytest.raises(ZeroDivisionError):
        gpu.synchronize()                         # and so does the next barrier, once
    gpu.synchronize()
    assert gpu.thread.is_alive(), "one failed job must not stop the backend"
    assert gpu.submit("next", lambda: 2).result(timeout=WAIT) == 2


def test_close_runs_what_is_queued_then_ends_the_thread(Backend):
    done = []
    with Backend() as backend:
        job, started, release = blocked_job(done)
        backend.submit("job", job)
        assert started.wait(WAIT)
        closer = threading.Timer(BRIEFLY, release.set)
        closer.start()
    closer.join()
    assert done == ["job"] and not backend.thread.is_alive()


def test_with_block_ends_the_thread_on_an_error(Backend):
    with pytest.raises(RuntimeError):
        with Backend() as backend:
            backend.submit("job", lambda: None)
            raise RuntimeError("the experiment failed")
    assert not backend.thread.is_alive()


def test_reading_a_trace_keeps_two_steps_and_writes_the_trace_to_the_temporary_directory():
    # "Reading a trace": wait 1, warm up 1, keep 2 of the 4 steps; the table's counts and the
    # Chrome trace both hold the 2 kept steps, and the file is not written into the repository.
    ns = notebook_namespace("02", ["device", "on_gpu", "net", "step", "plan", "ops", "path"])
    assert ns["ops"]["aten::addmm"].count == 4  # 2 steps x 2 Linear layers
    assert ns["path"].parent == pathlib.Path(tempfile.gettempdir())
    events = json.loads(ns["path"].read_text(encoding="utf-8"))["traceEvents"]
    steps = {e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")}
    assert steps == {"ProfilerStep#2", "ProfilerStep#3"}, steps  # #0 waited, #1 warmed up


def test_the_gpu_cell_sets_the_sync_debug_mode_back():
    # Left at "warn", every later synchronizing call of the notebook (a barrier in dx.Benchmark,
    # .item()) would warn on a GPU.
    cells = json.loads(notebook_path("02").read_text(encoding="utf-8"))["cells"]
    (source,) = ["".join(c["source"]) for c in cells
                 if c["cell_type"] == "code" and "set_sync_debug_mode" in "".join(c["source"])]
    modes = [line.split("set_sync_debug_mode(")[1].split(")")[0]
             for line in source.splitlines() if "set_sync_debug_mode(" in line]
    assert modes == ['"warn"', '"default"'], modes
    assert "elapsed_time" in source and "enable_timing=True" in source
