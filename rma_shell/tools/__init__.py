"""Tools from anywhere: the contract every tool source keeps (typed functions, MCP servers).

A tool source declares tools (``ToolSpec``: name, description, JSON schema — the shape every
provider already accepts in ``tools=``) and runs calls to them. A toolbox gathers sources and
is itself a handler, so one toolbox serves all three hosts. This package holds the contract;
the sources live in their own modules.
"""

from rma_shell.tools.source import ToolOutput, ToolSource, ToolSpec

__all__ = ["ToolOutput", "ToolSource", "ToolSpec"]
