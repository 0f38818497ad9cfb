"""rma's MCP source against the official reference servers from PyPI (issue #26).

``mcp-server-time`` (stdio) is the reference server that needs the ``mcp`` SDK 2.x; it is not
in the project's dev environment (which pins ``mcp`` 1.x), so these tests run where it is
installed — ``pip install 'mcp>=2' mcp-server-time`` — and are skipped elsewhere. The
streamable-HTTP side runs the SDK's own server (``tests/tools/_mcp_server.py``, which speaks
both SDK majors) in ``tests/tools/test_mcp_sources.py``. Over Local the clock is a repeatable
tool: the same call twice runs twice.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from typing import Any

import pytest

from rma_shell import run
from rma_shell.providers.local import Local
from rma_shell.testing import OpenAIEmulator
from rma_shell.tools import Toolbox
from rma_shell.tools.mcp import MCPServer

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mcp_server_time") is None, reason="mcp-server-time is not installed"
)


def time_server(**options: Any) -> MCPServer:
    return MCPServer.stdio(sys.executable, ["-m", "mcp_server_time", "--local-timezone", "UTC"], **options)


async def test_the_time_server_is_listed_and_called_over_stdio() -> None:
    async with Toolbox(time_server(name="time")) as box:
        names = sorted(spec.name for spec in box.tools())
        assert names == ["convert_time", "get_current_time"]
        out = await box.handle_tool_call("get_current_time", {"timezone": "Europe/Oslo"}, None, _info())
        answer = json.loads(out if isinstance(out, str) else out.unwrap())
        assert answer["timezone"] == "Europe/Oslo" and "datetime" in answer
        bad = await box.handle_tool_call("get_current_time", {"timezone": "Mars/Olympus"}, None, _info())
        assert not isinstance(bad, str) and "Mars/Olympus" in bad.failure()


async def test_the_same_clock_call_runs_twice_on_local_when_the_tool_is_repeatable() -> None:
    call = {"tool_calls": [{"name": "get_current_time", "arguments": {"timezone": "UTC"}}]}
    with OpenAIEmulator([call, call, {"content": "done"}]) as emu:
        async with Toolbox(time_server(name="time", repeatable=True)) as box:
            provider = Local(base_url=emu.base_url, model="m", tools=box.tools())
            outcome = await run(provider, handler=box, prompt="what time is it, twice?")
        last = emu.requests[-1].body["messages"]
    assert outcome.unwrap().text == "done"
    results = [m["content"] for m in last if m["role"] == "tool"]
    assert len(results) == 2 and all('"timezone": "UTC"' in r or '"timezone":"UTC"' in r for r in results)


def _info() -> Any:
    from rma.vocabulary import SessionInfo

    return SessionInfo(session_id="s")
