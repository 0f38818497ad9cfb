"""In a real browser: headless Chromium loads a page that reads an agent served by rma with the
protocols' own clients — the AI SDK's ``DefaultChatTransport`` + ``readUIMessageStream`` (what
``useChat`` runs) and AG-UI's ``HttpAgent`` — bundled for the browser by esbuild. The page
renders what each client folded and posts it back; a screenshot of the page is saved under the
test's temporary folder. Skipped without Chromium, Node or ``npm ci`` in tests/ui/js."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Route

from rma_shell import Agent
from rma_shell.providers.local import Local
from rma_shell.testing import OpenAIEmulator
from rma_shell.ui import agui_endpoint, vercel_endpoint
from tests.ui.common import LOOKUP_SCRIPT, lookup_customer
from tests.ui.test_served import serving

JS = Path(__file__).parent / "js"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NODE = shutil.which("node")
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium"),
    pytest.mark.skipif(NODE is None, reason="needs Node"),
    pytest.mark.skipif(
        not (JS / "node_modules" / ".bin" / "esbuild").exists(), reason="needs `npm ci` in tests/ui/js"
    ),
]


async def bundle(out: Path) -> None:
    done = await anyio.run_process(
        [
            str(JS / "node_modules" / ".bin" / "esbuild"),
            "browser_entry.mjs",
            "--bundle",
            "--format=esm",
            "--platform=browser",
            f"--outfile={out}",
            "--log-level=warning",
        ],
        cwd=JS,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()


def chromium(url: str, profile: Path, *extra: str) -> list[str]:
    assert CHROMIUM is not None
    return [
        CHROMIUM,
        "--headless",
        "--no-sandbox",  # tests may run as root in a container
        "--disable-gpu",
        "--no-first-run",
        f"--user-data-dir={profile}",
        *extra,
        url,
    ]


@pytest.mark.timeout(180)
async def test_the_protocols_browser_clients_read_a_served_agent(tmp_path: Path) -> None:
    await bundle(tmp_path / "clients.js")
    reported = threading.Event()
    box: dict[str, Any] = {}

    async def report(request: Request) -> Response:
        box.setdefault("report", json.loads(await request.body()))  # the first load's
        reported.set()
        return Response(status_code=204)

    script = LOOKUP_SCRIPT * 20  # a run for each client, each time the page loads
    with OpenAIEmulator(script) as model:
        agent = Agent(tools=[lookup_customer], host=Local(base_url=model.base_url, model="m", stream=True))
        app = Starlette(
            routes=[
                Route("/", lambda _: FileResponse(JS / "page.html")),
                Route(
                    "/clients.js",
                    lambda _: FileResponse(tmp_path / "clients.js", media_type="text/javascript"),
                ),
                Route("/api/chat", vercel_endpoint(agent), methods=["POST"]),
                Route("/agent", agui_endpoint(agent), methods=["POST"]),
                Route("/report", report, methods=["POST"]),
            ]
        )
        with serving(app) as url:
            async with await anyio.open_process(chromium(url + "/", tmp_path / "profile")) as browser:
                try:
                    # a bound on a hang, not on speed
                    got = await anyio.to_thread.run_sync(reported.wait, 120)
                finally:
                    browser.terminate()
            assert got, "the page never reported"
            shot = tmp_path / "page.png"
            await anyio.run_process(
                chromium(
                    url + "/",
                    tmp_path / "profile-shot",
                    f"--screenshot={shot}",
                    "--virtual-time-budget=20000",
                ),
                check=False,
            )
    result = box["report"]
    assert "failed" not in result, result["failed"]
    message = result["vercel"]
    (call,) = [p for p in message["parts"] if p["type"] == "tool-lookup_customer"]
    assert (
        call["state"] == "output-available"
        and call["output"] == "Customer ada@example.com: Pro plan, active."
    )
    assert "".join(p["text"] for p in message["parts"] if p["type"] == "text").endswith(
        "Ada is on the Pro plan."
    )
    agui = result["agui"]
    assert agui["result"] == "Ada is on the Pro plan."
    assert [m["content"] for m in agui["messages"] if m["role"] == "tool"] == [
        "Customer ada@example.com: Pro plan, active."
    ]
    assert shot.exists() and shot.stat().st_size > 0
    if os.environ.get("RMA_UI_SCREENSHOT"):  # where to keep it (a CI artifact, a doc figure)
        shutil.copy(shot, os.environ["RMA_UI_SCREENSHOT"])
