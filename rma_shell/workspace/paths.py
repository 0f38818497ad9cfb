"""Files confined to a workspace: every path is walked one component at a time from a held
directory descriptor (``openat`` style), never by name from ``/``.

What this is: the file access under the workspace toolset's ``read``, ``write``, ``edit``,
``glob`` and ``grep``. A relative path (or an absolute one inside the workspace, spelled with
the workspace's own real path) is split into components; ``..`` is refused outright (no
lexical collapsing: ``a/../b`` is refused, not simplified), and each component is opened with
``O_NOFOLLOW`` relative to the descriptor of the one before (``os.open(..., dir_fd=...)``).
A symbolic link anywhere on the path is refused, whether it points in or out, and so is a
hard-linked file (``st_nlink > 1``: its other name may live outside). Because nothing is
resolved by name after the check, a link swapped in between a check and the use cannot
redirect the use: the use *is* the walk. Writes go to a temporary file in the same directory
descriptor and are renamed over the leaf, which replaces a link at the leaf rather than
following it.

What this is not: a defence against a process that already runs with the worker's rights
outside the sandbox (bash inside bubblewrap cannot reach outside the workspace; an
unsandboxed bash can do anything the worker can), nor a quota: sizes are capped per call.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import uuid
from collections.abc import Iterator
from pathlib import PurePosixPath

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK

MAX_FILE_BYTES = 256 * 1024
"""A whole-file ``read`` or an ``edit`` loads at most this much (the SDK's default cap)."""


class PathRefused(ValueError):
    """A path the file tools will not touch; the message is what the model reads."""


def _reason(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "is a symbolic link (links are not followed)"
    if exc.errno == errno.ENOTDIR:
        return "a component is not a directory (or is a symbolic link)"
    if exc.errno == errno.ENOENT:
        return "no such file or directory"
    if exc.errno == errno.EISDIR:
        return "is a directory"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno == errno.EEXIST:
        return "already exists"
    return (exc.strerror or "i/o error").lower()


class Root:
    """An open workspace directory. ``fd`` stays valid while the object lives, so a rename
    or swap of the directory's own path afterwards does not move where the tools act."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        real = os.path.realpath(os.fspath(path))
        self.fd = os.open(real, _DIR_FLAGS)
        self.path = real

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def parts(self, given: str, *, op: str) -> tuple[str, ...]:
        """The components of ``given`` below the workspace root; PathRefused when there are none
        usable (empty, ``..`` anywhere, NUL, absolute outside the workspace)."""
        if not isinstance(given, str) or not given:
            raise PathRefused(f"{op}: a path is required")
        if "\x00" in given:
            raise PathRefused(f"{op}: {given!r}: contains a NUL byte")
        p = PurePosixPath(given)
        if p.is_absolute():
            root = PurePosixPath(self.path)
            if p != root and root not in p.parents:
                raise PathRefused(
                    f"{op}: {given}: is outside the workspace (absolute paths must be inside it)"
                )
            p = p.relative_to(root)
        if ".." in p.parts:
            raise PathRefused(f"{op}: {given}: '..' is not permitted")
        return tuple(part for part in p.parts if part not in ("", "."))

    @contextlib.contextmanager
    def directory(
        self, parts: tuple[str, ...], *, op: str, given: str, create: bool = False
    ) -> Iterator[int]:
        """A descriptor of the directory ``parts`` (closed on exit), walked with O_NOFOLLOW."""
        fd = os.dup(self.fd)
        try:
            for part in parts:
                try:
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o777, dir_fd=fd)
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = nxt
            yield fd
        except OSError as exc:
            raise PathRefused(f"{op}: {given}: {_reason(exc)}") from exc
        finally:
            os.close(fd)

    def read_bytes(self, given: str, *, op: str, limit: int | None = MAX_FILE_BYTES) -> bytes:
        """A regular file's bytes (at most ``limit``; PathRefused past it)."""
        parts = self.parts(given, op=op)
        if not parts:
            raise PathRefused(f"{op}: {given}: is a directory")
        with self.directory(parts[:-1], op=op, given=given) as dfd:
            try:
                fd = os.open(parts[-1], _READ_FLAGS, dir_fd=dfd)
            except OSError as exc:
                raise PathRefused(f"{op}: {given}: {_reason(exc)}") from exc
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                _check_regular(st, op=op, given=given)
                if limit is not None and st.st_size > limit:
                    raise PathRefused(
                        f"{op}: {given} is {st.st_size} bytes, exceeds the {limit}-byte limit"
                        + (". Use view_range to read specific lines." if op == "read" else "")
                    )
                data = f.read(limit + 1 if limit is not None else -1)
                if limit is not None and len(data) > limit:
                    raise PathRefused(f"{op}: {given} grew past the {limit}-byte limit while being read")
                return data

    def write_bytes(self, given: str, data: bytes, *, op: str, must_exist: bool = False) -> None:
        """Replace (or create) a regular file atomically: a temporary file in the same directory
        descriptor, renamed over the leaf. Parent directories are created as needed."""
        parts = self.parts(given, op=op)
        if not parts:
            raise PathRefused(f"{op}: {given}: is a directory")
        with self.directory(parts[:-1], op=op, given=given, create=not must_exist) as dfd:
            leaf = parts[-1]
            mode = 0o644
            try:
                st = os.stat(leaf, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                if must_exist:
                    raise PathRefused(f"{op}: {given}: no such file or directory") from None
            else:
                _check_regular(st, op=op, given=given)
                mode = stat.S_IMODE(st.st_mode)
            tmp = f".{leaf}.rma-{uuid.uuid4().hex[:12]}.tmp"
            fd = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dfd
            )
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.rename(tmp, leaf, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)
                raise

    def entries(self, given: str | None, *, op: str) -> Iterator[tuple[str, os.stat_result]]:
        """Every regular file under ``given`` (a directory or one file; None: the workspace),
        as (relative path, stat); symbolic links and hard-linked files are skipped, never
        followed; ``.git`` and ``node_modules`` are not descended into."""
        parts = self.parts(given, op=op) if given else ()
        prefix = "/".join(parts)
        if parts:
            with self.directory(parts[:-1], op=op, given=given or ".") as dfd:
                try:
                    st = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
                except OSError as exc:
                    raise PathRefused(f"{op}: {given}: {_reason(exc)}") from exc
                if stat.S_ISLNK(st.st_mode):
                    raise PathRefused(f"{op}: {given}: is a symbolic link (links are not followed)")
                if stat.S_ISREG(st.st_mode):
                    if st.st_nlink <= 1:
                        yield prefix, st
                    return
        with self.directory(parts, op=op, given=given or ".") as top:
            yield from _walk(top, prefix)

    def open_for_scan(self, rel: str) -> int | None:
        """A read descriptor of a file ``entries`` listed, or None when it moved meanwhile."""
        parts = tuple(rel.split("/"))
        try:
            with self.directory(parts[:-1], op="grep", given=rel) as dfd:
                fd = os.open(parts[-1], _READ_FLAGS, dir_fd=dfd)
        except (OSError, PathRefused):
            return None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            os.close(fd)
            return None
        return fd


SKIPPED_DIRS = frozenset({".git", "node_modules"})
WALK_MAX_ENTRIES = 50_000


def _walk(top: int, prefix: str) -> Iterator[tuple[str, os.stat_result]]:
    stack: list[tuple[int, str]] = [(os.dup(top), prefix)]
    seen = 0
    try:
        while stack:
            fd, rel = stack.pop()
            try:
                with os.scandir(fd) as it:
                    listing = list(it)
                for entry in sorted(listing, key=lambda e: e.name):
                    seen += 1
                    if seen > WALK_MAX_ENTRIES:
                        return
                    name = f"{rel}/{entry.name}" if rel else entry.name
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISDIR(st.st_mode) and entry.name not in SKIPPED_DIRS:
                        try:
                            stack.append((os.open(entry.name, _DIR_FLAGS, dir_fd=fd), name))
                        except OSError:
                            continue
                    elif stat.S_ISREG(st.st_mode) and st.st_nlink <= 1:
                        yield name, st
            finally:
                os.close(fd)
    finally:
        for fd, _ in stack:
            os.close(fd)


def _check_regular(st: os.stat_result, *, op: str, given: str) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise PathRefused(f"{op}: {given}: is a symbolic link (links are not followed)")
    if stat.S_ISDIR(st.st_mode):
        raise PathRefused(f"{op}: {given}: is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise PathRefused(f"{op}: {given}: not a regular file")
    if st.st_nlink > 1:
        raise PathRefused(
            f"{op}: {given}: has other hard links (its other names may be outside the workspace)"
        )
