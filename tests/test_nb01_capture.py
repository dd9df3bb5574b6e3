"""Notebook 01 counts the chain's operators and the tensors they move from the graph that
torch.fx.symbolic_trace records (`ops`, `streams`); its printed prediction (fusion 13.5x) rests
on those counts. Here they are checked against the graph Dynamo captures (what torch.compile
fuses) and a hand count, and the notebook's MLP and chain against their compiled versions."""
import pytest
import torch

from nbcells import notebook_namespace


@pytest.fixture(scope="module")
def nb():
    return notebook_namespace("01", ["keep_graph", "get_net", "chain", "ops", "streams"])


def dynamo_calls(fn, *args):
    """The operators in the graphs Dynamo captures from fn(*args)."""
    torch._dynamo.reset()
    return [node for graph in torch._dynamo.explain(fn)(*args).graphs
            for node in graph.graph.nodes if node.op.startswith("call_")]


def test_mlp_has_the_operators_the_notebook_counts(nb):
    net = nb["get_net"]()  # the notebook divides by len(net): one operator per module
    x = torch.randn(1, 512, device=next(net.parameters()).device)
    assert len(dynamo_calls(net, x)) == len(net) == 5


def test_chain_operators_match_what_dynamo_captures(nb):
    assert len(dynamo_calls(nb["chain"], torch.randn(8))) == len(nb["ops"]) == 12


def test_chain_traffic_is_the_hand_count(nb):
    # 12 results written; operands read: mul, add, sigmoid, tanh, mul(2), abs, sqrt, mul,
    # sub(2), cos, pow, add(2) = 15. The notebook predicts fusion at 27 / 2 = 13.5x.
    assert nb["streams"] == 12 + 15
    reads = sum(len(n.all_input_nodes) for n in dynamo_calls(nb["chain"], torch.randn(8)))
    assert reads == 15


def test_chain_is_the_same_function_compiled(nb):
    x = torch.randn(1000)
    torch.testing.assert_close(torch.compile(nb["chain"])(x), nb["chain"](x))
