"""Rich tool results, for any mix of text, images and documents: what the Claude codec sends is
what the ``anthropic`` SDK's types and the emulator's validation accept; what Local sends is
what the ``openai`` SDK's message types accept; every result survives the journal's encoding;
fitting to a host is idempotent; the text cap applied twice is the smaller cap applied once."""

from __future__ import annotations

import base64
from typing import Any

import pydantic
from hypothesis import given, settings
from hypothesis import strategies as st

from properties._world import scaled
from rma.codec_json import dumps, loads
from rma.content import Document, Image, Part, fit_parts
from rma.providers.claude.codec import CODEC as CLAUDE
from rma.providers.claude.content import LIMITS as CLAUDE_LIMITS
from rma.providers.local.content import LIMITS as LOCAL_LIMITS
from rma.providers.local.content import images_message, tool_text_and_images
from rma.vocabulary import ToolResult, ToolUse
from rma_shell.handler import _shown, truncate_parts
from rma_shell.testing.claude.wire import _result_content

PNG = b"\x89PNG\r\n\x1a\n"
file_ids = st.text("abcdefXYZ019_", min_size=1, max_size=12).map(lambda s: "file_" + s)
images = st.one_of(
    st.binary(min_size=1, max_size=40).map(lambda b: Image.from_bytes(PNG + b)),
    st.tuples(
        st.sampled_from(["image/jpeg", "image/gif", "image/webp"]), st.binary(min_size=1, max_size=20)
    ).map(lambda t: Image.from_bytes(t[1], t[0])),
    file_ids.map(Image.from_file_id),
)
titles = st.one_of(st.none(), st.text(max_size=10))
documents = st.one_of(
    st.builds(lambda b, t: Document.from_bytes(b"%PDF-" + b, title=t), st.binary(max_size=30), titles),
    st.builds(
        lambda s, t, c: Document.from_text(s, title=t, context=c),
        st.text(min_size=1, max_size=30),
        titles,
        titles,
    ),
    st.builds(lambda f, t: Document.from_file_id(f, title=t), file_ids, titles),
)
parts = st.lists(st.one_of(st.text(max_size=30), images, documents), min_size=1, max_size=6).filter(
    lambda ps: any(not isinstance(p, str) for p in ps)
)


def claude_params() -> pydantic.TypeAdapter[Any]:
    from anthropic.types.beta.sessions.beta_managed_agents_user_custom_tool_result_event_params import (
        BetaManagedAgentsUserCustomToolResultEventParams as Params,
    )

    return pydantic.TypeAdapter(Params)


CLAUDE_EVENT = claude_params()


@given(parts, st.booleans())
@settings(max_examples=scaled(200))
def test_claude_sends_what_the_sdk_types_and_the_emulator_accept(items: list[Part], is_error: bool) -> None:
    result = ToolResult.of("t1", items, is_error)
    fitted = fit_parts(CLAUDE_LIMITS, result.content)
    assert isinstance(fitted, tuple)  # Claude takes every kind
    (event,) = CLAUDE.resume_input([ToolUse("sevt_1", "tool")], [result])
    CLAUDE_EVENT.validate_python(event, strict=True)
    _result_content(event, "events[0]")
    media = [p for p in items if not isinstance(p, str)]
    assert [b["type"] for b in event["content"] if b["type"] != "text"] == [
        "image" if isinstance(p, Image) else "document" for p in media
    ]


@given(
    st.lists(
        st.one_of(st.text(max_size=20), images.filter(lambda i: i.file_id is None)), min_size=1, max_size=5
    )
)
@settings(max_examples=scaled(200))
def test_local_sends_what_the_openai_message_types_accept(items: list[Part]) -> None:
    from openai.types.chat import ChatCompletionMessageParam

    assert isinstance(fit_parts(LOCAL_LIMITS, tuple(items)), tuple)
    text, shown = tool_text_and_images(items)
    messages: list[Any] = [{"role": "tool", "tool_call_id": "c1", "content": text}]
    if shown:
        messages.append(images_message(shown))
        urls = [p["image_url"]["url"] for p in messages[1]["content"] if p["type"] == "image_url"]
        assert [base64.b64decode(u.split(",", 1)[1]) for u in urls] == [
            base64.b64decode(str(p.data)) for p in items if isinstance(p, Image)
        ]
    pydantic.TypeAdapter(list[ChatCompletionMessageParam]).validate_python(messages)


@given(parts, st.booleans())
@settings(max_examples=scaled(200))
def test_a_rich_result_survives_the_journal_encoding(items: list[Part], is_error: bool) -> None:
    result = ToolResult.of("t1", items, is_error)
    assert loads(dumps(result)) == result


@given(parts, st.integers(0, 2_000_000))
@settings(max_examples=scaled(200))
def test_fitting_to_a_host_is_idempotent(items: list[Part], limit: int) -> None:
    from rma.content import ContentLimits

    limits = ContentLimits(
        "h",
        frozenset({"image", "document"}),
        True,
        frozenset({"application/pdf", "text/plain"}),
        limit,
        limit,
    )
    once = fit_parts(limits, tuple(items))
    assert isinstance(once, tuple)
    assert fit_parts(limits, once) == once


@given(
    st.lists(st.one_of(st.text(max_size=60), images), min_size=1, max_size=6),
    st.integers(0, 120),
    st.integers(0, 120),
)
@settings(max_examples=scaled(200))
def test_the_text_cap_twice_is_the_smaller_cap_once(items: list[Part], a: int, b: int) -> None:
    once = truncate_parts(tuple(items), min(a, b))
    assert truncate_parts(truncate_parts(tuple(items), a), b) == once
    assert sum(len(_shown(p)[0]) for p in once if isinstance(p, str)) <= min(a, b)
    assert [p for p in once if not isinstance(p, str)] == [p for p in items if not isinstance(p, str)]
