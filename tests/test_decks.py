"""Every slide of every notebook's deck fits a projector (1280x720), as an instructor shows it,
and each lecture part is a lecture (tools/deckcheck.py: at most 28 slides, notes, a quiz
and a summary).

The notebooks are executed in the active profile (`ci` in `make test`) by tools/report.py, the
decks are cut by tools/nbsite.py as `make slides` cuts them, and tools/deckcheck.py visits every
slide in headless Chromium: content taller than the slide, a code line cut at the right edge or a
picture shrunk below its size fails. Where nbval ran every notebook earlier in the session
(`make test` runs notebooks/ first), the decks are cut from those runs (tests/nbval_plugin.py);
D2L_DECK_NOTEBOOKS=DIR checks notebooks already executed there (e.g. build/report/notebooks).
Skipped without Chromium.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
import nbval_plugin  # noqa: E402
from tools import deckcheck, nbsite, report  # noqa: E402
from tools.browser import chromium_page, find_chromium  # noqa: E402

pytest.importorskip("playwright", reason="playwright is not installed (requirements.txt)")
pytestmark = pytest.mark.skipif(
    find_chromium() is None,
    reason="no Chromium installed: apt-get install -y chromium (Debian) runs this test")
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.fixture(scope="module")
def decks(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("decks")
    executed = os.environ.get("D2L_DECK_NOTEBOOKS") or nbval_plugin.executed_folder(NOTEBOOKS)
    if executed:
        folder = Path(executed)
    else:
        assert report.report(NOTEBOOKS, tmp / "report") == 0, \
            f"a notebook failed to run: see {tmp / 'report' / 'summary.md'}"
        folder = tmp / "report" / report.EXECUTED
    nbsite.build("slides", sorted(folder.glob("*.ipynb")), tmp / "slides", ROOT / "notebooks")
    return {d.name.removesuffix(".slides.html"): d for d in (tmp / "slides").glob("*.slides.html")}


@pytest.fixture(scope="module")
def browser():
    with chromium_page(1280, 720) as opened:  # one Chromium for every deck
        yield opened


def parts_of(decks, path):
    """The decks cut from one notebook: NN-name, then NN-name-part2, ... (nbsite.deck_name)."""
    return [decks[name] for name in sorted(decks)
            if name == path.stem or name.startswith(path.stem + "-part")]


def test_every_notebook_has_a_deck(decks):
    assert {name.split("-part")[0] for name in decks} == {p.stem for p in NOTEBOOKS}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_slide_fits_at_1280x720_and_has_its_notes(decks, browser, path):
    problems = [p for deck in parts_of(decks, path) for p in deckcheck.check_deck(browser, deck)]
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems)


def test_the_check_sees_a_slide_that_overflows_or_has_no_notes(tmp_path, monkeypatch, browser):
    tall = "\n".join(f"<p>line {i}</p>" for i in range(60))
    wide = "<pre>" + "x" * 400 + "</pre>"
    note = '<aside class="notes">Say this.</aside>'
    deck = tmp_path / "bad.slides.html"
    pytest.importorskip("sphinx_revealjs", reason="sphinx-revealjs is not installed")
    reveal = nbsite._package_dir("sphinx_revealjs", "_static", "revealjs")
    deck.write_text(f"""<html><head><link rel="stylesheet" href="{(reveal / 'dist' / 'reveal.css')
        .as_uri()}"><style>.reveal .slides section {{ max-height: 700px; overflow-y: auto; }}
        pre {{ overflow-x: auto; }}</style></head><body><div class="reveal"><div class="slides">
        <section><h2>fits</h2><p>short</p>{note}</section>
        <section><h2>too tall</h2>{tall}{note}</section>
        <section><h2>too wide</h2>{wide}{note}</section>
        <section><h2>silent</h2><p>no notes</p></section>
        <section><p>a plot, no heading</p></section><section><h2>Sources</h2></section>
        </div></div>
        <script src="{(reveal / 'dist' / 'reveal.js').as_uri()}"></script>
        <script src="{(reveal / 'plugin' / 'notes' / 'notes.js').as_uri()}"></script>
        <script>Reveal.initialize({{width: 960, height: 700, center: false,
                                    plugins: [RevealNotes]}});</script>
        </body></html>""")
    # The command line, in a process of its own: Playwright's sync API does not nest in one.
    run = subprocess.run([sys.executable, "-m", "tools.deckcheck", str(deck)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    problems = run.stdout.splitlines()
    assert run.returncode == 1 and len(problems) == 3, run.stdout + run.stderr
    assert "slide 2.1 (too tall): content" in problems[0]
    assert "slide 3.1 (too wide): a line cut" in problems[1]
    assert "slide 4.1 (silent): no speaker notes" in problems[2]
    monkeypatch.setattr(deckcheck, "MAX_SLIDES", 5)
    problems = deckcheck.check_deck(browser, deck)
    assert "bad.slides.html: 6 slides, more than 5 for one lecture" in problems[0]
