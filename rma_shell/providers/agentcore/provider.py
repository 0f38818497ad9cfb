"""The Bedrock AgentCore Harness provider: one signed, streamed InvokeHarness per turn.

``BedrockAgentCore(harness_arn=...)`` with ``run(..., runtime_session_id=...)`` pairs the pure codec
(``rma.providers.agentcore.codec``) with ``AgentCoreClient``. The loop runs server-side in
the harness; each turn is one ``InvokeHarness`` whose event-stream frames are forwarded live
to the handler as they arrive (B-7, B-28). The conversation lives in the runtime session, so a
tool resume re-sends the assistant's toolUse blocks with the results (B-6), and a reattach
(``session_id=``) simply invokes the same session again with ``resumed`` true (B-14).

Retries (B-9…B-12 Better): a turn is re-sent, with backoff, only when that is safe — a
throttled or transient-5xx answer, a connection failure, or a stream that ended before its
``messageStop`` (B-10, default 2 retries; then ``early_termination``). Never after any other
4xx, and never after an exception frame inside a 200 (the server said the turn failed).
A run's timeout (or its cancellation) cancels the request client-side and then stops the
runtime session with ``StopRuntimeSession`` (``stop_remote``, issue #15), so the harness does
not run on (and bill) up to its own ``timeoutSeconds`` (wire §5.4); ``invoke_timeout`` still
bounds each invocation on the server.
"""

from __future__ import annotations

import logging
import os
import random
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import anyio
import attrs
import httpx
from returns.result import Failure, Result, Success

from rma.errors import (
    EarlyTermination,
    HttpError,
    InvalidOpts,
    MalformedFrame,
    ProviderError,
    SessionError,
    StreamDropped,
    StreamException,
    TransportError,
    TurnLost,
)
from rma.live import attempt_discarded_event
from rma.origin import with_origin
from rma.provider import Input
from rma.providers.agentcore.codec import (
    CODEC,
    BedrockAgentCoreCodec,
    check_endpoint_name,
    check_overrides,
    check_region,
    check_runtime_session_id,
    control_plane_url,
    data_plane_url,
    invoke_body,
    is_retryable,
    parse_harness_arn,
    tool_declarations,
)
from rma.providers.agentcore.commands import DEFAULT_MOUNT_PATH, CommandResult
from rma.retry import is_transient_error, next_delay_s
from rma.session.option_checks import check_count, check_seconds, check_url
from rma.vocabulary import JSON
from rma_shell.artifacts.session_storage import SessionStorage
from rma_shell.aws_credentials import CredentialSource, resolve_credential_source
from rma_shell.logging import log_fields
from rma_shell.options import refuses_unknown_options, renamed_options
from rma_shell.providers.agentcore.client import (
    DEFAULT_IDLE_TIMEOUT_S,
    AgentCoreClient,
    OnOutput,
)
from rma_shell.providers.base import LiveSink, OpenRequest, PollOutcome, Provider, StopReport
from rma_shell.seams import Seams, pick
from rma_shell.telemetry import Telemetry
from rma_shell.transport.http import of_another_loop, running_loop

logger = logging.getLogger("rma.providers.bedrock_agentcore")

_UNSET: Any = object()


def new_runtime_session_id(prefix: str = "rma-") -> str:
    """A fresh runtime session id that satisfies every operation's rule (wire §4): the
    prefix plus 32 characters of unpadded base64url from 24 random bytes."""
    token = secrets.token_urlsafe(24)
    # base64url may start with '-' or '_' only after the prefix; a prefix is alphanumeric-led.
    value = f"{prefix}{token}"
    if not value[0].isalnum():
        value = "s" + value
    return value[:100]


@attrs.frozen
class AgentCoreConn:
    """One runtime session of one harness: what each invoke needs."""

    runtime_session_id: str
    harness_arn: str
    resumed: bool = False
    endpoint_name: str | None = None
    user_id: str | None = None
    overrides: Mapping[str, JSON] = attrs.field(factory=dict)
    client: AgentCoreClient | None = attrs.field(default=None, eq=False, repr=False)
    in_doubt: bool = False
    """The next invoke re-asks a turn the harness may already have taken (``resume``)."""


class BedrockAgentCore(Provider[AgentCoreConn]):
    """An agent loop run by an AWS Bedrock AgentCore harness.

    Per run only: ``runtime_session_id`` (required for a fresh session: 33–100 characters,
    alphanumeric first, then ``[A-Za-z0-9_-]``; see ``new_runtime_session_id``) — or
    ``session_id=`` to reattach to an existing one. It names one conversation, so it is never
    a provider setting.

    Per provider or per run (a run's wins; ``run(..., harness_arn=...)``; a provision handle
    ``harness={"harness_arn", "harness_id"}`` is accepted too, B-4): ``harness_arn``
    (required), ``endpoint_name`` (sent as the ``qualifier``; default: the DEFAULT endpoint), ``user_id``
    (the runtime user-id header), and the per-invocation overrides ``invoke_timeout`` (whole
    seconds: the harness's ``timeoutSeconds`` for the invocation),
    ``max_iterations``, ``max_tokens``, ``model``, ``system_prompt``, ``tools`` (client tools
    become ``inline_function`` declarations), ``skills``, ``allowed_tools``, ``actor_id``.

    AWS settings resolve explicit option > ``app_config`` > environment (K-4/K-5):
    ``aws_access_key_id``, ``aws_secret_access_key``, ``aws_session_token``, ``aws_region``
    (the harness ARN's region when none is given explicitly, so the signature scope always
    matches the host). With the ``aws`` extra installed and no keys given, botocore's full
    chain (profiles, SSO, container and instance roles) is used, refreshed as it expires.
    ``data_url``/``control_url`` override the hosts derived from the region (``fips``,
    ``dualstack`` select those variants); without them botocore's endpoint variables are read
    (``AWS_ENDPOINT_URL_BEDROCK_AGENTCORE``, ``AWS_ENDPOINT_URL_BEDROCK_AGENTCORE_CONTROL``,
    then ``AWS_ENDPOINT_URL``). ``idle_timeout`` (seconds, default 300) bounds silence
    within a turn's stream; ``max_retries`` (default 2) bounds re-sends of a turn, with a
    backoff of ``backoff_base``…``backoff_cap`` seconds.
    """

    codec: BedrockAgentCoreCodec = CODEC
    run_options = frozenset(
        {
            "runtime_session_id",
            "harness_arn",
            "harness",
            "endpoint_name",
            "user_id",
            "invoke_timeout",
            "max_iterations",
            "max_tokens",
            "model",
            "system_prompt",
            "tools",
            "skills",
            "allowed_tools",
            "actor_id",
        }
    )

    @refuses_unknown_options
    def __init__(
        self,
        *,
        harness_arn: str | None = None,
        endpoint_name: str | None = None,
        user_id: str | None = None,
        harness: Mapping[str, Any] | None = None,
        invoke_timeout: int | None = None,
        max_iterations: int | None = None,
        max_tokens: int | None = None,
        model: Mapping[str, Any] | None = None,
        system_prompt: str | Sequence[Mapping[str, Any]] | None = None,
        tools: Sequence[object] | None = None,
        skills: Sequence[Mapping[str, Any]] | None = None,
        allowed_tools: Sequence[str] | None = None,
        actor_id: str | None = None,
        aws_access_key_id: Any = _UNSET,
        aws_secret_access_key: Any = _UNSET,
        aws_session_token: Any = _UNSET,
        aws_region: Any = _UNSET,
        app_config: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        credentials: CredentialSource | None = None,
        data_url: str | None = None,
        control_url: str | None = None,
        fips: bool = False,
        dualstack: bool = False,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT_S,
        max_retries: int = 2,
        backoff_base: float = 0.5,
        backoff_cap: float = 20.0,
        http_client: httpx.AsyncClient | None = None,
        client: AgentCoreClient | None = None,
        telemetry: Telemetry | None = None,
        _seams: Seams | None = None,
    ) -> None:
        self._telemetry = telemetry
        self.defaults: dict[str, Any] = {
            "harness_arn": harness_arn,
            "endpoint_name": endpoint_name,
            "user_id": user_id,
            "harness": harness,
            "invoke_timeout": invoke_timeout,
            "max_iterations": max_iterations,
            "max_tokens": max_tokens,
            "model": model,
            "system_prompt": system_prompt,
            "tools": tools,
            "skills": skills,
            "allowed_tools": allowed_tools,
            "actor_id": actor_id,
        }
        given = {
            "aws_access_key_id": aws_access_key_id,
            "aws_secret_access_key": aws_secret_access_key,
            "aws_session_token": aws_session_token,
            "aws_region": aws_region,
        }
        self._aws_opts = {k: v for k, v in given.items() if v is not _UNSET}
        self._app = dict(app_config or {})
        self._env = env
        self._credentials = credentials
        self._data_url = data_url
        self._control_url = control_url
        self._fips = fips
        self._dualstack = dualstack
        self.idle_timeout = idle_timeout
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self._http_client = http_client
        self._client = client
        self._injected = client is not None
        self._loop: object | None = None  # the event loop the built client's connections belong to
        self._seams = _seams
        self._rand: Callable[[], float] = pick(_seams, "rand", random.random)
        self._sleep: Callable[[float], Awaitable[None]] = pick(_seams, "sleep", anyio.sleep)

    def __repr__(self) -> str:
        return (
            f"BedrockAgentCore(harness_arn={self.defaults['harness_arn']!r}, "
            f"endpoint_name={self.defaults['endpoint_name']!r})"
        )

    # -- settings ------------------------------------------------------------------------

    def _env_map(self) -> Mapping[str, str]:
        return self._env if self._env is not None else os.environ

    def _region(self, arn_region: str | None) -> Result[str, InvalidOpts]:
        explicit = self._aws_opts.get("aws_region", self._app.get("aws_region"))
        if explicit is not None:
            return check_region(explicit)
        if arn_region is not None:
            return Success(arn_region)
        env = self._env_map()
        for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
            if env.get(name):
                return check_region(env[name])
        return Success("us-east-1")

    async def _credential_source(self, region: str) -> Result[CredentialSource, SessionError]:
        """Explicit options > app config > ``AWS_*`` environment; without keys and with the
        ``aws`` extra, botocore's chain (profiles, SSO, roles), refreshed as it expires."""
        if self._credentials is not None:
            return Success(self._credentials)
        opts = {**self._aws_opts, "aws_region": region}
        source = await resolve_credential_source(opts=opts, app=self._app, env=self._env_map())
        if isinstance(source, Failure):
            return Failure(source.failure())
        self._credentials = source.unwrap()
        return Success(self._credentials)

    def _check_settings(self) -> Result[None, InvalidOpts]:
        """Connection and retry settings, before any request: URLs with a possible port,
        counts and durations that are numbers (never NaN or negative)."""
        for checked in (
            check_count(self.max_retries, "max_retries"),
            check_seconds(self.idle_timeout, "idle_timeout", allow_inf=True),
            check_seconds(self.backoff_base, "backoff_base", allow_zero=True),
            check_seconds(self.backoff_cap, "backoff_cap", allow_zero=True),
            *(
                check_url(url, name)
                for name, url in (("data_url", self._data_url), ("control_url", self._control_url))
                if url is not None
            ),
        ):
            if isinstance(checked, Failure):
                return Failure(checked.failure())
        return Success(None)

    def _endpoint(self, explicit: str | None, variable: str) -> Result[str | None, InvalidOpts]:
        """An explicit URL, else botocore's endpoint variables (the service's own, then
        ``AWS_ENDPOINT_URL``; both ignored under ``AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true``),
        else None: the host derived from the region."""
        if explicit:
            return Success(explicit)
        env = self._env_map()
        if env.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").lower() == "true":
            return Success(None)
        for name in (variable, "AWS_ENDPOINT_URL"):
            url = env.get(name)
            if url:
                if not url.startswith(("http://", "https://")):
                    return Failure(InvalidOpts(option=name, detail=f"must be an http(s) URL, got {url!r}"))
                return Success(url)
        return Success(None)

    async def client_for(self, region: str) -> Result[AgentCoreClient, SessionError]:
        """The data/control-plane client for ``region``, built once (again under a new event
        loop: connections belong to the loop that opened them)."""
        loop = running_loop()
        if not self._injected and of_another_loop(self._loop, loop):
            self._client = None
        if loop is not None:
            self._loop = loop
        if self._client is not None:
            return Success(self._client)
        source = await self._credential_source(region)
        if isinstance(source, Failure):
            return Failure(source.failure())
        data_url = self._endpoint(self._data_url, "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE")
        control_url = self._endpoint(self._control_url, "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE_CONTROL")
        for url in (data_url, control_url):
            if isinstance(url, Failure):
                return Failure(url.failure())
        self._client = AgentCoreClient(
            region=region,
            credentials=source.unwrap(),
            data_url=data_url.unwrap() or data_plane_url(region, fips=self._fips, dualstack=self._dualstack),
            control_url=control_url.unwrap()
            or control_plane_url(region, fips=self._fips, dualstack=self._dualstack),
            http_client=self._http_client,
            idle_timeout=self.idle_timeout,
            telemetry=self._telemetry,
            _seams=self._seams,
        )
        return Success(self._client)

    async def control_client(self) -> Result[AgentCoreClient, SessionError]:
        """The client for provisioning: the region is ``aws_region`` (option, app config),
        else the harness ARN's, else ``AWS_REGION``/``AWS_DEFAULT_REGION``, else us-east-1."""
        settings = self._check_settings()
        if isinstance(settings, Failure):
            return Failure(settings.failure())
        arn = parse_harness_arn(self.defaults.get("harness_arn") or "")
        region = self._region(arn.unwrap().region if isinstance(arn, Success) else None)
        if isinstance(region, Failure):
            return Failure(region.failure())
        return await self.client_for(region.unwrap())

    # -- lifecycle -----------------------------------------------------------------------

    def declared_tools(self, request: OpenRequest) -> Sequence[object]:
        tools = request.extra.get("tools")
        if tools is None:
            tools = self.defaults.get("tools")
        return tuple(tools) if isinstance(tools, Sequence) and not isinstance(tools, str) else ()

    def snapshot(self, conn: AgentCoreConn) -> Mapping[str, JSON] | None:
        """The runtime session id: the harness keeps the conversation."""
        return {"runtime_session_id": conn.runtime_session_id}

    async def restore(
        self, request: OpenRequest, snapshot: Mapping[str, JSON]
    ) -> Result[AgentCoreConn, SessionError]:
        session = snapshot.get("runtime_session_id")
        if not isinstance(session, str) or not session:
            return Failure(
                InvalidOpts("journal", "the journaled AgentCore snapshot has no runtime session id")
            )
        extra = {k: v for k, v in request.extra.items() if k != "runtime_session_id"}
        return await self.open(attrs.evolve(request, session_id=session, extra=extra))

    def turn_in_doubt(self, conn: AgentCoreConn) -> AgentCoreConn:
        """The turn in flight is asked again with the same messages. If the harness had taken
        it, it refuses them (they repeat what its conversation holds) — and that refusal is
        the only trace of the lost reply the wire gives (no listing; a reattach returns
        nothing): the poll then fails with ``TurnLost`` (docs/durable.md)."""
        return attrs.evolve(conn, in_doubt=True)

    async def open(self, request: OpenRequest) -> Result[AgentCoreConn, SessionError]:
        """B-2: validate everything before any network call; no call is made here."""
        opts = {**{k: v for k, v in self.defaults.items() if v is not None}}
        opts.update({k: v for k, v in request.extra.items() if k in self.run_options and v is not None})
        handle = opts.get("harness")
        arn_value = opts.get("harness_arn")
        if arn_value is None and handle is not None:
            # B-4: a provision handle — a mapping or an object with ``harness_arn``.
            arn_value = (
                handle.get("harness_arn")
                if isinstance(handle, Mapping)
                else getattr(handle, "harness_arn", None)
            )
        if arn_value is None:
            return Failure(InvalidOpts(option="harness_arn", detail="Bedrock AgentCore needs harness_arn="))
        arn = parse_harness_arn(arn_value)
        if isinstance(arn, Failure):
            return Failure(arn.failure())
        fresh = opts.get("runtime_session_id")
        if request.session_id is not None and fresh is not None and fresh != request.session_id:
            return Failure(
                InvalidOpts(
                    option="runtime_session_id",
                    detail="names a fresh session, and session_id= reattaches to another: give one",
                )
            )
        if request.session_id is not None:  # B-2: a reattach
            session = check_runtime_session_id(request.session_id, option="session_id")
            resumed = True
        elif opts.get("runtime_session_id") is not None:
            session = check_runtime_session_id(opts["runtime_session_id"])
            resumed = False
        else:
            return Failure(
                InvalidOpts(
                    option="runtime_session_id",
                    detail="a fresh AgentCore session needs runtime_session_id= (33–100 characters; "
                    "new_runtime_session_id() makes one), or session_id= to reattach",
                )
            )
        if isinstance(session, Failure):
            return Failure(session.failure())
        endpoint = check_endpoint_name(opts.get("endpoint_name"))
        if isinstance(endpoint, Failure):
            return Failure(endpoint.failure())
        user_id = opts.get("user_id")
        if user_id is not None and (not isinstance(user_id, str) or not user_id):
            return Failure(InvalidOpts(option="user_id", detail="must be a non-empty string"))
        if request.extra.get("output_tool") is not None:  # output_type='s terminal tool
            opts["tools"] = [*(opts.get("tools") or ()), request.extra["output_tool"]]
        if opts.get("tools") is not None:
            tools = tool_declarations(list(opts["tools"]))
            if isinstance(tools, Failure):
                return Failure(tools.failure())
            opts["tools"] = tools.unwrap()
        overrides = check_overrides(opts)
        if isinstance(overrides, Failure):
            return Failure(overrides.failure())
        settings = self._check_settings()
        if isinstance(settings, Failure):
            return Failure(settings.failure())
        region = self._region(arn.unwrap().region)
        if isinstance(region, Failure):
            return Failure(region.failure())
        client = await self.client_for(region.unwrap())
        if isinstance(client, Failure):
            return Failure(client.failure())
        return Success(
            AgentCoreConn(
                runtime_session_id=session.unwrap(),
                harness_arn=arn.unwrap().arn,
                resumed=resumed,
                endpoint_name=endpoint.unwrap(),
                user_id=user_id,
                overrides=overrides.unwrap(),
                client=client.unwrap(),
            )
        )

    def session_id(self, conn: AgentCoreConn) -> str | None:
        return conn.runtime_session_id  # B-3

    def resumed(self, conn: AgentCoreConn) -> bool:
        return conn.resumed

    def describe(self, conn: AgentCoreConn) -> Mapping[str, JSON]:
        out: dict[str, JSON] = {"gen_ai_provider": "aws.bedrock"}
        parsed = parse_harness_arn(conn.harness_arn)
        if isinstance(parsed, Success):
            out["agent_id"] = parsed.unwrap().harness_id
            out["agent_name"] = parsed.unwrap().harness_id.rsplit("-", 1)[0]
        model = conn.overrides.get("model")
        if isinstance(model, Mapping):
            for config in model.values():
                if isinstance(config, Mapping) and isinstance(config.get("modelId"), str):
                    out["model"] = config["modelId"]
        if conn.client is not None:
            try:
                url = httpx.URL(conn.client.data_url)
            except (httpx.InvalidURL, TypeError, ValueError):
                return out
            out["server_address"] = url.host or None
            out["server_port"] = url.port or (443 if url.scheme == "https" else 80)
        return out

    async def aclose(self, conn: AgentCoreConn) -> None:
        await anyio.lowlevel.checkpoint()

    async def close(self) -> None:
        """Close the client this provider built (providers are reusable across runs)."""
        client = self._client
        if client is not None:
            if not self._injected:
                self._client = None  # built again on next use: its connections belong to one loop
            await client.aclose()

    # -- turns ---------------------------------------------------------------------------

    async def poll_turn(
        self, conn: AgentCoreConn, input: Input, live: LiveSink | None
    ) -> PollOutcome[AgentCoreConn]:
        if conn.in_doubt:
            return _in_doubt(await self.poll_turn(attrs.evolve(conn, in_doubt=False), input, live))
        client = conn.client
        if client is None:
            return PollOutcome(Failure(ProviderError(detail="the AgentCore connection has no client")), conn)
        if (
            not isinstance(input, Mapping)
            or not isinstance(input.get("messages"), list)
            or not input["messages"]
        ):
            return PollOutcome(Failure(ProviderError(detail="refusing to invoke with no messages")), conn)
        body = invoke_body(input, conn.overrides)
        attempt = 0
        sent = 0  # frames the current attempt forwarded live

        async def forward(event: JSON) -> None:
            nonlocal sent
            sent += 1
            assert live is not None
            await live(event)

        taken = False  # an earlier attempt's 200 stream was cut: the harness had the turn
        while True:
            sent = 0
            got, retry_headers = await client.invoke_harness_attempt(
                harness_arn=conn.harness_arn,
                runtime_session_id=conn.runtime_session_id,
                body=body,
                endpoint_name=conn.endpoint_name,
                user_id=conn.user_id,
                on_event=forward if live is not None else None,
            )
            if isinstance(got, Success):
                invoked = got.unwrap()
                if invoked.complete:
                    return PollOutcome(Success(invoked.events), conn)
                error: SessionError = StreamDropped(detail="the stream ended before messageStop")
                if invoked.url is not None:
                    error = with_origin(error, url=invoked.url, request_id=invoked.request_id)
            else:
                error = got.failure()
            if sent and live is not None:
                # What this attempt forwarded belongs to no turn: say so, retried or not.
                await live(attempt_discarded_event(attempt, error.kind))
            if taken and _refused(error):
                # The retry of a cut stream's turn refused as a repeat: the harness had kept the
                # turn (it runs to its end server-side), and its reply is not readable back.
                return PollOutcome(Failure(_lost(conn, error, stream_dropped=True)), conn)
            if not _retryable(error):
                return PollOutcome(Failure(error), conn)
            taken = taken or isinstance(error, StreamDropped | MalformedFrame)
            if attempt >= self.max_retries:
                if isinstance(error, StreamDropped):
                    error = EarlyTermination(
                        detail=error.detail,
                        attempts=attempt + 1,
                        host=error.host,
                        request_id=error.request_id,
                    )
                return PollOutcome(Failure(error), conn)
            delay = next_delay_s(  # issue #12: the server's Retry-After, when it sent one
                attempt,
                headers=retry_headers,
                now_epoch_s=client.now_epoch_s(),
                jitter=min(1.0, max(0.0, self._rand())),
                base_s=self.backoff_base,
                cap_s=self.backoff_cap,
            )
            logger.warning(
                "InvokeHarness attempt %d of %d failed (%s); retrying in %.2fs",
                attempt + 1,
                self.max_retries + 1,
                error.message,
                delay,
                extra=log_fields(
                    session_id=conn.runtime_session_id,
                    provider="bedrock_agentcore",
                    attempt=attempt,
                    error=error.kind,
                    delay_s=delay,
                ),
            )
            await self._sleep(delay)
            attempt += 1

    async def stop_remote(self, conn: AgentCoreConn) -> Result[StopReport, SessionError]:
        """Issue #15: ``StopRuntimeSession`` for this run's runtime session, on the harness ARN
        (the target ``run_command`` uses) and its endpoint; a 200 is the confirmation."""
        client = conn.client
        if client is None:
            return Failure(ProviderError(detail="the AgentCore connection has no client"))
        stopped = await client.stop_runtime_session(
            runtime_arn=conn.harness_arn,
            runtime_session_id=conn.runtime_session_id,
            endpoint_name=conn.endpoint_name,
        )
        if isinstance(stopped, Failure):
            return Failure(stopped.failure())
        status = stopped.unwrap()
        if status != 200:  # the model's answer is 200; another 2xx confirms nothing documented
            return Success(StopReport("unconfirmed", f"StopRuntimeSession answered {status}"))
        return Success(StopReport("confirmed"))

    # -- runtime commands ----------------------------------------------------------------

    @renamed_options("BedrockAgentCore.run_command")
    async def run_command(
        self,
        command: str,
        *,
        runtime_session_id: str,
        timeout: int | None = None,
        harness_arn: str | None = None,
        runtime_arn: str | None = None,
        endpoint_name: str | None = None,
        on_output: OnOutput | None = None,
    ) -> Result[CommandResult, SessionError]:
        """Run a shell command in a runtime session's microVM (B-85…B-88).

        The target is the harness ARN (this provider's unless given) — the reference's
        live-verified choice — or ``runtime_arn``, the runtime behind it (wire §7 "Which
        ARN"). ``on_output(stream, text)`` receives stdout/stderr pieces as they arrive. A
        non-zero exit or ``TIMED_OUT`` is a ``CommandResult``, not an error. ``timeout``:
        whole seconds the command may run (1–3,600; the host's default when None).
        """
        session = check_runtime_session_id(runtime_session_id)
        if isinstance(session, Failure):
            return Failure(session.failure())
        endpoint = check_endpoint_name(
            endpoint_name if endpoint_name is not None else self.defaults["endpoint_name"]
        )
        if isinstance(endpoint, Failure):
            return Failure(endpoint.failure())
        arn = parse_harness_arn(harness_arn or self.defaults["harness_arn"] or "")
        if isinstance(arn, Failure) and runtime_arn is None:
            return Failure(arn.failure())
        arn_region = arn.unwrap().region if isinstance(arn, Success) else None
        region = self._region(arn_region)
        if isinstance(region, Failure):
            return Failure(region.failure())
        client = await self.client_for(region.unwrap())
        if isinstance(client, Failure):
            return Failure(client.failure())
        target = runtime_arn or arn.unwrap().arn
        return await client.unwrap().run_command(
            runtime_arn=target,
            runtime_session_id=session.unwrap(),
            command=command,
            timeout=timeout,
            endpoint_name=endpoint.unwrap(),
            on_output=on_output,
        )

    @renamed_options("BedrockAgentCore.storage")
    def storage(
        self,
        runtime_session_id: str,
        *,
        base_path: str = DEFAULT_MOUNT_PATH,
        timeout: int | None = 120,
        runtime_arn: str | None = None,
    ) -> SessionStorage:
        """The session-storage artifact store of one runtime session (list/fetch/put/delete)."""

        async def run(command: str) -> Result[CommandResult, SessionError]:
            return await self.run_command(
                command,
                runtime_session_id=runtime_session_id,
                timeout=timeout,
                runtime_arn=runtime_arn,
            )

        return SessionStorage(run, base_path=base_path)


_REFUSALS = frozenset(
    {"runtimeClientError", "validationException", "RuntimeClientError", "ValidationException"}
)
"""How the harness refuses a request's messages: an exception frame on the stream (Bedrock's
conversation rules, wire §5.1, §5.3) or the HTTP error of a session still running the turn."""


def _in_doubt(polled: PollOutcome[AgentCoreConn]) -> PollOutcome[AgentCoreConn]:
    """A re-asked turn (``turn_in_doubt``): the host's refusal of the same messages the dead
    process sent means it had taken them — ``TurnLost``; anything else is what it is."""
    error = polled.result.failure() if isinstance(polled.result, Failure) else None
    if error is None or not _refused(error):
        return polled
    return PollOutcome(Failure(_lost(polled.conn, error, stream_dropped=False)), polled.conn)


def _refused(error: SessionError) -> bool:
    """The harness's refusal of a request's messages (``_REFUSALS``)."""
    return (isinstance(error, StreamException) and error.error_type in _REFUSALS) or (
        isinstance(error, HttpError) and error.status in (400, 424) and error.code in _REFUSALS
    )


def _lost(conn: AgentCoreConn, error: SessionError, *, stream_dropped: bool) -> TurnLost:
    return TurnLost(
        runtime_session_id=conn.runtime_session_id,
        detail=str(getattr(error, "detail", "") or getattr(error, "body", "") or ""),
        error_type=getattr(error, "error_type", None) or getattr(error, "code", None),
        stream_dropped=stream_dropped,
        result=error.result,
    )


def _retryable(error: SessionError) -> bool:
    """Only what cannot have been the server's verdict on the turn."""
    if isinstance(error, HttpError):
        code = error.body.get("code", "") if isinstance(error.body, Mapping) else ""
        return is_retryable(error.status, str(code))
    if isinstance(error, TransportError | StreamDropped):
        return is_transient_error(error)
    # A frame the decoder could not read is damage in transit, like a drop; a frame that
    # decoded but carries no JSON is what the host sent, and another try would get it again.
    return isinstance(error, MalformedFrame) and error.reason != "bad_json"
