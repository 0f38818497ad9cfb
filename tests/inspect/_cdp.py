"""A headless Chromium driven over the Chrome DevTools Protocol — just what the inspector's
browser test needs: open a page, wait for a condition, click an element with the mouse, take
a screenshot.

Plain CDP over a websocket (the ``websockets`` package's synchronous client), no Playwright or
Puppeteer: those download a browser build of their own, and this drives the system's
Chromium (Debian's ``chromium`` package, which ``python3 dev.py test`` installs). Waits poll
the page against generous deadlines (a slow machine waits longer; nothing is timed).
"""

from __future__ import annotations

import base64
import json
import os
import queue
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

DEADLINE_S = 60.0
_LISTENING = re.compile(r"DevTools listening on (ws://\S+)")


def find_chromium() -> str | None:
    """``RMA_CHROMIUM``, else the first of Debian's and the usual names on ``PATH``."""
    given = os.environ.get("RMA_CHROMIUM")
    if given:
        return given
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class Chromium:
    """A headless Chromium with one page, on its own profile in ``workdir``; close it after."""

    def __init__(self, executable: str, workdir: Path) -> None:
        args = [
            executable,
            "--headless=new",
            "--no-sandbox",  # root on CI and in containers: the sandbox needs a user namespace
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            f"--user-data-dir={workdir / 'profile'}",
            "--window-size=1100,900",
            "about:blank",
        ]
        self.process = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._drain, args=(lines,), daemon=True).start()
        browser_url = self._wait_for_endpoint(lines)
        port = browser_url.split("//", 1)[1].split("/", 1)[0]
        self.page = Page(self._page_url(port))

    def _drain(self, lines: queue.Queue[str]) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            lines.put(line)

    def _wait_for_endpoint(self, lines: queue.Queue[str]) -> str:
        end = time.monotonic() + DEADLINE_S
        seen: list[str] = []
        while time.monotonic() < end:
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                if self.process.poll() is not None:
                    break
                continue
            seen.append(line)
            match = _LISTENING.search(line)
            if match:
                return match.group(1)
        self.close()
        raise RuntimeError("Chromium did not open its DevTools endpoint:\n" + "".join(seen[-20:]))

    def _page_url(self, port: str) -> str:
        import httpx

        end = time.monotonic() + DEADLINE_S
        while time.monotonic() < end:
            targets = httpx.get(f"http://{port}/json/list", timeout=10).json()
            pages = [t for t in targets if t.get("type") == "page"]
            if pages:
                return str(pages[0]["webSocketDebuggerUrl"])
            time.sleep(0.1)
        raise RuntimeError("Chromium opened no page")

    def close(self) -> None:
        page = getattr(self, "page", None)
        if page is not None:
            page.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


class Page:
    """One page's CDP session: commands answered in order, events skipped."""

    def __init__(self, url: str) -> None:
        self.ws: ClientConnection = connect(url, max_size=None, open_timeout=DEADLINE_S)
        self._next = 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._next += 1
        sent = self._next
        self.ws.send(json.dumps({"id": sent, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv(timeout=DEADLINE_S))
            if message.get("id") == sent:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, what: str) -> Any:
        """Poll ``expression`` until it is truthy; fail naming ``what`` after the deadline. While
        a page loads it may throw, or its context go away: that counts as not yet."""
        guarded = f"(() => {{ try {{ return ({expression}); }} catch (e) {{ return null; }} }})()"
        end = time.monotonic() + DEADLINE_S
        while time.monotonic() < end:
            try:
                value = self.evaluate(guarded)
            except RuntimeError:  # the context was replaced by a navigation
                value = None
            if value:
                return value
            time.sleep(0.1)
        text = self.evaluate("document.body ? document.body.innerText : ''")
        raise AssertionError(f"the page never showed {what}; it shows:\n{text}")

    def open(self, url: str) -> None:
        self.call("Page.enable")
        self.call("Page.navigate", url=url)
        self.wait_for(
            f"location.href === {json.dumps(url)} && document.readyState === 'complete'", f"{url} loaded"
        )

    def click(self, selector: str) -> None:
        """A real mouse click (press and release) at the middle of ``selector``'s element."""
        box = self.wait_for(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); if (!e) return null;"
            " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
            " return {x: r.left + r.width / 2, y: r.top + r.height / 2}; })()",
            selector,
        )
        for kind in ("mousePressed", "mouseReleased"):
            self.call(
                "Input.dispatchMouseEvent", type=kind, x=box["x"], y=box["y"], button="left", clickCount=1
            )

    def screenshot(self, path: Path) -> Path:
        shot = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def close(self) -> None:
        self.ws.close()
