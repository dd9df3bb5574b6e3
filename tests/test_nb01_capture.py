"""Notebook 01 counts operators and the tensors they move from the graphs Dynamo captures
(`operators`, `streams`); its printed prediction (fusion 13.5x) rests on those counts. Here the
counts are checked against an independent tracer, torch.fx.symbolic_trace, and a hand count."""
import pytest
import torch

from nbcells import notebook_namespace

CALLS = ("call_function", "call_method", "call_module")


@pytest.fixture(scope="module")
def nb():
    return notebook_namespace("01", ["keep_graph", "operators", "get_net", "chain", "streams"])


def traced_calls(fn):
    return [n for n in torch.fx.symbolic_trace(fn).graph.nodes if n.op in CALLS]


def test_mlp_operators_match_symbolic_trace(nb):
    net = nb["get_net"]()
    x = torch.randn(1, 512, device=next(net.parameters()).device)
    assert len(nb["operators"](net, x)) == len(traced_calls(net)) == 5


def test_chain_operators_match_symbolic_trace(nb):
    assert len(nb["operators"](nb["chain"], torch.randn(8))) == len(traced_calls(nb["chain"])) == 12


def test_chain_traffic_is_the_hand_count(nb):
    # 12 results written; operands read: mul, add, sigmoid, tanh, mul(2), abs, sqrt, mul,
    # sub(2), cos, pow, add(2) = 15. The notebook predicts fusion at 27 / 2 = 13.5x.
    assert nb["streams"] == 12 + 15


def test_chain_is_the_same_function_compiled(nb):
    x = torch.randn(1000)
    torch.testing.assert_close(torch.compile(nb["chain"])(x), nb["chain"](x))
