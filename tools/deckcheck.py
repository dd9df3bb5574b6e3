"""Open every slide of every deck in headless Chromium and list what does not fit (issue 16).

    python -m tools.deckcheck build/slides            # after `make slides`
    python -m tools.deckcheck --width 1280 --height 720 build/slides/04-hardware.slides.html

A slide does not fit when its content is taller than the slide, a code or output line is cut at
the right edge, or a picture is shrunk below 90 % (its 12 pt text would shrink). A deck fails with
more than MAX_SLIDES slides, or a heading slide (Sources aside) without speaker notes. One line
per problem; exit 1 if there is any.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tools.browser import chromium_page, wait_for

MAX_SLIDES = 35  # one lecture part

# Run in the page on the current slide: what does not fit, in slide pixels.
MEASURE = (Path(__file__).parent / "site" / "measure_slide.js").read_text(encoding="utf-8")


def check_deck(browser, deck: Path) -> list[str]:
    """Visit every slide of one deck (in a tools.browser page); a line per slide that misfits."""
    browser.goto(deck.resolve().as_uri())
    if not wait_for(browser, "window.Reveal && Reveal.isReady()", 30):
        return [f"{deck.name}: reveal.js did not start ({browser.errors[:2]})"]
    browser.evaluate("Reveal.configure({transition: 'none', backgroundTransition: 'none'})")
    wait_for(browser, "!window.MathJax || !MathJax.Hub || MathJax.Hub.queue.pending === 0", 20)
    stacks = browser.evaluate("Reveal.getHorizontalSlides().map("
                              "h => Math.max(1, h.querySelectorAll(':scope > section').length))")
    problems, total = [], sum(stacks)
    if total > MAX_SLIDES:
        problems.append(f"{deck.name}: {total} slides, more than {MAX_SLIDES} for one "
                        "lecture: trim, or split the notebook into parts with a `#` heading")
    for h, count in enumerate(stacks):
        for v in range(count):
            browser.evaluate(f"Reveal.slide({h}, {v})")
            found = json.loads(browser.evaluate(MEASURE))
            for problem in found["problems"]:
                problems.append(f"{deck.name} slide {h + 1}.{v + 1} "
                                f"({found['title'] or 'no heading'}): {problem}")
    return problems


def check(decks: list[Path], width: int = 1280, height: int = 720) -> list[str]:
    """Every problem of every deck, opened at width x height."""
    problems = []
    with chromium_page(width, height) as browser:
        for deck in decks:
            problems += check_deck(browser, deck)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="+", type=Path, help="decks, or folders holding them")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=720)
    args = parser.parse_args(argv)
    decks = [d for p in args.paths
             for d in (sorted(p.glob("*.slides.html")) if p.is_dir() else [p])]
    if not decks:
        print("no decks found: build them with `make slides`", file=sys.stderr)
        return 2
    problems = check(decks, args.width, args.height)
    print("\n".join(problems) or f"every slide of {len(decks)} decks fits")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
