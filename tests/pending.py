"""Notebooks not yet reworked for issue 16 (cells that fit a slide, decks that fit a projector).

Their checks in tests/test_notebook_cells.py and tests/test_decks.py are expected to fail
(strict: once a notebook passes, the test fails until it leaves this list). Empty this list.
"""
PENDING: set[str] = {
    "06-multiple-gpus-concise",
}


def params(paths):
    """pytest params of notebook paths, the pending ones marked as expected to fail."""
    import pytest
    return [pytest.param(p, id=p.name, marks=pytest.mark.xfail(
                reason="issue 16: this notebook is not reworked yet", strict=True))
            if p.stem in PENDING else pytest.param(p, id=p.name) for p in paths]
