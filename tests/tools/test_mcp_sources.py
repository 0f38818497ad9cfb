"""MCP servers as tool sources (issue #14): a real server built with the SDK's ``FastMCP``,
spawned over stdio or serving streamable HTTP on 127.0.0.1 — declarations, result mapping,
collisions, schema checks, connect and call timeouts, crashes, restarts and no orphans."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from returns.result import Failure, Success

from rma.vocabulary import SessionInfo
from rma_shell.tools import Toolbox, ToolboxError, tool
from rma_shell.tools.mcp import MCPServer, MCPServerError
from rma_shell.transport.http import user_agent
from tests.tools._mcp import free_port, http_server, pid_alive, stdio_server

INFO = SessionInfo(session_id="s-1", provider="local")


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    with http_server(env={"RMA_MCP_LABEL": "web", "RMA_MCP_PAGE_SIZE": "3"}) as url:
        yield url


async def call(box: Toolbox, name: str, **arguments: Any) -> Any:
    return await box.handle_tool_call(name, arguments, None, INFO)


async def server_pid(box: Toolbox, name: str = "pid") -> int:
    result = await call(box, name)
    assert isinstance(result, Success), result
    return int(result.unwrap())


@pytest.mark.trio_only  # mapping, not concurrency: the lifecycle tests run on both backends
async def test_tools_are_listed_across_pages_declared_like_local_tools_and_their_results_mapped(
    http_url: str,
) -> None:
    async with Toolbox(MCPServer.http(http_url, prefix="m_")) as box:
        # twelve tools, served three per tools/list page, all declared with the prefix, in order
        names = (
            "calls",
            "echo",
            "add",
            "lines",
            "pid",
            "wait",
            "block",
            "crash",
            "hang",
            "fail",
            "picture",
            "header",
        )
        assert [spec.name for spec in box.tools()] == [f"m_{n}" for n in names]
        add = next(spec for spec in box.tools() if spec.name == "m_add")
        assert add.description == "Add two integers."
        assert add.input_schema["type"] == "object"
        assert add.input_schema["required"] == ["a", "b"]
        assert add.input_schema["properties"] == {
            "a": {"title": "A", "type": "integer"},
            "b": {"title": "B", "type": "integer"},
        }
        assert await call(box, "m_echo", text="hi") == Success("web:hi")
        assert await call(box, "m_add", a=2, b=3) == Success("5")
        assert await call(box, "m_picture") == Success("look:\n[image: image/png, 4 bytes]")
        assert await call(box, "m_fail", why="no") == Failure("Error executing tool fail: refused: no")
        # several text blocks are joined by newlines; structured content alone is sent as JSON
        assert await call(box, "m_lines", n=2) == Success("line 0\nline 1")
        assert await call(box, "m_lines", n=0) == Success('{"result":[]}')


@pytest.mark.trio_only  # mapping, not concurrency: the lifecycle tests run on both backends
async def test_http_tools_are_called_with_the_given_headers(http_url: str) -> None:
    source = MCPServer.http(http_url, headers={"X-Rma-Test": "yes"}, allowed_tools={"echo", "header"})
    async with Toolbox(source) as box:
        assert sorted(box.names()) == ["echo", "header"]
        assert await call(box, "echo", text="hi") == Success("web:hi")
        assert await call(box, "header") == Success("yes")
        # a tool left out by allowed_tools is not routed
        unknown = await call(box, "add", a=1, b=2)
        assert isinstance(unknown, Failure) and "unknown tool 'add'" in unknown.failure()


@pytest.mark.trio_only  # mapping, not concurrency: the lifecycle tests run on both backends
async def test_http_calls_carry_rmas_user_agent_unless_the_given_headers_name_one(http_url: str) -> None:
    async with Toolbox(MCPServer.http(http_url, allowed_tools={"header"})) as box:
        assert await call(box, "header", which="user-agent") == Success(user_agent())
    mine = MCPServer.http(http_url, headers={"user-agent": "my-app/7.0"}, allowed_tools={"header"})
    async with Toolbox(mine) as box:
        assert await call(box, "header", which="user-agent") == Success("my-app/7.0")


@pytest.mark.trio_only  # mapping, not concurrency: the lifecycle tests run on both backends
async def test_allowed_tools_naming_a_tool_the_server_lacks_is_an_error_up_front(http_url: str) -> None:
    with pytest.raises(
        MCPServerError, match=r"allowed_tools names \['nope'\], which the server does not offer"
    ):
        async with Toolbox(MCPServer.http(http_url, allowed_tools=["echo", "nope"])):
            pass
    # a predicate filters without that check
    async with Toolbox(MCPServer.http(http_url, allowed_tools=lambda n: n.startswith("e"))) as box:
        assert box.names() == ["echo"]


@pytest.mark.trio_only  # mapping, not concurrency: the lifecycle tests run on both backends
async def test_name_collisions_between_servers_or_with_own_tools_are_errors_up_front(http_url: str) -> None:
    with pytest.raises(ToolboxError, match=r"duplicate tool name 'calls' \(from MCPServer\('b'"):
        async with Toolbox(MCPServer.http(http_url, name="a"), MCPServer.http(http_url, name="b")):
            pass

    @tool
    def echo(text: str) -> str:
        """Our own echo."""
        return text

    with pytest.raises(ToolboxError, match="duplicate tool name 'echo'"):
        async with Toolbox(echo, MCPServer.http(http_url)):
            pass
    # prefixes make them mix
    async with Toolbox(
        echo, MCPServer.http(http_url, prefix="a_"), MCPServer.http(http_url, prefix="b_")
    ) as box:
        assert {"echo", "a_echo", "b_echo"} <= set(box.names())
        assert await call(box, "echo", text="x") == "x"
        assert await call(box, "b_echo", text="x") == Success("web:x")


@pytest.mark.trio_only  # mapping, not concurrency: the lifecycle tests run on both backends
async def test_invalid_arguments_are_refused_by_the_schema_before_reaching_the_server(http_url: str) -> None:
    async with Toolbox(MCPServer.http(http_url, allowed_tools={"add", "calls"}, prefix="w_")) as box:
        before = await call(box, "w_calls")
        refused = await call(box, "w_add", a="2", b=3)
        assert refused == Failure("invalid arguments for w_add:\n- a: '2' is not of type 'integer'")
        missing = await call(box, "w_add", a=1)
        assert missing == Failure("invalid arguments for w_add:\n- (arguments): 'b' is a required property")
        assert await call(box, "w_calls") == before  # the server ran no add


async def test_a_server_that_never_answers_initialize_fails_after_connect_timeout() -> None:
    # reads every request, answers none (exits when its stdin closes)
    mute = MCPServer.stdio(
        sys.executable, ["-c", "import sys; sys.stdin.read()"], name="mute", connect_timeout=0.5
    )
    started = time.monotonic()
    with pytest.raises(MCPServerError, match=r"'mute' did not answer initialize and tools/list within 0.5 s"):
        async with Toolbox(mute):
            pass
    assert time.monotonic() - started < 30  # the server would never answer


async def test_an_http_server_that_accepts_but_never_answers_fails_after_connect_timeout() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # the kernel accepts connections; nobody ever reads or answers
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/mcp"
        with pytest.raises(MCPServerError, match=r"did not answer initialize and tools/list within 0\.5 s"):
            async with Toolbox(MCPServer.http(url, name="silent", connect_timeout=0.5)):
                pass


async def test_a_server_that_cannot_be_started_or_reached_is_an_error_naming_it() -> None:
    with pytest.raises(MCPServerError, match=r"'nowhere' could not be started: FileNotFoundError"):
        async with MCPServer.stdio("/nonexistent/mcp-server", name="nowhere"):
            pass
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connections are refused
        with pytest.raises(MCPServerError, match=r"'closed' failed to connect: .*ConnectError"):
            async with MCPServer.http(f"http://127.0.0.1:{port}/mcp", name="closed", connect_timeout=5):
                pass


async def test_a_call_past_call_timeout_is_an_error_a_live_server_is_kept_a_hung_one_restarted() -> None:
    async with Toolbox(stdio_server(name="slow", call_timeout=1)) as box:
        first = await server_pid(box)
        # the server answers a ping: the call is cancelled, the server kept
        waited = await call(box, "wait", seconds=30)
        assert waited == Failure("MCP server slow: wait did not answer within 1 s and was cancelled")
        assert await server_pid(box) == first
        # the server is blocked and answers nothing: dropped, respawned on the next call
        blocked = await call(box, "block", seconds=30)
        assert blocked == Failure(
            "MCP server slow: block did not answer within 1 s and the server did not answer a ping "
            "either; it will be restarted on the next call"
        )
        # calls racing to the dropped server share one respawn
        pids: list[Any] = []
        async with anyio.create_task_group() as tg:
            for note in ("a", "b", "c"):
                tg.start_soon(lambda n: _append(pids, call(box, "pid", note=n)), note)
        assert len({str(p) for p in pids}) == 1 and isinstance(pids[0], Success)
        second = int(pids[0].unwrap())
        assert second != first
        assert await call(box, "echo", text="again") == Success("mcp:again")
    assert not pid_alive(first) and not pid_alive(second)


async def _append(out: list[Any], result: Any) -> None:
    out.append(await result)


@pytest.mark.trio_only  # three server processes: once is enough
async def test_an_http_server_that_dies_mid_call_or_restarts_is_reconnected_on_the_next_call() -> None:
    port = free_port()
    with http_server(port=port) as url:
        source = MCPServer.http(url, name="web", call_timeout=30)  # not reached: the loss is seen at once
        async with Toolbox(source) as box:
            first = await server_pid(box)
            # the answer's stream breaks off: the connection is lost, the call fails at once
            crashed = await call(box, "crash")
            assert isinstance(crashed, Failure)
            assert crashed.failure().endswith("during crash; it will be reconnected on the next call")
            down = await call(box, "pid", note="down")
            assert isinstance(down, Failure) and "'web' failed to connect: ConnectError" in down.failure()
            with http_server(port=port):
                second = await server_pid(box)
            assert second != first
            # restarted between calls: the server answers 404 for the old session; the call is
            # made again on a new one
            with http_server(port=port):
                third = await call(box, "pid", note="again")
            assert isinstance(third, Success) and int(third.unwrap()) not in (first, second)


async def test_an_http_server_killed_mid_call_fails_the_call_at_once_not_at_call_timeout(
    tmp_path: Path,
) -> None:
    # As over stdio (the process exits, its stdout ends): the lost connection fails the call
    # in flight, instead of it waiting out call_timeout for an answer that cannot come.
    arrived = tmp_path / "arrived"
    os.mkfifo(arrived)  # opened by the server inside the call: a read returns once it is there
    port = free_port()
    with http_server(port=port) as url:
        async with Toolbox(MCPServer.http(url, name="web", call_timeout=600)) as box:
            pid = await server_pid(box)
            results: list[Any] = []
            with anyio.fail_after(30):  # a safety net, far below call_timeout; not a speed bound
                async with anyio.create_task_group() as tg:
                    tg.start_soon(lambda: _append(results, call(box, "hang", marker=str(arrived))))
                    assert await anyio.to_thread.run_sync(arrived.read_text, abandon_on_cancel=True)
                    os.kill(pid, signal.SIGKILL)  # the server is inside the call
            [hung] = results
            assert isinstance(hung, Failure), hung
            assert hung.failure().startswith("MCP server web cut the connection mid-answer (")
            assert hung.failure().endswith("during hang; it will be reconnected on the next call")
            # reaped: a dying process may still hold the port the next server binds
            await anyio.to_thread.run_sync(os.waitpid, pid, 0)
            with http_server(port=port):
                assert await server_pid(box) != pid


async def test_leaving_the_toolbox_stops_the_server_process_also_when_cancelled_mid_call() -> None:
    # (the timeout test and the crash test on Local check the same after a plain exit)
    box = Toolbox(stdio_server(call_timeout=None))
    pids: list[int] = []
    with anyio.CancelScope() as scope:
        async with box:
            pids.append(await server_pid(box))
            assert pid_alive(pids[0])
            scope.deadline = anyio.current_time() + 0.3
            await call(box, "wait", seconds=60)  # cancelled by the scope, mid-call
    assert scope.cancelled_caught
    assert not pid_alive(pids[0])


async def test_a_toolbox_that_fails_to_start_stops_the_servers_it_spawned(tmp_path: Path) -> None:
    @tool
    def echo(text: str) -> str:
        """Our own echo, colliding with the server's."""
        return text

    pidfile = tmp_path / "pid"
    with pytest.raises(ToolboxError, match="duplicate tool name 'echo'"):
        async with Toolbox(echo, stdio_server(env={"RMA_MCP_PIDFILE": str(pidfile)})):
            pass
    assert not pid_alive(int(pidfile.read_text()))


async def test_tools_before_start_is_an_error() -> None:
    with pytest.raises(ToolboxError, match="use it inside `async with toolbox:`"):
        Toolbox(stdio_server()).tools()
    with pytest.raises(MCPServerError, match="valid once the source is started"):
        stdio_server(name="early").tools()


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: stdio_server(connect_timeout=0), "connect_timeout"),
        (lambda: stdio_server(connect_timeout=float("inf")), "connect_timeout"),
        (lambda: stdio_server(call_timeout=-1), "call_timeout"),
        (lambda: stdio_server(call_timeout="60"), "call_timeout"),
        (lambda: stdio_server(allowed_tools="echo"), "allowed_tools"),
        (lambda: stdio_server(prefix=None), "prefix"),
        (lambda: MCPServer.stdio("python", "server.py"), "args"),
        (lambda: MCPServer.stdio("", []), "command"),
        (lambda: MCPServer.stdio("python", env={"A": 1}), "env"),
        (lambda: MCPServer.http("ftp://127.0.0.1/mcp"), "url"),
        (lambda: MCPServer.http("http://127.0.0.1/mcp", headers={"A": 1}), "headers"),
        (lambda: MCPServer.http("http://127.0.0.1/mcp", name=""), "name"),
    ],
)
def test_bad_options_are_typed_errors_naming_the_field(build: Any, field: str) -> None:
    with pytest.raises(MCPServerError, match=field):
        build()


def test_an_http_servers_default_name_leaves_out_credentials_and_query() -> None:
    # the name is in every error result the model sees
    assert MCPServer.http("http://me:pw@127.0.0.1:8123/mcp?token=abc").name == "http://127.0.0.1:8123/mcp"
    with pytest.raises(MCPServerError) as raised:
        MCPServer.http("ftp://me:pw@127.0.0.1/mcp?token=abc")
    assert "pw" not in str(raised.value) and "abc" not in str(raised.value)
