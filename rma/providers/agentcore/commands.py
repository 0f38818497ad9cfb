"""AgentCore runtime commands: the pure half — command-stream assembly and storage scripts.

What this module is: how the ``InvokeAgentRuntimeCommand`` response stream folds into a
``CommandResult`` (wire §7, B-85…B-88: ``chunk`` events carrying ``contentStart``,
``contentDelta`` with stdout/stderr, ``contentStop`` with the exit code and a status that
the reference ignored and we surface — ``TIMED_OUT`` included), and the shell commands that
implement a session-storage artifact store on top of it (wire §7.1: ``python3 -c`` scripts
over the harness's ``sessionStorage`` mount, names validated, bytes as base64).
What it is not: no HTTP, no signing, no frame decoding; ``rma_shell`` runs the commands.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping, Sequence
from typing import Final

import attrs
from returns.result import Failure, Result, Success

from rma.errors import EarlyTermination, InvalidOpts, MalformedResponse, ProviderError, SessionError
from rma.vocabulary import JSON

COMMAND_MAX_CHARS: Final = 65_536
PUT_CHUNK_CHARS: Final = 48_000
"""Base64 characters per put command: well under the command limit with the script around it."""
NOT_FOUND_EXIT: Final = 3
PART_SUFFIX: Final = ".rma_b64_part"
ARTIFACT_NAME: Final = re.compile(r"[A-Za-z0-9._-]+")
DEFAULT_MOUNT_PATH: Final = "/mnt/data"


@attrs.frozen
class CommandResult:
    """A finished command: a non-zero exit is a result, not an error (B-86)."""

    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    status: str | None = None
    """``COMPLETED`` or ``TIMED_OUT`` (wire §7); None when the stream never said."""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.status in (None, "COMPLETED")

    @property
    def timed_out(self) -> bool:
        return self.status == "TIMED_OUT"


@attrs.define
class CommandAssembler:
    """Folds the command stream's events in order; ``finish`` says whether it completed."""

    stdout: list[str] = attrs.field(factory=list)
    stderr: list[str] = attrs.field(factory=list)
    exit_code: int | None = None
    status: str | None = None
    stopped: bool = False

    def feed(self, event: JSON) -> tuple[tuple[str, str], ...]:
        """Fold one decoded event (``{"chunk": {...}}`` or bare, B-86); returns the
        non-empty output pieces it carried as ``(stream, text)`` for ``on_output`` (B-87)."""
        body = event.get("chunk", event) if isinstance(event, Mapping) else None
        if not isinstance(body, Mapping):
            return ()
        out: list[tuple[str, str]] = []
        delta = body.get("contentDelta")
        if isinstance(delta, Mapping):
            for stream, sink in (("stdout", self.stdout), ("stderr", self.stderr)):
                piece = delta.get(stream)
                if isinstance(piece, str) and piece:
                    sink.append(piece)
                    out.append((stream, piece))
        stop = body.get("contentStop")
        if isinstance(stop, Mapping):
            self.stopped = True
            code = stop.get("exitCode")
            if isinstance(code, int) and not isinstance(code, bool):
                self.exit_code = code
            status = stop.get("status")
            if isinstance(status, str):
                self.status = status
        return tuple(out)

    def finish(self) -> Result[CommandResult, SessionError]:
        if not self.stopped:
            return Failure(
                EarlyTermination(detail="the command stream ended without a contentStop", attempts=1)
            )
        return Success(CommandResult("".join(self.stdout), "".join(self.stderr), self.exit_code, self.status))


def command_body(command: str, timeout_s: int | None) -> Result[bytes, InvalidOpts]:
    """B-85: ``{command, timeout?}``; the command is 1–65,536 characters, timeout 1–3,600 s."""
    if not isinstance(command, str) or not 1 <= len(command) <= COMMAND_MAX_CHARS:
        return Failure(InvalidOpts(option="command", detail="a command is 1–65,536 characters"))
    body: dict[str, JSON] = {"command": command}
    if timeout_s is not None:
        if not isinstance(timeout_s, int) or isinstance(timeout_s, bool) or not 1 <= timeout_s <= 3600:
            return Failure(InvalidOpts(option="timeout", detail="a command timeout is 1–3,600 s"))
        body["timeout"] = timeout_s
    return Success(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode())


# --- session-storage artifacts (wire §7.1) ----------------------------------------------------


def check_base_path(path: object) -> Result[str, InvalidOpts]:
    """The storage mount path: absolute, no single quote (it is single-quoted into commands);
    a trailing '/' is trimmed."""
    if not isinstance(path, str) or not path.startswith("/") or "'" in path or "\0" in path:
        return Failure(
            InvalidOpts(option="base_path", detail=f"an absolute path without quotes is required: {path!r}")
        )
    trimmed = path.rstrip("/") or "/"
    return Success(trimmed)


def check_name(name: object) -> Result[str, InvalidOpts]:
    """Artifact names: ``[A-Za-z0-9._-]+``, not ``.`` or ``..``, not a put's part file."""
    if (
        not isinstance(name, str)
        or ARTIFACT_NAME.fullmatch(name) is None
        or name in (".", "..")
        or name.endswith(PART_SUFFIX)
        or len(name) > 255
    ):
        return Failure(
            InvalidOpts(
                option="name",
                detail=f"an artifact name is 1–255 of [A-Za-z0-9._-], not '.' or '..': {name!r}",
            )
        )
    return Success(name)


def shell_quote(value: str) -> str:
    """POSIX single quotes: ``'`` becomes ``'\\''``."""
    return "'" + value.replace("'", "'\\''") + "'"


def python_command(code: str, *args: str) -> str:
    return " ".join(["python3", "-c", shell_quote(code), *(shell_quote(a) for a in args)])


_LIST = """import json, os, sys
base = sys.argv[1]
out = []
if os.path.isdir(base):
    for name in sorted(os.listdir(base)):
        path = os.path.join(base, name)
        if os.path.isfile(path) and not name.endswith(".rma_b64_part"):
            st = os.stat(path)
            out.append({"name": name, "size": st.st_size, "modified": st.st_mtime})
print(json.dumps(out))
"""

_FETCH = """import base64, os, sys
path = sys.argv[1]
if not os.path.isfile(path):
    sys.exit(3)
with open(path, "rb") as f:
    sys.stdout.write(base64.b64encode(f.read()).decode())
"""

_DELETE = """import os, sys
path = sys.argv[1]
if not os.path.isfile(path):
    sys.exit(3)
os.remove(path)
"""

_PUT_PART = """import os, sys
path, mode, data = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
with open(path + ".rma_b64_part", mode) as f:
    f.write(data)
"""

_PUT_FINISH = """import base64, os, sys
path = sys.argv[1]
part = path + ".rma_b64_part"
with open(part) as f:
    data = base64.b64decode(f.read())
tmp = path + ".rma_tmp"
with open(tmp, "wb") as f:
    f.write(data)
    f.flush()
    os.fsync(f.fileno())
os.replace(tmp, path)
os.remove(part)
"""


def _join(base: str, name: str) -> str:
    return base + name if base.endswith("/") else f"{base}/{name}"


def list_command(base: str) -> str:
    return python_command(_LIST, base)


def fetch_command(base: str, name: str) -> str:
    return python_command(_FETCH, _join(base, name))


def delete_command(base: str, name: str) -> str:
    return python_command(_DELETE, _join(base, name))


def put_commands(base: str, name: str, data: bytes) -> tuple[str, ...]:
    """The chunked upload: each 48,000-character base64 piece appended to the part file in
    its own command (the first truncates it), then a finish that decodes it into place
    atomically. Concurrent puts of one name race on the part file: serialize them."""
    encoded = base64.b64encode(data).decode()
    path = _join(base, name)
    pieces = [encoded[i : i + PUT_CHUNK_CHARS] for i in range(0, len(encoded), PUT_CHUNK_CHARS)] or [""]
    parts = tuple(python_command(_PUT_PART, path, "w" if i == 0 else "a", p) for i, p in enumerate(pieces))
    return (*parts, python_command(_PUT_FINISH, path))


@attrs.frozen
class StoredArtifact:
    name: str
    size: int
    modified: float | None = None


def _failed(verb: str, result: CommandResult) -> ProviderError:
    return ProviderError(
        detail=f"artifact {verb} failed (exit {result.exit_code}, status {result.status}): "
        f"{result.stderr.strip()[-500:]}",
        error_type="command_failed",
        payload={"exit_code": result.exit_code, "status": result.status, "stderr": result.stderr[-2000:]},
    )


def parse_list(result: CommandResult) -> Result[tuple[StoredArtifact, ...], SessionError]:
    if not result.ok:
        return Failure(_failed("list", result))
    try:
        rows = json.loads(result.stdout)
    except ValueError:
        return Failure(
            MalformedResponse(detail="artifact list output is not JSON", response=result.stdout[:500])
        )
    out: list[StoredArtifact] = []
    if not isinstance(rows, list):
        return Failure(MalformedResponse(detail="artifact list output is not a list", response=rows))
    for row in rows:
        if isinstance(row, Mapping) and isinstance(row.get("name"), str) and isinstance(row.get("size"), int):
            modified = row.get("modified")
            out.append(
                StoredArtifact(
                    str(row["name"]), int(row["size"]), float(modified) if modified is not None else None
                )
            )
    return Success(tuple(out))


@attrs.frozen
class NotFound:
    """A fetch or delete of a name that is not a file (exit 3)."""

    name: str


def parse_fetch(name: str, result: CommandResult) -> Result[bytes | NotFound, SessionError]:
    if result.exit_code == NOT_FOUND_EXIT and result.status in (None, "COMPLETED"):
        return Success(NotFound(name))
    if not result.ok:
        return Failure(_failed("fetch", result))
    try:
        return Success(base64.b64decode("".join(result.stdout.split()), validate=True))
    except (binascii.Error, ValueError):
        return Failure(
            MalformedResponse(detail="artifact fetch output is not base64", response=result.stdout[:200])
        )


def parse_delete(name: str, result: CommandResult) -> Result[NotFound | None, SessionError]:
    if result.exit_code == NOT_FOUND_EXIT and result.status in (None, "COMPLETED"):
        return Success(NotFound(name))
    if not result.ok:
        return Failure(_failed("delete", result))
    return Success(None)


def parse_put(result: CommandResult) -> Result[None, SessionError]:
    return Success(None) if result.ok else Failure(_failed("put", result))


def join_outputs(pieces: Sequence[tuple[str, str]]) -> str:
    return "".join(text for _, text in pieces)
