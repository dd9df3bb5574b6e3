"""A slide deck and a page, opened in headless Chromium as a person would open them (file://).

Built from the small executed notebook of tests/test_slides.py (seconds, no kernel). Skipped where
no Chromium is installed (Debian: apt-get install -y chromium). D2L_SCREENSHOTS=DIR keeps
screenshots of what the browser showed.
"""
import json
import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_slides import PART2, SECTIONS, build  # noqa: E402
from tools.browser import chromium_page, find_chromium, wait_for  # noqa: E402

pytest.importorskip("playwright", reason="playwright is not installed (requirements.txt)")
needs_chromium = pytest.mark.skipif(
    find_chromium() is None,
    reason="no Chromium installed: apt-get install -y chromium (Debian) runs this test")

# MathJax 2 probes fonts with a @font-face whose src is 'about:blank'; from a file:// page
# Chromium reports that probe as a failed load. It is not one of the page's resources.
HARMLESS = ("about:blank",)

IMAGES = """JSON.stringify(Array.from(document.images).map(
    i => ({src: i.src.slice(0, 40), complete: i.complete, width: i.naturalWidth})))"""


def real_errors(errors):
    return [e for e in errors if not any(h in e for h in HARMLESS)]


def loaded_images(browser):
    images = json.loads(browser.evaluate(IMAGES))
    assert images, "the page shows no image"
    broken = [i for i in images if not (i["complete"] and i["width"] > 0)]
    assert not broken, f"images that did not load: {broken}"
    return images


def typeset_math(browser):
    """Wait for MathJax to finish; return how many formulas it typeset."""
    return wait_for(
        browser, "window.MathJax && MathJax.Hub && MathJax.Hub.queue.pending === 0 && "
        "document.querySelectorAll('.MathJax').length", 20)


def shot(browser, name):
    folder = os.environ.get("D2L_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        browser.screenshot(path=Path(folder) / name)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser")
    return {"slides": build("slides", tmp), "html": build("html", tmp)}


@needs_chromium
def test_deck_has_a_slide_per_section_with_its_pictures(site):
    with chromium_page() as browser:
        browser.goto((site["slides"] / "demo.slides.html").as_uri())
        assert wait_for(browser, "window.Reveal && Reveal.isReady()"), \
            f"reveal.js did not start; errors: {browser.errors}"
        assert browser.evaluate("Reveal.getHorizontalSlides().length") == SECTIONS
        # Sub-slides (the plot, the long code cell) sit below their section, as nbmeta cut them.
        cells = json.loads((site["slides"].parent / "executed" / "demo.ipynb").read_text())["cells"]
        kinds = [c["metadata"]["slideshow"]["slide_type"] for c in cells]
        assert kinds.count("subslide") >= 2
        # ... less the second lecture part's slides (a deck of its own) and the Exercises slide
        # (the notebook's).
        assert browser.evaluate("Reveal.getTotalSlides()") == \
            kinds.count("slide") + kinds.count("subslide") - PART2 - 1
        images = loaded_images(browser)
        assert len(images) == 2, f"expected the Markdown figure and the plot, got {images}"
        assert typeset_math(browser) >= 2, "MathJax did not typeset the formulas"
        # The speaker view (S) shows each slide's notes, from the notebook's metadata.
        assert browser.evaluate("Reveal.hasPlugin('notes')")
        browser.evaluate("Reveal.slide(0, 0)")
        assert "on any k" in browser.evaluate("Reveal.getSlideNotes()")
        for h, v in ((0, 0), (1, 0), (1, 1), (2, 0)):
            browser.evaluate(f"Reveal.slide({h}, {v})")
            time.sleep(1.0)  # the slide transition
            shot(browser, f"deck-{h}-{v}.png")
        assert not real_errors(browser.errors), browser.errors


@needs_chromium
def test_page_shows_outputs_pictures_and_math(site):
    with chromium_page(height=1200) as browser:
        browser.goto((site["html"] / "demo.html").as_uri())
        images = loaded_images(browser)
        assert len(images) == 2, f"expected the Markdown figure and the plot, got {images}"
        assert typeset_math(browser) >= 2, "MathJax did not typeset the formulas"
        assert "Test CPU" in browser.evaluate("document.body.innerText")
        shot(browser, "page.png")
        browser.goto((site["html"] / "index.html").as_uri())
        assert browser.evaluate("document.links.length") >= 1
        shot(browser, "index.png")
        assert not real_errors(browser.errors), browser.errors


def test_chromium_can_be_named_and_its_absence_is_explained(monkeypatch, tmp_path):
    monkeypatch.setenv("CHROMIUM", "/opt/my/chrome")
    assert find_chromium() == "/opt/my/chrome"
    monkeypatch.delenv("CHROMIUM")
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing to find
    assert find_chromium() is None
    with pytest.raises(FileNotFoundError, match="apt-get install -y chromium"):
        with chromium_page():
            pass


@needs_chromium
def test_a_script_error_is_reported(tmp_path):
    page = tmp_path / "broken.html"
    page.write_text("<html><body><script>undefined_function();</script></body></html>")
    with chromium_page() as browser:
        browser.goto(page.as_uri())
        assert browser.evaluate("1 + 1") == 2
    assert any("undefined_function" in e for e in browser.errors), browser.errors
