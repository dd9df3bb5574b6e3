"""The system's headless Chromium (or CHROMIUM=path), driven by Playwright: nothing is downloaded.
tools/deckcheck.py and the browser tests open the slides and pages in it as a person would.

    with chromium_page() as page:
        page.goto("file:///.../index.html"); page.evaluate("document.title"); page.errors
"""
from __future__ import annotations

import contextlib
import os
import shutil


def find_chromium() -> str | None:
    """Path of a Chromium/Chrome executable, or None (CHROMIUM=path overrides the search)."""
    names = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
    return os.environ.get("CHROMIUM") or next(filter(None, map(shutil.which, names)), None)


@contextlib.contextmanager
def chromium_page(width: int = 1280, height: int = 800):
    """A Playwright page of a fresh headless Chromium; `page.errors` lists its script errors.
    One at a time in a process: Playwright's sync API does not nest."""
    executable = find_chromium()
    if executable is None:
        raise FileNotFoundError("no Chromium found: install Debian's `chromium` package "
                                "(apt-get install -y chromium) or set CHROMIUM=/path")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as playwright:
        # --no-sandbox: Chromium refuses to run as root (containers, CI) with its sandbox.
        browser = playwright.chromium.launch(executable_path=executable,
                                             args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": width, "height": height})
        page.errors = []  # uncaught exceptions, console errors and failed loads, in order
        page.on("pageerror", lambda err: page.errors.append(str(err)))
        page.on("console", lambda msg: msg.type == "error" and page.errors.append(
            f"{msg.text} ({msg.location.get('url', '')})"))
        try:
            yield page
        finally:
            browser.close()


def wait_for(page, expression: str, seconds: float = 10.0):
    """Poll a JavaScript expression until it is truthy; its value, or None at the timeout."""
    from playwright.sync_api import TimeoutError
    try:
        return page.wait_for_function(expression, timeout=seconds * 1000).json_value()
    except TimeoutError:
        return None
