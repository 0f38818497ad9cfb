"""Rich tool results on Claude Managed Agents: ``rma.content`` parts as content blocks.

A ``user.custom_tool_result``'s ``content`` is a list of text, image and document blocks (the
SDK's ``BetaManagedAgentsUserCustomToolResultEventParams``): an image is a ``base64`` or
``file`` source, a document a ``base64`` PDF, a ``text`` plain-text source or a ``file``
source, with the document's ``title`` and ``context``. Pure; not the event itself
(``rma.providers.claude.codec.custom_tool_result``).
"""

from __future__ import annotations

from typing import Final

from rma.content import DOCUMENT_MEDIA_TYPES, ContentLimits, Document, Image, Part
from rma.vocabulary import JSON

MAX_IMAGE_BYTES: Final = 5 * 1024 * 1024
"""The Messages API's limit for one image (5 MB); the session's model reads the same blocks."""

MAX_DOCUMENT_BYTES: Final = 32 * 1024 * 1024
"""The Messages API's request limit a PDF must fit in (32 MB)."""

LIMITS: Final = ContentLimits(
    "claude_managed_agents",
    kinds=frozenset({"image", "document"}),
    file_ids=True,
    document_media_types=DOCUMENT_MEDIA_TYPES,
    max_image_bytes=MAX_IMAGE_BYTES,
    max_document_bytes=MAX_DOCUMENT_BYTES,
)


def content_blocks(parts: tuple[Part, ...]) -> list[JSON]:
    """The blocks of ``parts`` in order; empty text parts are dropped (the API refuses them)."""
    blocks: list[JSON] = []
    for part in parts:
        if isinstance(part, str):
            if part:
                blocks.append({"type": "text", "text": part})
        elif isinstance(part, Image):
            blocks.append({"type": "image", "source": _image_source(part)})
        else:
            blocks.append(_document_block(part))
    return blocks


def _image_source(image: Image) -> dict[str, JSON]:
    if image.file_id is not None:
        return {"type": "file", "file_id": image.file_id}
    return {"type": "base64", "media_type": image.media_type, "data": image.data}


def _document_block(document: Document) -> dict[str, JSON]:
    source: dict[str, JSON]
    if document.file_id is not None:
        source = {"type": "file", "file_id": document.file_id}
    elif document.media_type == "text/plain":
        source = {"type": "text", "media_type": "text/plain", "data": document.text}
    else:
        source = {"type": "base64", "media_type": document.media_type, "data": document.data}
    block: dict[str, JSON] = {"type": "document", "source": source}
    if document.title is not None:
        block["title"] = document.title
    if document.context is not None:
        block["context"] = document.context
    return block
