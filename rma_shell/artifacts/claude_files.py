"""Claude Files artifacts: one Claude Managed Agents session's files as an ``ArtifactStore``.

The two directions are different things on this provider (wire §13):

- ``list`` / ``fetch`` / ``delete`` see the session's **outputs**: files the agent wrote under
  ``/mnt/session/outputs/``, which the API scopes to the session (``GET /v1/files?scope_id=``,
  every page). Re-runs pile up files of one name, so ``fetch`` and ``delete`` act on the newest
  ``created_at`` among exact-name matches (A-2, A-5); none is ``NotFound``.
- ``put`` is an **input**: it uploads the bytes (``POST /v1/files``, multipart ``file``) and
  attaches the upload to the session as a file resource (``POST /v1/sessions/{id}/resources``)
  at ``<mount_dir>/<name>`` — ``/mnt/session/uploads/<name>`` by default, always sent
  explicitly (wire §15 row 25). The upload's part carries the content type the standard
  library's ``mimetypes`` infers from the name (``prices.csv`` → ``text/csv``; a compressed
  ``data.csv.gz`` → ``application/gzip``; unknown → ``application/octet-stream``); an
  explicit ``mime_type=`` wins. An upload is not a session output: it does not appear in
  ``list`` and the API refuses to download it (400 ``file_not_downloadable``).

Names are checked before any request exactly as on AgentCore (``[A-Za-z0-9._-]+``, not ``.``
or ``..``), so a name can never walk out of the mount directory (A-6 Better). When the attach
fails the upload is deleted again (best effort; the attach's error is what ``put`` returns),
so a failed put leaves no orphan file (A-6 Better). An upload answer without a file id is a
``MalformedResponse``, not a crash.

What it is not: not a general Files API client (that is ``CMAClient``), and not a way to read
your own uploads back.
"""

from __future__ import annotations

import logging
import mimetypes
import re
from collections.abc import Mapping
from typing import Final, Protocol

import anyio
from returns.result import Failure, Result, Success

from rma.errors import InvalidOpts, MalformedResponse, NotFound, SessionError
from rma.vocabulary import JSON
from rma_shell.artifacts.base import Artifact, check_name, newest, parse_timestamp
from rma_shell.logging import log_fields

log = logging.getLogger("rma.artifacts")

DEFAULT_MOUNT_DIR: Final = "/mnt/session/uploads"
"""Where ``put`` mounts uploads: the API's own upload directory, keyed by the caller's name
instead of the file id the API would use (the id is unknown to whoever writes the prompt)."""
_CLEANUP_S: Final = 30.0
"""How long a cancelled put may still spend deleting its upload."""


class FilesClient(Protocol):
    """The part of ``CMAClient`` this store uses (a test may hand in its own)."""

    async def list_files(self, *, scope_id: str | None = None) -> Result[list[JSON], SessionError]: ...

    async def download_file(self, file_id: str) -> Result[bytes, SessionError]: ...

    async def delete_file(self, file_id: str) -> Result[JSON, SessionError]: ...

    async def upload_file(
        self, filename: str, content: bytes, mime_type: str = "application/octet-stream"
    ) -> Result[JSON, SessionError]: ...

    async def add_session_resource(
        self, session_id: str, body: Mapping[str, JSON]
    ) -> Result[JSON, SessionError]: ...


_ENCODED: Final = {
    "gzip": "application/gzip",
    "bzip2": "application/x-bzip2",
    "xz": "application/x-xz",
    "compress": "application/x-compress",
    "br": "application/x-brotli",
}
"""The bytes of ``x.csv.gz`` are gzip, not CSV: a compressed name gets its compression's type."""
_MIME = re.compile(r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*(;[ \t]*[\x20-\x7e]*)?")
OCTET_STREAM: Final = "application/octet-stream"


def content_type(name: str, explicit: object = None) -> Result[str, InvalidOpts]:
    """The upload part's content type: ``explicit`` when given (``type/subtype`` with optional
    parameters, no control characters), else inferred from ``name`` by ``mimetypes``."""
    if explicit is not None:
        if not isinstance(explicit, str) or not _MIME.fullmatch(explicit):
            detail = f"a media type such as 'text/csv', got {explicit!r}"
            return Failure(InvalidOpts(option="mime_type", detail=detail))
        return Success(explicit)
    guessed, encoding = mimetypes.guess_type(name, strict=False)
    if encoding is not None:
        return Success(_ENCODED.get(encoding, OCTET_STREAM))
    return Success(guessed or OCTET_STREAM)


def check_mount_dir(path: object) -> Result[str, InvalidOpts]:
    """An absolute directory without ``.``/``..`` segments or NUL; a trailing ``/`` is trimmed."""
    if (
        not isinstance(path, str)
        or not path.startswith("/")
        or "\0" in path
        or any(part in (".", "..") for part in path.split("/"))
    ):
        return Failure(
            InvalidOpts(option="mount_dir", detail=f"an absolute path without '.' or '..' segments: {path!r}")
        )
    return Success(path.rstrip("/") or "/")


def file_artifact(meta: JSON) -> Artifact | None:
    """A file's metadata as an ``Artifact`` (A-4): ``filename``, ``size_bytes``, ``id``,
    ``created_at``; None for an entry without a string ``id`` and ``filename``."""
    if not isinstance(meta, dict):
        return None
    file_id, filename, size = meta.get("id"), meta.get("filename"), meta.get("size_bytes")
    if not isinstance(file_id, str) or not isinstance(filename, str):
        return None
    return Artifact(
        name=filename,
        size=size if isinstance(size, int) and not isinstance(size, bool) else None,
        ref=file_id,
        created_at=parse_timestamp(meta.get("created_at")),
        raw=meta,
    )


class ClaudeFiles:
    """The artifact verbs over one Claude Managed Agents session (an ``ArtifactStore``)."""

    def __init__(self, client: FilesClient, session_id: str, *, mount_dir: str = DEFAULT_MOUNT_DIR) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise ValueError(f"a session id is required, got {session_id!r}")
        checked = check_mount_dir(mount_dir)
        if isinstance(checked, Failure):
            raise ValueError(checked.failure().message)
        self.client = client
        self.session_id = session_id
        self.mount_dir = checked.unwrap()

    def __repr__(self) -> str:
        return f"ClaudeFiles(session_id={self.session_id!r}, mount_dir={self.mount_dir!r})"

    def mount_path(self, name: str) -> str:
        """Where ``put(name, …)`` mounts the file in the session's sandbox."""
        return f"{self.mount_dir.rstrip('/')}/{name}"

    async def list(self) -> Result[tuple[Artifact, ...], SessionError]:
        """Every file scoped to the session, over every page, duplicates included (A-4)."""
        listed = await self.client.list_files(scope_id=self.session_id)
        if isinstance(listed, Failure):
            return Failure(listed.failure())
        out: list[Artifact] = []
        for meta in listed.unwrap():
            artifact = file_artifact(meta)
            if artifact is None:
                return Failure(MalformedResponse(detail="a listed file has no id or filename", response=meta))
            out.append(artifact)
        return Success(tuple(out))

    async def _resolve(self, name: str) -> Result[Artifact, SessionError]:
        checked = check_name(name)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        listed = await self.list()
        if isinstance(listed, Failure):
            return Failure(listed.failure())
        found = newest(listed.unwrap(), name)
        if found is None or found.ref is None:
            return Failure(NotFound(resource="artifact", name=name))
        return Success(found)

    async def fetch(self, name: str) -> Result[bytes, SessionError]:
        """The bytes of the newest session file named exactly ``name`` (A-5)."""
        found = await self._resolve(name)
        if isinstance(found, Failure):
            return Failure(found.failure())
        ref = found.unwrap().ref
        assert ref is not None
        return await self.client.download_file(ref)

    async def delete(self, name: str) -> Result[None, SessionError]:
        """Delete the newest session file named exactly ``name`` (A-5); older duplicates stay."""
        found = await self._resolve(name)
        if isinstance(found, Failure):
            return Failure(found.failure())
        ref = found.unwrap().ref
        assert ref is not None
        deleted = await self.client.delete_file(ref)
        if isinstance(deleted, Failure):
            return Failure(deleted.failure())
        return Success(None)

    async def put(
        self,
        name: str,
        data: bytes,
        *,
        mount_path: str | None = None,
        mime_type: str | None = None,
    ) -> Result[Artifact, SessionError]:
        """Upload ``data`` as ``name`` and mount it in the session (A-6).

        The upload's content type is ``mime_type`` when given, else what ``mimetypes``
        infers from ``name`` (``application/octet-stream`` when it knows nothing).
        ``mount_path`` defaults to ``mount_path(name)``; one given must be absolute with no
        ``.``/``..`` segments. The artifact returned has ``ref`` = the file id and ``raw`` =
        ``{"file": <upload metadata>, "resource": <the session resource>}``. If the attach
        fails, the upload is deleted and the attach's error returned."""
        checked = check_name(name)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        if not isinstance(data, bytes | bytearray | memoryview):
            return Failure(InvalidOpts(option="data", detail=f"bytes expected, got {type(data).__name__}"))
        part_type = content_type(name, mime_type)
        if isinstance(part_type, Failure):
            return Failure(part_type.failure())
        target = self.mount_path(name)
        if mount_path is not None:
            valid = check_mount_dir(mount_path)
            if isinstance(valid, Failure) or valid.unwrap() == "/":
                detail = f"an absolute file path without '.' or '..' segments: {mount_path!r}"
                return Failure(InvalidOpts(option="mount_path", detail=detail))
            target = valid.unwrap()
        uploaded = await self.client.upload_file(name, bytes(data), part_type.unwrap())
        if isinstance(uploaded, Failure):
            return Failure(uploaded.failure())
        meta = uploaded.unwrap()
        file_id = meta.get("id") if isinstance(meta, dict) else None
        if not isinstance(file_id, str) or not file_id:
            return Failure(MalformedResponse(detail="the upload answer carries no file id", response=meta))
        body: dict[str, JSON] = {"type": "file", "file_id": file_id, "mount_path": target}
        try:
            attached = await self.client.add_session_resource(self.session_id, body)
        except BaseException:  # cancelled (or a client bug) mid-attach: do not leave the upload behind
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CLEANUP_S):
                await self._discard(file_id)
            raise
        if isinstance(attached, Failure):
            await self._discard(file_id)
            return Failure(attached.failure())
        artifact = file_artifact(meta) or Artifact(name=name, size=len(data), ref=file_id)
        raw: dict[str, JSON] = {"file": meta, "resource": attached.unwrap()}
        return Success(
            Artifact(name=name, size=artifact.size, ref=file_id, created_at=artifact.created_at, raw=raw)
        )

    async def _discard(self, file_id: str) -> None:
        """Best effort: an orphan we cannot delete is logged, never reported over the real error."""
        gone = await self.client.delete_file(file_id)
        if isinstance(gone, Failure):
            log.warning(
                "could not delete orphaned upload %s after a failed attach: %s",
                file_id,
                gone.failure().kind,
                extra=log_fields(session_id=self.session_id, file_id=file_id),
            )


__all__ = [
    "DEFAULT_MOUNT_DIR",
    "OCTET_STREAM",
    "ClaudeFiles",
    "FilesClient",
    "check_mount_dir",
    "content_type",
    "file_artifact",
]
