"""Headless Chromium over the DevTools protocol: load a page, collect console errors, take a screenshot.

Debian's `chromium` package (scripts/setup_chromium.sh installs it); `websockets` speaks the protocol.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from typing import Any

import httpx

from tests.support.process import stop

BINARIES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    explicit = os.environ.get("ART_CHROMIUM")
    if explicit:
        return explicit
    return next((path for b in BINARIES if (path := shutil.which(b))), None)


class Page:
    """One headless Chromium with one page; events are kept in `events`."""

    def __init__(self, width: int = 1400, height: int = 1000, binary: str | None = None) -> None:
        from websockets.sync.client import connect

        binary = binary or find_chromium()
        if binary is None:
            raise FileNotFoundError("no Chromium found: apt-get install chromium (or set ART_CHROMIUM)")
        self.profile = tempfile.mkdtemp(prefix="art-chromium-")
        self.proc = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--remote-debugging-port=0",
             f"--user-data-dir={self.profile}", f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
        port = self._devtools_port()
        deadline = time.time() + 30
        while True:
            pages = [t for t in httpx.get(f"http://127.0.0.1:{port}/json/list").json() if t["type"] == "page"]
            if pages or time.time() > deadline:
                break
            time.sleep(0.1)
        self.ws = connect(pages[0]["webSocketDebuggerUrl"], max_size=64 * 2**20).__enter__()
        self._id = 0
        self.events: list[dict[str, Any]] = []
        for domain in ("Runtime", "Log", "Page"):
            self.call(f"{domain}.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def _devtools_port(self) -> int:
        assert self.proc.stderr is not None
        deadline = time.time() + 30
        seen = []
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                break
            seen.append(line)
            m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if m:
                return int(m.group(1))
        raise RuntimeError("Chromium did not start:\n" + "".join(seen[-20:]))

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def evaluate(self, expression: str, *, await_promise: bool = False) -> Any:
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=await_promise)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression!r} raised: {r['exceptionDetails']}")
        return r["result"].get("value")

    def goto(self, url: str, ready: str = "document.body && document.body.dataset.ready === '1'",
             timeout: float = 30) -> float:
        """Navigate and wait until `ready` is true; returns the seconds it took."""
        t0 = time.perf_counter()
        self.call("Page.navigate", url=url)
        self.wait(ready, timeout)
        return time.perf_counter() - t0

    def wait(self, condition: str, timeout: float = 30) -> None:
        deadline = time.time() + timeout
        while not self._true(condition):
            if time.time() > deadline:
                raise TimeoutError(f"page never got to {condition!r}; errors: {self.errors()}")
            time.sleep(0.05)

    def _true(self, condition: str) -> bool:
        try:
            return bool(self.evaluate(f"Boolean({condition})"))
        except RuntimeError:  # the page is still loading (its elements are not there yet)
            return False

    def errors(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions and failed loads seen so far."""
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e.get("method") == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                out.append(f"exception: {d.get('exception', {}).get('description') or d.get('text')}")
            elif e.get("method") == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning", "assert"):
                out.append(f"console.{p['type']}: " + " ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
            elif e.get("method") == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
                out.append(f"log {p['entry']['level']}: {p['entry']['text']} {p['entry'].get('url', '')}")
        return out

    def screenshot(self) -> bytes:
        return base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            stop(self.proc, 10)
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Page:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":  # python -m tests.obs.cdp URL OUT.png [WIDTH HEIGHT]: the docs' screenshot
    import sys

    url, out = sys.argv[1], sys.argv[2]
    w, h = (int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) > 4 else (1400, 1000)
    with Page(w, h) as page:
        page.goto(url)
        if page.errors():
            raise SystemExit(f"console errors: {page.errors()}")
        with open(out, "wb") as f:
            f.write(page.screenshot())
