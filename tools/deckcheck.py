"""Open every slide of every deck in headless Chromium and list what does not fit (issue 16).

    python -m tools.deckcheck build/slides            # after `make slides`
    python -m tools.deckcheck --width 1280 --height 720 build/slides/04-hardware.slides.html

A slide fails when its content is taller than the slide, a code or output line is cut at the
right edge, code or output is set below 20 px, it holds more than 15 lines of code, a cell that
draws shows no figure, a picture is shrunk below 90 % (its 12 pt text would shrink), a plot does
not get the slide's width, or a heading slide (Sources aside) has no speaker notes. A deck (one
lecture part) fails with more than MAX_SLIDES slides, a vertical stack of more than MAX_STACK,
notes on fewer than NOTES_SHARE of its slides, or without a Quiz and then a Summary at its end.
One line per problem; exit 1 if there is any.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tools import nbmeta
from tools.browser import chromium_page, wait_for

MAX_SLIDES = 28  # one lecture part of 75 minutes, its quiz included
MAX_STACK = 6    # sub-slides under one heading: more and the class loses its place
NOTES_SHARE = 0.9

MATHJAX_DONE = "!window.MathJax || !MathJax.Hub || MathJax.Hub.queue.pending === 0"
# Run in the page on the current slide: what does not fit, in slide pixels, within LIMITS.
LIMITS = {"codeLines": nbmeta.CODE_LINES}  # the check holds the slides to what nbmeta cuts
MEASURE = (Path(__file__).parent / "site" / "measure_slide.js").read_text(encoding="utf-8")


def check_deck(browser, deck: Path, shots: Path | None = None) -> list[str]:
    """Visit every slide of one deck (in a tools.browser page); a line per slide that misfits.
    With `shots`, a screenshot of each slide lands there (DECK-H.V.png), to be looked at."""
    browser.goto(deck.resolve().as_uri())
    if not wait_for(browser, "window.Reveal && Reveal.isReady()", 30):
        return [f"{deck.name}: reveal.js did not start ({browser.errors[:2]})"]
    browser.evaluate("Reveal.configure({transition: 'none', backgroundTransition: 'none'})")
    wait_for(browser, MATHJAX_DONE, 20)
    stacks = browser.evaluate("Reveal.getHorizontalSlides().map("
                              "h => Math.max(1, h.querySelectorAll(':scope > section').length))")
    problems, total, slides = [], sum(stacks), []
    if total > MAX_SLIDES:
        problems.append(f"{deck.name}: {total} slides, more than {MAX_SLIDES} for one "
                        "lecture: trim, or split the notebook into parts with a `#` heading")
    problems += [f"{deck.name}: slide {h + 1} stacks {n} slides, more than {MAX_STACK}"
                 for h, n in enumerate(stacks) if n > MAX_STACK]
    for h, count in enumerate(stacks):
        for v in range(count):
            browser.evaluate(f"Reveal.slide({h}, {v})")
            wait_for(browser, MATHJAX_DONE, 10)  # the slide's formulas typeset again at its size
            slides.append(found := json.loads(browser.evaluate(MEASURE, LIMITS)))
            if shots:
                stem = deck.name.removesuffix(".slides.html")
                browser.screenshot(path=str(shots / f"{stem}-{h + 1:02d}.{v + 1}.png"))
            for problem in found["problems"]:
                problems.append(f"{deck.name} slide {h + 1}.{v + 1} "
                                f"({found['title'] or 'no heading'}): {problem}")
    noted = sum(s["notes"] for s in slides)
    if noted < NOTES_SHARE * total:
        problems.append(f"{deck.name}: notes on {noted} of {total} slides, fewer than "
                        f"{NOTES_SHARE:.0%}")
    titles = [s["title"] for s in slides if s["title"] and not s["title"].startswith("Sources")]
    if [t.split()[0] for t in titles[-2:]] != ["Quiz", "Summary"]:
        problems.append(f"{deck.name}: ends with {titles[-2:]}, not a Quiz and then a Summary")
    return problems


def check(decks: list[Path], width: int = 1280, height: int = 720,
          shots: Path | None = None) -> list[str]:
    """Every problem of every deck, opened at width x height."""
    problems = []
    if shots:
        shots.mkdir(parents=True, exist_ok=True)
    with chromium_page(width, height) as browser:
        for deck in decks:
            problems += check_deck(browser, deck, shots)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="+", type=Path, help="decks, or folders holding them")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=720)
    parser.add_argument("--shots", type=Path, help="a folder: a screenshot of every slide")
    args = parser.parse_args(argv)
    decks = [d for p in args.paths
             for d in (sorted(p.glob("*.slides.html")) if p.is_dir() else [p])]
    if not decks:
        print("no decks found: build them with `make slides`", file=sys.stderr)
        return 2
    problems = check(decks, args.width, args.height, args.shots)
    print("\n".join(problems) or f"every slide of {len(decks)} decks fits")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
