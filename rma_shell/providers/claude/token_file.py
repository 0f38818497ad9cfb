"""Reading the bearer-token file safely: regular files only, bounded, never blocking the loop.

``ANTHROPIC_BEARER_TOKEN_FILE`` (``bearer_token_file=``) is re-read before every request (K-16),
so whatever the path names is opened again and again. ``read_token_file`` opens it without
blocking (``O_NONBLOCK``: a FIFO nobody writes to does not hang the open), refuses anything
that is not a regular file after following symlinks (a FIFO, ``/dev/zero``, a socket, a
directory), refuses a file larger than ``MAX_TOKEN_FILE_BYTES`` (64 KiB) without reading more
than one byte past the limit, and warns — once per path and reason, on the
``rma.providers.claude_managed_agents`` logger, without the path (a secret, K-20) — when the
file is readable or writable by its group or others, or when the path is a symlink, as ssh
and the AWS CLI flag credential files.
It warns rather than refuses: Kubernetes mounts secrets and projected tokens as symlinks with
mode 0644 by default, and refusing them would break the most common deployment (see
docs/decisions.md). ``read_token_file_async`` runs it in a worker thread the caller's
cancellation abandons, so a slow filesystem cannot outlive the run's deadline.

What it is not: the content check (``rma.config.parse_bearer_file``) and the Authorization
header are the client's.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable
from typing import Final

import anyio

log = logging.getLogger("rma.providers.claude_managed_agents")

MAX_TOKEN_FILE_BYTES: Final = 64 * 1024
"""A token file is a small JSON object; anything larger is refused unread."""

_FLAGS: Final = (
    os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
)
"""Non-blocking: opening a FIFO nobody writes to returns at once (and is then refused)."""
_WARNED: set[tuple[str, str]] = set()
_KINDS: Final = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


class TokenFileError(OSError):
    """The token file cannot be used; ``reason`` says why (never its content)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _warn_once(path: str, reason: str) -> None:
    if (path, reason) in _WARNED:
        return
    _WARNED.add((path, reason))
    log.warning("bearer token file %s", reason)  # the path is a secret too (K-20): never logged


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_token_file(path: str) -> str:
    """The file's text, or ``TokenFileError`` / ``OSError`` / ``UnicodeDecodeError``."""
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            _warn_once(path, "is a symlink (it is followed; point the option at the file itself)")
    except OSError:
        pass  # the open below reports it
    fd = os.open(path, _FLAGS)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise TokenFileError(f"is not a regular file ({_kind(info.st_mode)})")
        if info.st_size > MAX_TOKEN_FILE_BYTES:
            raise TokenFileError(f"is larger than {MAX_TOKEN_FILE_BYTES} bytes")
        if os.name == "posix" and info.st_mode & 0o077:
            _warn_once(
                path,
                f"is accessible by group or others (mode {stat.S_IMODE(info.st_mode):04o}; chmod 600 it)",
            )
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_TOKEN_FILE_BYTES:  # the size may change between fstat and read
            chunk = os.read(fd, MAX_TOKEN_FILE_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_TOKEN_FILE_BYTES:
            raise TokenFileError(f"is larger than {MAX_TOKEN_FILE_BYTES} bytes")
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8")


async def read_token_file_async(path: str, read: Callable[[str], str] = read_token_file) -> str:
    """``read(path)`` in a worker thread; cancelling the caller abandons the thread at once."""
    return await anyio.to_thread.run_sync(read, path, abandon_on_cancel=True)
