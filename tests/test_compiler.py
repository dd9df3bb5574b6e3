import torch

import d2l_extras as dx
from d2l_extras import compiler


def test_compile_support_reports_a_reason():
    works, reason = dx.compile_support()
    assert isinstance(works, bool) and reason


def test_maybe_compile_is_the_same_function():
    fn = dx.maybe_compile(lambda x: torch.sin(x) + 1)
    x = torch.randn(10)
    torch.testing.assert_close(fn(x), torch.sin(x) + 1)


def test_maybe_compile_falls_back_with_a_notice(monkeypatch, capsys):
    monkeypatch.setattr(compiler, "compile_support", lambda: (False, "no C++ compiler"))
    def f(x):
        return x + 1
    assert dx.maybe_compile(f) is f
    assert "no C++ compiler" in capsys.readouterr().out
