"""Rich tool-result content: the image and document values a tool may return beside its text.

A tool's result is text by default. A rich result is an ordered tuple of parts — ``str`` for
text, ``Image``, ``Document`` — carried in ``ToolResult.content``; each host's codec renders
the parts to its own shape (a Claude ``user.custom_tool_result``'s content blocks, a following
user message's ``image_url`` parts on an OpenAI-compatible server). ``ContentLimits`` says
what one host takes in a tool result — which kinds, file ids or not, how many bytes per
item — and ``fit_parts`` checks a result against it: an item over the host's byte limit is
replaced by a note the model reads, a kind the host cannot take at all is refused (the
session fails with ``ToolContentUnsupported``, naming the kind and the host).

Binary data is held as base64 text — the form every host's wire takes — so the values are
JSON through ``rma.codec_json`` and journal and replay like any result. Pure: building from a
path (a read) is the shell's (``rma_shell.tools.image_from_path``). Not a renderer: each
host's codec renders.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterable
from typing import Final

import attrs

IMAGE_MEDIA_TYPES: Final = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""The image types every host that takes images accepts (Claude, OpenAI-compatible servers)."""

DOCUMENT_MEDIA_TYPES: Final = frozenset({"application/pdf", "text/plain"})
"""The document types a Claude tool result accepts: a base64 PDF, or plain text."""

_MAGIC: Final = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
)


def sniff_media_type(data: bytes) -> str | None:
    """The media type ``data`` starts like (PNG, JPEG, GIF, WebP, PDF), or None."""
    for magic, media_type in _MAGIC:
        if data.startswith(magic):
            return media_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _base64_text(_inst: object, attribute: attrs.Attribute[str | None], value: object) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not value:
        raise ValueError(f"{attribute.name} must be non-empty base64 text, got {type(value).__name__}")
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"{attribute.name} is not valid base64 ({exc})") from exc


def _optional_id(_inst: object, attribute: attrs.Attribute[str | None], value: object) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ValueError(f"{attribute.name} must be a non-empty string or None, got {value!r}")


def _optional_text(_inst: object, attribute: attrs.Attribute[str | None], value: object) -> None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{attribute.name} must be a string or None, got {type(value).__name__}")


def _one_source(inst: Image | Document) -> None:
    if (inst.data is None) == (inst.file_id is None):
        raise ValueError(f"{type(inst).__name__} needs exactly one of data (base64) or file_id")


def _decoded_size(data: str) -> int:
    """The byte length base64 ``data`` decodes to, without decoding it."""
    return len(data) * 3 // 4 - data[-2:].count("=")


@attrs.frozen
class Image:
    """An image in a tool result: base64 ``data`` of ``media_type``, or a host ``file_id``.

    Build one with ``Image.from_bytes(raw)`` (the type is read from the bytes' signature when
    not given), ``Image.from_file_id("file_…")`` (Claude's Files API) or, in the shell,
    ``rma_shell.tools.image_from_path(path)``.
    """

    media_type: str | None = attrs.field(default=None)
    data: str | None = attrs.field(default=None, validator=_base64_text, repr=False)
    file_id: str | None = attrs.field(default=None, validator=_optional_id)

    def __attrs_post_init__(self) -> None:
        _one_source(self)
        if self.data is not None and self.media_type not in IMAGE_MEDIA_TYPES:
            accepted = ", ".join(sorted(IMAGE_MEDIA_TYPES))
            raise ValueError(f"Image.media_type must be one of {accepted}, got {self.media_type!r}")
        if self.file_id is not None and self.media_type is not None:
            raise ValueError("Image.media_type is the file's own with a file_id: leave it None")

    @classmethod
    def from_bytes(cls, data: bytes, media_type: str | None = None) -> Image:
        if not isinstance(data, bytes | bytearray) or not data:
            raise ValueError("Image.from_bytes needs non-empty bytes")
        kind = media_type or sniff_media_type(bytes(data))
        if kind is None:
            raise ValueError("Image.from_bytes: not a PNG, JPEG, GIF or WebP image; pass media_type=")
        return cls(kind, base64.b64encode(data).decode("ascii"))

    @classmethod
    def from_file_id(cls, file_id: str) -> Image:
        return cls(file_id=file_id)

    @property
    def size(self) -> int:
        """Bytes of the image (0 for a file id: the host holds it)."""
        return 0 if self.data is None else _decoded_size(self.data)

    @property
    def ref(self) -> str:
        """A short stable name for the model to refer to it by (``file_…`` or a content hash)."""
        if self.file_id is not None:
            return self.file_id
        return hashlib.sha1(str(self.data).encode("ascii"), usedforsecurity=False).hexdigest()[:8]


@attrs.frozen
class Document:
    """A document in a tool result: a PDF or plain text as base64 ``data``, or a host ``file_id``;
    ``title`` and ``context`` are passed to hosts that take them (Claude)."""

    media_type: str | None = attrs.field(default=None)
    data: str | None = attrs.field(default=None, validator=_base64_text, repr=False)
    file_id: str | None = attrs.field(default=None, validator=_optional_id)
    title: str | None = attrs.field(default=None, validator=_optional_text)
    context: str | None = attrs.field(default=None, validator=_optional_text)

    def __attrs_post_init__(self) -> None:
        _one_source(self)
        if self.data is not None and self.media_type not in DOCUMENT_MEDIA_TYPES:
            accepted = ", ".join(sorted(DOCUMENT_MEDIA_TYPES))
            raise ValueError(f"Document.media_type must be one of {accepted}, got {self.media_type!r}")
        if self.media_type == "text/plain" and self.data is not None:
            try:
                base64.b64decode(self.data).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError("Document.data of a text/plain document must be UTF-8 text") from exc
        if self.file_id is not None and self.media_type is not None:
            raise ValueError("Document.media_type is the file's own with a file_id: leave it None")

    @classmethod
    def from_bytes(
        cls,
        data: bytes,
        media_type: str | None = None,
        *,
        title: str | None = None,
        context: str | None = None,
    ) -> Document:
        if not isinstance(data, bytes | bytearray) or not data:
            raise ValueError("Document.from_bytes needs non-empty bytes")
        kind = media_type or sniff_media_type(bytes(data))
        if kind is None:
            raise ValueError("Document.from_bytes: not a PDF; pass media_type= ('text/plain' for text)")
        return cls(kind, base64.b64encode(data).decode("ascii"), title=title, context=context)

    @classmethod
    def from_text(cls, text: str, *, title: str | None = None, context: str | None = None) -> Document:
        if not isinstance(text, str) or not text:
            raise ValueError("Document.from_text needs non-empty text")
        return cls.from_bytes(text.encode("utf-8"), "text/plain", title=title, context=context)

    @classmethod
    def from_file_id(cls, file_id: str, *, title: str | None = None, context: str | None = None) -> Document:
        return cls(file_id=file_id, title=title, context=context)

    @property
    def size(self) -> int:
        return 0 if self.data is None else _decoded_size(self.data)

    @property
    def text(self) -> str | None:
        """The text of a ``text/plain`` document (None for a PDF or a file id)."""
        if self.media_type != "text/plain" or self.data is None:
            return None
        return base64.b64decode(self.data).decode("utf-8")


Media = Image | Document
Part = str | Image | Document
"""One part of a rich result: text, an image or a document."""


def content_parts(items: Iterable[object]) -> tuple[Part, ...]:
    """``items`` as a tuple of parts; anything but text, ``Image`` or ``Document`` is refused."""
    parts: list[Part] = []
    for i, part in enumerate(items):
        if not isinstance(part, str | Image | Document):
            raise TypeError(f"content[{i}] must be str, Image or Document, got {type(part).__name__}")
        parts.append(part)
    return tuple(parts)


def is_rich(value: object) -> bool:
    """Whether ``value`` (a tool's return) is media, or a list or tuple holding some."""
    if isinstance(value, Image | Document):
        return True
    return isinstance(value, list | tuple) and any(isinstance(v, Image | Document) for v in value)


def text_of(parts: Iterable[Part]) -> str:
    """The text parts joined — what a text-only reader (logs, telemetry, a journal's summary)
    sees of a rich result; media appear as ``[image …]`` / ``[document …]`` markers."""
    out: list[str] = []
    for part in parts:
        if isinstance(part, str):
            if part:
                out.append(part)
        else:
            out.append(describe(part))
    return "\n".join(out)


def describe(part: Media) -> str:
    kind = "image" if isinstance(part, Image) else "document"
    if part.file_id is not None:
        return f"[{kind} {part.file_id}]"
    return f"[{kind} {part.ref if isinstance(part, Image) else part.media_type}: {part.size} bytes]"


@attrs.frozen
class ContentLimits:
    """What one host takes in a tool result besides text.

    ``kinds``: ``"image"`` and/or ``"document"``; ``file_ids``: whether a host file id may stand
    for the bytes; ``document_media_types``: the document types taken; ``max_image_bytes`` /
    ``max_document_bytes``: the most one item may hold (an item over it is replaced by a note).
    """

    host: str
    kinds: frozenset[str] = frozenset()
    file_ids: bool = False
    document_media_types: frozenset[str] = frozenset()
    max_image_bytes: int = 0
    max_document_bytes: int = 0


TEXT_ONLY: Final = ContentLimits("this host")
"""A codec that declares no ``content_limits`` takes text only."""

OVERSIZE_NOTE: Final = (
    "[{kind} {name} not shown: {size} bytes, over this host's limit of {limit} for one {kind}]"
)


def fit_parts(limits: ContentLimits, parts: tuple[Part, ...]) -> tuple[Part, ...] | str:
    """``parts`` as ``limits``' host can take them, or the name of the first kind it cannot.

    An item over its byte limit becomes ``OVERSIZE_NOTE`` text (the model learns it was
    there); a kind, a file id or a document type the host does not take is returned as a
    string naming it, for the caller's typed error.
    """
    out: list[Part] = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
            continue
        kind = "image" if isinstance(part, Image) else "document"
        if kind not in limits.kinds:
            return kind
        if part.file_id is not None and not limits.file_ids:
            return f"{kind} given by file id"
        if (
            isinstance(part, Document)
            and part.data is not None
            and part.media_type not in limits.document_media_types
        ):
            return f"document of type {part.media_type}"
        limit = limits.max_image_bytes if kind == "image" else limits.max_document_bytes
        if part.size > limit:
            name = part.ref if isinstance(part, Image) else part.title or str(part.media_type)
            out.append(OVERSIZE_NOTE.format(kind=kind, name=name, size=part.size, limit=limit))
            continue
        out.append(part)
    return tuple(out)
