"""Notebook 03 shows a copy overlapping computation on a CPU with two single-threaded workers
(`worker`, `run_workers`, defined in the notebook). These tests check the model, never a timing:
the same results at once as in turn, one thread per worker and each on its own thread, a log of
every call, threads that end, the process's thread setting restored, and a count below 1 refused."""
import concurrent.futures
import threading
import time

import pytest
import torch

from nbcells import notebook_namespace


@pytest.fixture(scope="module")
def nb():
    ns = notebook_namespace("03", ["worker", "run_workers"])
    # imported in the set-up cell, which also prints the hardware report
    ns.update(torch=torch, time=time, concurrent=concurrent, threading=threading)
    return ns


def small_jobs(count=3):
    gen = torch.Generator().manual_seed(0)
    a, src = torch.rand(64, 64, generator=gen), torch.rand(10_000, generator=gen)
    dst = torch.empty_like(src)
    return {"matmul": (lambda: a @ a, count), "copy": (lambda: dst.copy_(src), count)}, a, src, dst


@pytest.mark.parametrize("at_once", [False, True])
def test_results_equal_the_sequential_ones(nb, at_once):
    jobs, a, src, dst = small_jobs()
    results, _ = nb["run_workers"](jobs, at_once=at_once)
    torch.testing.assert_close(results["matmul"], a @ a)
    assert torch.equal(dst, src) and results["copy"] is dst


def test_at_once_computes_what_in_turn_computes(nb):
    jobs, _, src, dst = small_jobs()
    in_turn, _ = nb["run_workers"](jobs, at_once=False)
    dst.zero_()
    both, _ = nb["run_workers"](jobs, at_once=True)
    torch.testing.assert_close(both["matmul"], in_turn["matmul"])
    assert torch.equal(dst, src)


@pytest.mark.parametrize("at_once", [False, True])
def test_every_call_is_logged_in_order(nb, at_once):
    jobs, *_ = small_jobs(count=4)
    _, log = nb["run_workers"](jobs, at_once=at_once)
    for lane in jobs:
        spans = [(s, e) for ln, s, e in log if ln == lane]
        assert len(spans) == 4
        assert all(s <= e for s, e in spans)
        assert all(e1 <= s2 for (_, e1), (s2, _) in zip(spans, spans[1:])), "one after another"
    if not at_once:  # in turn: the copy starts after the last product ended
        last_matmul = max(e for ln, _, e in log if ln == "matmul")
        assert min(s for ln, s, _ in log if ln == "copy") >= last_matmul


def test_each_worker_has_one_thread_and_its_own_thread(nb):
    before = torch.get_num_threads()
    probe = lambda: (torch.get_num_threads(), threading.get_ident())  # noqa: E731
    jobs = {"w1": (probe, 1), "w2": (probe, 1)}
    results, _ = nb["run_workers"](jobs, at_once=True)
    assert [n for n, _ in results.values()] == [1, 1]
    idents = {ident for _, ident in results.values()}
    assert len(idents) == 2 and threading.get_ident() not in idents
    results, _ = nb["run_workers"](jobs, at_once=False)
    assert len({ident for _, ident in results.values()}) == 1, "in turn: one thread for all"
    assert [n for n, _ in results.values()] == [1, 1]
    assert torch.get_num_threads() == before, "the process's setting is restored"


def test_threads_end(nb):
    before = set(threading.enumerate())
    jobs, *_ = small_jobs()
    nb["run_workers"](jobs, at_once=True)
    assert set(threading.enumerate()) <= before


def test_an_error_in_a_worker_reaches_the_caller_and_threads_end(nb):
    before, threads = set(threading.enumerate()), torch.get_num_threads()

    def broken():
        raise RuntimeError("worker failed")

    jobs, *_ = small_jobs()
    jobs["broken"] = (broken, 1)
    for at_once in (False, True):
        with pytest.raises(RuntimeError, match="worker failed"):
            nb["run_workers"](jobs, at_once=at_once)
    assert set(threading.enumerate()) <= before
    assert torch.get_num_threads() == threads


@pytest.mark.parametrize("count", [0, -1], ids=["count 0", "negative"])
@pytest.mark.parametrize("at_once", [False, True])
def test_a_count_below_one_is_refused_before_any_work(nb, count, at_once):
    # What a student can get wrong: a count rounded down to 0 leaves the worker no result.
    threads = torch.get_num_threads()
    with pytest.raises(ValueError, match="count >= 1"):
        nb["run_workers"]({"w": (lambda: None, count)}, at_once=at_once)
    assert torch.get_num_threads() == threads


@pytest.mark.parametrize("jobs", [{"w": (lambda: None, 1.5)}, {"w": ("not a function", 1)}],
                         ids=["float", "not callable"])
def test_other_bad_input_raises_at_the_caller_and_restores_the_threads(nb, jobs):
    threads = torch.get_num_threads()
    with pytest.raises(TypeError):
        nb["run_workers"](jobs, at_once=True)
    assert torch.get_num_threads() == threads
