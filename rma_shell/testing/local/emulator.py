"""A loopback OpenAI-compatible chat-completions server, scripted turn by turn.

``OpenAIEmulator`` runs a real HTTP/1.1 server on 127.0.0.1 (an OS-chosen port) in a
background thread, so any client — httpx, the official ``openai`` SDK, the Local provider —
talks to it over its ordinary HTTP stack::

    with OpenAIEmulator([{"content": "Hi!"}], faults={0: status(429, retry_after=1)}) as emu:
        client = openai.OpenAI(base_url=emu.base_url, api_key="sk-test")
        ...
        assert emu.requests[1].body["messages"][0]["role"] == "user"

It speaks the wire the way the real API does: ``POST /v1/chat/completions`` answered with a
``chat.completion`` JSON body, or with ``text/event-stream`` chunks (``data: {chunk}`` …
``data: [DONE]``, chunked transfer encoding) when ``stream`` is true, usage in a final
choice-less chunk when ``stream_options.include_usage`` is set. It validates requests at
least as strictly as the real API on the points clients get wrong (model, roles, tool
messages answering exactly the preceding assistant's tool calls) and answers mistakes with
an OpenAI-shaped 400. Faults are injected per request index (0-based, counting every
request received): ``status``, ``drop_mid_stream``, ``malformed_chunk``, ``delay``, and
``cut_off`` (the reply ends at a token limit, ``finish_reason: "length"``). Every answer
carries an ``x-request-id`` header, as the real API's do (``RecordedRequest.request_id``).

A scripted turn is consumed only by a request that was answered in full, so a faulted
request is followed by the same turn on retry. It is not a model: it never invents a
reply, and runs out of turns with a 400 (type ``emulator_script_exhausted``).
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import attrs

from rma_shell.testing._loopback import LoopbackEmulator, LoopbackHandler

JSONDict = dict[str, Any]

Reply = Mapping[str, Any] | Callable[[JSONDict], "Mapping[str, Any] | Turn"]
"""A message dict (``content`` and/or ``tool_calls``) or a callable of the request body."""


@attrs.frozen
class Turn:
    """One scripted model reply.

    ``reply`` is a message dict — ``{"content": "…"}`` and/or ``{"tool_calls": […]}`` where a
    tool call is either OpenAI-shaped (``{"id", "type", "function": {"name", "arguments"}}``)
    or the shorthand ``{"name": …, "arguments": dict | str}`` — or a callable receiving the
    request body and returning such a dict (or a ``Turn``). ``usage`` replaces the estimated
    usage; ``finish_reason`` defaults to "tool_calls" when there are tool calls, else "stop".
    """

    reply: Reply
    usage: Mapping[str, Any] | None = None
    finish_reason: str | None = None


@attrs.frozen
class Fault:
    """A fault for one request; build with ``status``, ``drop_mid_stream``, ``malformed_chunk``,
    ``delay`` or ``cut_off``."""

    kind: Literal["status", "drop", "malformed", "delay", "length", "pace", "hold"]
    status: int = 0
    retry_after: str | None = None
    retry_after_ms: str | None = None
    message: str | None = None
    after_chunks: int = 1
    seconds: float = 0.0
    after_chars: int = 0
    release: threading.Event | None = attrs.field(default=None, eq=False)


def status(
    code: int,
    *,
    retry_after: float | str | None = None,
    retry_after_ms: float | None = None,
    message: str | None = None,
) -> Fault:
    """Answer this request with HTTP ``code`` and an OpenAI-shaped error body.

    ``retry_after`` sets ``Retry-After`` (seconds, or an HTTP-date string);
    ``retry_after_ms`` sets OpenAI's ``retry-after-ms``.
    """
    return Fault(
        "status",
        status=code,
        retry_after=None if retry_after is None else _num(retry_after),
        retry_after_ms=None if retry_after_ms is None else _num(retry_after_ms),
        message=message,
    )


def drop_mid_stream(after_chunks: int = 1) -> Fault:
    """Close the connection after ``after_chunks`` SSE chunks (streaming), or halfway
    through the body (non-streaming)."""
    return Fault("drop", after_chunks=after_chunks)


def malformed_chunk(after_chunks: int = 1) -> Fault:
    """Send a data line holding invalid JSON after ``after_chunks`` chunks (streaming), or an
    invalid JSON body (non-streaming)."""
    return Fault("malformed", after_chunks=after_chunks)


def cut_off(after_chars: int = 0) -> Fault:
    """The model hits its token limit: the reply keeps only its first ``after_chars``
    characters of content and tool-call arguments, in the order they stream, and finishes with
    ``"length"``. A call is sent (id and name, as vLLM streams them) as soon as everything
    before it was, so ``cut_off(0)`` of a tool-call reply is the call with empty arguments.
    The reply is complete on the wire: the turn counts as answered."""
    return Fault("length", after_chars=max(0, after_chars))


def pace(seconds: float) -> Fault:
    """Streaming: wait ``seconds`` before each SSE chunk (and before ``[DONE]``), as a model
    producing tokens does; non-streamed answers are not affected."""
    return Fault("pace", seconds=max(0.0, seconds))


def hold(after_chunks: int, release: threading.Event, *, timeout: float = 10.0) -> Fault:
    """Streaming: send ``after_chunks`` chunks, then wait until ``release`` is set (at most
    ``timeout`` seconds) before sending the rest. ``Fault.seconds`` holds the timeout."""
    return Fault("hold", after_chunks=max(0, after_chunks), seconds=timeout, release=release)


def delay(seconds: float) -> Fault:
    """Wait ``seconds`` before answering (combine with other faults in a list)."""
    return Fault("delay", seconds=seconds)


def _num(value: float | str) -> str:
    if isinstance(value, str):
        return value
    return str(int(value)) if float(value).is_integer() else str(value)


@attrs.frozen
class RecordedRequest:
    """A request as received: ``body`` is the decoded JSON (None when it was not JSON);
    ``client_port`` is the client's end of the TCP connection (equal ports: a reused one)."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any
    raw: bytes = attrs.field(repr=False)
    request_id: str = ""
    """The ``x-request-id`` the emulator answered this request with."""
    client_port: int | None = None


_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

_STATUS_ERRORS: dict[int, tuple[str, str, str | None]] = {
    400: ("Bad request.", "invalid_request_error", None),
    401: ("Incorrect API key provided.", "invalid_request_error", "invalid_api_key"),
    403: ("You are not allowed to use this model.", "invalid_request_error", None),
    404: ("Not found.", "invalid_request_error", None),
    408: ("Request timed out.", "timeout", None),
    429: ("Rate limit reached for requests.", "requests", "rate_limit_exceeded"),
    500: ("The server had an error while processing your request. Sorry about that!", "server_error", None),
    502: ("Bad gateway.", "server_error", None),
    503: ("The engine is currently overloaded, please try again later.", "server_error", None),
}


class _Rejected(Exception):
    def __init__(
        self, status: int, message: str, kind: str, param: str | None = None, code: str | int | None = None
    ):
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = status, message, kind, param, code


def _invalid(message: str, param: str | None = None, code: str | None = None) -> _Rejected:
    return _Rejected(400, message, "invalid_request_error", param, code)


def _unanswered(open_calls: list[str]) -> _Rejected:
    ids = ", ".join(open_calls)
    return _invalid(
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
        f"'tool_call_id'. The following tool_call_ids did not have response messages: {ids}",
        "messages",
    )


def _validate_request(body: Any) -> None:
    """Raise ``_Rejected`` where the real API would answer 400 (the points clients get wrong)."""
    if not isinstance(body, dict):
        raise _invalid("We could not parse the JSON body of your request.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _invalid("you must provide a model parameter", "model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _invalid("Invalid 'messages': expected a non-empty array.", "messages", "empty_array")
    open_calls: list[str] = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise _invalid(f"Invalid type for '{where}': expected an object.", where)
        role = message.get("role")
        if role not in _ROLES:
            raise _invalid(f"Invalid value for '{where}.role': {role!r}.", f"{where}.role")
        if role != "tool" and open_calls:
            raise _unanswered(open_calls)
        content = message.get("content")
        if role in ("system", "developer", "user") and not isinstance(content, (str, list)):
            raise _invalid(
                f"Invalid type for '{where}.content': expected a string or array.", f"{where}.content"
            )
        if isinstance(content, list):
            _validate_parts(content, where, images=role == "user")
        if role == "assistant":
            calls = message.get("tool_calls")
            if content is None and not calls:
                raise _invalid(f"Missing '{where}.content': content is required without tool_calls.", where)
            if calls is not None:
                open_calls = _validate_calls(calls, where)
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str):
                raise _invalid(
                    f"Missing required parameter: '{where}.tool_call_id'.", f"{where}.tool_call_id"
                )
            if call_id not in open_calls:
                raise _invalid(
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
                    "message with 'tool_calls'.",
                    f"{where}.role",
                )
            open_calls.remove(call_id)
            if not isinstance(content, (str, list)):
                raise _invalid(
                    f"Invalid type for '{where}.content': expected a string or array.", f"{where}.content"
                )
    if open_calls:
        raise _unanswered(open_calls)
    _validate_tools(body.get("tools"))
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise _invalid("Invalid type for 'stream': expected a boolean.", "stream")
    if body.get("stream_options") is not None and not stream:
        raise _invalid(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options"
        )


_DATA_URL = re.compile(r"data:image/(png|jpeg|gif|webp);base64,[A-Za-z0-9+/]+={0,2}")


def _validate_parts(parts: list[Any], where: str, *, images: bool) -> None:
    """Content parts as Chat Completions takes them: text everywhere, ``image_url`` in user
    messages only (a tool or assistant message takes text parts only), each image a URL —
    here a ``data:`` URL of a PNG, JPEG, GIF or WebP, since the emulator fetches nothing."""
    for j, part in enumerate(parts):
        at = f"{where}.content[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            if not isinstance(part.get("text"), str):
                raise _invalid(f"Missing required parameter: '{at}.text'.", f"{at}.text")
        elif kind == "image_url" and images:
            url = part.get("image_url", {}).get("url") if isinstance(part.get("image_url"), dict) else None
            if not isinstance(url, str) or not _DATA_URL.fullmatch(url):
                raise _invalid(f"Invalid '{at}.image_url.url': expected a base64 image data URL.", at)
        else:
            allowed = "'text', 'image_url'" if images else "'text'"
            raise _invalid(f"Invalid value: {kind!r}. Supported values are: {allowed}.", f"{at}.type")


def _validate_calls(calls: Any, where: str) -> list[str]:
    if not isinstance(calls, list):
        raise _invalid(f"Invalid type for '{where}.tool_calls': expected an array.", f"{where}.tool_calls")
    ids: list[str] = []
    for j, call in enumerate(calls):
        at = f"{where}.tool_calls[{j}]"
        function = call.get("function") if isinstance(call, dict) else None
        if (
            not isinstance(call, dict)
            or not isinstance(call.get("id"), str)
            or call.get("type", "function") != "function"
            or not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
            or not isinstance(function.get("arguments"), str)
        ):
            raise _invalid(
                f"Invalid '{at}': expected {{id, type: function, function: {{name, arguments}}}}.", at
            )
        ids.append(call["id"])
    return ids


def _validate_tools(tools: Any) -> None:
    if tools is None:
        return
    if not isinstance(tools, list):
        raise _invalid("Invalid type for 'tools': expected an array.", "tools")
    for k, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict):
            raise _invalid(f"Invalid 'tools[{k}]': expected a function tool.", f"tools[{k}]")
        name = function.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            raise _invalid(
                f"Invalid 'tools[{k}].function.name': string does not match pattern '^[a-zA-Z0-9_-]+$'.",
                f"tools[{k}].function.name",
            )


def _truncated(message: JSONDict, calls: list[JSONDict], budget: int) -> tuple[JSONDict, list[JSONDict]]:
    """``message`` cut after ``budget`` characters of content and arguments (see ``cut_off``)."""
    out = dict(message)
    content = message.get("content")
    if content:
        out["content"] = content[:budget]
        if len(content) > budget:
            out.pop("tool_calls", None)
            return out, []
        budget -= len(content)
    kept: list[JSONDict] = []
    for call in calls:
        arguments = call["function"]["arguments"]
        kept.append({**call, "function": {**call["function"], "arguments": arguments[:budget]}})
        if len(arguments) > budget:
            break
        budget -= len(arguments)
    if kept:
        out["tool_calls"] = kept
    return out, kept


def _estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def prompt_tokens(body: Mapping[str, Any]) -> int:
    """The emulator's tokenizer: a request's prompt tokens (its messages and tools, a token per
    four characters of their JSON plus three per message for the chat template)."""
    messages = body.get("messages") or []
    tools = body.get("tools")
    text = json.dumps(messages) + (json.dumps(tools) if tools else "")
    return _estimate_tokens(text) + 3 * len(messages)


class OpenAIEmulator(LoopbackEmulator):
    """The emulator; use as a context manager (``with OpenAIEmulator(turns) as emu``)."""

    handler_class = LoopbackHandler
    thread_name = "openai-emulator"
    label = "openai emulator"

    def __init__(
        self,
        turns: Iterable[Turn | Reply] = (),
        *,
        faults: Mapping[int, Fault | Sequence[Fault]] | None = None,
        api_key: str | None = None,
        model: str | None = None,
        chunk_chars: int = 4,
        context_window: int | None = None,
    ) -> None:
        """``api_key``: when set, requests must carry ``Authorization: Bearer <api_key>``
        (else 401). ``model``: when set, other models get a 404 ``model_not_found``.
        ``chunk_chars``: how many characters of content or arguments go in one SSE chunk.
        ``context_window``: the model's window, as vLLM serves one: ``/v1/models`` says it as
        ``max_model_len``, ``POST /tokenize`` counts a request's tokens, and a request whose
        prompt (plus its ``max_tokens``) exceeds it gets vLLM's 400 — without using a turn."""
        self._turns = [t if isinstance(t, Turn) else Turn(t) for t in turns]
        self._faults: dict[int, tuple[Fault, ...]] = {
            index: (fault,) if isinstance(fault, Fault) else tuple(fault)
            for index, fault in (faults or {}).items()
        }
        self._api_key = api_key
        self._model = model
        self._chunk_chars = max(1, chunk_chars)
        self.context_window = context_window
        self.refused = 0
        """How many requests the context limit refused."""
        self._lock = threading.Lock()
        self._init_loopback()
        self._answered = 0
        self.requests: list[RecordedRequest] = []
        self.holds: list[bool] = []
        """One per ``hold`` fault met: True when its ``release`` was set, False when it timed out."""

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1`` — what OpenAI clients take as ``base_url``."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def answered(self) -> int:
        """How many scripted turns were consumed."""
        with self._lock:
            return self._answered

    # -- request handling (server threads) --

    def _handle(self, h: LoopbackHandler) -> None:
        raw = h.read_body()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        headers = {k.lower(): v for k, v in h.headers.items()}
        with self._lock:
            index = len(self.requests)
            port = h.client_address[1] if isinstance(h.client_address, tuple) else None
            h.request_id = request_id = f"req_emu_{index:04d}"
            self.requests.append(
                RecordedRequest(
                    h.command, h.path, headers, body, raw, client_port=port, request_id=request_id
                )
            )
        faults = self._faults.get(index, ())
        for fault in faults:
            if fault.kind == "delay":
                self._stopping.wait(fault.seconds)
        try:
            self._route(h, body, raw, headers, faults)
        except _Rejected as rejected:
            self._send_error(h, rejected)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            # The client went away (cancelled or timed out): nothing to answer.
            h.close_connection = True
        # Anything else (a scripted callable that raised, a bug) is answered by the loopback
        # handler: a 500 in ``_crash_reply``'s shape, or a cut connection mid-stream.

    def _crash_reply(self, h: LoopbackHandler, message: str) -> tuple[dict[str, str], bytes]:
        error = {"message": message, "type": "server_error", "param": None, "code": None}
        headers = {"Content-Type": "application/json"}
        if h.request_id is not None:
            headers["x-request-id"] = h.request_id
        return headers, json.dumps({"error": error}).encode()

    def _route(
        self, h: LoopbackHandler, body: Any, raw: bytes, headers: Mapping[str, str], faults: Sequence[Fault]
    ) -> None:
        path = h.path.split("?", 1)[0]
        if h.command == "GET" and path == "/v1/models":
            self._check_auth(headers)
            model = self._model or "emulator-model"
            entry: JSONDict = {"id": model, "object": "model", "created": 0, "owned_by": "rma"}
            if self.context_window is not None:
                entry["max_model_len"] = self.context_window
            self._send_json(h, 200, {"object": "list", "data": [entry]})
            return
        if h.command == "POST" and path == "/tokenize" and self.context_window is not None:
            self._check_auth(headers)
            if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                raise _invalid("tokenize needs 'messages'", "messages")
            count = prompt_tokens(body)
            self._send_json(
                h, 200, {"count": count, "max_model_len": self.context_window, "tokens": [0] * count}
            )
            return
        if h.command != "POST" or path != "/v1/chat/completions":
            raise _Rejected(404, f"Invalid URL ({h.command} {path})", "invalid_request_error")
        self._check_auth(headers)
        if body is None and raw:
            raise _invalid("We could not parse the JSON body of your request.")
        _validate_request(body)
        if self._model is not None and body["model"] != self._model:
            raise _Rejected(
                404,
                f"The model `{body['model']}` does not exist or you do not have access to it.",
                "invalid_request_error",
                None,
                "model_not_found",
            )
        for fault in faults:
            if fault.kind == "status":
                self._send_status_fault(h, fault)
                return
        if self.context_window is not None:
            self._check_window(body)
        with self._lock:
            turn_index = self._answered
        if turn_index >= len(self._turns):
            raise _Rejected(
                400,
                f"openai emulator: no scripted turn left for request #{turn_index + 1}",
                "emulator_script_exhausted",
            )
        cut = next((f.after_chars for f in faults if f.kind == "length"), None)
        message, usage, finish = self._reply(self._turns[turn_index], body, turn_index, cut)
        body_fault = next((f for f in faults if f.kind in ("drop", "malformed")), None)
        if body.get("stream"):
            self._send_stream(h, body, message, usage, finish, body_fault, faults)
        else:
            self._send_completion(h, body, message, usage, finish, body_fault)

    def _check_window(self, body: JSONDict) -> None:
        """vLLM's refusal of a request longer than the window (its message and body, HTTP 400)."""
        window = self.context_window
        assert window is not None
        prompt = prompt_tokens(body)
        wanted = body.get("max_completion_tokens") or body.get("max_tokens")
        if prompt >= window:
            message = (
                f"This model's maximum context length is {window} tokens. However, your request has "
                f"{prompt} input tokens. Please reduce the length of the input messages."
            )
        elif isinstance(wanted, int) and prompt + wanted > window:
            message = (
                f"'max_tokens' or 'max_completion_tokens' is too large: {wanted}. This model's maximum "
                f"context length is {window} tokens and your request has {prompt} input tokens "
                f"({wanted} > {window} - {prompt})."
            )
        else:
            return
        with self._lock:
            self.refused += 1
        raise _Rejected(400, message, "BadRequestError", None, 400)

    def _claim(self) -> None:
        """The turn is answered: counted before the bytes that finish it leave, because a
        client that has read them may send its next request before this thread runs again
        (counting after the write served that request the same turn twice, under load)."""
        with self._lock:
            self._answered += 1

    def _check_auth(self, headers: Mapping[str, str]) -> None:
        if self._api_key is not None and headers.get("authorization") != f"Bearer {self._api_key}":
            raise _Rejected(
                401,
                "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.",
                "invalid_request_error",
                None,
                "invalid_api_key",
            )

    def _reply(
        self, turn: Turn, body: JSONDict, turn_index: int, cut: int | None = None
    ) -> tuple[JSONDict, JSONDict, str]:
        reply = turn.reply
        if callable(reply):
            produced = reply(body)
            if isinstance(produced, Turn):
                turn = produced
                reply = produced.reply
                if callable(reply):
                    raise TypeError("a callable turn must return a message dict or a Turn with a dict reply")
            else:
                reply = produced
        message: JSONDict = {"role": "assistant", "content": reply.get("content")}
        calls = [self._tool_call(c, turn_index, i) for i, c in enumerate(reply.get("tool_calls") or [])]
        if calls:
            message["tool_calls"] = calls
        message["refusal"] = None
        finish = turn.finish_reason or ("tool_calls" if calls else "stop")
        if cut is not None:
            message, calls = _truncated(message, calls, cut)
            finish = "length"
        if turn.usage is not None:
            usage = dict(turn.usage)
        else:
            prompt = (
                prompt_tokens(body)
                if self.context_window is not None
                else _estimate_tokens(json.dumps(body.get("messages")))
            )
            completion = _estimate_tokens(
                (message["content"] or "") + "".join(c["function"]["arguments"] for c in calls)
            )
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": 0},
            }
        return message, usage, finish

    @staticmethod
    def _tool_call(call: Mapping[str, Any], turn_index: int, i: int) -> JSONDict:
        if "function" in call:
            function = dict(call["function"])
            name = function.get("name")
            arguments = function.get("arguments", "")
        else:
            name = call.get("name")
            arguments = call.get("arguments", {})
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        return {
            "id": call.get("id") or f"call_emu{turn_index}x{i}",
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }

    # -- writing --

    def _start(self, h: LoopbackHandler, code: int) -> None:
        h.send_response(code)
        h.send_header("x-request-id", h.request_id or "req_emu_unknown")

    def _send_json(
        self, h: LoopbackHandler, code: int, data: Any, extra: Mapping[str, str] | None = None
    ) -> None:
        payload = json.dumps(data).encode()
        self._start(h, code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(payload)))
        for name, value in (extra or {}).items():
            h.send_header(name, value)
        h.end_headers()
        h.wfile.write(payload)

    def _send_error(self, h: LoopbackHandler, rejected: _Rejected) -> None:
        error = {
            "message": rejected.message,
            "type": rejected.kind,
            "param": rejected.param,
            "code": rejected.code,
        }
        try:
            self._send_json(h, rejected.status, {"error": error})
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            h.close_connection = True

    def _send_status_fault(self, h: LoopbackHandler, fault: Fault) -> None:
        message, kind, code = _STATUS_ERRORS.get(fault.status, ("Error.", "server_error", None))
        extra: dict[str, str] = {}
        if fault.retry_after is not None:
            extra["Retry-After"] = fault.retry_after
        if fault.retry_after_ms is not None:
            extra["retry-after-ms"] = fault.retry_after_ms
        error = {"message": fault.message or message, "type": kind, "param": None, "code": code}
        self._send_json(h, fault.status, {"error": error}, extra)

    def _completion_base(self, body: JSONDict, obj: str) -> JSONDict:
        with self._lock:
            index = len(self.requests)
        return {
            "id": f"chatcmpl-emu{index:06d}",
            "object": obj,
            "created": int(time.time()),
            "model": body["model"],
            "system_fingerprint": "fp_emulator",
        }

    def _send_completion(
        self,
        h: LoopbackHandler,
        body: JSONDict,
        message: JSONDict,
        usage: JSONDict,
        finish: str,
        fault: Fault | None,
    ) -> None:
        response = {
            **self._completion_base(body, "chat.completion"),
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
            "usage": usage,
        }
        payload = json.dumps(response).encode()
        if fault is not None and fault.kind == "malformed":
            payload = payload[: len(payload) // 2]
        self._start(h, 200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(payload)))
        h.end_headers()
        if fault is not None and fault.kind == "drop":
            h.wfile.write(payload[: len(payload) // 2])
            self._drop(h)
            return
        if fault is None:
            self._claim()
        h.wfile.write(payload)

    def _chunks(self, body: JSONDict, message: JSONDict, usage: JSONDict, finish: str) -> list[JSONDict]:
        base = self._completion_base(body, "chat.completion.chunk")
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True

        def chunk(delta: JSONDict, finish_reason: str | None = None) -> JSONDict:
            out = {
                **base,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
            }
            if include_usage:
                out["usage"] = None
            return out

        step = self._chunk_chars
        calls = message.get("tool_calls") or []
        content = message.get("content")
        chunks = [chunk({"role": "assistant", "content": "" if content is not None or not calls else None})]
        if content:
            chunks.extend(chunk({"content": content[i : i + step]}) for i in range(0, len(content), step))
        for index, call in enumerate(calls):
            function = call["function"]
            first = {"index": index, "id": call["id"], "type": "function"}
            chunks.append(
                chunk({"tool_calls": [{**first, "function": {"name": function["name"], "arguments": ""}}]})
            )
            arguments = function["arguments"]
            chunks.extend(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments[i : i + step]}}]})
                for i in range(0, len(arguments), step)
            )
        chunks.append(chunk({}, finish))
        if include_usage:
            chunks.append({**base, "choices": [], "usage": usage})
        return chunks

    def _send_stream(
        self,
        h: LoopbackHandler,
        body: JSONDict,
        message: JSONDict,
        usage: JSONDict,
        finish: str,
        fault: Fault | None,
        faults: Sequence[Fault] = (),
    ) -> None:
        pace_s = sum(f.seconds for f in faults if f.kind == "pace")
        held = next((f for f in faults if f.kind == "hold"), None)
        self._start(h, 200)
        h.send_header("Content-Type", "text/event-stream; charset=utf-8")
        h.send_header("Cache-Control", "no-cache")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()

        def write(data: bytes) -> None:
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

        chunks = self._chunks(body, message, usage, finish)
        # A fault asked for past the last chunk still happens, just before [DONE].
        cut = min(max(0, fault.after_chunks), len(chunks)) if fault is not None else -1
        # The chunk that carries finish_reason ends the reply for a client (usage may follow).
        finishing = next(n for n, c in enumerate(chunks) if c["choices"] and c["choices"][0]["finish_reason"])
        for n, chunk in enumerate([*chunks, None]):
            if held is not None and held.release is not None and n == held.after_chunks:
                released = held.release.wait(held.seconds)
                with self._lock:
                    self.holds.append(released)
            if pace_s:
                self._stopping.wait(pace_s)
            if n == cut and fault is not None:
                if fault.kind == "drop":
                    self._drop(h)
                    return
                write(b'data: {"id": "chatcmpl-broken", "choices": [\n\n')
            if n == finishing and fault is None:
                self._claim()
            if chunk is not None:
                write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        write(b"data: [DONE]\n\n")
        h.wfile.write(b"0\r\n\r\n")

    @staticmethod
    def _drop(h: LoopbackHandler) -> None:
        h.close_connection = True
        with contextlib.suppress(OSError):
            h.connection.shutdown(socket.SHUT_RDWR)
