"""The inspector in a real browser: Debian's headless Chromium opens a journal's session that
waits for an approval, a mouse click on Allow records it, the session (resumed by its owner
when told of the decision) runs to its end, and the page — following the journal live, with
no reload — shows it ended. A screenshot of the timeline is saved under the test's tmp_path.

Skipped, saying why, only where no Chromium is installed: ``python3 dev.py test`` installs
Debian's ``chromium`` (apt-get, as root) before it runs the tests."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from returns.result import Success

pytest.importorskip("starlette", reason="the 'inspect' extra (Starlette) is not installed")
pytest.importorskip("uvicorn", reason="the 'inspect' extra (uvicorn) is not installed")
pytest.importorskip("websockets", reason="the dev extra's websockets drives the browser")

import uvicorn

from rma_shell.inspect import app
from rma_shell.inspect.server import bind
from tests.inspect import _sessions as s
from tests.inspect._cdp import Chromium, find_chromium

CHROMIUM = find_chromium()
pytestmark = [
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="no Chromium here: `python3 dev.py test` installs Debian's chromium with apt-get as root "
        "(or set RMA_CHROMIUM to a Chromium or Chrome executable)",
    ),
    pytest.mark.timeout(300),
]


class Served:
    """The inspector on 127.0.0.1 (any free port), in a thread, until ``stop``."""

    def __init__(self, asgi: Any) -> None:
        self.sock = bind("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/"
        self.server = uvicorn.Server(uvicorn.Config(asgi, log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()


def test_clicking_allow_in_chromium_resumes_the_session_to_its_end(tmp_path: Path) -> None:
    assert CHROMIUM is not None
    journal = tmp_path / "sessions.db"
    paused = s.journal_of("trio", journal, "waiting", s.APPROVAL)
    assert not isinstance(paused, Success)  # waits for approval
    decided = threading.Event()
    asgi = app(journal, environ={}, on_decision=lambda key, use_id, decision: decided.set())
    served = Served(asgi)
    s.refunds.clear()
    try:
        with Chromium(CHROMIUM, tmp_path) as browser:
            page = browser.page
            page.open(served.url + "session?key=waiting")
            page.wait_for("document.querySelector('#allow-t2') !== null", "the Allow button")
            assert "refund" in page.evaluate("document.querySelector('section.pending').innerText")
            page.click("#allow-t2")
            page.wait_for(
                "document.body.innerText.includes('allow recorded for t2')", "the decision recorded"
            )
            assert decided.wait(60), "the inspector never reported the decision"
            # The session's owner carries it on; the page follows the journal as it grows.
            done = s.resume_of("trio", journal, "waiting", s.APPROVAL[1:])
            assert isinstance(done, Success) and s.refunds == [120]
            page.wait_for("document.querySelector('h1 .state').textContent === 'ended'", "the session ended")
            text = page.evaluate("document.body.innerText")
            assert "Refunded 120 for order 4417." in text and "Turn 2" in text
            assert page.evaluate("document.querySelector('section.pending')") is None
            shot = page.screenshot(tmp_path / "timeline.png")
    finally:
        served.stop()
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
