"""Bedrock AgentCore Harness: the pure codec — invoke inputs, stream frames, normalization.

What this module is: how an ``InvokeHarness`` request looks (the messages of a kickoff, a
follow-up and a tool resume, the per-invocation overrides, the URL and headers), how the
event-stream messages of its response classify into events and stream errors, how one
turn's events normalize into a ``TurnResult`` (the Converse-stream assembly of wire §5.2),
which identifiers the service accepts, and how its JSON errors are read (§2, §10).
What it is not: no HTTP, no signing (``rma.wire.sigv4``), no frame decoding
(``rma.wire.eventstream``), no clock and no credentials — the transport in
``rma_shell.providers.agentcore.provider`` moves what is built here. Where botocore 1.44.5's
service model and the Elixir reference disagree, the model wins (wire §11).

Decisions (ids refer to ``shared/reference/behaviors.md`` §7):

- **Events** are the decoded frames in the shape boto3 yields them: ``{event_type:
  payload}`` (``{"messageStop": {"stopReason": "end_turn"}}``). Event types the model does
  not know are kept (not dropped as botocore does) so nothing the service says is lost;
  normalization ignores them.
- **Exception and error frames** inside a 200 are never events: ``classify`` returns a
  ``StreamFault`` and the transport ends the turn with a ``ProviderError`` carrying the
  frame's type and message (B-9; never retried).
- **Tool blocks are keyed by toolUseId** (B-21, B-22): a ``contentBlockStart`` with a
  ``toolUse`` (re)opens the block for its id at its index; input deltas go to the id most
  recently started at their index; a ``toolResult`` start clears the index, so a stray
  delta cannot corrupt a client tool. Indices reset with each ``messageStart``.
- **Client vs server tools** (§5.2 refinement, §11 #5): only ``type: tool_use`` (or no
  type) blocks go to the handler. ``server_tool_use`` / ``mcp_tool_use`` blocks are the
  harness's own tools: observe-only, reported in ``server_tool_uses`` with their input.
- **Several messages in one stream**: the tools to run are those of the last assistant
  message whose ``messageStop`` is ``tool_use``; a later ``end_turn`` wins over them.
- **Terminal** (B-17, all 15 stop reasons of the model): ``end_turn`` and
  ``stop_sequence`` → END_TURN; ``tool_use`` → REQUIRES_ACTION; everything else (and an
  unknown value) → TERMINATED with the raw reason kept. No ``messageStop`` → the stream was
  truncated; the transport retries it (B-10) and never normalizes it.
- **Usage** (B-20, §11 #6): the last ``metadata.usage`` wins (the model describes it as
  invocation-level); cache read/write counters are kept; ``raw`` holds that map.
- **Tool input** (B-23): the input fragments joined and JSON-decoded; empty → ``{}``. Input
  that does not parse to a JSON object (``'{"q": "al'``, ``[1]``) or nests deeper than
  ``MAX_TOOL_INPUT_DEPTH`` is never run with ``{}``: the use carries ``input_error`` and the
  session answers it with an error result the model sees, as Local answers bad arguments
  (issue #12). The raw fragments stay in the events; the resume echoes the use with ``{}``.
- **Empty tool results**: the model requires ``text`` of at least one character, so an
  empty handler result is sent as ``EMPTY_RESULT_TEXT`` rather than an invalid request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Final
from urllib.parse import quote

import attrs
from returns.result import Failure, Result, Success

from rma.content import ContentLimits
from rma.errors import InvalidOpts
from rma.live import LiveUpdate, TextDelta, ToolCallStarted, common_updates
from rma.provider import Input, Mode, ProviderCodec, register_codec
from rma.vocabulary import (
    JSON,
    MAX_TOOL_INPUT_DEPTH,
    Terminal,
    ToolResult,
    ToolUse,
    TurnResult,
    Usage,
    rejected_tool_input,
    tool_input_problem,
)

SERVICE: Final = "bedrock-agentcore"
"""The SigV4 service name of both planes (the control plane too, wire §1)."""

SESSION_HEADER: Final = "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"
USER_HEADER: Final = "X-Amzn-Bedrock-AgentCore-Runtime-User-Id"
EVENT_STREAM_TYPE: Final = "application/vnd.amazon.eventstream"

EMPTY_RESULT_TEXT: Final = "(empty result)"

# wire §4 and §8.1, from botocore's model.
RUNTIME_SESSION_ID: Final = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_-]{32,99}")
ENDPOINT_NAME: Final = re.compile(r"[a-zA-Z][a-zA-Z0-9_]{0,47}")
HARNESS_ARN: Final = re.compile(
    r"arn:(?P<partition>[^:]+)?:bedrock-agentcore:(?P<region>[a-z0-9-]+):(?P<account>[0-9]{12}):"
    r"harness/(?P<harness_id>[a-zA-Z][a-zA-Z0-9_]{0,39}-[a-zA-Z0-9]{10})"
)
_REGION: Final = re.compile(r"[a-z]{2}(-[a-z]+)+-[0-9]+")

END_TURN_REASONS: Final = frozenset({"end_turn", "stop_sequence"})
STOP_REASONS: Final = (
    "end_turn",
    "tool_use",
    "tool_result",
    "max_tokens",
    "stop_sequence",
    "content_filtered",
    "malformed_model_output",
    "malformed_tool_use",
    "interrupted",
    "partial_turn",
    "model_context_window_exceeded",
    "max_iterations_exceeded",
    "max_output_tokens_exceeded",
    "timeout_exceeded",
    "hook_stopped",
)
"""Every ``stopReason`` in botocore 1.44.5's ``HarnessStopReason`` enum."""

KNOWN_EVENTS: Final = frozenset(
    {"messageStart", "contentBlockStart", "contentBlockDelta", "contentBlockStop", "messageStop"}
    | {"metadata", "hookEvent"}
)

OVERRIDES: Final = {
    "model": "model",
    "system_prompt": "systemPrompt",
    "tools": "tools",
    "skills": "skills",
    "allowed_tools": "allowedTools",
    "max_iterations": "maxIterations",
    "max_tokens": "maxTokens",
    "invoke_timeout": "timeoutSeconds",
    "actor_id": "actorId",
}
"""Per-invocation overrides: option name → body member (B-8: sent only when given)."""

_INT_OVERRIDES: Final = frozenset({"max_iterations", "max_tokens", "invoke_timeout"})


# --- identifiers ------------------------------------------------------------------------


def check_runtime_session_id(value: object, option: str = "runtime_session_id") -> Result[str, InvalidOpts]:
    """B-15 Better: 33–100 characters, alphanumeric first, then ``[A-Za-z0-9_-]`` — the id
    then works for invoke, runtime commands and stop alike (wire §4)."""
    if not isinstance(value, str) or RUNTIME_SESSION_ID.fullmatch(value) is None:
        return Failure(
            InvalidOpts(
                option=option,
                detail="a runtime session id is 33–100 characters: a letter or digit, then letters, "
                f"digits, '-' or '_' (got {value!r})",
            )
        )
    return Success(value)


def check_endpoint_name(value: object) -> Result[str | None, InvalidOpts]:
    """B-80: the qualifier must match ``[a-zA-Z][a-zA-Z0-9_]{0,47}``; None means DEFAULT."""
    if value is None:
        return Success(None)
    if not isinstance(value, str) or ENDPOINT_NAME.fullmatch(value) is None:
        return Failure(
            InvalidOpts(
                option="endpoint_name",
                detail=f"an endpoint name is a letter then up to 47 letters, digits or '_' (got {value!r})",
            )
        )
    return Success(value)


@attrs.frozen
class HarnessArn:
    arn: str
    partition: str
    region: str
    account: str
    harness_id: str


def parse_harness_arn(value: object) -> Result[HarnessArn, InvalidOpts]:
    match = HARNESS_ARN.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        return Failure(
            InvalidOpts(
                option="harness_arn",
                detail="expected arn:aws:bedrock-agentcore:<region>:<12-digit account>:harness/<name>-<10 "
                f"alphanumerics> (got {value!r})",
            )
        )
    assert isinstance(value, str)
    return Success(
        HarnessArn(
            value,
            match["partition"] or "aws",
            match["region"],
            match["account"],
            match["harness_id"],
        )
    )


def check_region(value: object) -> Result[str, InvalidOpts]:
    if not isinstance(value, str) or _REGION.fullmatch(value) is None:
        return Failure(InvalidOpts(option="aws_region", detail=f"not an AWS region name: {value!r}"))
    return Success(value)


def dns_suffix(region: str, *, dualstack: bool = False) -> str:
    """wire §1: the partition's DNS suffix for a region (no allow-list; any region resolves)."""
    if region.startswith("cn-"):
        return "api.amazonwebservices.com.cn" if dualstack else "amazonaws.com.cn"
    if region.startswith("eusc-"):
        return "api.amazonwebservices.eu" if dualstack else "amazonaws.eu"
    return "api.aws" if dualstack else "amazonaws.com"


def data_plane_url(region: str, *, fips: bool = False, dualstack: bool = False) -> str:
    """B-34 Better: the data-plane host derived from the region the requests are signed for."""
    prefix = "bedrock-agentcore-fips" if fips else "bedrock-agentcore"
    return f"https://{prefix}.{region}.{dns_suffix(region, dualstack=dualstack)}"


def control_plane_url(region: str, *, fips: bool = False, dualstack: bool = False) -> str:
    prefix = "bedrock-agentcore-control-fips" if fips else "bedrock-agentcore-control"
    return f"https://{prefix}.{region}.{dns_suffix(region, dualstack=dualstack)}"


def quote_value(value: str) -> str:
    """RFC 3986 encoding as botocore puts labels and query values on the wire."""
    return quote(value, safe="-._~")


def invoke_url(base_url: str, harness_arn: str, endpoint_name: str | None) -> str:
    """B-27: ``POST {data}/harnesses/invoke?harnessArn=<arn>[&qualifier=<endpoint>]``."""
    query = f"harnessArn={quote_value(harness_arn)}"
    if endpoint_name is not None:
        query += f"&qualifier={quote_value(endpoint_name)}"
    return f"{base_url.rstrip('/')}/harnesses/invoke?{query}"


def stop_runtime_session_url(base_url: str, runtime_arn: str, endpoint_name: str | None) -> str:
    """Issue #15: ``POST {data}/runtimes/{agentRuntimeArn}/stopruntimesession[?qualifier=<endpoint>]``
    (botocore's ``StopRuntimeSession``: the ARN a path label, the session in its header)."""
    url = f"{base_url.rstrip('/')}/runtimes/{quote_value(runtime_arn)}/stopruntimesession"
    if endpoint_name is not None:
        url += f"?qualifier={quote_value(endpoint_name)}"
    return url


def stop_runtime_session_body(client_token: str) -> bytes:
    """The JSON body: only ``clientToken`` (33–256 characters; botocore fills a uuid4), so a
    retried stop is the same request."""
    return json.dumps({"clientToken": client_token}, separators=(",", ":")).encode()


# --- inputs -----------------------------------------------------------------------------


def text_block(text: str) -> dict[str, JSON]:
    return {"text": text}


def user_message(text: str) -> dict[str, JSON]:
    return {"role": "user", "content": [text_block(text)]}


def tool_use_block(use: ToolUse) -> dict[str, JSON]:
    """B-6: the echo of one client tool use (id, name, input; no type)."""
    return {"toolUse": {"toolUseId": use.id, "name": use.name, "input": dict(use.input)}}


def tool_result_block(tool_use_id: str | None, text: str, is_error: bool) -> dict[str, JSON]:
    return {
        "toolResult": {
            "toolUseId": tool_use_id,
            "content": [text_block(text if text else EMPTY_RESULT_TEXT)],
            "status": "error" if is_error else "success",
        }
    }


def messages_input(messages: Sequence[JSON]) -> dict[str, JSON]:
    return {"messages": list(messages)}


def resume_messages(uses: Sequence[ToolUse], results: Sequence[ToolResult]) -> list[JSON]:
    """B-6 / wire §5.3: the assistant's toolUse blocks echoed, then one toolResult per use.

    The harness does not persist the uncommitted tool-use turn, so both messages are
    required. Results are matched by id, in tool-use order; a use without a result is
    answered with an error result (the service rejects a resume that leaves one out), and
    a repeated id is echoed once (the service rejects duplicate ids).
    """
    by_id: dict[str | None, ToolResult] = {}
    for result in results:
        by_id.setdefault(result.tool_use_id, result)
    echoed: list[JSON] = []
    answered: list[JSON] = []
    seen: set[str | None] = set()
    for use in uses:
        if use.id in seen:
            continue
        seen.add(use.id)
        echoed.append(tool_use_block(use))
        found = by_id.get(use.id)
        if found is None:
            answered.append(tool_result_block(use.id, "no result was produced for this tool call", True))
        else:
            answered.append(tool_result_block(use.id, found.text, found.is_error))
    return [{"role": "assistant", "content": echoed}, {"role": "user", "content": answered}]


def system_prompt_blocks(value: JSON) -> JSON:
    """B-27: a string system prompt becomes one text block (the model wants a list)."""
    if isinstance(value, str):
        return [text_block(value)]
    return value


def check_overrides(options: Mapping[str, JSON]) -> Result[dict[str, JSON], InvalidOpts]:
    """The per-invocation overrides present in ``options``, as body members (B-8).

    Integers must be positive ints; None means "not given" (never sent as null).
    """
    body: dict[str, JSON] = {}
    for option, member in OVERRIDES.items():
        value = options.get(option)
        if value is None:
            continue
        if option in _INT_OVERRIDES and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            return Failure(InvalidOpts(option=option, detail=f"must be a positive integer, got {value!r}"))
        if option == "system_prompt":
            value = system_prompt_blocks(value)
        body[member] = value
    return Success(body)


def invoke_body(input: Input, overrides: Mapping[str, JSON]) -> bytes:
    """The InvokeHarness body: the input's messages plus the overrides (absent → omitted)."""
    body: dict[str, JSON] = {"messages": input["messages"]}
    body.update(overrides)
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


# --- stream frames ------------------------------------------------------------------------


@attrs.frozen
class StreamFault:
    """An exception or error frame inside a 200 (B-9): terminal for the turn, never retried."""

    error_type: str
    message: str
    payload: JSON = None


def fault_message(payload: JSON, fallback: str) -> str:
    if isinstance(payload, Mapping):
        for key in ("message", "Message"):
            if isinstance(payload.get(key), str):
                return str(payload[key])
    if isinstance(payload, str) and payload:
        return payload
    return fallback


def classify(
    message_type: str, type_name: str | None, payload: JSON, error_message: str | None = None
) -> JSON | StreamFault:
    """One decoded frame → an event ``{type: payload}`` or a ``StreamFault``.

    ``message_type`` is the ``:message-type`` header (absent → ``event``); ``type_name`` the
    ``:event-type`` / ``:exception-type`` / ``:error-code`` header; ``payload`` the decoded
    JSON (None when empty). An event frame without an ``:event-type`` is malformed.
    """
    if message_type == "exception":
        name = type_name or "unknown_exception"
        return StreamFault(name, fault_message(payload, name), payload)
    if message_type == "error":
        name = type_name or "unknown_error"
        return StreamFault(name, error_message or fault_message(payload, name), payload)
    if message_type != "event" or not type_name:
        return StreamFault(
            "malformed_frame",
            f"a frame with :message-type {message_type!r} and no usable type header",
            payload,
        )
    return {type_name: payload if payload is not None else {}}


def event_type(event: JSON) -> str | None:
    if isinstance(event, Mapping) and len(event) == 1:
        (name,) = event
        return str(name)
    return None


def _body(event: JSON, name: str) -> Mapping[str, JSON] | None:
    if isinstance(event, Mapping):
        value = event.get(name)
        if isinstance(value, Mapping):
            return value
    return None


def stop_reason_of(event: JSON) -> str | None:
    body = _body(event, "messageStop")
    reason = body.get("stopReason") if body is not None else None
    return reason if isinstance(reason, str) else None


def text_delta(event: JSON) -> str | None:
    """B-26: the text of a text ``contentBlockDelta``; anything else → None."""
    body = _body(event, "contentBlockDelta")
    delta = body.get("delta") if body is not None else None
    if isinstance(delta, Mapping):
        text = delta.get("text")
        if isinstance(text, str):
            return text
    return None


def live_updates(event: JSON) -> tuple[LiveUpdate, ...]:
    """``rma.live`` updates of one frame: a text ``contentBlockDelta`` (B-26) and the
    ``contentBlockStart`` of a client tool (``type: tool_use`` or none); the harness's own
    tools (``server_tool_use``, ``mcp_tool_use``) have none. Plus the transport's discard
    marker for a re-invoked turn."""
    text = text_delta(event)
    if text:
        return (TextDelta(text),)
    body = _body(event, "contentBlockStart")
    if body is not None:
        start = body.get("start")
        tool = start.get("toolUse") if isinstance(start, Mapping) else None
        if isinstance(tool, Mapping) and isinstance(tool.get("toolUseId"), str):
            kind = tool.get("type")
            if kind is None or kind == "tool_use":
                return (ToolCallStarted(str(tool["toolUseId"]), str(tool.get("name") or "")),)
        return ()
    return common_updates(event)


def terminal_for(stop_reason: str | None) -> Terminal:
    if stop_reason in END_TURN_REASONS:
        return Terminal.END_TURN
    if stop_reason == "tool_use":
        return Terminal.REQUIRES_ACTION
    return Terminal.TERMINATED


def is_complete(events: Sequence[JSON]) -> bool:
    """B-10: a turn's stream is whole when it carried a ``messageStop``."""
    return any(stop_reason_of(e) is not None for e in events)


def _count(value: JSON) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def usage_of(usage: Mapping[str, JSON]) -> Usage:
    return Usage(
        input_tokens=_count(usage.get("inputTokens")),
        output_tokens=_count(usage.get("outputTokens")),
        cache_read_input_tokens=_count(usage.get("cacheReadInputTokens")),
        cache_creation_input_tokens=_count(usage.get("cacheWriteInputTokens")),
        raw=(dict(usage),),
    )


def _decode_input(fragments: str) -> dict[str, JSON]:
    """The decoded input, or ``{}`` when it is not a usable one (``_parse_input`` says why)."""
    problem, value = _parse_input(fragments)
    return value if problem is None else {}


def _parse_input(fragments: str) -> tuple[str | None, dict[str, JSON]]:
    if not fragments.strip():
        return None, {}
    try:
        value = json.loads(fragments)
    except ValueError as exc:
        return f"invalid JSON: {exc}", {}
    except RecursionError:
        return f"nested more than {MAX_TOOL_INPUT_DEPTH} levels deep", {}
    problem = tool_input_problem(value)
    return (problem, {}) if problem is not None else (None, value)


def _client_tool_use(tid: str, name: str, fragments: str) -> ToolUse:
    problem, value = _parse_input(fragments)
    if problem is None:
        return ToolUse(tid, name, value)
    return ToolUse(tid, name, {}, input_error=rejected_tool_input(name, problem, fragments))


@attrs.define
class _Block:
    tool_use_id: str
    name: str
    kind: str
    server_name: JSON
    fragments: list[str] = attrs.field(factory=list)


def _int(value: JSON) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def normalize(events: Sequence[JSON]) -> TurnResult:
    """One turn's events → TurnResult (B-17…B-24, §5.2 with its refinements)."""
    text: list[str] = []
    stop_reason: str | None = None
    usage: Usage | None = None
    blocks: dict[str, _Block] = {}
    active: dict[int, str] = {}
    message_tools: list[str] = []  # client tool ids of the current message, first-seen order
    run_tools: list[str] = []  # the last message that stopped with tool_use
    server_ids: list[str] = []
    for event in events:
        name = event_type(event)
        if name == "messageStart":
            active = {}
            message_tools = []
        elif name == "contentBlockStart":
            body = _body(event, name) or {}
            index = _int(body.get("contentBlockIndex"))
            start = body.get("start")
            tool = start.get("toolUse") if isinstance(start, Mapping) else None
            if isinstance(tool, Mapping) and isinstance(tool.get("toolUseId"), str):
                tid = str(tool["toolUseId"])
                kind = tool.get("type") if isinstance(tool.get("type"), str) else "tool_use"
                blocks[tid] = _Block(tid, str(tool.get("name") or ""), str(kind), tool.get("serverName"))
                if index is not None:
                    active[index] = tid
                target = message_tools if kind == "tool_use" else server_ids
                if tid not in target:
                    target.append(tid)
            elif index is not None:  # a toolResult (or unknown) start closes the index
                active.pop(index, None)
        elif name == "contentBlockDelta":
            body = _body(event, name) or {}
            delta = body.get("delta")
            if not isinstance(delta, Mapping):
                continue
            if isinstance(delta.get("text"), str):
                text.append(str(delta["text"]))
            tool_delta = delta.get("toolUse")
            index = _int(body.get("contentBlockIndex"))
            if isinstance(tool_delta, Mapping) and index is not None and index in active:
                fragment = tool_delta.get("input")
                if isinstance(fragment, str):
                    blocks[active[index]].fragments.append(fragment)
        elif name == "messageStop":
            stop_reason = stop_reason_of(event)
            if stop_reason == "tool_use":
                run_tools = list(message_tools)
        elif name == "metadata":
            body = _body(event, name) or {}
            raw_usage = body.get("usage")
            if isinstance(raw_usage, Mapping):
                usage = usage_of(raw_usage)
    terminal = terminal_for(stop_reason)
    uses: tuple[ToolUse, ...] = ()
    if terminal is Terminal.REQUIRES_ACTION:
        uses = tuple(
            _client_tool_use(tid, blocks[tid].name, "".join(blocks[tid].fragments))
            for tid in run_tools
            if blocks[tid].name
        )
    server = tuple(
        {
            "toolUseId": tid,
            "name": blocks[tid].name,
            "type": blocks[tid].kind,
            **({"serverName": blocks[tid].server_name} if blocks[tid].server_name is not None else {}),
            "input": _decode_input("".join(blocks[tid].fragments)),
        }
        for tid in server_ids
    )
    return TurnResult(
        terminal=terminal,
        stop_reason=stop_reason,
        text="".join(text),
        custom_tool_uses=uses,
        server_tool_uses=server,
        usage=usage,
        events=tuple(events),
    )


# --- HTTP errors (wire §2, §10) -----------------------------------------------------------


def error_code(status: int, headers: Mapping[str, str], body: JSON) -> str:
    """botocore's order: ``x-amzn-ErrorType`` (before ':' and after '#'), the body's
    ``code``/``Code``, its ``__type``, else the status as a string."""
    header = next((v for k, v in headers.items() if k.lower() == "x-amzn-errortype"), None)
    if header:
        return header.split(":", 1)[0].rsplit("#", 1)[-1]
    if isinstance(body, Mapping):
        for key in ("code", "Code", "__type"):
            value = body.get(key)
            if isinstance(value, str) and value:
                return value.rsplit("#", 1)[-1]
    return str(status)


RETRYABLE_CODES: Final = frozenset(
    {
        "ThrottlingException",
        "ThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "ServiceUnavailableException",
        "InternalServerException",
        "RequestTimeout",
        "RequestTimeoutException",
        "RetryableConflictException",
    }
)
THROTTLING_CODES: Final = frozenset(
    {"ThrottlingException", "ThrottledException", "TooManyRequestsException", "RequestLimitExceeded"}
)
AUTH_CODES: Final = frozenset(
    {
        "InvalidSignatureException",
        "UnrecognizedClientException",
        "ExpiredTokenException",
        "ExpiredToken",
        "MissingAuthenticationTokenException",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
    }
)


def is_retryable(status: int, code: str) -> bool:
    """§10 / B-12 Better: retry throttling, transient 5xx and modeled-retryable codes —
    never any other 4xx (a 400/403/404/402/424 will fail the same way again)."""
    if code in RETRYABLE_CODES:
        return True
    return status in (500, 502, 503, 504)


# --- the codec ------------------------------------------------------------------------------


class BedrockAgentCoreCodec(ProviderCodec):
    """B-1: request/response, no reconnect history, no outcomes, no budget; text deltas."""

    name = "bedrock_agentcore"
    mode = Mode.REQUEST_RESPONSE
    supports_outcomes = False
    supports_budget = False
    has_text_delta = True
    # The Harness's toolResult content (botocore's HarnessToolResultContentBlock) is text or
    # json only: no image or document block, so a rich result's media are refused, typed.
    content_limits = ContentLimits("bedrock_agentcore")

    def user_input(self, text: str) -> Input:
        return messages_input([user_message(text)])  # B-5

    def resume_input(self, uses: Sequence[ToolUse], results: Sequence[ToolResult]) -> Input:
        return messages_input(resume_messages(uses, results))

    def normalize(self, events: Sequence[JSON]) -> TurnResult:
        return normalize(events)

    def text_delta(self, event: JSON) -> str | None:
        return text_delta(event)

    def live_updates(self, event: JSON) -> tuple[LiveUpdate, ...]:
        return live_updates(event)


CODEC = BedrockAgentCoreCodec()
register_codec(BedrockAgentCoreCodec)


# --- tool declarations ----------------------------------------------------------------------


def _attr(tool: object, key: str) -> JSON:
    if isinstance(tool, Mapping):
        return tool.get(key)
    return getattr(tool, key, None)


def inline_function(tool: object) -> Result[dict[str, JSON], InvalidOpts]:
    """B-25: a client tool (a dict or an object with ``name``, ``description``,
    ``input_schema``) as an ``inline_function`` harness tool. A dict that already has a
    ``type`` is a harness tool declaration and passes through verbatim."""
    if isinstance(tool, Mapping) and "type" in tool:
        return Success(dict(tool))
    name = _attr(tool, "name")
    if not isinstance(name, str) or re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name) is None:
        detail = f"tool name must match [a-zA-Z0-9_-]{{1,64}}: {name!r}"
        return Failure(InvalidOpts(option="tools", detail=detail))
    description = _attr(tool, "description")
    schema = _attr(tool, "input_schema")
    if schema is None:
        schema = _attr(tool, "inputSchema")
    # The model requires a description of 1–4096 characters; a tool without one is described by its name.
    text = (description if isinstance(description, str) and description else name)[:4096]
    return Success(
        {
            "type": "inline_function",
            "name": name,
            "config": {
                "inlineFunction": {
                    "description": text,
                    "inputSchema": dict(schema) if isinstance(schema, Mapping) else {"type": "object"},
                }
            },
        }
    )


def tool_declarations(tools: Sequence[object]) -> Result[list[JSON], InvalidOpts]:
    out: list[JSON] = []
    for tool in tools:
        built = inline_function(tool)
        if isinstance(built, Failure):
            return Failure(built.failure())
        out.append(built.unwrap())
    return Success(out)
