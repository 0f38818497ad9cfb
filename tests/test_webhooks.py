"""Webhooks (issue #25): the host's signed deliveries verified as the ``anthropic`` SDK verifies
them — forged, stale, early and replayed ones refused, typed — and a ``session.requires_action``
/ ``session.status_idled`` delivery resuming the journaled session it names, answered 202 at
once while the resume runs in the receiver's task group. Deliveries come from the Claude
emulator, which signs them from the scheme (not from rma's code), so the two cross-check."""

from __future__ import annotations

import base64
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from returns.result import Failure, Success

from rma.journal import AwaitingApproval
from rma.webhooks import DeliveryLog, InvalidSecret, WebhookEvent, sign, signing_key, verify
from rma_shell import Agent
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.testing import CMAEmulator, cma
from rma_shell.testing.claude.webhooks import new_secret
from rma_shell.tools import tool
from rma_shell.webhooks import WebhookReceiver, journal_key_of

KEY = "sk-ant-test"
NOW = 1_770_000_000.0
BODY = b'{"type":"event","data":{"type":"session.status_idled","id":"sesn_1"}}'


def signed(secret: str, body: bytes | None = None) -> dict[str, str]:
    body = BODY if body is None else body
    stamp = int(NOW)
    return {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(stamp),
        "webhook-signature": sign(secret, "msg_1", stamp, body),
    }


# ── verification ──


def test_a_delivery_signed_with_the_secret_verifies_and_names_its_session() -> None:
    secret = new_secret()
    event = verify(secret, signed(secret), BODY, now=NOW).unwrap()
    assert (event.type, event.session_id, event.delivery_id, event.timestamp) == (
        "session.status_idled",
        "sesn_1",
        "msg_1",
        int(NOW),
    )


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda h: {k: v for k, v in h.items() if k != "webhook-signature"}, "missing_headers"),
        (lambda h: {**h, "webhook-signature": "v1," + base64.b64encode(b"x" * 32).decode()}, "bad_signature"),
        (lambda h: {**h, "webhook-timestamp": "soon"}, "bad_timestamp"),
        (lambda h: {**h, "webhook-timestamp": "nan"}, "bad_timestamp"),
        (lambda h: {**h, "webhook-id": "msg_2"}, "bad_signature"),  # the id is signed
    ],
)
def test_a_forged_or_incomplete_delivery_is_refused_naming_why(change: Any, reason: str) -> None:
    secret = new_secret()
    refused = verify(secret, change(signed(secret)), BODY, now=NOW)
    assert isinstance(refused, Failure) and refused.failure().reason == reason


def test_another_secret_or_an_edited_body_does_not_verify() -> None:
    secret = new_secret()
    assert verify(new_secret(), signed(secret), BODY, now=NOW).failure().reason == "bad_signature"
    edited = BODY.replace(b"sesn_1", b"sesn_2")
    assert verify(secret, signed(secret), edited, now=NOW).failure().reason == "bad_signature"


def test_timestamps_outside_the_tolerance_either_way_are_refused() -> None:
    secret = new_secret()
    assert isinstance(verify(secret, signed(secret), BODY, now=NOW + 300), Success)
    assert verify(secret, signed(secret), BODY, now=NOW + 301).failure().reason == "stale"
    assert verify(secret, signed(secret), BODY, now=NOW - 301).failure().reason == "too_new"
    assert isinstance(verify(secret, signed(secret), BODY, now=NOW + 500, tolerance=600), Success)


def test_any_of_several_signatures_may_match_and_header_case_does_not_matter() -> None:
    secret = new_secret()
    headers = signed(secret)
    rotated = {k.upper(): v for k, v in headers.items()}
    rotated["WEBHOOK-SIGNATURE"] = "v1,AAAA " + headers["webhook-signature"] + " v2,BBBB"
    assert isinstance(verify(secret, rotated, BODY, now=NOW), Success)


def test_the_secret_may_be_prefixed_unprefixed_unpadded_or_bytes() -> None:
    raw = b"k" * 24
    text = base64.b64encode(raw).decode()
    assert (
        signing_key("whsec_" + text) == signing_key(text) == signing_key(text.rstrip("=")) == signing_key(raw)
    )
    with pytest.raises(InvalidSecret):
        signing_key("whsec_")
    with pytest.raises(InvalidSecret):
        signing_key("whsec_!!!")


def test_a_body_that_is_not_a_webhook_event_is_malformed() -> None:
    secret = new_secret()
    for body in (b"not json", b"[1]", b'{"type":"event","data":{}}'):
        assert verify(secret, signed(secret, body), body, now=NOW).failure().reason == "malformed"


def test_a_delivery_taken_once_is_refused_as_replayed_until_it_would_be_stale() -> None:
    event = WebhookEvent("session.status_idled", "sesn_1", "wevt_1", None, "msg_1", int(NOW), {})
    log = DeliveryLog(tolerance=300).take(event, NOW).unwrap()
    assert log.take(event, NOW + 10).failure().reason == "replayed"
    later = WebhookEvent("session.status_idled", "sesn_1", "wevt_2", None, "msg_2", int(NOW + 700), {})
    pruned = log.take(later, NOW + 700).unwrap()
    assert set(pruned.seen) == {"msg_2"}  # msg_1 would be refused as stale by now


def test_the_sdk_and_rma_agree_on_the_emulators_signature() -> None:
    """The oracle: the anthropic SDK's ``webhooks.unwrap`` (Standard Webhooks) accepts what the
    emulator signs and what rma signs, and refuses what rma refuses."""
    pytest.importorskip("standardwebhooks")
    import anthropic

    with CMAEmulator([], api_key=KEY) as emu:
        delivery = emu.webhook_delivery("session.requires_action", "sesn_9")
        forged = emu.webhook_delivery("session.requires_action", "sesn_9", secret=new_secret())
    client = anthropic.Anthropic(api_key=KEY, webhook_key=emu.webhook_secret)
    event = client.beta.webhooks.unwrap(delivery.body.decode(), headers=dict(delivery.headers))
    assert (event.data.type, event.data.id) == ("session.requires_action", "sesn_9")
    mine = verify(emu.webhook_secret, delivery.headers, delivery.body, now=time.time()).unwrap()
    assert (mine.type, mine.session_id) == ("session.requires_action", "sesn_9")
    with pytest.raises(Exception, match="No matching signature"):
        client.beta.webhooks.unwrap(forged.body.decode(), headers=dict(forged.headers))
    assert (
        verify(emu.webhook_secret, forged.headers, forged.body, now=time.time()).failure().reason
        == "bad_signature"
    )
    # rma's signature is the SDK's
    from standardwebhooks import Webhook

    stamp = int(time.time())
    ours = sign(emu.webhook_secret, "msg_x", stamp, b"{}")
    assert ours == Webhook(emu.webhook_secret).sign("msg_x", datetime.fromtimestamp(stamp, UTC), b"{}")


# ── the receiver ──

RAN: list[str] = []


@tool(requires_approval=True)
def refund(email: str) -> str:
    """Refund a customer.

    Args:
        email: whom to refund
    """
    RAN.append(email)
    return "refunded"


def claude(emu: CMAEmulator) -> ClaudeManagedAgents:
    return ClaudeManagedAgents(api_key=KEY, base_url=emu.base_url, env={}, model="claude-sonnet-4-6")


async def paused_run(emu: CMAEmulator, journal: str) -> str:
    """A run that paused for an approval, then the approval given; the host session's id."""
    RAN.clear()
    host = claude(emu)
    agent = Agent(tools=[refund], host=host, journal=journal)
    paused = await agent.run("refund a@x", journal_key="order-1")
    await host.close()
    assert isinstance(paused, Failure) and isinstance(paused.failure(), AwaitingApproval)
    (waiting,) = agent.pending_approvals("order-1").unwrap()
    assert agent.approve("order-1", waiting.tool_use_id, "allow") == Success(None)
    (session_id,) = emu.session_ids
    return session_id


async def post_to(app: WebhookReceiver, headers: Any, body: bytes) -> httpx.Response:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://receiver"
    ) as client:
        return await client.post("/", content=body, headers=dict(headers))


async def test_a_requires_action_delivery_resumes_the_journaled_session_it_names(tmp_path: Path) -> None:
    journal = str(tmp_path / "j.db")
    script = [cma.tool_turn(("refund", {"email": "a@x"})), cma.text_turn("Refunded.")]
    with CMAEmulator(script, api_key=KEY) as emu:
        session_id = await paused_run(emu, journal)
        assert journal_key_of(journal, session_id) == "order-1"
        host = claude(emu)
        outcomes: list[tuple[str, str, Any]] = []
        receiver = WebhookReceiver(
            Agent(tools=[refund], host=host, journal=journal),
            secret=emu.webhook_secret,
            on_outcome=lambda key, event, outcome: outcomes.append((key, event.type, outcome)),
        )
        delivery = emu.webhook_delivery("session.requires_action", session_id)
        async with receiver.running():
            answer = await post_to(receiver, delivery.headers, delivery.body)
            assert (answer.status_code, answer.json()) == (
                202,
                {"status": "resuming", "journal_key": "order-1"},
            )
            await receiver.settled()
            again = await post_to(receiver, delivery.headers, delivery.body)
        await host.close()
    assert (again.status_code, again.json()["reason"]) == (200, "replayed")
    ((key, kind, outcome),) = outcomes
    assert (key, kind) == ("order-1", "session.requires_action")
    assert isinstance(outcome, Success) and outcome.unwrap().text == "Refunded."
    assert RAN == ["a@x"]  # the approved call ran once, in the resume


async def test_refused_ignored_and_unavailable_deliveries_answer_without_resuming(tmp_path: Path) -> None:
    journal = str(tmp_path / "j.db")
    script = [cma.tool_turn(("refund", {"email": "a@x"})), cma.text_turn("Refunded.")]
    with CMAEmulator(script, api_key=KEY) as emu:
        session_id = await paused_run(emu, journal)
        resumed: list[str] = []

        class Recorder:
            journal = None

            async def resume(self, key: str) -> Any:
                resumed.append(key)
                return Success(None)

        receiver = WebhookReceiver(Recorder(), secret=emu.webhook_secret, journal=journal)
        early = emu.webhook_delivery("session.requires_action", session_id)
        before_start = await post_to(receiver, early.headers, early.body)
        cases = {
            "forged": emu.webhook_delivery("session.requires_action", session_id, secret=new_secret()),
            "stale": emu.webhook_delivery(
                "session.requires_action", session_id, timestamp=time.time() - 3600
            ),
            "early": emu.webhook_delivery(
                "session.requires_action", session_id, timestamp=time.time() + 3600
            ),
            "unknown": emu.webhook_delivery("session.requires_action", "sesn_nobody"),
            "other": emu.webhook_delivery("session.created", session_id),
        }
        async with receiver.running():
            answers = {name: await post_to(receiver, d.headers, d.body) for name, d in cases.items()}
            # the early delivery was not taken before the lifespan: its retry works now
            retried = await post_to(receiver, early.headers, early.body)
            await receiver.settled()
    assert before_start.status_code == 503
    assert {n: (a.status_code, a.json().get("reason")) for n, a in answers.items()} == {
        "forged": (400, "bad_signature"),
        "stale": (400, "stale"),
        "early": (400, "too_new"),
        "unknown": (200, None),
        "other": (200, None),
    }
    assert retried.status_code == 202 and resumed == ["order-1"]


async def test_deliveries_for_a_key_being_resumed_ask_for_one_more_resume_not_a_parallel_one(
    tmp_path: Path,
) -> None:
    journal = str(tmp_path / "j.db")
    script = [cma.tool_turn(("refund", {"email": "a@x"})), cma.text_turn("Refunded.")]
    with CMAEmulator(script, api_key=KEY) as emu:
        session_id = await paused_run(emu, journal)
        release = anyio.Event()
        active: list[int] = []
        peak: list[int] = []

        class Slow:
            journal = None

            async def resume(self, key: str) -> Any:
                active.append(1)
                peak.append(len(active))
                await release.wait()
                active.pop()
                return Success(None)

        receiver = WebhookReceiver(Slow(), secret=emu.webhook_secret, journal=journal)
        async with receiver.running():
            for _ in range(3):
                d = emu.webhook_delivery("session.requires_action", session_id)
                assert (await post_to(receiver, d.headers, d.body)).status_code == 202
            release.set()
            await receiver.settled()
    assert peak == [1, 1]  # the first resume, then one more for the two that came meanwhile


async def test_the_asgi_lifespan_owns_the_task_group() -> None:
    receiver = WebhookReceiver(_Never(), secret=new_secret(), journal=":memory:")
    to_app, app_reads = anyio.create_memory_object_stream[dict[str, Any]](4)
    app_writes, from_app = anyio.create_memory_object_stream[dict[str, Any]](4)
    async with anyio.create_task_group() as group:
        group.start_soon(receiver, {"type": "lifespan"}, app_reads.receive, app_writes.send)
        await to_app.send({"type": "lifespan.startup"})
        assert (await from_app.receive())["type"] == "lifespan.startup.complete"
        assert receiver._group is not None
        await to_app.send({"type": "lifespan.shutdown"})
        assert (await from_app.receive())["type"] == "lifespan.shutdown.complete"
    assert receiver._group is None


class _Never:
    journal = None

    async def resume(self, key: str) -> Any:
        raise AssertionError("no resume expected")


def test_the_receiver_refuses_a_bad_secret_or_no_journal_when_built() -> None:
    with pytest.raises(InvalidSecret):
        WebhookReceiver(_Never(), secret="whsec_", journal=":memory:")
    with pytest.raises(TypeError, match="journal"):
        WebhookReceiver(_Never(), secret=new_secret())


def test_the_emulator_delivers_signed_webhooks_when_sessions_go_idle() -> None:
    """Automatic deliveries: one per idle (requires_action, then end_turn), POSTed to a loopback
    URL, each verifying under the emulator's secret."""
    import http.server
    import threading

    got: list[tuple[dict[str, str], bytes]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            got.append(({k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hooks"
    try:
        script = [cma.tool_turn(("lookup", {"q": "x"})), cma.text_turn("Done.")]
        with CMAEmulator(script, api_key=KEY, webhook_url=url) as emu:
            client = httpx.Client(base_url=emu.base_url, headers=_headers())
            agent = client.post("/v1/agents", json={"name": "a", "model": "claude-sonnet-4-6"}).json()
            env = client.post("/v1/environments", json={"name": "e"}).json()
            sid = client.post(
                "/v1/sessions", json={"agent": agent["id"], "environment_id": env["id"]}
            ).json()["id"]
            client.post(
                f"/v1/sessions/{sid}/events",
                json={"events": [{"type": "user.message", "content": [{"type": "text", "text": "hi"}]}]},
            )
            use = next(e for e in emu.history(sid) if e["type"] == "agent.custom_tool_use")
            result = {
                "type": "user.custom_tool_result",
                "custom_tool_use_id": use["id"],
                "content": [{"type": "text", "text": "r"}],
            }
            client.post(f"/v1/sessions/{sid}/events", json={"events": [result]})
            sent = emu.webhooks.wait(2) if emu.webhooks else []
            client.close()
            secret = emu.webhook_secret
    finally:
        server.shutdown()
    assert [d.status for d in sent] == [204, 204]
    kinds = [verify(secret, h, b, now=time.time()).unwrap() for h, b in got]
    assert [(e.type, e.session_id) for e in kinds] == [
        ("session.requires_action", sid),
        ("session.status_idled", sid),
    ]


def _headers() -> dict[str, str]:
    return {
        "x-api-key": KEY,
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "managed-agents-2026-04-01",
    }
