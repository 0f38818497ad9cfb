"""``Workspace``: the six tools of Claude's ``agent_toolset_20260401`` (``bash``, ``read``,
``write``, ``edit``, ``glob``, ``grep``) run on this machine, as a tool source.

    async with Workspace("/srv/ws/job-1") as ws:          # starts nothing until bash is called
        agent = Agent(tools=[ws], host=Local(...))        # or any host: the same local hands

On a self-hosted Claude environment the worker (``rma_shell.providers.claude.worker``) gives
each session its own ``Workspace`` and answers the agent's built-in ``agent.tool_use`` calls
from it; on Local and AgentCore the same object is an ordinary tool source in a ``Toolbox``
or an ``Agent``'s ``tools=``. Inputs are the wire's (the SDK's
``BetaManagedAgentsAgentToolset20260401*Input``) and results are the SDK reference toolset's
words (``wrote N bytes to PATH``, ``edited PATH (N replacement(s))``, ``no matches``, a
failing command's output as an error).

The file tools act through ``rma_shell.workspace.paths`` (descriptor walks, no link ever
followed); bash is ``rma_shell.workspace.shell`` inside ``rma_shell.workspace.sandbox``.
What the sandbox protects and what it does not: docs/workspace.md. What this is not: a way
to read images or PDFs (``read`` takes UTF-8 text), or a shared shell (one per Workspace).
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

import anyio
from returns.result import Failure, Success

from rma.vocabulary import JSON
from rma_shell.tools.source import ToolOutput, ToolSpec
from rma_shell.workspace.paths import MAX_FILE_BYTES, PathRefused, Root
from rma_shell.workspace.sandbox import Sandbox, SandboxUnavailable, base_env, resolve
from rma_shell.workspace.shell import DEFAULT_TIMEOUT, Shell, ShellTimeout

TOOL_NAMES = ("bash", "read", "write", "edit", "glob", "grep")
GLOB_RESULT_LIMIT = 200
GREP_OUTPUT_LIMIT = 100 * 1024
GREP_MAX_LINE_LENGTH = 2000


def _obj(props: Mapping[str, JSON], required: Sequence[str] = ()) -> dict[str, JSON]:
    schema: dict[str, JSON] = {"type": "object", "properties": dict(props)}
    if required:
        schema["required"] = list(required)
    return schema


_STR: JSON = {"type": "string"}
SPECS: Mapping[str, ToolSpec] = {
    "bash": ToolSpec(
        "bash",
        "Run a command in a persistent bash shell (cwd, variables and jobs persist between calls). "
        "restart=true starts a fresh shell.",
        _obj({"command": _STR, "restart": {"type": "boolean"}, "timeout_ms": {"type": "integer"}}),
    ),
    "read": ToolSpec(
        "read",
        "Read a text file in the workspace; view_range [start_line, end_line] is 1-indexed inclusive "
        "(end_line <= 0: to the end).",
        _obj(
            {"file_path": _STR, "view_range": {"type": "array", "items": {"type": "integer"}}}, ["file_path"]
        ),
    ),
    "write": ToolSpec(
        "write",
        "Write a whole file in the workspace, creating parent directories as needed.",
        _obj({"file_path": _STR, "content": _STR}, ["file_path", "content"]),
    ),
    "edit": ToolSpec(
        "edit",
        "Replace old_string with new_string in a file; old_string must occur exactly once "
        "unless replace_all.",
        _obj(
            {"file_path": _STR, "old_string": _STR, "new_string": _STR, "replace_all": {"type": "boolean"}},
            ["file_path", "old_string", "new_string"],
        ),
    ),
    "glob": ToolSpec(
        "glob",
        "List workspace files matching a doublestar glob pattern (e.g. **/*.py), newest first.",
        _obj({"pattern": _STR, "path": _STR}, ["pattern"]),
    ),
    "grep": ToolSpec(
        "grep",
        "Search workspace file contents for a regular expression; lines come back as path:line:text.",
        _obj({"pattern": _STR, "path": _STR}, ["pattern"]),
    ),
}


class WorkspaceError(ValueError):
    """A workspace that cannot be made (a missing directory, an unknown sandbox)."""


class Workspace:
    """The workspace toolset over one directory. See the module docstring.

    Args:
        path: the workspace directory (must exist); the file tools and bash never leave it.
        sandbox: ``"auto"`` (bubblewrap, or refuse bash with ``SandboxUnavailable``),
            ``"bwrap"``, or ``"none"`` — bash unconfined, an explicit opt-in (docs/workspace.md).
        network: let bash reach the network (default False: no network at all in the sandbox).
        env: extra environment variables for bash (it never inherits the worker's).
        read_only: more directories bash may read (bound read-only at their own path).
        bash_timeout: seconds a command may run when the call names no ``timeout_ms``.
        max_file_bytes: the size cap of a whole-file read and of an edit.
        tools: which of the six tools to offer (default all).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        sandbox: Sandbox | str = Sandbox.AUTO,
        network: bool = False,
        env: Mapping[str, str] | None = None,
        read_only: Sequence[str] = (),
        bash_timeout: float = DEFAULT_TIMEOUT,
        max_file_bytes: int = MAX_FILE_BYTES,
        tools: Sequence[str] = TOOL_NAMES,
    ) -> None:
        real = os.path.realpath(os.fspath(path))
        if not os.path.isdir(real):
            raise WorkspaceError(f"path: {os.fspath(path)!r} is not a directory")
        try:
            self.sandbox = Sandbox(sandbox)
        except ValueError:
            raise WorkspaceError(
                f"sandbox: must be one of {[s.value for s in Sandbox]}, got {sandbox!r}"
            ) from None
        unknown = [t for t in tools if t not in SPECS]
        if unknown or isinstance(tools, str):
            raise WorkspaceError(
                f"tools: unknown tool names {unknown or tools!r} (known: {list(TOOL_NAMES)})"
            )
        if not (isinstance(bash_timeout, int | float) and bash_timeout > 0):
            raise WorkspaceError(f"bash_timeout: must be a positive number of seconds, got {bash_timeout!r}")
        self.path = real
        self.network = bool(network)
        self._env = dict(env or {})
        self._read_only = tuple(read_only)
        self._bash_timeout = float(bash_timeout)
        self._max_file_bytes = max_file_bytes
        self._names = tuple(tools)
        self._root: Root | None = None
        self._shell: Shell | None = None
        self._handlers: dict[str, Callable[[dict[str, Any]], Any]] = {
            "bash": self._bash,
            "read": self._read,
            "write": self._write,
            "edit": self._edit,
            "glob": self._glob,
            "grep": self._grep,
        }

    def __repr__(self) -> str:
        return f"Workspace({self.path!r}, sandbox={self.sandbox.value!r}, network={self.network})"

    async def __aenter__(self) -> Self:
        self._root = Root(self.path)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Kill the shell (and everything it started) and close the workspace's descriptor."""
        shell, self._shell = self._shell, None
        if shell is not None:
            await shell.close()
        if self._root is not None:
            self._root.close()
            self._root = None

    def tools(self) -> Sequence[ToolSpec]:
        return [SPECS[name] for name in self._names]

    @property
    def shell_pid(self) -> int | None:
        return None if self._shell is None else self._shell.pid

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolOutput:
        handler = self._handlers.get(name) if name in self._names else None
        if handler is None:
            return Failure(f"unknown tool {name!r} (this workspace offers {list(self._names)})")
        if not isinstance(arguments, Mapping):
            return Failure(f"{name}: input must be an object")
        if self._root is None:
            self._root = Root(self.path)  # usable without ``async with`` too; aclose() ends it
        try:
            if name == "bash":
                return await handler(dict(arguments))  # type: ignore[no-any-return]
            return await anyio.to_thread.run_sync(functools.partial(handler, dict(arguments)))
        except PathRefused as exc:
            return Failure(str(exc))
        except (TypeError, ValueError, KeyError) as exc:
            return Failure(f"{name}: invalid input: {exc}")

    # -- bash --

    async def _bash(self, args: dict[str, Any]) -> ToolOutput:
        command, restart, timeout_ms = args.get("command"), args.get("restart"), args.get("timeout_ms")
        if command is not None and not isinstance(command, str):
            return Failure("bash: command must be a string")
        if timeout_ms is not None and (not isinstance(timeout_ms, int) or isinstance(timeout_ms, bool)):
            return Failure("bash: timeout_ms must be an integer")
        try:
            shell = self._shell_or_new()
        except SandboxUnavailable as exc:
            return Failure(f"bash: refused: {exc}")
        if restart:
            await shell.restart()
            return "bash session restarted"
        if not command:
            return Failure("bash: command is required")
        timeout = timeout_ms / 1000.0 if timeout_ms and timeout_ms > 0 else self._bash_timeout
        try:
            out, code = await shell.run(command, timeout)
        except ShellTimeout as exc:
            return Failure(str(exc))
        if code != 0:
            return Failure(out or f"(exit status {code})")
        return Success(out)

    def _shell_or_new(self) -> Shell:
        if self._shell is None:
            mode = resolve(self.sandbox)
            env = base_env(self._env, self.path)
            self._shell = Shell(self.path, mode, env, network=self.network, read_only=self._read_only)
        return self._shell

    # -- files (run in a worker thread) --

    def _root_now(self) -> Root:
        assert self._root is not None
        return self._root

    def _read(self, args: dict[str, Any]) -> ToolOutput:
        path, view = _need_str(args, "file_path", "read"), args.get("view_range")
        if view is not None and (
            not isinstance(view, list) or len(view) != 2 or not all(isinstance(v, int) for v in view)
        ):
            return Failure("read: view_range must be [start_line, end_line]")
        limit = None if view else self._max_file_bytes
        data = self._root_now().read_bytes(path, op="read", limit=limit if limit else 64 * 1024 * 1024)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return Failure(f"read: {path}: not valid UTF-8 text")
        if not view:
            return text
        lines = text.split("\n")
        start, end = max(0, view[0] - 1), (view[1] if view[1] > 0 else len(lines))
        chosen = "\n".join(lines[start:end])
        if len(chosen.encode()) > self._max_file_bytes:
            return Failure(f"read: the selected lines exceed the {self._max_file_bytes}-byte limit")
        return chosen

    def _write(self, args: dict[str, Any]) -> ToolOutput:
        path, content = _need_str(args, "file_path", "write"), _need_str(args, "content", "write", empty=True)
        self._root_now().write_bytes(path, content.encode("utf-8"), op="write")
        return f"wrote {len(content)} bytes to {path}"

    def _edit(self, args: dict[str, Any]) -> ToolOutput:
        path = _need_str(args, "file_path", "edit")
        old, new = (
            _need_str(args, "old_string", "edit", empty=True),
            _need_str(args, "new_string", "edit", empty=True),
        )
        root = self._root_now()
        data = root.read_bytes(path, op="edit", limit=self._max_file_bytes)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return Failure(f"edit: {path}: not valid UTF-8 text (cannot edit binary files)")
        if not old:
            return Failure("edit: old_string must not be empty")
        count = text.count(old)
        if count == 0:
            return Failure(f"edit: old_string not found in {path}")
        replace_all = bool(args.get("replace_all"))
        if count > 1 and not replace_all:
            return Failure(f"edit: old_string appears {count} times in {path} (must be unique)")
        updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
        root.write_bytes(path, updated.encode("utf-8"), op="edit", must_exist=True)
        return f"edited {path} ({count if replace_all else 1} replacement(s))"

    def _glob(self, args: dict[str, Any]) -> ToolOutput:
        pattern, base = _need_str(args, "pattern", "glob"), args.get("path")
        if pattern.startswith("/"):
            return Failure(
                "glob: absolute pattern not permitted; pass a relative pattern (and optionally path)"
            )
        if ".." in pattern.split("/"):
            return Failure("glob: '..' is not permitted in the pattern")
        rx = _glob_regex(pattern)
        root = self._root_now()
        prefix = "/".join(root.parts(base, op="glob")) if base else ""
        hits = []
        for rel, st in root.entries(base if base else None, op="glob"):
            below = rel[len(prefix) + 1 :] if prefix and rel.startswith(prefix + "/") else rel
            if rx.fullmatch(below):
                hits.append((st.st_mtime, rel))
        if not hits:
            return "no matches"
        hits.sort(key=lambda h: (-h[0], h[1]))
        return "\n".join(rel for _, rel in hits[:GLOB_RESULT_LIMIT])

    def _grep(self, args: dict[str, Any]) -> ToolOutput:
        pattern, base = _need_str(args, "pattern", "grep"), args.get("path")
        try:
            rx = re.compile(pattern)
        except re.error as exc:
            return Failure(f"grep: invalid regex: {exc}")
        root = self._root_now()
        out: list[str] = []
        budget = GREP_OUTPUT_LIMIT
        for rel, _ in root.entries(base if base else None, op="grep"):
            fd = root.open_for_scan(rel)
            if fd is None:
                continue
            with os.fdopen(fd, "rb") as f:
                if b"\x00" in f.read(512):
                    continue
                f.seek(0)
                for number, raw in enumerate(f, 1):
                    if len(raw) > GREP_MAX_LINE_LENGTH:
                        continue  # a model-written pattern against a huge line could backtrack for ages
                    line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                    if rx.search(line):
                        entry = f"{rel}:{number}:{line}"
                        budget -= len(entry) + 1
                        if budget < 0:
                            out.append(f"[output truncated at {GREP_OUTPUT_LIMIT} bytes]")
                            return "\n".join(out)
                        out.append(entry)
        return "\n".join(out) if out else "no matches"


def _need_str(args: Mapping[str, Any], key: str, op: str, *, empty: bool = False) -> str:
    value = args.get(key)
    if not isinstance(value, str) or (not empty and not value):
        raise PathRefused(f"{op}: {key} is required (a {'string' if empty else 'non-empty string'})")
    return value


@functools.lru_cache(maxsize=256)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    """A doublestar glob as a regex over '/'-separated relative paths."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                out.append(re.escape("["))
                i += 1
            else:
                out.append(fnmatch.translate(pattern[i : end + 1])[4:-3])
                i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))
