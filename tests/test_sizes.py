"""The size policy: every experiment fits 4, 16 and 80 GB GPUs and shows its lesson on big ones."""
import pytest
import torch

import d2l_extras as dx
from d2l_extras.sizes import SIZES

GB = 10 ** 9
BUDGETS = {"4 GB": 4 * GB, "16 GB": 16 * GB, "80 GB": 80 * GB}


def used_bytes(name, size):
    exp = SIZES[name]
    return exp.count * size * size * exp.bytes_per_item if exp.count else size * exp.bytes_per_item


def operand_bytes(name, size):
    """One operand: an n x n matrix, or a float32 vector (bytes_per_item covers all tensors)."""
    exp = SIZES[name]
    return size * size * exp.bytes_per_item if exp.count else size * 4


@pytest.mark.parametrize("name", sorted(SIZES))
@pytest.mark.parametrize("budget", list(BUDGETS.values()), ids=list(BUDGETS))
@pytest.mark.parametrize("prof", ["ci", "class", "full"])
def test_every_gpu_size_fits_its_share_of_memory(name, budget, prof):
    size = dx.problem_size(name, "cuda:0", budget=budget, profile_name=prof)
    assert size >= SIZES[name].minimum
    assert used_bytes(name, size) <= SIZES[name].fraction * budget


@pytest.mark.parametrize("name", sorted(SIZES))
@pytest.mark.parametrize("prof", ["class", "full"])
def test_large_gpus_get_a_size_that_shows_the_lesson(name, prof):
    for budget in (16 * GB, 80 * GB):
        size = dx.problem_size(name, "cuda:0", budget=budget, profile_name=prof)
        assert operand_bytes(name, size) >= SIZES[name].lesson_bytes, (name, budget)


@pytest.mark.parametrize("name", sorted(SIZES))
def test_an_80_gb_gpu_gets_the_wanted_size_and_sizes_grow_with_memory(name):
    sizes = [dx.problem_size(name, "cuda", budget=b, profile_name="class") for b in BUDGETS.values()]
    assert sizes == sorted(sizes)
    assert sizes[-1] == SIZES[name].gpu[1]


@pytest.mark.parametrize("name", sorted(SIZES))
def test_gpu_sizes_are_at_least_the_cpu_sizes(name):
    assert all(gpu >= cpu for gpu, cpu in zip(SIZES[name].gpu, SIZES[name].cpu))


def test_the_device_kind_picks_the_sizes(monkeypatch):
    monkeypatch.setenv("D2L_PROFILE", "class")
    assert dx.sizes.device_kind("cpu") == "cpu"
    assert dx.sizes.device_kind(torch.device("cuda", 3)) == "gpu"
    assert dx.sizes.device_kind("mps") == "gpu"
    assert dx.problem_size("fusion", "cpu", budget=10 ** 15) == SIZES["fusion"].cpu[1]
    assert dx.problem_size("fusion", "cuda:1", budget=10 ** 15) == SIZES["fusion"].gpu[1]


def test_a_budget_too_small_says_what_to_do():
    with pytest.raises(ValueError, match="close other notebooks"):
        dx.problem_size("fusion", "cuda", budget=1000, profile_name="class")
    with pytest.raises(ValueError, match="close other notebooks"):
        dx.problem_size("async_matmul", "cuda", budget=1000, profile_name="class")


def test_unknown_names_are_refused():
    with pytest.raises(ValueError, match="known experiments: .*fusion"):
        dx.problem_size("nope", "cpu")


def test_count_overrides_the_matrices_alive_at_once():
    few = dx.problem_size("overlap", "cuda", count=3, budget=4 * GB, profile_name="full")
    many = dx.problem_size("overlap", "cuda", count=300, budget=4 * GB, profile_name="full")
    assert many < few
    assert 300 * many * many * 4 <= 0.25 * 4 * GB
