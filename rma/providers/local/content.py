"""Rich tool results on OpenAI-compatible servers: images after the tool messages.

A Chat Completions ``tool`` message takes text only; images are read from ``user`` content
(``image_url`` parts, here ``data:`` URLs). So a rich result's tool message holds its text
with ``See file <ref>.`` where each image stood, and one user message after the batch's tool
messages shows them: ``This is file <ref>:`` then the image — Pydantic AI's mapping of a
tool's multimodal return on the same APIs (``_agent_graph``: ``See file {identifier}`` /
``This is file {identifier}:``). Documents and host file ids have no portable form in Chat
Completions and are refused (``ContentLimits``). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from rma.content import ContentLimits, Image, Part
from rma.vocabulary import JSON

MAX_IMAGE_BYTES: Final = 20 * 1024 * 1024
"""OpenAI's limit for one image in a request (20 MB); servers of open models take less or
the same (vLLM and llama.cpp decode what fits their context)."""

LIMITS: Final = ContentLimits("local", kinds=frozenset({"image"}), max_image_bytes=MAX_IMAGE_BYTES)

SEE_FILE: Final = "See file {ref}."
THIS_IS_FILE: Final = "This is file {ref}:"


def tool_text_and_images(parts: Sequence[Part]) -> tuple[str, list[JSON]]:
    """The tool message's text (images referred to by name) and the images, as
    ``{"ref": …, "url": "data:<type>;base64,…"}``, for the user message that follows."""
    texts: list[str] = []
    images: list[JSON] = []
    for part in parts:
        if isinstance(part, str):
            if part:
                texts.append(part)
        elif isinstance(part, Image) and part.data is not None:
            texts.append(SEE_FILE.format(ref=part.ref))
            images.append({"ref": part.ref, "url": f"data:{part.media_type};base64,{part.data}"})
    return "\n".join(texts), images


def images_message(images: Sequence[JSON]) -> JSON:
    """The user message showing a batch's images, each introduced by name."""
    content: list[JSON] = []
    for image in images:
        content.append({"type": "text", "text": THIS_IS_FILE.format(ref=image["ref"])})
        content.append({"type": "image_url", "image_url": {"url": image["url"]}})
    return {"role": "user", "content": content}
