"""CMAClient behaviour: auth, bearer-token file, retries, pagination, files, errors, telemetry,
secrets (C-28…C-37, K-10, K-12…K-20; wire reference §1–3, §13).

Most tests drive the client through ``httpx.MockTransport`` (exact requests, injected failures);
the file and retry round trips also run against the loopback ``CMAEmulator``. ``sleep``,
``clock`` and ``rand`` are injected, so no test waits for a backoff.
"""

from __future__ import annotations

import email.utils
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from returns.result import Failure, Result, Success

from rma.config import AnthropicSettings, ApiKeyAuth, BearerFileAuth, Secret
from rma.errors import AuthenticationError, HttpError, MalformedResponse, SessionError, TransportError
from rma_shell.providers.claude.client import CMAClient
from rma_shell.seams import Seams
from rma_shell.telemetry import Telemetry
from rma_shell.testing.claude import CMAEmulator, status_once

KEY = "sk-ant-client-7f3a"
TOKEN_A = "tok-alpha-1d9c"
TOKEN_B = "tok-bravo-6e2f"
BASE = "http://cma.test"
NOW = 1_800_000_000.0
ENVELOPE = {
    "type": "error",
    "error": {"type": "api_error", "message": "Internal server error.", "details": {"error_code": "x_y"}},
    "request_id": "req_011",
}
SESSION = {"agent": "agent_1", "environment_id": "env_1"}
USER_MESSAGE = {"type": "user.message", "content": [{"type": "text", "text": "hi"}]}


# --- harness -----------------------------------------------------------------------------------


class Sleeps:
    """An injected ``sleep`` that records the delays and never waits."""

    def __init__(self, on_sleep: Callable[[int], None] | None = None) -> None:
        self.delays: list[float] = []
        self.on_sleep = on_sleep

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        if self.on_sleep is not None:
            self.on_sleep(len(self.delays))
        await anyio.lowlevel.checkpoint()


Step = httpx.Response | type[httpx.TransportError] | Callable[[httpx.Request], httpx.Response]
Call = Callable[[CMAClient], Awaitable[Result[Any, SessionError]]]


class Server:
    """A MockTransport handler answering from a script of steps; the last step repeats.

    A step is a response, a transport-error class (raised), or ``request -> response``."""

    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps) or [ok({})]
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        step = self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]
        if isinstance(step, type):
            raise step("injected", request=request)
        if isinstance(step, httpx.Response):  # a fresh copy: a step may answer many requests
            return httpx.Response(step.status_code, headers=step.headers, content=step.content)
        return step(request)

    @property
    def paths(self) -> list[str]:
        return [r.url.path for r in self.requests]


def ok(body: Any, status: int = 200) -> httpx.Response:
    return httpx.Response(status, json=body)


def fail(status: int, headers: Mapping[str, str] | None = None, body: Any = ENVELOPE) -> httpx.Response:
    return httpx.Response(status, json=body, headers=dict(headers or {}))


def page(data: list[Any], next_page: str | None) -> httpx.Response:
    return ok({"data": data, "next_page": next_page})


def make(
    server: Server,
    *,
    auth: ApiKeyAuth | BearerFileAuth | None = None,
    sleep: Sleeps | None = None,
    clock: Callable[[], float] = lambda: NOW,
    read_file: Callable[[str], str] | None = None,
    http: httpx.AsyncClient | None = None,
    **kw: Any,
) -> CMAClient:
    settings = AnthropicSettings(auth=auth or ApiKeyAuth(Secret(KEY)), base_url=BASE)
    return CMAClient(
        settings,
        http_client=http or httpx.AsyncClient(transport=httpx.MockTransport(server)),
        _seams=Seams(sleep=sleep or Sleeps(), rand=lambda: 1.0, clock=clock, read_file=read_file),
        **kw,
    )


def write_token(path: Path, token: str, expires_at: float = NOW + 3600) -> None:
    path.write_text(json.dumps({"access_token": token, "expires_at": expires_at}))


def bearer(path: Path) -> BearerFileAuth:
    return BearerFileAuth(Secret(str(path)))


def auth_of(request: httpx.Request) -> str | None:
    value: str | None = request.headers.get("authorization")
    return value


async def open_stream(client: CMAClient, session_id: str = "sesn_1") -> Result[bytes, SessionError]:
    async with client.stream_events(session_id) as opened:
        if isinstance(opened, Failure):
            return Failure(opened.failure())
        return Success(await opened.unwrap().aread())


@pytest.fixture
async def loopback() -> AsyncIterator[Callable[..., CMAClient]]:
    """CMAClients for an emulator, each on its own plain-HTTP httpx client (closed afterwards)."""
    opened: list[httpx.AsyncClient] = []

    def build(base_url: str, *, auth: ApiKeyAuth | BearerFileAuth | None = None, **kw: Any) -> CMAClient:
        http = httpx.AsyncClient(verify=False)
        opened.append(http)
        kw.setdefault("_seams", Seams(sleep=Sleeps()))
        return CMAClient(
            AnthropicSettings(auth=auth or ApiKeyAuth(Secret(KEY)), base_url=base_url), http_client=http, **kw
        )

    yield build
    for http in opened:
        await http.aclose()


async def provision(client: CMAClient) -> str:
    agent = (await client.create_agent({"name": "a", "model": "claude-sonnet-4-6"})).unwrap()
    env = (await client.create_environment({"name": "e"})).unwrap()
    session = (await client.create_session({"agent": agent["id"], "environment_id": env["id"]})).unwrap()
    return str(session["id"])


# --- API-key auth (K-19, C-28) -----------------------------------------------------------------


async def test_K19_C28_an_api_key_goes_out_as_authorization_bearer_by_default() -> None:
    server = Server(ok({"id": "sesn_1"}))
    assert (await make(server).get_session("sesn_1")).unwrap() == {"id": "sesn_1"}
    [request] = server.requests
    assert auth_of(request) == f"Bearer {KEY}" and "x-api-key" not in request.headers
    assert request.headers["anthropic-version"] == "2026-10-21"
    assert request.headers["anthropic-beta"] == "managed-agents-2026-04-01"


async def test_K19_C28_api_key_header_x_api_key_sends_the_key_there_and_no_authorization() -> None:
    server = Server(ok({}))
    await make(server, api_key_header="x-api-key").create_session(SESSION)
    [request] = server.requests
    assert request.headers["x-api-key"] == KEY and "authorization" not in request.headers
    assert request.headers["content-type"] == "application/json"


def test_K19_an_unknown_api_key_header_style_is_refused() -> None:
    with pytest.raises(ValueError, match="api_key_header"):
        make(Server(), api_key_header="X-Auth")


async def test_K19_both_header_styles_pass_the_emulator_and_a_wrong_key_is_an_authentication_error(
    loopback: Callable[..., CMAClient],
) -> None:
    with CMAEmulator(api_key=KEY) as emu:
        for style in ("authorization", "x-api-key"):
            created = await loopback(emu.base_url, api_key_header=style).create_agent(
                {"name": style, "model": "m"}
            )
            assert created.unwrap()["name"] == style
        wrong = await loopback(emu.base_url, auth=ApiKeyAuth(Secret("sk-ant-wrong-000"))).get_agent("agent_x")
        seen = [(r.headers.get("authorization"), r.headers.get("x-api-key")) for r in emu.requests]
    assert seen[:2] == [(f"Bearer {KEY}", None), (None, KEY)]
    err = wrong.failure()
    assert isinstance(err, AuthenticationError) and "sk-ant-wrong-000" not in err.message


# --- bearer-token file (K-15…K-20) ------------------------------------------------------------


async def test_K16_the_bearer_file_is_reread_on_every_attempt_including_a_retry(tmp_path: Path) -> None:
    token_file = tmp_path / "token.json"
    write_token(token_file, TOKEN_A)
    sleeps = Sleeps(on_sleep=lambda n: write_token(token_file, TOKEN_B))  # rotated during the backoff
    server = Server(fail(529), ok({"id": "sesn_1"}))
    result = await make(server, auth=bearer(token_file), sleep=sleeps).create_session(SESSION)
    assert result.unwrap() == {"id": "sesn_1"}
    assert [auth_of(r) for r in server.requests] == [f"Bearer {TOKEN_A}", f"Bearer {TOKEN_B}"]
    assert len(sleeps.delays) == 1
    assert all("x-api-key" not in r.headers for r in server.requests)  # K-19: the token replaces the key


async def test_K16_json_files_and_stream_calls_each_read_the_current_token(tmp_path: Path) -> None:
    token_file = tmp_path / "token.json"
    reads: list[str] = []

    def read_file(path: str) -> str:
        reads.append(path)
        return Path(path).read_text()

    server = Server(ok({"id": "x"}))
    client = make(server, auth=bearer(token_file), read_file=read_file)
    write_token(token_file, TOKEN_A)
    await client.get_session("sesn_1")
    write_token(token_file, TOKEN_B)
    await client.upload_file("a.txt", b"a", "text/plain")
    write_token(token_file, "tok-charlie-0a0a")
    assert isinstance(await open_stream(client), Success)
    write_token(token_file, "tok-delta-0b0b")
    await client.download_file("file_1")
    assert [auth_of(r) for r in server.requests] == [
        f"Bearer {TOKEN_A}",
        f"Bearer {TOKEN_B}",
        "Bearer tok-charlie-0a0a",
        "Bearer tok-delta-0b0b",
    ]
    assert reads == [str(token_file)] * 4


async def test_K16_K19_a_bearer_client_talks_to_the_emulator_and_a_rotated_out_token_gets_401(
    tmp_path: Path, loopback: Callable[..., CMAClient]
) -> None:
    token_file = tmp_path / "token.json"
    write_token(token_file, TOKEN_A, expires_at=4_000_000_000)
    with CMAEmulator(api_key=KEY, bearer_tokens=[TOKEN_A]) as emu:
        client = loopback(emu.base_url, auth=bearer(token_file))
        created = await client.create_agent({"name": "a", "model": "m"})
        write_token(token_file, TOKEN_B, expires_at=4_000_000_000)
        refused = await client.get_agent(created.unwrap()["id"])
    err = refused.failure()
    assert isinstance(err, AuthenticationError)
    assert TOKEN_B not in err.message and str(token_file) not in err.message


@pytest.mark.parametrize("remaining", [30, 29.9, 0, -3600])
async def test_K17_a_token_with_30s_or_less_left_fails_before_anything_is_sent(
    tmp_path: Path, remaining: float
) -> None:
    token_file = tmp_path / "token.json"
    write_token(token_file, TOKEN_A, expires_at=NOW + remaining)
    server = Server(ok({}))
    client = make(server, auth=bearer(token_file))
    results = [
        await client.get_session("sesn_1"),
        await client.create_session(SESSION),
        await client.upload_file("a.txt", b"a"),
        await open_stream(client),
    ]
    assert server.requests == []
    for result in results:
        err = result.failure()
        assert isinstance(err, AuthenticationError) and "expires" in err.detail
        assert TOKEN_A not in err.message and str(token_file) not in err.message


async def test_K17_a_token_with_more_than_30s_left_is_used(tmp_path: Path) -> None:
    token_file = tmp_path / "token.json"
    write_token(token_file, TOKEN_A, expires_at=NOW + 31)
    server = Server(ok({}))
    assert isinstance(await make(server, auth=bearer(token_file)).get_session("sesn_1"), Success)
    assert [auth_of(r) for r in server.requests] == [f"Bearer {TOKEN_A}"]


async def test_K16_K17_a_token_that_expires_during_the_backoff_stops_the_retry_before_dispatch(
    tmp_path: Path,
) -> None:
    token_file = tmp_path / "token.json"
    write_token(token_file, TOKEN_A, expires_at=NOW + 60)
    now = [NOW]
    sleeps = Sleeps(on_sleep=lambda n: now.__setitem__(0, NOW + 45))  # 15 s left after the wait
    server = Server(fail(503), ok({}))
    result = await make(server, auth=bearer(token_file), sleep=sleeps, clock=lambda: now[0]).get_session("s")
    assert isinstance(result.failure(), AuthenticationError)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "content",
    [
        None,  # missing file
        b"\xff\xfe\x00\x81 not utf-8",
        b"",
        b"not json {",
        b'["access_token", "expires_at"]',
        json.dumps({"expires_at": NOW + 3600}).encode(),
        json.dumps({"access_token": "", "expires_at": NOW + 3600}).encode(),
        json.dumps({"access_token": 42, "expires_at": NOW + 3600}).encode(),
        json.dumps({"access_token": "tok-secret-file-99"}).encode(),
        json.dumps({"access_token": "tok-secret-file-99", "expires_at": "tomorrow"}).encode(),
        json.dumps({"access_token": "tok-secret-file-99", "expires_at": True}).encode(),
        b'{"access_token": "tok-secret-file-99", "expires_at": NaN}',
    ],
    ids=[
        "missing",
        "binary",
        "empty",
        "not-json",
        "not-an-object",
        "no-token",
        "empty-token",
        "token-not-a-string",
        "no-expiry",
        "expiry-not-a-number",
        "expiry-bool",
        "expiry-nan",
    ],
)
async def test_K17_K20_an_unreadable_or_invalid_bearer_file_is_an_authentication_error(
    tmp_path: Path, content: bytes | None
) -> None:
    token_file = tmp_path / "secret-token-path.json"
    if content is not None:
        token_file.write_bytes(content)
    server = Server(ok({}))
    client = make(server, auth=bearer(token_file))
    for result in (await client.get_session("sesn_1"), await open_stream(client)):
        err = result.failure()
        assert isinstance(err, AuthenticationError), err
        assert "secret-token-path" not in err.message and "tok-secret-file-99" not in err.message
    assert server.requests == []


async def test_K17_a_directory_as_the_bearer_file_is_an_authentication_error(tmp_path: Path) -> None:
    server = Server(ok({}))
    result = await make(server, auth=bearer(tmp_path)).get_session("sesn_1")
    assert isinstance(result.failure(), AuthenticationError) and server.requests == []


@pytest.mark.parametrize("follow", [False, True], ids=["client-default", "client-follows-redirects"])
async def test_K18_a_redirect_is_not_followed_with_a_bearer_token(tmp_path: Path, follow: bool) -> None:
    """Even an injected httpx client configured to follow redirects does not follow ours."""
    token_file = tmp_path / "token.json"
    write_token(token_file, TOKEN_A)
    elsewhere = "http://elsewhere.test/steal"

    def redirect(request: httpx.Request) -> httpx.Response:
        if request.url.host == "elsewhere.test":
            return ok({"stolen": True})
        return httpx.Response(307, headers={"location": elsewhere})

    server = Server(redirect)
    http = httpx.AsyncClient(transport=httpx.MockTransport(server), follow_redirects=follow)
    client = make(server, auth=bearer(token_file), http=http)
    results = [await client.get_session("sesn_1"), await client.send_events("sesn_1", [USER_MESSAGE])]
    results.append(await open_stream(client))
    for result in results:
        err = result.failure()
        assert isinstance(err, HttpError) and err.status == 307
    assert len(server.requests) == 3 and all(r.url.host == "cma.test" for r in server.requests)
    assert elsewhere not in [str(r.url) for r in server.requests]


# --- retries (C-35, wire §2.2) -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "delay"),
    [
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after": "2"}, 2.0),
        ({"retry-after": "0.75"}, 0.75),
        ({"retry-after": email.utils.formatdate(NOW + 3, usegmt=True)}, 3.0),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),  # milliseconds win
        ({"retry-after": "120"}, 0.5),  # over 60 s: our own backoff instead
        ({"retry-after": "soon"}, 0.5),  # unparsable: our own backoff
    ],
    ids=["ms", "seconds", "fractional", "http-date", "ms-wins", "too-long", "garbage"],
)
async def test_C35_retry_after_ms_and_retry_after_are_honoured(headers: dict[str, str], delay: float) -> None:
    for status in (429, 529, 503):
        sleeps = Sleeps()
        server = Server(fail(status, headers), ok({"id": "sesn_1"}))
        assert isinstance(
            await make(
                server,
                sleep=sleeps,
            ).get_session("sesn_1"),
            Success,
        )
        assert sleeps.delays == [pytest.approx(delay)] and len(server.requests) == 2


@pytest.mark.parametrize(("jitter", "delays"), [(1.0, [0.5, 1, 2, 4, 8, 8]), (0.0, [0.25, 0.5, 1, 2, 4, 4])])
async def test_C35_backoff_without_a_hint_doubles_from_half_a_second_and_caps_at_8s(
    jitter: float, delays: list[float]
) -> None:
    sleeps = Sleeps()
    server = Server(fail(503))
    settings = AnthropicSettings(auth=ApiKeyAuth(Secret(KEY)), base_url=BASE)
    client = CMAClient(
        settings,
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(server)),
        max_retries=6,
        _seams=Seams(sleep=sleeps, rand=lambda: jitter, clock=lambda: NOW),
    )
    err = (await client.get_session("sesn_1")).failure()
    assert isinstance(err, HttpError) and err.status == 503 and err.body == ENVELOPE
    assert sleeps.delays == delays and len(server.requests) == 7


@pytest.mark.parametrize("max_retries", [0, 1, 2])
async def test_C35_max_retries_bounds_the_attempts(max_retries: int) -> None:
    server = Server(fail(529))
    err = (await make(server, max_retries=max_retries).create_session(SESSION)).failure()
    assert isinstance(err, HttpError) and err.status == 529
    assert len(server.requests) == max_retries + 1


@pytest.mark.parametrize("status", [429, 500, 503, 529])
async def test_C35_x_should_retry_false_stops_retries(status: int) -> None:
    calls: list[Call] = [lambda c: c.get_session("sesn_1"), lambda c: c.create_session(SESSION)]
    for call in calls:
        sleeps = Sleeps()
        server = Server(fail(status, {"x-should-retry": "false", "retry-after": "1"}), ok({}))
        err = (
            await call(
                make(
                    server,
                    sleep=sleeps,
                )
            )
        ).failure()
        assert isinstance(err, HttpError) and err.status == status
        assert len(server.requests) == 1 and sleeps.delays == []


async def test_C35_x_should_retry_true_is_obeyed_before_the_status_rules() -> None:
    cases: list[tuple[int, Call]] = [
        (500, lambda c: c.send_events("sesn_1", [USER_MESSAGE])),  # a non-idempotent POST
        (400, lambda c: c.get_session("sesn_1")),  # a status never retried otherwise
    ]
    for status, call in cases:
        server = Server(fail(status, {"x-should-retry": "true"}), ok({"data": []}))
        assert isinstance(await call(make(server)), Success)
        assert len(server.requests) == 2


NON_IDEMPOTENT: dict[str, Call] = {
    "create_session": lambda c: c.create_session(SESSION),
    "send_events": lambda c: c.send_events("sesn_1", [USER_MESSAGE]),
    "upload_file": lambda c: c.upload_file("a.csv", b"a,b\n", "text/csv"),
    "create_agent": lambda c: c.create_agent({"name": "a", "model": "m"}),
    "create_environment": lambda c: c.create_environment({"name": "e"}),
    "add_session_resource": lambda c: c.add_session_resource("sesn_1", {"type": "file", "file_id": "f"}),
}
IDEMPOTENT: dict[str, Call] = {
    "get_session": lambda c: c.get_session("sesn_1"),
    "list_events": lambda c: c.list_events("sesn_1"),
    "download_file": lambda c: c.download_file("file_1"),
    "delete_session": lambda c: c.delete_session("sesn_1"),
    "delete_file": lambda c: c.delete_file("file_1"),
    "archive_session": lambda c: c.archive_session("sesn_1"),
    "archive_agent": lambda c: c.archive_agent("agent_1"),
    "update_session": lambda c: c.update_session("sesn_1", {"title": "t"}),
    "update_agent": lambda c: c.update_agent("agent_1", {"version": 1, "system": "s"}),
}
MAY_HAVE_LANDED: dict[str, Step] = {
    "500": fail(500),
    "502": fail(502),
    "503": fail(503),
    "504": fail(504),
    "408": fail(408),
    "409": fail(409),  # §15 #19: never auto-retry a create on 409
    "read-timeout": httpx.ReadTimeout,
    "connection-dropped": httpx.RemoteProtocolError,
}
NOT_PROCESSED: dict[str, Step] = {
    "429": fail(429),
    "529": fail(529),
    "connect-error": httpx.ConnectError,
    "connect-timeout": httpx.ConnectTimeout,
    "pool-timeout": httpx.PoolTimeout,
}
SUCCESS_BODY = {"id": "x", "data": []}


@pytest.mark.parametrize("failure", list(MAY_HAVE_LANDED), ids=list(MAY_HAVE_LANDED))
@pytest.mark.parametrize("call", list(NON_IDEMPOTENT), ids=list(NON_IDEMPOTENT))
async def test_C35_a_non_idempotent_post_is_not_retried_when_it_may_have_landed(
    call: str, failure: str
) -> None:
    sleeps = Sleeps()
    server = Server(MAY_HAVE_LANDED[failure], ok(SUCCESS_BODY))
    result = await NON_IDEMPOTENT[call](
        make(
            server,
            sleep=sleeps,
        )
    )
    err = result.failure()
    assert isinstance(err, HttpError | TransportError)
    assert len(server.requests) == 1 and sleeps.delays == []


@pytest.mark.parametrize("failure", list(NOT_PROCESSED), ids=list(NOT_PROCESSED))
@pytest.mark.parametrize("call", list(NON_IDEMPOTENT), ids=list(NON_IDEMPOTENT))
async def test_C35_a_non_idempotent_post_is_retried_when_it_cannot_have_been_processed(
    call: str, failure: str
) -> None:
    server = Server(NOT_PROCESSED[failure], ok(SUCCESS_BODY))
    assert isinstance(await NON_IDEMPOTENT[call](make(server)), Success)
    assert len(server.requests) == 2


@pytest.mark.parametrize("failure", [*MAY_HAVE_LANDED, *NOT_PROCESSED])
@pytest.mark.parametrize("call", list(IDEMPOTENT), ids=list(IDEMPOTENT))
async def test_C35_an_idempotent_call_is_retried_on_every_transient_failure(call: str, failure: str) -> None:
    step = {**MAY_HAVE_LANDED, **NOT_PROCESSED}[failure]
    server = Server(step, ok(SUCCESS_BODY))
    assert isinstance(await IDEMPOTENT[call](make(server)), Success)
    assert len(server.requests) == 2
    assert server.requests[0].method == server.requests[1].method
    assert server.requests[0].url == server.requests[1].url


@pytest.mark.parametrize("status", [400, 402, 403, 404, 412, 413, 422])
async def test_C35_final_statuses_are_not_retried(status: int) -> None:
    server = Server(fail(status), ok({}))
    err = (await make(server).get_session("sesn_1")).failure()
    assert isinstance(err, HttpError) and err.status == status and len(server.requests) == 1


async def test_C30_a_401_is_an_authentication_error_and_not_retried() -> None:
    body = {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}
    server = Server(fail(401, body=body), ok({}))
    err = (await make(server).get_session("sesn_1")).failure()
    assert isinstance(err, AuthenticationError) and "invalid x-api-key" in err.detail
    assert len(server.requests) == 1


async def test_C35_against_the_emulator_a_529_on_create_is_retried_and_a_500_on_an_event_post_is_not(
    loopback: Callable[..., CMAClient],
) -> None:
    sleeps = Sleeps()
    with CMAEmulator(api_key=KEY) as emu:
        client = loopback(
            emu.base_url,
            _seams=Seams(sleep=sleeps),
        )
        emu.inject(status_once(529, retry_after_ms=250, method="POST", path="^/v1/sessions$"))
        sid = await provision(client)
        emu.inject(status_once(500, method="POST", path="/events$"))
        posted = await client.send_events(sid, [USER_MESSAGE])
        creates = [r for r in emu.requests if r.method == "POST" and r.path == "/v1/sessions"]
        posts = [r for r in emu.requests if r.path.endswith("/events")]
    assert len(creates) == 2 and sleeps.delays == [0.25]
    err = posted.failure()
    assert isinstance(err, HttpError) and err.status == 500 and len(posts) == 1
    assert isinstance(err.body, dict) and err.body["error"]["type"] == "api_error"


# --- the stream (C-46, C-47) -------------------------------------------------------------------


async def test_C46_the_stream_asks_for_sse() -> None:
    server = Server(ok({}))
    assert isinstance(await open_stream(make(server)), Success)
    [request] = server.requests
    assert request.url.path == "/v1/sessions/sesn_1/events/stream"
    assert request.headers["accept"] == "text/event-stream"
    assert request.headers["anthropic-beta"] == "managed-agents-2026-04-01"


@pytest.mark.parametrize(
    ("step", "delay"),
    [
        (fail(429), 0.5),
        (fail(429, {"retry-after": "3"}), 3.0),
        (fail(529, {"retry-after-ms": "1250"}), 1.25),
        (fail(503, {"retry-after": "0"}), 0.0),
        (fail(500), 0.5),
        (fail(409), 0.5),
        (httpx.ConnectError, 0.5),
        (httpx.ReadTimeout, 0.5),
    ],
    ids=[
        "429",
        "429-retry-after",
        "529-retry-after-ms",
        "503-retry-after-0",
        "500",
        "409",
        "connect",
        "timeout",
    ],
)
async def test_C46_Better_a_transient_stream_connect_is_retried_like_an_idempotent_call(
    step: Step, delay: float
) -> None:
    # Issue #12: the reference never retries the stream's GET; a 429 ended the run.
    sleeps = Sleeps()
    server = Server(step, ok({}))
    assert (
        await open_stream(
            make(
                server,
                sleep=sleeps,
            )
        )
    ).unwrap() == b"{}"
    assert len(server.requests) == 2 and sleeps.delays == [delay]


async def test_C46_a_stream_connect_that_keeps_failing_gives_up_after_max_retries() -> None:
    sleeps = Sleeps()
    server = Server(fail(529))
    err = (await open_stream(make(server, sleep=sleeps, max_retries=3))).failure()
    assert isinstance(err, HttpError) and err.status == 529
    assert len(server.requests) == 4 and sleeps.delays == [0.5, 1.0, 2.0]


@pytest.mark.parametrize(
    ("step", "kind"),
    [
        (fail(401), AuthenticationError),
        (fail(404), HttpError),
        (fail(400), HttpError),
        (fail(503, {"x-should-retry": "false"}), HttpError),
    ],
    ids=["401", "404", "400", "should-retry-false"],
)
async def test_C46_a_definite_stream_connect_answer_is_not_retried(
    step: Step, kind: type[SessionError]
) -> None:
    server = Server(step, ok({}))
    err = (await open_stream(make(server))).failure()
    assert isinstance(err, kind) and len(server.requests) == 1


async def test_C46_x_should_retry_true_retries_a_stream_connect_with_any_status() -> None:
    server = Server(fail(400, {"x-should-retry": "true"}), ok({}))
    assert isinstance(await open_stream(make(server)), Success) and len(server.requests) == 2


async def test_C47_an_error_while_reading_the_stream_propagates_as_itself() -> None:
    class Broken(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield b'event: agent.thinking\ndata: {"type": "agent.thinking"}\n\n'
            raise httpx.ReadError("connection reset")

    server = Server(lambda request: httpx.Response(200, stream=Broken()))
    client = make(server)
    chunks: list[bytes] = []
    with pytest.raises(httpx.ReadError, match="connection reset"):
        async with client.stream_events("sesn_1") as opened:
            async for chunk in opened.unwrap().aiter_bytes():
                chunks.append(chunk)
    assert chunks and b"agent.thinking" in chunks[0]


# --- pagination (C-31, wire §3) ----------------------------------------------------------------


async def test_C31_pagination_follows_next_page_and_keeps_the_rest_of_the_query() -> None:
    listings: list[tuple[Call, str, dict[str, str]]] = [
        (lambda c: c.list_events("sesn_1"), "/v1/sessions/sesn_1/events", {"order": "asc", "limit": "1000"}),
        (lambda c: c.list_agents(), "/v1/agents", {"include_archived": "false", "limit": "100"}),
        (lambda c: c.list_agent_versions("agent_1"), "/v1/agents/agent_1/versions", {"limit": "100"}),
        (lambda c: c.list_environments(), "/v1/environments", {"include_archived": "false", "limit": "100"}),
        (lambda c: c.list_sessions(order="desc"), "/v1/sessions", {"limit": "100", "order": "desc"}),
        (lambda c: c.list_files(scope_id="sesn_1"), "/v1/files", {"limit": "1000", "scope_id": "sesn_1"}),
    ]
    for call, path, query in listings:
        server = Server(page([1, 2], "page_b"), page([3], "page_c"), page([4, 5], None))
        assert (await call(make(server))).unwrap() == [1, 2, 3, 4, 5]
        assert server.paths == [path] * 3
        assert [dict(r.url.params) for r in server.requests] == [
            query,
            {**query, "page": "page_b"},
            {**query, "page": "page_c"},
        ]


@pytest.mark.parametrize(
    ("cursors", "requests"),
    [(["A", "A"], 2), (["A", "B", "A"], 3), (["A", "B", "C", "B"], 4)],
    ids=["same-cursor-again", "two-cycle", "three-cycle"],
)
async def test_C31_a_repeated_cursor_stops_the_walk(cursors: list[str], requests: int) -> None:
    calls: list[Call] = [
        lambda c: c.list_events("sesn_1"),
        lambda c: c.list_files(),
        lambda c: c.list_agents(),
    ]
    for call in calls:
        steps: list[Step] = [page([i], cursor) for i, cursor in enumerate(cursors)]
        server = Server(*steps, fail(500))  # a page past the guard would fail the walk
        assert (await call(make(server))).unwrap() == list(range(len(cursors)))
        assert len(server.requests) == requests


async def test_C31_a_blank_cursor_ends_the_walk_and_a_page_without_data_is_malformed() -> None:
    server = Server(page([1], ""), fail(500))
    assert (await make(server).list_events("sesn_1")).unwrap() == [1]
    server = Server(page([1], "page_b"), ok({"items": []}))
    err = (await make(server).list_events("sesn_1")).failure()
    assert isinstance(err, MalformedResponse)


async def test_C31_sessions_list_pages_through_the_emulators_bidirectional_cursor(
    loopback: Callable[..., CMAClient],
) -> None:
    with CMAEmulator(api_key=KEY) as emu:
        client = loopback(emu.base_url)
        created = [await provision(client) for _ in range(5)]
        listed = (await client.list_sessions(limit=2, order="asc")).unwrap()
        lists = [r for r in emu.requests if r.method == "GET" and r.path.startswith("/v1/sessions?")]
    assert [s["id"] for s in listed] == created
    assert len(lists) == 3 and all("limit=2" in r.path for r in lists)


# --- files (C-32…C-34, wire §13) ---------------------------------------------------------------


async def test_C32_C33_C34_upload_attach_list_download_and_delete_against_the_emulator(
    loopback: Callable[..., CMAClient],
) -> None:
    with CMAEmulator(api_key=KEY) as emu:
        client = loopback(emu.base_url)
        sid = await provision(client)
        upload = (await client.upload_file("data.csv", b"a,b\n1,2\n", "text/csv")).unwrap()
        mount = "/mnt/session/uploads/data.csv"
        resource = (
            await client.add_session_resource(
                sid, {"type": "file", "file_id": upload["id"], "mount_path": mount}
            )
        ).unwrap()
        output = emu.add_output_file(sid, "report.md", "# Report\n")
        scoped = (await client.list_files(scope_id=sid)).unwrap()
        everything = (await client.list_files()).unwrap()
        downloaded = (await client.download_file(output["id"])).unwrap()
        not_downloadable = (await client.download_file(upload["id"])).failure()
        metadata = (await client.get_file(upload["id"])).unwrap()
        deleted = (await client.delete_file(upload["id"])).unwrap()
        gone = (await client.get_file(upload["id"])).failure()
        session = emu.session(sid)
        upload_request = next(r for r in emu.requests if r.method == "POST" and r.path == "/v1/files")
    assert (
        upload["filename"] == "data.csv" and upload["mime_type"] == "text/csv" and upload["size_bytes"] == 8
    )
    assert resource["file_id"] == upload["id"] and resource["mount_path"] == mount
    assert [(r["file_id"], r["mount_path"]) for r in session["resources"]] == [(upload["id"], mount)]
    assert [f["id"] for f in scoped] == [output["id"]]  # only the session's outputs
    assert {f["id"] for f in everything} == {upload["id"], output["id"]}
    assert downloaded == b"# Report\n"
    assert isinstance(not_downloadable, HttpError) and not_downloadable.status == 400
    assert isinstance(not_downloadable.body, dict)
    assert not_downloadable.body["error"]["details"] == {"error_code": "file_not_downloadable"}
    assert metadata["id"] == upload["id"] and deleted == {"id": upload["id"], "type": "file_deleted"}
    assert isinstance(gone, HttpError) and gone.status == 404
    assert upload_request.headers["anthropic-beta"] == "files-api-2025-04-14,managed-agents-2026-04-01"
    assert upload_request.headers["content-type"].startswith("multipart/form-data; boundary=")


# --- results and errors (C-30) -----------------------------------------------------------------


async def test_C30_an_error_body_reaches_HttpError_body_with_method_and_path() -> None:
    server = Server(fail(404, body=ENVELOPE))
    err = (await make(server).get_agent("agent_404")).failure()
    assert isinstance(err, HttpError)
    assert (err.status, err.body, err.method, err.url) == (404, ENVELOPE, "GET", "/v1/agents/agent_404")
    server = Server(httpx.Response(502, text="<html>bad gateway</html>"))
    err = (await make(server, max_retries=0).get_agent("agent_1")).failure()
    assert isinstance(err, HttpError) and err.body == "<html>bad gateway</html>"


async def test_C30_any_2xx_is_the_decoded_body_an_empty_body_is_None_and_non_json_is_malformed() -> None:
    assert (await make(Server(ok({"id": "a"}, status=201))).create_agent({})).unwrap() == {"id": "a"}
    assert (await make(Server(httpx.Response(204))).delete_session("s")).unwrap() is None
    err = (await make(Server(httpx.Response(200, text="<html>"))).get_session("s")).failure()
    assert isinstance(err, MalformedResponse)
    raw = await make(Server(httpx.Response(200, content=b"\x00\x01"))).download_file("f")
    assert raw.unwrap() == b"\x00\x01"


async def test_C30_S53_an_empty_events_list_is_refused_without_a_request() -> None:
    server = Server(ok({}))
    assert isinstance((await make(server).send_events("sesn_1", [])).failure(), MalformedResponse)
    assert server.requests == []


async def test_C30_a_transport_failure_is_a_TransportError() -> None:
    err = (await make(Server(httpx.ConnectError), max_retries=0).get_session("s")).failure()
    assert isinstance(err, TransportError) and err.error_type == "connect"
    err = (await make(Server(httpx.ReadTimeout), max_retries=0).get_session("s")).failure()
    assert isinstance(err, TransportError) and err.error_type == "ReadTimeout"


# --- telemetry (C-36, M-1) ---------------------------------------------------------------------


async def test_C36_M1_request_telemetry_carries_method_path_status_and_never_a_secret(tmp_path: Path) -> None:
    token_file = tmp_path / "bearer-secret-path.json"
    write_token(token_file, TOKEN_A)
    seen: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    telemetry = Telemetry()
    telemetry.attach("t", "rma.request.*", lambda n, m, md: seen.append((n, dict(m), dict(md))))
    server = Server(fail(529), ok({"id": "sesn_1"}, status=201), httpx.ConnectError)
    for auth in (ApiKeyAuth(Secret(KEY)), bearer(token_file)):
        client = make(server, auth=auth, telemetry=telemetry, max_retries=1)
        await client.create_session(SESSION)
    # API key: 529 then 201 (retried); bearer: a connect error twice (retried once, then given up).
    assert [n for n, _, _ in seen] == ["rma.request.start", "rma.request.stop"] * 4
    stops = [md for n, _, md in seen if n == "rma.request.stop"]
    assert [(md["method"], md["path"], md.get("status"), md["attempt"]) for md in stops] == [
        ("POST", "/v1/sessions", 529, 0),
        ("POST", "/v1/sessions", 201, 1),  # the real status (REF reported 200 for every 2xx)
        ("POST", "/v1/sessions", None, 0),
        ("POST", "/v1/sessions", None, 1),
    ]
    assert [md.get("error") for md in stops] == [None, None, "transport_error", "transport_error"]
    assert all(md["provider"] == "claude_managed_agents" for _, _, md in seen)
    assert all("duration" in m for n, m, _ in seen if n.endswith(".stop"))
    dumped = repr(seen)
    for secret in (KEY, TOKEN_A, str(token_file), "bearer-secret-path"):
        assert secret not in dumped


# --- secrets (C-37, K-10, K-20) ----------------------------------------------------------------


async def test_C37_K10_K20_secrets_never_show_in_repr_logs_telemetry_or_errors(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    token_file = tmp_path / "bearer-secret-path.json"
    write_token(token_file, TOKEN_A)
    secrets = (KEY, TOKEN_A, TOKEN_B, str(token_file), "bearer-secret-path")
    telemetry = Telemetry()
    seen: list[Any] = []
    telemetry.attach("t", "rma.*", lambda n, m, md: seen.append((n, m, md)))
    errors: list[SessionError] = []
    clients: list[CMAClient] = []
    for auth in (ApiKeyAuth(Secret(KEY)), bearer(token_file)):
        server = Server(fail(529), fail(500), fail(401), httpx.ReadTimeout, ok({}))
        client = make(server, auth=auth, telemetry=telemetry)
        clients.append(client)
        calls: list[Call] = [
            lambda c: c.get_session("sesn_1"),
            lambda c: c.get_session("sesn_1"),
            lambda c: c.create_session(SESSION),
            lambda c: c.upload_file("a.txt", b"a"),
        ]
        for call in calls:
            result = await call(client)
            if isinstance(result, Failure):
                errors.append(result.failure())
        stream = await open_stream(make(Server(fail(401)), auth=auth))
        errors.append(stream.failure())
    write_token(token_file, TOKEN_B, expires_at=NOW + 5)  # now refused before dispatch
    errors.append((await clients[1].get_session("sesn_1")).failure())
    token_file.write_text("{ not json " + TOKEN_B)
    errors.append((await clients[1].get_session("sesn_1")).failure())
    token_file.unlink()
    errors.append((await clients[1].get_session("sesn_1")).failure())

    assert len(errors) >= 5 and caplog.records  # the retries were logged
    shown = [repr(c) for c in clients] + [str(c) for c in clients] + [repr(c.settings) for c in clients]
    shown += [f"{e!r} {e.message}" for e in errors]
    shown += [r.getMessage() for r in caplog.records] + [repr(r.args) for r in caplog.records]
    shown.append(repr(seen))
    for text in shown:
        for secret in secrets:
            assert secret not in text, (secret, text)
    assert repr(clients[0]) == f"CMAClient(base_url='{BASE}', auth=api_key=***)"
    assert repr(clients[1]) == f"CMAClient(base_url='{BASE}', auth=bearer_token_file=***)"
