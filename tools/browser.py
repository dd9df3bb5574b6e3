"""Drive headless Chromium over the DevTools protocol: open a page, run JavaScript, take screenshots.

Used by tests/test_browser.py to check the slides and pages as a person sees them. It needs only
the Debian `chromium` package and websocket-client (pinned in requirements.txt):

    with Browser() as b:
        b.open("file:///.../index.html")
        b.evaluate("document.title"); b.screenshot("page.png"); b.errors   # script errors
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

# Flags that work as root in a container, and keep Chromium off the network.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio"]


def find_chromium() -> str | None:
    """Path of a Chromium/Chrome executable, or None (CHROMIUM=path overrides the search)."""
    if os.environ.get("CHROMIUM"):
        return os.environ["CHROMIUM"]
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """One headless Chromium with a fresh profile, and one page tab driven over a websocket."""

    def __init__(self, executable: str | None = None, width: int = 1280, height: int = 800,
                 timeout: float = 30.0):
        self.executable = executable or find_chromium()
        if self.executable is None:
            raise FileNotFoundError("no Chromium found: install Debian's `chromium` package "
                                    "(apt-get install -y chromium) or set CHROMIUM=/path")
        self.size, self.timeout = (width, height), timeout
        self.errors: list[str] = []      # uncaught exceptions and console errors, in order
        self._id, self._proc, self._ws = 0, None, None

    def __enter__(self) -> "Browser":
        import websocket  # websocket-client
        # Chromium's helper processes may still be writing to the profile as it is removed.
        self._profile = tempfile.TemporaryDirectory(prefix="chromium-profile-",
                                                    ignore_cleanup_errors=True)
        self._proc = subprocess.Popen(
            [self.executable, *FLAGS, f"--user-data-dir={self._profile.name}",
             f"--window-size={self.size[0]},{self.size[1]}", "--remote-debugging-port=0",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Port 0: Chromium picks a free port and writes it into DevToolsActivePort.
        port_file = Path(self._profile.name) / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout
        while not (port_file.exists() and port_file.read_text().strip()):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"{self.executable} did not start its DevTools server")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            page = next(t for t in json.load(r) if t["type"] == "page")
        self._ws = websocket.create_connection(page["webSocketDebuggerUrl"],
                                               timeout=self.timeout, suppress_origin=True)
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")
        return self

    def __exit__(self, *exc) -> None:
        if self._ws is not None:
            self._ws.close()
        if self._proc is not None:
            # Collect the renderer and GPU helpers first: once the browser is gone they would be
            # orphans still writing into the profile (and processes the test session must not leak).
            import psutil
            try:
                helpers = psutil.Process(self._proc.pid).children(recursive=True)
            except psutil.Error:
                helpers = []
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            _, alive = psutil.wait_procs(helpers, timeout=5)
            for proc in alive:
                try:
                    proc.kill()
                except psutil.Error:
                    pass
            psutil.wait_procs(alive, timeout=5)
        self._profile.cleanup()

    def _event(self, msg: dict) -> None:
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Runtime.exceptionThrown":
            d = params["exceptionDetails"]
            text = d.get("exception", {}).get("description") or d.get("text", "")
            self.errors.append(f"{text} ({d.get('url', '')}:{d.get('lineNumber', '')})")
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            e = params["entry"]
            self.errors.append(f"{e.get('text', '')} ({e.get('url', '')})")
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.errors.append(" ".join(str(a.get("value", a.get("description", "")))
                                        for a in params.get("args", [])))

    def send(self, method: str, **params) -> dict:
        """Call one DevTools method and return its result (events seen meanwhile are recorded)."""
        self._id += 1
        self._ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self._ws.recv())
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self._event(msg)

    def open(self, url: str) -> None:
        """Load `url` and wait for its load event."""
        self.send("Page.navigate", url=url)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            msg = json.loads(self._ws.recv())
            self._event(msg)
            if msg.get("method") == "Page.loadEventFired":
                return
        raise TimeoutError(f"{url} did not finish loading in {self.timeout} s")

    def evaluate(self, expression: str, await_promise: bool = False):
        """The value of a JavaScript expression in the page (JSON-serializable)."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=await_promise)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 10.0):
        """Poll a JavaScript expression until it is truthy; return its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value or time.monotonic() > deadline:
                return value
            time.sleep(0.1)

    def screenshot(self, path: str | os.PathLike) -> Path:
        """Save what the page shows now as a PNG."""
        data = self.send("Page.captureScreenshot", format="png")["data"]
        path = Path(path)
        path.write_bytes(base64.b64decode(data))
        return path
