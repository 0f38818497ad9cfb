"""The inspector's pages, through Starlette's TestClient on both anyio backends: the sessions
and their states, a session's timeline (text, calls, results, usage, durations, errors),
redaction, Allow and Deny recorded as ``approve`` records them, recordings read-only, the
live version, and the refusals (a second decision, a foreign token or Host)."""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path
from typing import Any

import pytest
from returns.result import Failure, Success

pytest.importorskip("starlette", reason="the 'inspect' extra (Starlette) is not installed")

from starlette.testclient import TestClient

from rma.journal import load
from rma_shell import MemoryJournal, SQLiteJournal, pending_approvals
from rma_shell.inspect import SourceError, app
from rma_shell.inspect.reading import codec_for
from tests.inspect import _sessions as s


def _client(backend: Any, target: Any, **options: Any) -> TestClient:
    name = backend if isinstance(backend, str) else backend[0]
    return TestClient(app(target, environ={}, **options), base_url="http://127.0.0.1", backend=name)


def _text(html: str) -> str:
    return unescape(re.sub(r"<[^>]+>", " ", html))


def _decide(client: TestClient, key: str, use_id: str, decision: str, reason: str = "") -> Any:
    token = client.app.state.token  # type: ignore[attr-defined]
    return client.post(
        "/session/decide",
        data={"key": key, "id": use_id, "decision": decision, "reason": reason, "token": token},
        follow_redirects=True,
    )


@pytest.fixture
def journal(tmp_path: Path, anyio_backend: Any) -> Path:
    path = tmp_path / "sessions.db"
    s.every_state(anyio_backend, path)
    return path


def test_the_sessions_page_lists_every_session_with_its_state(journal: Path, anyio_backend: Any) -> None:
    with _client(anyio_backend, journal) as client:
        page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    rows = {
        m[0]: m[1]
        for m in re.findall(r'key=(\w+)">\w+</a></td><td><span class="state \w+">([^<]+)<', page.text)
    }
    assert rows == {"ended": "ended", "failed": "failed", "waiting": "waiting for approval"}
    assert "the host is down (503)" in page.text  # a failed session says why, in the list already


def test_a_session_still_running_is_listed_as_running(anyio_backend: Any) -> None:
    # A journal cut after its first turn: what a live session's journal looks like mid-run.
    whole, cut = MemoryJournal(), MemoryJournal()
    s.journal_of(anyio_backend, whole, "live", s.ENDED)
    cut.append("live", [text for _, text, _ in whole.rows("live")[:3]])
    with _client(anyio_backend, cut) as client:
        listed = client.get("/").text
        shown = _text(client.get("/session", params={"key": "live"}).text)
    assert 'class="state running">running<' in listed
    assert "Turn 1" in shown and "Checking." in shown and "in progress" not in shown


def test_the_timeline_shows_turns_text_calls_results_usage_and_durations(
    journal: Path, anyio_backend: Any
) -> None:
    with _client(anyio_backend, journal) as client:
        page = client.get("/session", params={"key": "ended"})
    text = _text(page.text)
    assert page.status_code == 200
    assert "help with ended" in text  # the prompt
    assert re.search(r"Turn 1 .*\d+ ms.*50 in · 9 out", text) and re.search(r"Turn 2 .*80 in · 5 out", text)
    assert "Checking." in text and "All good." in text
    assert '"q": "5302"' in text and "order 5302 (token" in text  # the call's input and its result
    assert re.search(r"lookup\s+done · \d+ ms", text)  # the call's duration, from the journal's times
    assert "130 in · 14 out" in text  # the session's total
    assert "Result: end_turn" in text


def test_a_failed_session_shows_its_error(journal: Path, anyio_backend: Any) -> None:
    with _client(anyio_backend, journal) as client:
        text = _text(client.get("/session", params={"key": "failed"}).text)
    assert "error (provider_error)" in text and "the host is down (503)" in text


def test_secrets_are_masked_by_name_and_by_value(journal: Path, anyio_backend: Any) -> None:
    with _client(anyio_backend, journal, secrets=[s.SECRET]) as client:
        page = client.get("/session", params={"key": "ended"}).text
    assert s.SECRET not in page
    assert "&quot;api_key&quot;: &quot;***&quot;" in page and "(token ***)" in page
    # Named credentials in the environment are masked too, as the logs mask what they send.
    name = anyio_backend if isinstance(anyio_backend, str) else anyio_backend[0]
    env_app = app(journal, environ={"OPENAI_API_KEY": s.SECRET})
    with TestClient(env_app, base_url="http://127.0.0.1", backend=name) as client:
        assert s.SECRET not in client.get("/session", params={"key": "ended"}).text


def test_a_pending_approval_shows_the_call_its_input_and_the_two_buttons(
    journal: Path, anyio_backend: Any
) -> None:
    with _client(anyio_backend, journal) as client:
        page = client.get("/session", params={"key": "waiting"}).text
    section = page[page.index('<section class="pending"') :]
    assert "Waiting for approval" in section and "refund" in section and "&quot;amount&quot;: 120" in section
    assert 'value="allow"' in section and 'value="deny"' in section
    assert "order 4417: paid 120" in page  # the call that ran before the pause


def test_allow_records_the_decision_as_approve_does_and_the_session_resumes(
    journal: Path, anyio_backend: Any
) -> None:
    s.refunds.clear()
    with _client(anyio_backend, journal) as client:
        after = _decide(client, "waiting", "t2", "allow")
        assert after.status_code == 200 and "allow recorded for t2" in _text(after.text)
        assert "Waiting for approval" not in after.text
        again = _decide(client, "waiting", "t2", "deny")  # a second decision is refused
        assert "not recorded" in _text(again.text) and "does not wait for approval" in _text(again.text)
    store = SQLiteJournal(journal)
    try:
        rows = store.rows("waiting")
        assert isinstance(load("waiting", rows, codec_for), Success)  # the chain still holds
        approvals = [r for _, r, _ in rows if '"kind":"approval"' in r]
        assert len(approvals) == 1 and '"decision":"allow"' in approvals[0]
    finally:
        store.close()
    assert pending_approvals(journal, "waiting").unwrap() == ()
    done = s.resume_of(anyio_backend, journal, "waiting", s.APPROVAL[1:])
    assert isinstance(done, Success) and s.refunds == [120]
    with _client(anyio_backend, journal) as client:
        text = _text(client.get("/session", params={"key": "waiting"}).text)
    assert "ended" in text and "Refunded 120 for order 4417." in text and "allowed" in text


def test_deny_with_a_reason_answers_the_model_with_it(journal: Path, anyio_backend: Any) -> None:
    s.refunds.clear()
    with _client(anyio_backend, journal) as client:
        _decide(client, "waiting", "t2", "deny", "over the limit")
    done = s.resume_of(anyio_backend, journal, "waiting", s.APPROVAL[1:])
    assert isinstance(done, Success) and s.refunds == []
    with _client(anyio_backend, journal) as client:
        text = _text(client.get("/session", params={"key": "waiting"}).text)
    assert "denied by the approver: over the limit" in text


def test_a_decision_without_this_inspectors_token_or_from_another_host_is_refused(
    journal: Path, anyio_backend: Any
) -> None:
    with _client(anyio_backend, journal) as client:
        forged = client.post(
            "/session/decide", data={"key": "waiting", "id": "t2", "decision": "allow", "token": "guess"}
        )
        assert forged.status_code == 403
        rebound = client.get("/", headers={"host": "evil.example:8321"})
        assert rebound.status_code == 421
        bad = _decide(client, "waiting", "t2", "maybe")
        assert bad.status_code == 400 and "decision" in bad.text
    assert [p.tool_use_id for p in pending_approvals(journal, "waiting").unwrap()] == ["t2"]


def test_the_version_changes_as_the_journal_grows(anyio_backend: Any) -> None:
    whole, growing = MemoryJournal(), MemoryJournal()
    s.journal_of(anyio_backend, whole, "k", s.ENDED)
    rows = [text for _, text, _ in whole.rows("k")]
    growing.append("k", rows[:2])
    with _client(anyio_backend, growing) as client:
        first = client.get("/session/version", params={"key": "k"}).text
        growing.append("k", rows[2:])
        second = client.get("/session/version", params={"key": "k"}).text
        page = client.get("/session", params={"key": "k"}).text
    assert first != second and f'data-version="{second}"' in page
    assert 'src="static/inspect.js"' in page


def test_a_recording_opens_read_only(tmp_path: Path, anyio_backend: Any) -> None:
    log = tmp_path / "run.jsonl"
    outcome = s.run_sync(
        anyio_backend, s.run, s.host(s.ENDED), handler=s.PLAIN_TOOLS, prompt="recorded", record=str(log)
    )
    assert isinstance(outcome, Success)
    with _client(anyio_backend, log) as client:
        listed = client.get("/").text
        page = client.get("/session", params={"key": "run.jsonl"}).text
        token = client.app.state.token  # type: ignore[attr-defined]
        refused = client.post(
            "/session/decide", data={"key": "run.jsonl", "id": "u1", "decision": "allow", "token": token}
        )
    assert "recording (read-only)" in listed and 'class="state ended">ended<' in listed
    text = _text(page)
    assert "read-only" in text and "<form" not in page
    assert "Turn 1" in text and "50 in · 9 out" in text and '"q": "5302"' in text
    assert refused.status_code == 405


def test_a_damaged_journal_is_shown_as_damaged(anyio_backend: Any) -> None:
    journal = MemoryJournal()
    s.journal_of(anyio_backend, journal, "k", s.ENDED)
    journal.tamper("k", 3, '{"kind":"event","event":{"$type":"Opened","session_id":"x"}}')
    with _client(anyio_backend, journal) as client:
        text = _text(client.get("/session", params={"key": "k"}).text)
    assert "damaged" in text and "record 3" in text


def test_an_unknown_session_is_404_and_static_assets_ship_in_the_package(
    journal: Path, anyio_backend: Any
) -> None:
    with _client(anyio_backend, journal) as client:
        assert client.get("/session", params={"key": "nope"}).status_code == 404
        css = client.get("/static/inspect.css")
        js = client.get("/static/inspect.js")
        assert client.get("/static/other.js").status_code == 404
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert js.status_code == 200 and "setInterval" in js.text


def test_a_path_that_is_neither_a_journal_nor_a_recording_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no such file"):
        app(tmp_path / "missing.db")
    with pytest.raises(SourceError, match="is a directory"):
        app(tmp_path)
    (tmp_path / "x.bin").write_bytes(b"\x00\x01binary")
    with pytest.raises(SourceError, match="neither a journal"):
        app(tmp_path / "x.bin")
    with pytest.raises(SourceError, match="expected a journal"):
        app(42)  # type: ignore[arg-type]


def test_a_failed_approve_is_shown_not_raised(journal: Path, anyio_backend: Any) -> None:
    with _client(anyio_backend, journal) as client:
        page = _decide(client, "ended", "u1", "allow")
    assert page.status_code == 200 and "not recorded" in _text(page.text)
    assert isinstance(pending_approvals(journal, "ended"), Success)
    assert not isinstance(pending_approvals(journal, "ended"), Failure)


def test_a_recording_still_being_written_shows_as_running(tmp_path: Path, anyio_backend: Any) -> None:
    whole, live = tmp_path / "whole.jsonl", tmp_path / "live.jsonl"
    outcome = s.run_sync(
        anyio_backend, s.run, s.host(s.ENDED), handler=s.PLAIN_TOOLS, prompt="recorded", record=str(whole)
    )
    assert isinstance(outcome, Success)
    lines = whole.read_text(encoding="utf-8").splitlines(keepends=True)
    live.write_text("".join(lines[:4]) + lines[4][:20], encoding="utf-8")  # mid-line, as a writer leaves it
    with _client(anyio_backend, live) as client:
        listed = client.get("/").text
        page = client.get("/session", params={"key": "live.jsonl"})
    assert 'class="state running">running<' in listed
    assert page.status_code == 200 and "Checking." in _text(page.text)


def test_with_a_model_each_usage_shows_its_price_from_the_table(journal: Path, anyio_backend: Any) -> None:
    pytest.importorskip("genai_prices")
    from rma.vocabulary import Usage
    from rma_shell.cost import label, price

    shown = label("gpt-4.1")
    expected = price(Usage(input_tokens=130, output_tokens=14), "gpt-4.1")
    assert expected is not None
    with _client(anyio_backend, journal, price=shown) as client:
        text = _text(client.get("/session", params={"key": "ended"}).text)
    assert f"${expected.amount:.4f}" in text  # the session's total, priced


def test_a_price_label_needs_a_model_and_says_none_for_an_unknown_one() -> None:
    pytest.importorskip("genai_prices")
    from rma.vocabulary import Usage
    from rma_shell.cost import label

    with pytest.raises(ValueError, match="model"):
        label("")
    assert label("no-such-model-anywhere")("local", Usage(input_tokens=1, output_tokens=1)) is None
