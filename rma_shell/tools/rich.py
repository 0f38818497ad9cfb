"""Rich tool results from files: ``image_from_path`` and ``document_from_path``.

The values are the core's (``rma.content.Image`` / ``Document``, re-exported here): frozen,
validated, JSON through the journal. Building one from a path reads the file, which the pure
core does not do — so these builders live in the shell. A file larger than ``max_bytes`` is
refused here, before it is read whole, with an error naming the path.
"""

from __future__ import annotations

import mimetypes
from pathlib import Path
from typing import Final

from rma.content import Document, Image, sniff_media_type

__all__ = ["Document", "Image", "document_from_path", "image_from_path"]

DEFAULT_MAX_FILE_BYTES: Final = 32 * 1024 * 1024
"""The largest file the builders read (the largest item any host takes: a Claude PDF)."""


def _read(path: str | Path, max_bytes: int) -> tuple[Path, bytes]:
    where = Path(path)
    size = where.stat().st_size
    if size > max_bytes:
        raise ValueError(f"{where}: {size} bytes is over the {max_bytes}-byte limit for a tool result file")
    return where, where.read_bytes()


def _media_type(where: Path, data: bytes, given: str | None) -> str | None:
    if given is not None:
        return given
    return sniff_media_type(data) or mimetypes.guess_type(where.name)[0]


def image_from_path(
    path: str | Path, media_type: str | None = None, *, max_bytes: int = DEFAULT_MAX_FILE_BYTES
) -> Image:
    """The image in the file at ``path``; its type from its first bytes (or ``media_type``)."""
    where, data = _read(path, max_bytes)
    kind = _media_type(where, data, media_type)
    if kind is None:
        raise ValueError(f"{where}: not a PNG, JPEG, GIF or WebP image; pass media_type=")
    return Image.from_bytes(data, kind)


def document_from_path(
    path: str | Path,
    media_type: str | None = None,
    *,
    title: str | None = None,
    context: str | None = None,
    max_bytes: int = DEFAULT_MAX_FILE_BYTES,
) -> Document:
    """The PDF or text file at ``path`` as a document titled ``title`` (default: the file's name)."""
    where, data = _read(path, max_bytes)
    kind = _media_type(where, data, media_type)
    if kind is None:
        raise ValueError(f"{where}: cannot tell the document's type; pass media_type=")
    return Document.from_bytes(data, kind, title=title if title is not None else where.name, context=context)
