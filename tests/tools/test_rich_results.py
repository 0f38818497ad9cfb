"""Rich tool results (issue #25): a tool returns images and documents beside its text, and each
host gets them in its own shape — Claude's content blocks (checked by the SDK's types),
a following user message's ``image_url`` parts on an OpenAI-compatible server (checked by the
openai SDK's types and the emulator), a typed refusal where a host cannot take a kind — with
the text cap counting text only, items over a host's byte limit replaced by a note, and the
result journaled and replayed whole. Through ``Agent`` against each host's emulator."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pydantic
import pytest
from returns.result import Failure, Success

from rma.codec_json import from_jsonable, to_jsonable
from rma.content import OVERSIZE_NOTE, ContentLimits, Document, Image, fit_parts
from rma.errors import ToolContentUnsupported
from rma.journal import load
from rma.provider import codec_for
from rma.providers.claude.content import MAX_IMAGE_BYTES as CLAUDE_MAX_IMAGE
from rma.vocabulary import ToolResult
from rma_shell import Agent, SQLiteJournal
from rma_shell.providers.agentcore import BedrockAgentCore
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.providers.local import Local
from rma_shell.testing import CMAEmulator, OpenAIEmulator, cma
from rma_shell.testing import agentcore as ace
from rma_shell.testing.agentcore import AgentCoreEmulator
from rma_shell.tools import Toolbox, document_from_path, image_from_path, tool

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
PDF = b"%PDF-1.4\n%rma\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"
CHART = Image.from_bytes(PNG)


@tool
def chart() -> list[Any]:
    """Draw the chart."""
    return ["Revenue by month:", CHART, {"months": 3}]


@tool
def report() -> Any:
    """Fetch the report."""
    return ["The report:", Document.from_bytes(PDF, title="Q3"), Document.from_text("notes", title="n")]


@tool
def long_caption() -> list[Any]:
    """A long caption and an image."""
    return ["y" * 80, CHART, "z" * 80]


@tool
def huge() -> Image:
    """An image over Claude's per-image limit."""
    return Image.from_bytes(PNG + bytes(CLAUDE_MAX_IMAGE))


@tool
def partial_chart() -> Any:
    """A chart drawn in part."""
    return Failure(["x" * 150, CHART])


def claude_host(emu: CMAEmulator) -> ClaudeManagedAgents:
    return ClaudeManagedAgents(
        api_key="sk-ant-test", base_url=emu.base_url, env={}, model="claude-sonnet-4-6"
    )


def agentcore_host(emu: AgentCoreEmulator) -> BedrockAgentCore:
    return BedrockAgentCore(
        harness_arn=emu.harness_arn,
        data_url=emu.base_url,
        control_url=emu.base_url,
        env=emu.credentials_env(),
    )


def posted_results(emu: CMAEmulator) -> list[dict[str, Any]]:
    return [
        event
        for r in emu.requests
        if r.method == "POST" and r.path.endswith("/events")
        for event in r.body["events"]
        if event["type"] == "user.custom_tool_result"
    ]


def sdk_checked(event: dict[str, Any]) -> None:
    """The anthropic SDK's own type for the event validates what rma sent."""
    from anthropic.types.beta.sessions.beta_managed_agents_user_custom_tool_result_event_params import (
        BetaManagedAgentsUserCustomToolResultEventParams as Params,
    )

    pydantic.TypeAdapter(Params).validate_python(event, strict=True)


# ── Claude: content blocks ──


async def test_claude_gets_text_image_and_documents_as_content_blocks_the_sdk_types_accept() -> None:
    turns = [cma.tool_turn(("chart", {}), ("report", {})), cma.text_turn("Seen.")]
    with CMAEmulator(turns, api_key="sk-ant-test") as emu:
        host = claude_host(emu)
        result = await Agent(tools=[chart, report], host=host).run_or_raise("show me")
        await host.close()
        posted = posted_results(emu)
    assert result.text == "Seen."
    for event in posted:
        sdk_checked(event)
    data = base64.b64encode(PNG).decode()
    assert posted[0]["content"] == [
        {"type": "text", "text": "Revenue by month:"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
        {"type": "text", "text": '{"months": 3}'},
    ]
    assert posted[1]["content"] == [
        {"type": "text", "text": "The report:"},
        {
            "type": "document",
            "source": {
                "type": "base64",
                "media_type": "application/pdf",
                "data": base64.b64encode(PDF).decode(),
            },
            "title": "Q3",
        },
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": "notes"},
            "title": "n",
        },
    ]


async def test_claude_takes_images_and_documents_by_file_id() -> None:
    def handle(name: str, input: dict[str, Any], ctx: object) -> Any:
        return [Image.from_file_id("file_img"), Document.from_file_id("file_doc", context="the contract")]

    spec = {"name": "fetch", "description": "Fetch.", "input_schema": {"type": "object"}}
    with CMAEmulator([cma.tool_turn(("fetch", {})), cma.text_turn("ok")], api_key="sk-ant-test") as emu:
        host = claude_host(emu)
        await Agent(tools=[spec], handler=handle, host=host).run_or_raise("go")
        await host.close()
        (event,) = posted_results(emu)
    sdk_checked(event)
    assert event["content"] == [
        {"type": "image", "source": {"type": "file", "file_id": "file_img"}},
        {"type": "document", "source": {"type": "file", "file_id": "file_doc"}, "context": "the contract"},
    ]


async def test_an_image_over_the_hosts_byte_limit_is_replaced_by_a_note_the_model_reads() -> None:
    with CMAEmulator([cma.tool_turn(("huge", {})), cma.text_turn("ok")], api_key="sk-ant-test") as emu:
        host = claude_host(emu)
        await Agent(tools=[huge], host=host).run_or_raise("go")
        await host.close()
        (event,) = posted_results(emu)
    sdk_checked(event)
    (block,) = event["content"]
    size = len(PNG) + CLAUDE_MAX_IMAGE
    assert (
        block["type"] == "text"
        and f"not shown: {size} bytes, over this host's limit of {CLAUDE_MAX_IMAGE} for" in block["text"]
    )


async def test_the_text_cap_counts_text_parts_only_and_cuts_once() -> None:
    turns = [cma.tool_turn(("long_caption", {})), cma.text_turn("ok")]
    with CMAEmulator(turns, api_key="sk-ant-test") as emu:
        host = claude_host(emu)
        await Agent(tools=[long_caption], host=host, max_tool_result_chars=100).run_or_raise("go")
        await host.close()
        (event,) = posted_results(emu)
    first, image, last = event["content"]
    assert first == {"type": "text", "text": "y" * 80}
    assert image["type"] == "image" and image["source"]["data"] == CHART.data
    assert last["text"] == "z" * 20 + "\n[truncated: 60 of 80 characters not shown]"


async def test_a_failure_may_carry_media_and_the_toolbox_cap_cuts_its_text() -> None:
    turns = [cma.tool_turn(("partial_chart", {})), cma.text_turn("ok")]
    with CMAEmulator(turns, api_key="sk-ant-test") as emu:
        host = claude_host(emu)
        await Agent(tools=[Toolbox(partial_chart, max_result_chars=100)], host=host).run_or_raise("go")
        await host.close()
        (event,) = posted_results(emu)
    sdk_checked(event)
    assert event["is_error"] is True
    text, image = event["content"]
    assert text["text"] == "x" * 100 + "\n[truncated: 50 of 150 characters not shown]"
    assert image["source"]["data"] == CHART.data


# ── OpenAI-compatible servers: images in a following user message ──


async def test_local_sends_the_image_in_a_user_message_after_the_tool_messages() -> None:
    turns = [{"tool_calls": [{"id": "c1", "name": "chart", "arguments": {}}]}, {"content": "Seen."}]
    with OpenAIEmulator(turns) as emu:
        host = Local(base_url=emu.base_url, model="qwen2.5-vl")
        result = await Agent(tools=[chart], host=host).run_or_raise("show me")
        await host.close()
        messages = emu.requests[-1].body["messages"]
    assert result.text == "Seen."
    ref = CHART.ref
    tool_message, user_message = messages[-2:]
    assert tool_message == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": f'Revenue by month:\nSee file {ref}.\n{{"months": 3}}',
    }
    assert user_message == {
        "role": "user",
        "content": [
            {"type": "text", "text": f"This is file {ref}:"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + CHART.data}},
        ],
    }
    from openai.types.chat import ChatCompletionMessageParam

    adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(list[ChatCompletionMessageParam])
    adapter.validate_python(messages)


@pytest.mark.parametrize(
    ("returned", "named"),
    [
        (Document.from_bytes(PDF), "document"),
        (Image.from_file_id("file_x"), "image given by file id"),
    ],
)
async def test_local_refuses_documents_and_file_ids_with_a_typed_error(returned: Any, named: str) -> None:
    turns = [{"tool_calls": [{"id": "c1", "name": "fetch", "arguments": {}}]}, {"content": "never"}]
    spec = {"name": "fetch", "description": "Fetch.", "input_schema": {"type": "object"}}
    with OpenAIEmulator(turns) as emu:
        host = Local(base_url=emu.base_url, model="m")
        outcome = await Agent(tools=[spec], handler=lambda n, i, c: returned, host=host).run("go")
        await host.close()
        asked = len(emu.requests)
    assert isinstance(outcome, Failure)
    error = outcome.failure()
    assert isinstance(error, ToolContentUnsupported)
    assert (error.provider, error.content, error.tool_use_id) == ("local", named, "c1")
    assert "cannot take in a tool result" in str(error)
    assert asked == 1  # nothing was sent after the refusal


# ── AgentCore: text only ──


async def test_agentcore_refuses_an_image_the_harness_cannot_take_and_sends_nothing() -> None:
    with AgentCoreEmulator([ace.tool_turn(("chart", {}, "tooluse_1")), ace.text_turn("never")]) as emu:
        host = agentcore_host(emu)
        outcome = await Agent(tools=[chart], host=host).run("go")
        await host.close()
        invokes = [r for r in emu.requests if r.path.startswith("/harnesses/invoke")]
    assert isinstance(outcome, Failure) and isinstance(outcome.failure(), ToolContentUnsupported)
    assert (outcome.failure().provider, outcome.failure().content) == ("bedrock_agentcore", "image")
    assert len(invokes) == 1


def test_the_agentcore_emulator_refuses_an_image_in_a_tool_result_as_botocores_model_does() -> None:
    """Why rma refuses images there: the service model's toolResult content is text or json.
    If a botocore upgrade adds image blocks, this fails and the AgentCore limits can grow."""
    from rma_shell.testing.agentcore.validation import _validate

    block = {"toolResult": {"toolUseId": "t1", "content": [{"image": {"format": "png", "source": {}}}]}}
    params = {"runtimeSessionId": "s" * 40, "messages": [{"role": "user", "content": [block]}]}
    with pytest.raises(Exception, match=r'Unknown parameter .*"image", must be one of: text, json'):
        _validate("InvokeHarness", params)


async def test_agentcore_takes_a_rich_result_whose_media_were_noted_as_text() -> None:
    def handle(name: str, input: dict[str, Any], ctx: object) -> Any:
        return ["only words", "and more"]  # a list of text: JSON, as before

    spec = {"name": "fetch", "description": "Fetch.", "input_schema": {"type": "object"}}
    with AgentCoreEmulator([ace.tool_turn(("fetch", {}, "tooluse_1")), ace.text_turn("ok")]) as emu:
        host = agentcore_host(emu)
        result = await Agent(tools=[spec], handler=handle, host=host).run_or_raise("go")
        await host.close()
    assert result.text == "ok"


# ── the journal and the recording codec ──


async def test_a_rich_result_is_journaled_whole_and_a_resume_of_the_ended_run_replays_it(
    tmp_path: Path,
) -> None:
    turns = [{"tool_calls": [{"id": "c1", "name": "chart", "arguments": {}}]}, {"content": "Seen."}]
    path = str(tmp_path / "j.db")
    with OpenAIEmulator(turns) as emu:
        host = Local(base_url=emu.base_url, model="m")
        agent = Agent(tools=[chart], host=host, journal=path)
        first = await agent.run_or_raise("show me", journal_key="k1")
        again = await agent.resume("k1")
        await host.close()
    assert isinstance(again, Success) and again.unwrap().text == first.text == "Seen."
    store = SQLiteJournal(path)
    try:
        loaded = load("k1", store.rows("k1"), codec_for).unwrap()
    finally:
        store.close()
    (recorded,) = loaded.results.values()
    assert recorded.content == ("Revenue by month:", CHART, '{"months": 3}')


def test_rich_results_round_trip_through_the_recording_codec() -> None:
    result = ToolResult.of(
        "t1", ["a", CHART, Document.from_text("x", title="t", context="c"), Image.from_file_id("f")], True
    )
    assert from_jsonable(to_jsonable(result)) == result
    assert (
        result.text == f"a\n[image {CHART.ref}: {len(PNG)} bytes]\n[document text/plain: 1 bytes]\n[image f]"
    )


# ── the values ──


def test_values_are_validated_and_name_the_field() -> None:
    with pytest.raises(ValueError, match="media_type"):
        Image("image/tiff", base64.b64encode(b"II*\x00").decode())
    with pytest.raises(ValueError, match="exactly one of data"):
        Image("image/png", CHART.data, "file_1")
    with pytest.raises(ValueError, match="data is not valid base64"):
        Image("image/png", "not base64!")
    with pytest.raises(ValueError, match="not a PNG"):
        Image.from_bytes(b"plain words")
    with pytest.raises(ValueError, match="UTF-8"):
        Document("text/plain", base64.b64encode(b"\xff\xfe").decode())
    with pytest.raises(TypeError, match=r"content\[1\]"):
        ToolResult("t", "x", False, ("ok", 3))  # type: ignore[arg-type]


def test_fit_parts_notes_oversize_items_and_names_what_a_host_cannot_take() -> None:
    limits = ContentLimits("h", kinds=frozenset({"image"}), max_image_bytes=10)
    assert fit_parts(limits, ("t", CHART)) == (
        "t",
        OVERSIZE_NOTE.format(kind="image", name=CHART.ref, size=len(PNG), limit=10),
    )
    assert fit_parts(limits, (Document.from_text("x"),)) == "document"
    assert fit_parts(ContentLimits("h"), ("only text",)) == ("only text",)


def test_files_become_values_with_their_type_read_from_the_bytes(tmp_path: Path) -> None:
    (tmp_path / "c.png").write_bytes(PNG)
    (tmp_path / "r.pdf").write_bytes(PDF)
    (tmp_path / "n.txt").write_text("hello")
    assert image_from_path(tmp_path / "c.png") == CHART
    assert document_from_path(tmp_path / "r.pdf") == Document.from_bytes(PDF, title="r.pdf")
    assert document_from_path(tmp_path / "n.txt").text == "hello"
    with pytest.raises(ValueError, match="over the 10-byte limit"):
        image_from_path(tmp_path / "c.png", max_bytes=10)
