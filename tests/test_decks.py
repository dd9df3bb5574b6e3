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


def test_the_check_sees_what_a_room_cannot_read(tmp_path, monkeypatch, browser):
    tall = "\n".join(f"<p>line {i}</p>" for i in range(60))
    wide = "<pre>" + "x" * 400 + "</pre>"
    note = '<aside class="notes">Say this.</aside>'
    code = ('<div class="jp-InputArea"><pre>' + "\n".join(f"x{i} = {i}" for i in range(16))
            + "</pre></div>")
    slides = [
        f"<h2>fits</h2><p>short</p>{note}",
        f"<h2>too tall</h2>{tall}{note}",
        f"<h2>too wide</h2>{wide}{note}",
        "<h2>silent</h2><p>no notes</p>",
        f"<h2>small</h2><pre style='font-size: 12px'>x = 1</pre>{note}",
        f"<h2>long</h2>{code}{note}",
        f'<h2>blank</h2><div class="celltag_draws"><pre>plotting code</pre></div>{note}',
        '<h2>quoted</h2><p>The step takes 0.97x.</p><aside class="notes">About 6x per step,'
        ' 0.97x here, 1.5-3x on a laptop.</aside>',
        f"<h2>Summary</h2><p>Said.</p>{note}",
        "<h2>Sources</h2>",
    ]
    stack = "".join(f"<section><h3>part {i}</h3>{note}</section>" for i in range(7))
    sections = "".join(f"<section>{body}</section>" for body in slides)
    deck = tmp_path / "bad.slides.html"
    pytest.importorskip("sphinx_revealjs", reason="sphinx-revealjs is not installed")
    reveal = nbsite._package_dir("sphinx_revealjs", "_static", "revealjs")
    deck.write_text(f"""<html><head><link rel="stylesheet" href="{(reveal / 'dist' / 'reveal.css')
        .as_uri()}"><style>.reveal .slides section {{ max-height: 700px; overflow-y: auto; }}
        pre {{ overflow-x: auto; font-size: 22px; }}</style></head><body><div class="reveal">
        <div class="slides">{sections}<section>{stack}</section></div></div>
        <script src="{(reveal / 'dist' / 'reveal.js').as_uri()}"></script>
        <script src="{(reveal / 'plugin' / 'notes' / 'notes.js').as_uri()}"></script>
        <script>Reveal.initialize({{width: 960, height: 700, center: false,
                                    plugins: [RevealNotes]}});</script>
        </body></html>""")
    # The command line, in a process of its own: Playwright's sync API does not nest in one.
    run = subprocess.run([sys.executable, "-m", "tools.deckcheck", str(deck)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    problems = run.stdout.splitlines()
    expected = [
        "bad.slides.html: slide 11 stacks 7 slides, more than 6",
        "slide 2.1 (too tall): content",
        "slide 3.1 (too wide): a line cut",
        "slide 4.1 (silent): no speaker notes",
        "slide 5.1 (small): code or output at 11.",   # 12 px at reveal.js's scale
        "slide 6.1 (long): 16 lines of code, more than 15",
        "slide 7.1 (blank): a cell that draws shows no figure",
        "slide 8.1 (quoted): the notes say 6x, which the slide does not show",
        "bad.slides.html: notes on 15 of 17 slides, fewer than 90%",
        "bad.slides.html: ends with ['part 5', 'part 6'], not a Quiz and then a Summary",
    ]
    assert run.returncode == 1 and len(problems) == len(expected), run.stdout + run.stderr
    for line, want in zip(problems, expected):
        assert want in line, (want, line)
    monkeypatch.setattr(deckcheck, "MAX_SLIDES", 5)
    problems = deckcheck.check_deck(browser, deck)
    assert "bad.slides.html: 17 slides, more than 5 for one lecture" in problems[0]
