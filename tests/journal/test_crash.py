"""Kill a journaled run (SIGKILL, a real process) at every journal boundary, resume it, compare.

Per host, against its emulator (which runs here and outlives the killed process): the scripted
tool loop of ``tests.journal._scenario`` runs once undisturbed, here, with a journal that notes
at each append what the host and the tool had seen so far. Then, for each kill point, a fresh
emulator, a child process (``tests.journal._child``) that runs the same loop and dies there, and
``resume`` here — on trio and asyncio in turn — with the same tool. The kill points:

- ``after n`` for every append n: the n-th commit done, nothing it leads to has happened (every
  command boundary: the journal commits what is pending before anything leaves the process);
- ``before n`` for every append n that something outside happened before (a request reached
  the host, a tool ran): that happened, the record saying so is not there — the other half of
  each boundary (``before n`` elsewhere is the state ``after n-1`` leaves);
- ``before 1`` — nothing durable: the journal holds no session (a typed error);
- ``in tool id`` for every call: inside the tool, its effect committed, before it returns —
  the at-least-once window the idempotency key covers.

What must hold (``_check``): the run ends with the undisturbed run's ``SessionResult``
(``_scenario.comparable`` says which fields differ between two sessions and why); every call's
effect is applied once, by its idempotency key ``<journal key>:<tool-use id>``; a call whose
result was journaled is never run again; a call that had started runs again as attempt 2; the
host received nothing twice (the Claude session's event history and the AgentCore
conversation equal the undisturbed run's).

Two windows cannot end like the undisturbed run, by the hosts' nature, and are checked for what
does hold there:

- Claude, ``before 2``: the host created the session, the process died before journaling its
  id; the resume creates another (the first stays on the host, empty: nothing was posted to it).
- AgentCore, a model turn the harness had taken when the process died (the invoke landed, its
  reply not journaled): the harness keeps the conversation, has no listing and does not send a
  reply again, so the turn asked again is refused (its messages repeat what the conversation
  holds) — ``TurnLost``, never a tool run twice or a call of another turn; the host holds the
  undisturbed run's conversation up to that turn. A turn sent that had not landed is asked
  again and the run ends as the undisturbed one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from returns.result import Failure, Success

from rma.errors import TurnLost
from rma.vocabulary import SessionResult
from rma_shell import SQLiteJournal, resume, run
from tests.journal import _scenario as sc

ROOT = Path(__file__).resolve().parents[2]
HOSTS = ("local", "cma", "agentcore")


# ── the child ────────────────────────────────────────────────────────────────────────


class Zygote:
    """``python -m tests.journal._child``: one process that forks a run per kill point."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.journal._child"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def run(self, job: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the child server died"
        return dict(json.loads(line))

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    z = Zygote()
    try:
        yield z
    finally:
        z.close()


# ── the undisturbed run ──────────────────────────────────────────────────────────────


@attrs.frozen
class Append:
    """One append of the undisturbed run: its records' kinds, and what the outside had seen
    when it began (requests the host received, tool executions, model turns sent)."""

    kinds: tuple[str, ...]
    requests: int
    executions: int
    turns_sent: int


class Tracing(SQLiteJournal):
    def __init__(self, path: str, observe: Callable[[], tuple[int, int, int]]) -> None:
        super().__init__(path)
        self.observe = observe
        self.trace: list[Append] = []

    def append(self, key: str, records: Sequence[str]) -> None:
        kinds = tuple(_kind(json.loads(r)) for r in records)
        self.trace.append(Append(kinds, *self.observe()))
        super().append(key, records)


def _kind(record: dict[str, Any]) -> str:
    """A record's kind; an event's type, with ``+conn`` when it carries the host's snapshot."""
    if record["kind"] == "event":
        return str(record["event"]["$type"]) + ("+conn" if "conn" in record else "")
    return str(record["kind"])


@attrs.frozen
class Baseline:
    result: SessionResult
    trace: tuple[Append, ...]
    effects: frozenset[str]
    host_log: Any


def _turns_sent(host: str, emu: Any) -> int:
    """Model turns the host was asked for (AgentCore invokes)."""
    if host != "agentcore":
        return 0
    return sum(1 for r in emu.requests if r.path.startswith("/harnesses/invoke"))


def _host_log(host: str, emu: Any, session_id: str | None) -> Any:
    """What the host keeps of the session, for 'nothing received twice'."""
    if host == "cma":
        return [{k: v for k, v in e.items() if k != "processed_at"} for e in emu.history(session_id)]
    if host == "agentcore":
        session = emu.sessions.get(sc.SID)
        return session.messages if session is not None else None
    return None


def _baseline(host: str, tmp: Path) -> Baseline:
    effects = str(tmp / f"{host}-baseline-effects.db")
    sc.create_effects(effects)
    with sc.emulator(host) as (emu, spec):

        def observe() -> tuple[int, int, int]:
            return len(emu.requests), len(sc.read_effects(effects).executions), _turns_sent(host, emu)

        journal = Tracing(str(tmp / f"{host}-baseline.db"), observe)

        async def go() -> Any:
            provider = sc.provider(spec)
            try:
                return await run(
                    provider,
                    handler=sc.Payments(effects),
                    prompt=sc.PROMPT,
                    journal=journal,
                    journal_key=sc.KEY,
                    timeout=30,
                    **sc.run_options(spec),
                )
            finally:
                await provider.close()

        result = anyio.run(go, backend="trio").unwrap()
        host_log = _host_log(host, emu, result.session_id)
    done = sc.read_effects(effects)
    assert sorted(done.effects) == sorted(f"{sc.KEY}:{u.id}" for u in result.custom_tool_uses)
    return Baseline(result, tuple(journal.trace), frozenset(done.effects), host_log)


# ── kill points ──────────────────────────────────────────────────────────────────────


def kill_points(base: Baseline) -> list[dict[str, Any]]:
    trace = base.trace
    points: list[dict[str, Any]] = [{"before": 1}]
    points += [{"after": n} for n in range(1, len(trace) + 1)]
    for n in range(2, len(trace) + 1):
        now, previous = trace[n - 1], trace[n - 2]
        if (now.requests, now.executions) != (previous.requests, previous.executions):
            points.append({"before": n})
    points += [{"in_tool": use.id} for use in base.result.custom_tool_uses]
    return points


def _durable(kill: dict[str, Any], trace: Sequence[Append]) -> tuple[int, Append | None]:
    """How many appends a kill leaves, and the outside as it was at the kill (None: in a tool)."""
    if "after" in kill:
        return kill["after"], trace[kill["after"] - 1]
    if "before" in kill:
        return kill["before"] - 1, trace[kill["before"] - 1]
    return -1, None


def _turn_in_flight(host: str, kill: dict[str, Any], trace: Sequence[Append]) -> bool:
    """AgentCore only: a model turn sent whose result the journal does not hold."""
    if host != "agentcore":
        return False
    kept, outside = _durable(kill, trace)
    if outside is None:
        return False
    polled = sum(k in ("TurnPolled", "TurnFailed") for a in trace[:kept] for k in a.kinds)
    return outside.turns_sent > polled


# ── the property ─────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("host", HOSTS)
def test_a_run_killed_at_any_boundary_resumes_to_the_undisturbed_result(
    host: str, zygote: Zygote, tmp_path: Path
) -> None:
    base = _baseline(host, tmp_path)
    kinds = {k for a in base.trace for k in a.kinds}
    # The loop crosses every record kind a tool loop writes (approvals are not part of it).
    assert {"header", "Opened+conn", "tool_start", "tool_result", "ToolsFinished", "end"} <= kinds, kinds
    points = kill_points(base)
    for i, kill in enumerate(points):
        backend = ("trio", "asyncio")[i % 2]
        with tempfile.TemporaryDirectory(dir=tmp_path) as scratch:
            _check(host, base, kill, zygote, Path(scratch), backend)


def _check(host: str, base: Baseline, kill: dict[str, Any], zygote: Zygote, tmp: Path, backend: str) -> None:
    where = f"{host}, kill {kill}, resumed on {backend}"
    effects, journal = str(tmp / "effects.db"), str(tmp / "journal.db")
    sc.create_effects(effects)
    with sc.emulator(host) as (emu, spec):
        ended = zygote.run({"spec": spec, "kill": kill, "journal": journal, "effects": effects})
        assert ended == {"signal": signal.SIGKILL}, f"{where}: the child ended {ended}"
        rows = SQLiteJournal(journal).rows(sc.KEY)
        records = [json.loads(text) for _, text, _ in rows]
        journaled = {r["id"] for r in records if r["kind"] == "tool_result"}
        started = {r["id"] for r in records if r["kind"] == "tool_start"}
        before = sc.read_effects(effects)
        sent = len(emu.requests)

        async def go() -> Any:
            provider = sc.provider(spec)
            try:
                return await resume(
                    SQLiteJournal(journal),
                    sc.KEY,
                    provider=provider,
                    handler=sc.Payments(effects),
                    timeout=30,
                )
            finally:
                await provider.close()

        outcome = anyio.run(go, backend=backend)
        after = sc.read_effects(effects)
        resent = len(emu.requests) - sent
        sessions = list(emu.session_ids) if host == "cma" else []
        logs = [_host_log(host, emu, s) for s in sessions] if host == "cma" else [_host_log(host, emu, None)]

    # Nothing durable: not a session to resume, and nothing is sent.
    if kill == {"before": 1}:
        assert isinstance(outcome, Failure) and outcome.failure().kind == "journal_mismatch", where
        assert resent == 0 and not after.executions, where
        return

    # No call whose result was journaled ran again; a started one ran again as attempt 2.
    again = after.executions[len(before.executions) :]
    for tool_use_id, key, attempt in again:
        assert tool_use_id not in journaled, (
            f"{where}: {tool_use_id} ran again after its result was journaled"
        )
        assert key == f"{sc.KEY}:{tool_use_id}", where
        assert attempt == (2 if tool_use_id in started else 1), f"{where}: {tool_use_id} attempt {attempt}"
    if "in_tool" in kill:
        runs = [a for i, _k, a in after.executions if i == kill["in_tool"]]
        assert runs == [1, 2], f"{where}: the interrupted call ran as {runs}"
    # Every effect is one of the undisturbed run's, applied once (by its idempotency key).
    assert set(after.effects) <= base.effects, f"{where}: effects of calls it never made"

    if _turn_in_flight(host, kill, base.trace):
        # The harness had taken the turn; asked again, it refused: the reply is lost.
        assert isinstance(outcome, Failure), f"{where}: {outcome}"
        lost = outcome.failure()
        assert isinstance(lost, TurnLost), f"{where}: {lost}"
        assert lost.runtime_session_id == sc.SID and lost.error_type == "runtimeClientError", where
        # What the host holds is the undisturbed run's conversation so far: nothing twice.
        (held,) = logs
        assert held and held == base.host_log[: len(held)], f"{where}: the host holds {held}"
        return

    assert isinstance(outcome, Success), f"{where}: {outcome}"
    result = outcome.unwrap()
    assert set(after.effects) == base.effects, where
    if host == "cma" and kill == {"before": 2}:
        # The session the child created and never journaled stays, with nothing posted to it.
        _orphan, session = sessions
        assert logs[0] == [] and result.session_id == session, where
        logs = logs[1:]
        result = attrs.evolve(result, session_id=base.result.session_id)
    assert sc.comparable(result, host) == sc.comparable(base.result, host), where
    assert logs == [base.host_log], f"{where}: the host received something twice"
