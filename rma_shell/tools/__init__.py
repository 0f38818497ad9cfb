"""Tools from anywhere: typed Python functions, tool sources (MCP servers), one toolbox.

``@tool`` turns a typed function into a tool (schema from its type hints and docstring,
arguments validated by Pydantic before it runs); a ``Toolbox`` gathers such functions and
``ToolSource`` objects behind one handler whose ``tools()`` every provider accepts, so one
toolbox serves all three hosts. Needs the ``tools`` extra: ``pip install "rma-agents[tools]"``.
MCP servers are ``rma_shell.tools.mcp.MCPServer`` sources (the ``mcp`` extra).

The names load on first use, so ``rma_shell.tools.routing`` (an ``Agent``'s tools) and
``rma_shell.tools.source`` work without the extra; a typed function needs it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rma_shell.handler import DEFAULT_MAX_RESULT_CHARS, truncate
    from rma_shell.tools.function import FunctionTool, ToolCall, serialise, strict_schema, tool
    from rma_shell.tools.output import OutputTool, output_tool
    from rma_shell.tools.rich import Document, Image, document_from_path, image_from_path
    from rma_shell.tools.routing import Router, combine
    from rma_shell.tools.schema_validation import InvalidSchema, SchemaValidator
    from rma_shell.tools.source import ToolOutput, ToolSource, ToolSpec
    from rma_shell.tools.toolbox import Toolbox, ToolboxError

_WHERE = {
    "DEFAULT_MAX_RESULT_CHARS": "rma_shell.handler",
    "truncate": "rma_shell.handler",
    "FunctionTool": "rma_shell.tools.function",
    "ToolCall": "rma_shell.tools.function",
    "serialise": "rma_shell.tools.function",
    "strict_schema": "rma_shell.tools.function",
    "tool": "rma_shell.tools.function",
    "OutputTool": "rma_shell.tools.output",
    "Image": "rma_shell.tools.rich",
    "Document": "rma_shell.tools.rich",
    "image_from_path": "rma_shell.tools.rich",
    "document_from_path": "rma_shell.tools.rich",
    "output_tool": "rma_shell.tools.output",
    "InvalidSchema": "rma_shell.tools.schema_validation",
    "SchemaValidator": "rma_shell.tools.schema_validation",
    "ToolOutput": "rma_shell.tools.source",
    "ToolSource": "rma_shell.tools.source",
    "ToolSpec": "rma_shell.tools.source",
    "Toolbox": "rma_shell.tools.toolbox",
    "Router": "rma_shell.tools.routing",
    "combine": "rma_shell.tools.routing",
    "ToolboxError": "rma_shell.tools.toolbox",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'rma_shell.tools' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])


__all__ = [
    "DEFAULT_MAX_RESULT_CHARS",
    "Document",
    "FunctionTool",
    "Image",
    "InvalidSchema",
    "OutputTool",
    "Router",
    "SchemaValidator",
    "ToolCall",
    "ToolOutput",
    "ToolSource",
    "ToolSpec",
    "Toolbox",
    "ToolboxError",
    "combine",
    "document_from_path",
    "image_from_path",
    "output_tool",
    "serialise",
    "strict_schema",
    "tool",
    "truncate",
]
