"""A real MCP server for the tests, written with the SDK's own server API (``FastMCP``).

Run as ``python tests/tools/_mcp_server.py stdio`` (speaks MCP on stdin/stdout) or
``python tests/tools/_mcp_server.py http PORT`` (streamable HTTP on 127.0.0.1:PORT/mcp).
Environment: ``RMA_MCP_LABEL`` is put in front of what ``echo`` answers (to tell two
servers apart); ``RMA_MCP_PAGE_SIZE`` makes ``tools/list`` answer in pages of that size;
``RMA_MCP_PIDFILE`` names a file the server writes its pid to when it starts.

Its tools misbehave on request: ``wait`` sleeps without blocking the server, ``block``
blocks the whole server (it answers nothing, not even a ping, while it sleeps), ``crash``
kills the process in the middle of the call, ``hang`` writes to a file or FIFO (so a test
knows the call arrived) and never answers.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import anyio
import mcp.types as mt

try:  # mcp 1.x
    from mcp.server.fastmcp import Context, Image
    from mcp.server.fastmcp import FastMCP as Server

    V2 = False
except ImportError:  # mcp 2.x renamed FastMCP to MCPServer
    from mcp.server.mcpserver import Context, Image  # type: ignore[no-redef]
    from mcp.server.mcpserver import MCPServer as Server  # type: ignore[assignment]

    V2 = True

LABEL = os.environ.get("RMA_MCP_LABEL", "mcp")
app: Any = Server("rma-test-server", log_level="WARNING")
CALLS: list[str] = []


@app.tool()
def calls() -> list[str]:
    """The tools this server process has run, in order (``calls`` itself left out)."""
    return CALLS


@app.tool()
def echo(text: str) -> str:
    """Say the text back, after the server's label."""
    CALLS.append("echo")
    return f"{LABEL}:{text}"


@app.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    CALLS.append("add")
    return a + b


@app.tool()
def lines(n: int) -> list[str]:
    """``n`` lines: ``n`` text blocks (none when ``n`` is 0: then only structured content)."""
    return [f"line {i}" for i in range(n)]


@app.tool()
def pid(note: str = "") -> int:
    """The server's process id (``note`` only makes two calls differ)."""
    return os.getpid()


@app.tool()
async def wait(seconds: float) -> str:
    """Sleep without blocking the server, then answer."""
    await anyio.sleep(seconds)
    return "waited"


@app.tool()
async def block(seconds: float) -> str:
    """Block the whole server (no other request is answered), then answer. Async, so that it
    runs on the server's event loop whatever the SDK does with sync tools (mcp 2.x runs them in
    a worker thread)."""
    CALLS.append("block")
    time.sleep(seconds)  # noqa: ASYNC251 - blocking the server's loop is the point
    return "unblocked"


@app.tool()
def crash() -> str:
    """Kill the server in the middle of the call."""
    os._exit(3)


@app.tool()
async def hang(marker: str) -> str:
    """Write to the file (or FIFO) ``marker``, then never answer (until the process is killed)."""
    await anyio.Path(marker).write_text("arrived")
    await anyio.sleep_forever()
    return "never"


@app.tool()
def fail(why: str) -> str:
    """Raise: the SDK answers with an isError result (mcp 2.x keeps the text of a ``ToolError``
    only: any other exception is a crash whose text it keeps to itself)."""
    if V2:
        from mcp.server.mcpserver.exceptions import ToolError

        raise ToolError(f"refused: {why}")
    raise ValueError(f"refused: {why}")


@app.tool(structured_output=False)
def picture() -> list[object]:
    """A text block, then a 4-byte PNG."""
    return ["look:", Image(data=b"\x89PNG", format="png")]


@app.tool()
def header(ctx: Context, which: str = "x-rma-test") -> str:
    """A header (X-Rma-Test unless named) of the HTTP request that carried this call."""
    if V2:
        headers = ctx.headers
        return str(headers.get(which)) if headers is not None else "no request"
    request = ctx.request_context.request
    return str(request.headers.get(which)) if request is not None else "no request"


def _paginate(size: int) -> None:
    if V2:

        async def paged_v2(ctx: Any, params: mt.PaginatedRequestParams | None) -> mt.ListToolsResult:
            tools = await app.list_tools()
            start = int(params.cursor) if params and params.cursor else 0
            end = start + size
            return mt.ListToolsResult(
                tools=tools[start:end], next_cursor=str(end) if end < len(tools) else None
            )

        app._handle_list_tools = paged_v2
        return

    async def paged(request: mt.ListToolsRequest) -> mt.ListToolsResult:
        tools = await app.list_tools()
        start = int(request.params.cursor) if request.params and request.params.cursor else 0
        end = start + size
        return mt.ListToolsResult(tools=tools[start:end], nextCursor=str(end) if end < len(tools) else None)

    app._mcp_server.list_tools()(paged)


def main() -> None:
    if os.environ.get("RMA_MCP_PIDFILE"):
        with open(os.environ["RMA_MCP_PIDFILE"], "w") as f:
            f.write(str(os.getpid()))
    if os.environ.get("RMA_MCP_PAGE_SIZE"):
        _paginate(int(os.environ["RMA_MCP_PAGE_SIZE"]))
    if sys.argv[1:2] == ["http"] and V2:
        app.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    elif sys.argv[1:2] == ["http"]:
        app.settings.host = "127.0.0.1"
        app.settings.port = int(sys.argv[2])
        app.run(transport="streamable-http")
    else:
        app.run(transport="stdio")


if __name__ == "__main__":
    main()
