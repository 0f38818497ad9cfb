"""Tools from anywhere: typed Python functions, tool sources (MCP servers), one toolbox.

``@tool`` turns a typed function into a tool (schema from its type hints and docstring,
arguments validated by Pydantic before it runs); a ``Toolbox`` gathers such functions and
``ToolSource`` objects behind one handler whose ``tools()`` every provider accepts, so one
toolbox serves all three hosts. Needs the ``tools`` extra: ``pip install "rma-agents[tools]"``.
MCP servers are ``rma_shell.tools.mcp.MCPServer`` sources (the ``mcp`` extra).
"""

from rma_shell.handler import DEFAULT_MAX_RESULT_CHARS, truncate
from rma_shell.tools.function import FunctionTool, ToolCall, serialise, strict_schema, tool
from rma_shell.tools.output import OutputTool, output_tool
from rma_shell.tools.schema_validation import InvalidSchema, SchemaValidator
from rma_shell.tools.source import ToolOutput, ToolSource, ToolSpec
from rma_shell.tools.toolbox import Toolbox, ToolboxError

__all__ = [
    "DEFAULT_MAX_RESULT_CHARS",
    "FunctionTool",
    "InvalidSchema",
    "OutputTool",
    "SchemaValidator",
    "ToolCall",
    "ToolOutput",
    "ToolSource",
    "ToolSpec",
    "Toolbox",
    "ToolboxError",
    "output_tool",
    "serialise",
    "strict_schema",
    "tool",
    "truncate",
]
