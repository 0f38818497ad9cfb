"""The workspace toolset: Claude's built-in tools (bash, read, write, edit, glob, grep) run on
this machine, confined to one directory, bash inside an OS sandbox (docs/workspace.md)."""

from rma_shell.workspace.paths import PathRefused
from rma_shell.workspace.sandbox import Sandbox, SandboxUnavailable
from rma_shell.workspace.toolset import TOOL_NAMES, Workspace, WorkspaceError

__all__ = ["TOOL_NAMES", "PathRefused", "Sandbox", "SandboxUnavailable", "Workspace", "WorkspaceError"]
