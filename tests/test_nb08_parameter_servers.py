"""Notebook 08's code: the ring (in one process and between processes) and ShardedStore, saved
into d2l_extras.parameter_servers (`#@save`), checked against independent references such as
the sum; zero_bytes runs from the notebook's cell; FSDP2's step (`#@save sharding`) unsharded
against a plain AdamW step (its job: tests/test_sharding.py). The lesson keeps only the equivalences that
teach: ring == sum, push == reduce-scatter, store == allreduce."""
from types import SimpleNamespace

import pytest
import torch

from d2l_extras import parameter_servers as ps
from d2l_extras import sharding
from nbcells import notebook_namespace


def parts(n, numel, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(numel, generator=gen) for _ in range(n)]


@pytest.mark.parametrize("n", range(1, 9))
@pytest.mark.parametrize("numel", [1, 7, 13, 1001])
def test_ring_allreduce_is_the_sum_on_every_node(n, numel):
    tensors = parts(n, numel)
    out = ps.ring_allreduce(tensors)
    assert len(out) == n
    for ours in out:
        torch.testing.assert_close(ours, torch.stack(tensors).sum(0))


def test_ring_allreduce_keeps_shapes_devices_and_inputs():
    tensors = [t.reshape(3, 5) for t in parts(4, 15)]
    before = [t.clone() for t in tensors]
    for ours in ps.ring_allreduce(tensors):
        assert ours.shape == (3, 5) and ours.dtype == torch.float32
        torch.testing.assert_close(ours, sum(before))
    for t, b in zip(tensors, before):
        assert torch.equal(t, b)  # the inputs are left alone


@pytest.mark.parametrize("n", [2, 3, 4, 7])
def test_reduce_scatter_then_all_gather_step_by_step(n):
    tensors = parts(n, 50, seed=n)
    chunks = [list(torch.tensor_split(t.clone(), n)) for t in tensors]
    ps.reduce_scatter(chunks)
    expected = torch.tensor_split(sum(tensors), n)
    for i in range(n):  # node i holds the full sum of chunk i+1
        torch.testing.assert_close(chunks[i][(i + 1) % n], expected[(i + 1) % n])
    ps.all_gather(chunks)
    for node in chunks:
        torch.testing.assert_close(torch.cat(node), sum(tensors))


@pytest.mark.parametrize("n", [2, 3])
def test_ring_allreduce_dist_posts_each_send_with_its_receive(monkeypatch, n):
    # Rank 0 of n, in a fake group whose neighbours hold what this rank holds: every receive gets
    # what this rank sent, so the ring must end with n times the input, in place.
    dist, batches = torch.distributed, []

    def batch_isend_irecv(ops):
        batches.append(ops)
        ops[1].tensor.copy_(ops[0].tensor)
        return [SimpleNamespace(wait=lambda: None) for _ in ops]

    for name, value in {"get_rank": lambda: 0, "get_world_size": lambda: n,
                        "batch_isend_irecv": batch_isend_irecv,
                        "P2POp": lambda op, tensor, peer: SimpleNamespace(
                            op=op, tensor=tensor, peer=peer)}.items():
        monkeypatch.setattr(dist, name, value)
    x = torch.ones(2 * n)
    assert ps.ring_allreduce_dist(x) is x
    torch.testing.assert_close(x, torch.full((2 * n,), float(n)))
    assert len(batches) == 2 * (n - 1)  # reduce-scatter, then all-gather
    assert all([o.peer for o in ops] == [1, n - 1] for ops in batches)  # right, then left


@pytest.mark.parametrize("servers, owners", [
    (1, {k: 0 for k in "abcdefg"}),
    (2, {"a": 0, "b": 1, "c": 1, "d": 1, "e": 1, "f": 0, "g": 0}),
    (3, {"a": 0, "b": 1, "c": 2, "d": 1, "e": 1, "f": 2, "g": 2}),
])
def test_sharded_store_gives_each_key_to_the_least_loaded_server(servers, owners):
    sizes = {"a": 640, "b": 32, "c": 128, "d": 4, "e": 999, "f": 0, "g": 17}
    store = ps.ShardedStore(servers=servers)
    for key, numel in sizes.items():
        store.init(key, torch.zeros(numel))
    assert store.owner == owners  # the lowest server on a tie
    assert sum(store.load) == sum(sizes.values())


def test_sharded_store_push_sums_on_the_owner_and_pull_copies():
    workers = parts(3, 11, seed=5)
    store = ps.ShardedStore(servers=2)
    store.init("w", torch.full((11,), 7.0))
    store.init("b", torch.zeros(3))
    store.push("w", workers)
    pulled = store.pull("w")
    torch.testing.assert_close(pulled, sum(workers))  # the sum replaces the initial value
    assert "w" in store.shards[store.owner["w"]] and "w" not in store.shards[store.owner["b"]]
    pulled += 1  # a pull hands out a copy: the server's value stays
    torch.testing.assert_close(store.pull("w"), sum(workers))


@pytest.mark.parametrize("gpus", [1, 8, 64])
def test_zero_bytes_shard_what_each_stage_says(gpus):
    zero_bytes = notebook_namespace("08", ["zero_bytes"])["zero_bytes"]
    # weights, gradients, optimizer state: 4 + 4 + 8 bytes (autocast), 2 + 2 + 12 (DeepSpeed)
    for w, g, o in ((4, 4, 8), (2, 2, 12)):
        got = zero_bytes(1000, gpus, w=w, g=g, o=o)
        assert list(got.values()) == pytest.approx(
            [1000 * (w + g + o), 1000 * (w + g + o / gpus), 1000 * (w + (g + o) / gpus),
             1000 * (w + g + o) / gpus])
    assert zero_bytes(1000, 1) == zero_bytes(1000, 1, w=4, g=4, o=8)


def test_sharded_step_is_one_adamw_step_and_leaves_the_gradients():
    # Unsharded, the saved step is a plain AdamW step; the FSDP2 job reads the gradients'
    # shards after it, so the step must leave them (zero_grad comes first).
    gen = torch.Generator().manual_seed(3)
    X, Y = torch.randn(8, 6, generator=gen), torch.randn(8, 6, generator=gen)
    model, ref = sharding.block_stack(6, 2), sharding.block_stack(6, 2)
    loss = sharding.sharded_step(model, torch.optim.AdamW(model.parameters(), lr=0.1), X, Y)
    opt = torch.optim.AdamW(ref.parameters(), lr=0.1)
    expected = torch.nn.functional.mse_loss(ref(X), Y)
    expected.backward()
    opt.step()
    torch.testing.assert_close(loss, expected.detach())
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q)
        torch.testing.assert_close(p.grad, q.grad)
