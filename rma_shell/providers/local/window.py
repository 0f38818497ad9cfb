"""The context window's I/O for Local: asking the server how large it is, counting tokens,
summaries by the model, and reading a refusal.

``discover`` tries, in order, what the common servers say about the model they serve:

- vLLM: ``GET {base_url}/models`` lists each model with ``max_model_len``; vLLM also counts a
  request's tokens at ``POST {root}/tokenize`` (``{"model", "messages"}`` → ``{"count"}``),
  which ``count_tokens`` uses;
- llama.cpp's server: ``GET {root}/props`` → ``default_generation_settings.n_ctx`` (or ``n_ctx``);
- Ollama: ``POST {root}/api/show`` ``{"model"}`` → ``model_info["<arch>.context_length"]`` — the
  model's trained length; Ollama itself runs with its ``num_ctx`` setting, which may be smaller.

``{root}`` is the base URL without a trailing ``/v1``. Each probe is one short request; the
first that answers with a number wins, and none answering means no window (the policy stays
off until a refusal says one).

``counted`` feeds a planned request's server count back to the policy, ``summarized_by_model``
makes the summary call the policy asks for, ``refusal`` reads a length refusal and ``hooked``
applies the user's hook. Not the policy (``rma.providers.local.context``, which decides) and
not the chat request path (``rma_shell.providers.local.provider``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import attrs
import httpx
from returns.result import Failure, Result, Success

from rma.errors import ContextWindowExceeded, HttpError, SessionError
from rma.providers.local.context import count, messages_of, refusal_of
from rma.providers.local.conversation import Conversation
from rma.providers.local.request import measured, summarized, summary_request
from rma.vocabulary import JSON
from rma_shell.logging import log_fields

logger = logging.getLogger("rma.providers.local")

ContextHook = Callable[[list[JSON]], Sequence[JSON]]
Send = Callable[[dict[str, JSON]], Awaitable[Result[JSON, SessionError]]]
"""``hook(messages) -> messages``: rewrites the messages of each request just before it is sent
(after the context policy planned it). Its result goes out as is; the history keeps the original."""

_PROBE_TIMEOUT_S = 5.0


@attrs.frozen
class Discovered:
    """What a server said: the window (tokens) and which endpoint said it, and where it counts
    tokens (vLLM's ``/tokenize``), if anywhere."""

    window: int | None = None
    source: str | None = None
    tokenize_url: str | None = None


def root_of(base_url: str) -> str:
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def _positive(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def window_from_models(body: JSON, model: str | None) -> int | None:
    """vLLM's ``/v1/models``: the ``max_model_len`` of ``model`` (or of the only model served)."""
    data = body.get("data") if isinstance(body, Mapping) else None
    if not isinstance(data, list):
        return None
    entries = [e for e in data if isinstance(e, Mapping)]
    chosen = [e for e in entries if e.get("id") == model] or (entries if len(entries) == 1 else [])
    return _positive(chosen[0].get("max_model_len")) if chosen else None


def window_from_props(body: JSON) -> int | None:
    """llama.cpp's ``/props``: ``default_generation_settings.n_ctx``, else a top-level ``n_ctx``."""
    if not isinstance(body, Mapping):
        return None
    settings = body.get("default_generation_settings")
    if isinstance(settings, Mapping) and _positive(settings.get("n_ctx")):
        return _positive(settings.get("n_ctx"))
    return _positive(body.get("n_ctx"))


def window_from_show(body: JSON) -> int | None:
    """Ollama's ``/api/show``: the ``<architecture>.context_length`` of ``model_info``."""
    info = body.get("model_info") if isinstance(body, Mapping) else None
    if not isinstance(info, Mapping):
        return None
    for key, value in info.items():
        if isinstance(key, str) and key.endswith(".context_length") and _positive(value):
            return _positive(value)
    return None


async def _json(
    client: httpx.AsyncClient, method: str, url: str, headers: Mapping[str, str], body: Any = None
) -> JSON:
    try:
        if method == "GET":
            response = await client.get(url, headers=headers, timeout=_PROBE_TIMEOUT_S)
        else:
            response = await client.post(url, headers=headers, json=body, timeout=_PROBE_TIMEOUT_S)
    except httpx.HTTPError:
        return None
    if not 200 <= response.status_code < 300:
        return None
    try:
        decoded: JSON = json.loads(response.content)
    except ValueError:
        return None
    return decoded


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


async def discover(
    base_url: str, model: str | None, api_key: str | None, client: httpx.AsyncClient | None = None
) -> Discovered:
    """The window the server at ``base_url`` says for ``model``, and where it counts tokens."""
    own = client is None
    http = client if client is not None else httpx.AsyncClient(trust_env=False)
    headers = _headers(api_key)
    root = root_of(base_url)
    try:
        models = await _json(http, "GET", base_url.rstrip("/") + "/models", headers)
        window = window_from_models(models, model)
        if window is not None:
            return Discovered(window, "vllm /v1/models max_model_len", root + "/tokenize")
        window = window_from_props(await _json(http, "GET", root + "/props", headers))
        if window is not None:
            return Discovered(window, "llama.cpp /props n_ctx")
        if model is not None:
            show = await _json(http, "POST", root + "/api/show", headers, {"model": model})
            window = window_from_show(show)
            if window is not None:
                return Discovered(window, "ollama /api/show context_length")
        return Discovered()
    finally:
        if own:
            await http.aclose()


async def count_tokens(
    url: str,
    model: str | None,
    messages: Sequence[JSON],
    api_key: str | None,
    client: httpx.AsyncClient | None,
) -> int | None:
    """The prompt tokens of ``messages`` by the server's own tokenizer (vLLM's ``/tokenize``
    applies the chat template), or None when it does not answer with a count."""
    own = client is None
    http = client if client is not None else httpx.AsyncClient(trust_env=False)
    try:
        body: dict[str, JSON] = {"messages": list(messages)}
        if model is not None:
            body["model"] = model
        answer = await _json(http, "POST", url, _headers(api_key), body)
    finally:
        if own:
            await http.aclose()
    return _positive(answer.get("count")) if isinstance(answer, Mapping) else None


async def counted(
    conv: Conversation, tokenize_url: str, api_key: str | None, client: httpx.AsyncClient | None
) -> tuple[Conversation, tuple[JSON, ...]]:
    """The planned request counted by the server's tokenizer when the estimate comes near the
    window (past half of it): the count calibrates the policy, which may plan again (its events)."""
    ctx = conv.context
    if ctx is None or count(ctx, len(conv.history)) * 2 < ctx.window:
        return conv, ()
    tokens = await count_tokens(tokenize_url, conv.model, messages_of(ctx, conv.history), api_key, client)
    if tokens is None:
        return conv, ()
    return measured(conv, tokens)


async def summarized_by_model(
    conv: Conversation, send: Send, *, session_id: str | None = None
) -> tuple[Conversation, tuple[JSON, ...]]:
    """When the plan dropped turns no summary covers yet, one more model call condenses them
    (``summary_request``); the summary then rides after the system prompt. A failed call leaves
    those turns unsummarized (logged) and never fails the turn."""
    request = summary_request(conv)
    if request is None:
        return conv, ()
    text = reply_text(await send(request))
    if text is None:
        logger.warning(
            "the summary of the dropped turns failed; they are left out unsummarized",
            extra=log_fields(session_id=session_id, provider="local"),
        )
    return summarized(conv, text)


def hooked(hook: ContextHook, body: dict[str, JSON]) -> dict[str, JSON]:
    """The request body with its messages as the user's hook rewrote them."""
    messages = body.get("messages")
    return {**body, "messages": list(hook(list(messages) if isinstance(messages, list) else []))}


def reply_text(response: Result[JSON, SessionError]) -> str | None:
    """The text of a chat-completions reply (the summary), or None when there is none."""
    if not isinstance(response, Success):
        return None
    body = response.unwrap()
    choices = body.get("choices") if isinstance(body, Mapping) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, Mapping) else None
    content = message.get("content") if isinstance(message, Mapping) else None
    return content if isinstance(content, str) and content.strip() else None


def refusal(response: Result[JSON, SessionError]) -> tuple[int | None, int | None] | None:
    """(window, tokens) when the server refused the request for its length (a 400 or 413 whose
    body says so: ``rma.providers.local.context.refusal_of``), else None."""
    if not isinstance(response, Failure):
        return None
    error = response.failure()
    if isinstance(error, HttpError) and error.status in (400, 413):
        return refusal_of(error.body)
    body = getattr(error, "payload", None)  # an error body in a 2xx answer, or a chat= Failure
    return refusal_of(body) if body is not None else None


def exceeded(window: int | None, tokens: int | None, detail: str) -> ContextWindowExceeded:
    return ContextWindowExceeded(window=window, tokens=tokens, host="local", detail=detail)
