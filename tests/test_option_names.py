"""One naming rule for options (issue #22), checked over the public surface.

Durations are seconds with no unit suffix; retries are ``max_retries``; metadata is
``metadata``; test seams are not in public signatures (they go in the private ``_seams=``).
The names used before the rule still work through one table
(``rma.session.option_checks.RENAMED``): each warns, naming its replacement and pointing at the
caller; given together with its new name it is refused; a misspelling is answered with the new
name. Deprecated names appear in no signature.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from returns.result import Failure, Success

from rma.errors import InvalidOpts
from rma.session.option_checks import RENAMED, Renamed
from rma_shell import (
    Agent,
    MemoryJournal,
    SQLiteJournal,
    open_session,
    resume,
    resume_session,
    run,
    run_options,
    run_or_raise,
)
from rma_shell.agent import LIVE_OVERRIDES, RUN_OVERRIDES
from rma_shell.options import InvalidOptions, constructor_options
from rma_shell.providers.agentcore import BedrockAgentCore
from rma_shell.providers.agentcore import provisioning as harness_flows
from rma_shell.providers.agentcore.client import AgentCoreClient
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.providers.claude import provisioning as cma_flows
from rma_shell.providers.claude.client import CMAClient
from rma_shell.providers.local import Local
from rma_shell.provisioning import provision, teardown
from rma_shell.seams import Seams
from rma_shell.stores import JsonFileStore, MemoryStore, SqliteStore, base, ensure_record
from rma_shell.telemetry import Telemetry
from rma_shell.temporal import (
    DevServer,
    SessionSpec,
    Timeouts,
    connect,
    run_session,
    session_handle,
    session_worker,
    start_session,
)
from rma_shell.testing import CMAEmulator, ScriptedProvider, text_turn
from rma_shell.tools import Toolbox, tool
from rma_shell.tools.mcp import MCPServer
from tests.helpers import Recorder, cma_agent_and_environment, end

KEY = "sk-ant-names-22"
UNIT_SUFFIXES = ("_s", "_ms", "_seconds", "_secs")
SEAMS = frozenset({"rand", "sleep", "clock", "read_file", "session_id_factory", "client_token", "now"})

PUBLIC: dict[str, Callable[..., Any]] = {
    "run": run,
    "open_session": open_session,
    "run_or_raise": run_or_raise,
    "resume": resume,
    "resume_session": resume_session,
    "Agent": Agent,
    "Local": Local,
    "ClaudeManagedAgents": ClaudeManagedAgents,
    "BedrockAgentCore": BedrockAgentCore,
    "BedrockAgentCore.run_command": BedrockAgentCore.run_command,
    "BedrockAgentCore.storage": BedrockAgentCore.storage,
    "CMAClient": CMAClient,
    "AgentCoreClient": AgentCoreClient,
    "AgentCoreClient.run_command": AgentCoreClient.run_command,
    "AgentCoreClient.request_json": AgentCoreClient.request_json,
    "Toolbox": Toolbox,
    "tool": tool,
    "MCPServer.stdio": MCPServer.stdio,
    "MCPServer.http": MCPServer.http,
    "provision": provision,
    "teardown": teardown,
    "provision_harness": harness_flows.provision_harness,
    "teardown_harness": harness_flows.teardown_harness,
    "list_harnesses": harness_flows.list_harnesses,
    "ensure_harness": harness_flows.ensure_harness,
    "claude provision": cma_flows.provision,
    "MemoryStore": MemoryStore,
    "JsonFileStore": JsonFileStore,
    "SqliteStore": SqliteStore,
    "Store.claim": base.BaseStore.claim,
    "Store.renew": base.BaseStore.renew,
    "ensure_record": ensure_record,
    "MemoryJournal": MemoryJournal,
    "SQLiteJournal": SQLiteJournal,
    "SessionSpec": SessionSpec,
    "Timeouts": Timeouts,
    "connect": connect,
    "start_session": start_session,
    "run_session": run_session,
    "session_handle": session_handle,
    "session_worker": session_worker,
    "DevServer": DevServer,
}
"""The public surface whose keywords follow the rule, by the name ``RENAMED`` files them under."""


def why_not(name: str) -> str | None:
    """Why ``name`` breaks the rule, or None."""
    if name.startswith("_"):
        return None  # private: _seams
    if name.endswith(UNIT_SUFFIXES):
        return "a duration carries no unit suffix (seconds are the unit)"
    if name.endswith("_retries") and name != "max_retries":
        return "retries are max_retries"
    if name.endswith("_metadata"):
        return "metadata is metadata"
    if name in SEAMS:
        return "a test seam: pass it in _seams=Seams(...)"
    return None


def keywords(fn: Callable[..., Any]) -> set[str]:
    """The names ``fn`` takes: its keyword parameters, and the keys of a typed ``**options``
    (``Unpack[RunOptions]``: the run options are declared once, in ``rma_shell.run_options``)."""
    kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    names = {p.name for p in inspect.signature(fn).parameters.values() if p.kind in kinds}
    return names | set(run_options.typed_options(fn))


def every_option() -> Iterator[tuple[str, str]]:
    for where, fn in PUBLIC.items():
        for name in keywords(fn) - {"self"}:
            yield where, name
    for name in RUN_OVERRIDES | LIVE_OVERRIDES:
        yield "Agent.run()", name
    for provider in (Local, ClaudeManagedAgents, BedrockAgentCore):
        for name in provider.run_options | constructor_options(provider):
            yield f"{provider.__name__} (per run)", name


def test_every_public_option_follows_the_naming_rule() -> None:
    broken = {f"{where}: {name}": why for where, name in every_option() if (why := why_not(name))}
    assert broken == {}


def test_the_rule_itself() -> None:
    assert why_not("timeout") is None and why_not("max_retries") is None and why_not("_seams") is None
    assert why_not("metadata") is None and why_not("tools") is None and why_not("stop_grace") is None
    for bad in ("timeout_s", "receive_timeout_ms", "timeout_seconds", "lease_secs", "invoke_retries"):
        assert why_not(bad) is not None
    assert why_not("telemetry_metadata") is not None and why_not("sleep") is not None


# ── the table of renamed options ──────────────────────────────────────────────────────────


def _target(entry: Renamed) -> tuple[Callable[..., Any] | None, frozenset[str]]:
    """What ``entry``'s owner accepts today (its signature or, per run, its run options)."""
    if entry.owner == "run":
        return run, frozenset(keywords(run))
    if entry.owner.endswith(".run"):
        cls = {c.__name__: c for c in (Local, ClaudeManagedAgents, BedrockAgentCore)}[entry.owner[:-4]]
        return None, frozenset(cls.run_options) | frozenset(keywords(run))
    fn = PUBLIC[entry.owner]
    return fn, frozenset(keywords(fn))


@pytest.mark.parametrize("entry", RENAMED, ids=lambda e: f"{e.owner}.{e.old}")
def test_each_renamed_option_names_a_real_new_option_and_no_signature_shows_the_old(entry: Renamed) -> None:
    _, accepted = _target(entry)
    assert entry.new in accepted
    assert entry.old not in accepted
    assert why_not(entry.new) is None
    assert why_not(entry.old) is not None or entry.convert is not None  # a name, or a unit (ms)


def test_the_deprecated_names_are_in_no_public_signature() -> None:
    olds = {e.old for e in RENAMED}
    shown = {f"{where}: {name}" for where, name in every_option() if name in olds}
    assert shown == set()


# ── old names keep working, warn, and are refused beside their new name ────────────────────


def _one_warning(caught: list[warnings.WarningMessage], old: str, new: str) -> None:
    ours = [w for w in caught if issubclass(w.category, DeprecationWarning) and f"{old}=" in str(w.message)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    assert f"use {new}=" in str(ours[0].message)
    assert ours[0].filename == __file__  # it points at the caller, not into rma


def _constructed(make: Callable[..., Any], **kw: Any) -> tuple[Any, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        made = make(**kw)
    return made, caught


@pytest.mark.parametrize(
    ("make", "old", "value", "attribute", "expected"),
    [
        (Local, "timeout_s", 5, "timeout", 5),
        (Local, "backoff_base_s", 0.25, "backoff_base", 0.25),
        (Local, "backoff_cap_s", 9, "backoff_cap", 9),
        (BedrockAgentCore, "idle_timeout_s", 12, "idle_timeout", 12),
        (BedrockAgentCore, "invoke_retries", 0, "max_retries", 0),
        (BedrockAgentCore, "backoff_base_s", 0.1, "backoff_base", 0.1),
        (BedrockAgentCore, "backoff_cap_s", 4, "backoff_cap", 4),
        (ClaudeManagedAgents, "stream_idle_timeout_s", 30, "stream_idle_timeout", 30),
        (ClaudeManagedAgents, "cleanup_timeout_s", 2, "cleanup_timeout", 2),
        (lambda **kw: Timeouts(**kw), "heartbeat_s", 3.0, "heartbeat", 3.0),
        (lambda **kw: Timeouts(**kw), "retry_max_s", 7.0, "retry_max", 7.0),
    ],
)
def test_an_old_constructor_name_still_sets_the_new_option_and_warns(
    make: Callable[..., Any], old: str, value: object, attribute: str, expected: object
) -> None:
    made, caught = _constructed(make, **{old: value})
    assert getattr(made, attribute) == expected
    _one_warning(caught, old, attribute)


def test_agentcore_timeout_seconds_is_invoke_timeout_in_the_provider_and_per_run() -> None:
    made, caught = _constructed(BedrockAgentCore, timeout_seconds=30)
    assert made.defaults["invoke_timeout"] == 30
    _one_warning(caught, "timeout_seconds", "invoke_timeout")


def test_claude_receive_timeout_in_milliseconds_becomes_read_timeout_in_seconds() -> None:
    made, caught = _constructed(ClaudeManagedAgents, api_key=KEY, env={}, receive_timeout=2500)
    _one_warning(caught, "receive_timeout", "read_timeout")
    assert made.client().unwrap().settings.read_timeout == 2.5
    fresh = ClaudeManagedAgents(api_key=KEY, env={}, read_timeout=4)
    assert fresh.client().unwrap().settings.read_timeout == 4.0
    legacy_config = ClaudeManagedAgents(api_key=KEY, env={}, app_config={"receive_timeout": 1500})
    assert legacy_config.client().unwrap().settings.read_timeout == 1.5  # the app_config key, in ms


def test_stores_and_journals_take_their_old_duration_names(tmp_path: Path) -> None:
    store, caught = _constructed(SqliteStore, path=tmp_path / "s.db", busy_timeout_s=3)
    store.close()
    _one_warning(caught, "busy_timeout_s", "busy_timeout")
    journal, caught = _constructed(SQLiteJournal, path=tmp_path / "j.db", busy_timeout_s=3)
    journal.close()
    _one_warning(caught, "busy_timeout_s", "busy_timeout")
    memory = MemoryStore(_seams=Seams(clock=lambda: 100.0))
    key = base.StoreKey(provider="p", kind="agent", base="b")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        claimed = memory.claim(key, "0" * 64, "me", lease_s=5)
    _one_warning(caught, "lease_s", "lease")
    assert isinstance(claimed, base.Acquired) and claimed.claim.expires_at == 105.0


def test_old_and_new_name_together_are_refused() -> None:
    with pytest.raises(InvalidOptions) as raised:
        Local(timeout_s=1, timeout=2)
    assert (raised.value.error.option, raised.value.error.suggestion) == ("timeout_s", "timeout")
    assert isinstance(raised.value, TypeError)
    with pytest.raises(InvalidOptions):
        BedrockAgentCore(invoke_retries=1, max_retries=1)
    with pytest.raises(InvalidOptions):
        ClaudeManagedAgents(receive_timeout=1000, read_timeout=1)
    with pytest.raises(InvalidOptions):
        Timeouts(heartbeat_s=1, heartbeat=1)
    with pytest.raises(InvalidOptions):
        SessionSpec(provider="p", handler="h", telemetry_metadata={"a": 1}, metadata={"a": 1})


@pytest.mark.parametrize(
    ("make", "typo", "meant"),
    [
        (Local, "timeout_sec", "timeout"),
        (Local, "backoff_bse", "backoff_base"),
        (BedrockAgentCore, "max_retires", "max_retries"),
        (BedrockAgentCore, "idle_timout_s", "idle_timeout"),
        (BedrockAgentCore, "invoke_timout", "invoke_timeout"),
        (ClaudeManagedAgents, "stream_idle_timeout_ms", "stream_idle_timeout"),
        (ClaudeManagedAgents, "read_timout", "read_timeout"),
    ],
)
def test_a_misspelling_is_answered_with_the_new_name(make: Callable[..., Any], typo: str, meant: str) -> None:
    with pytest.raises(InvalidOptions) as raised:
        make(**{typo: 1})
    assert (raised.value.error.option, raised.value.error.suggestion) == (typo, meant)


def test_a_seam_is_no_longer_a_keyword() -> None:
    with pytest.raises(InvalidOptions) as raised:
        Local(sleep=None)
    assert raised.value.error.option == "sleep"
    assert "_seams" not in raised.value.error.message  # private names are never suggested


# ── run()'s metadata ─────────────────────────────────────────────────────────────────────


async def test_run_metadata_labels_the_telemetry_and_the_old_name_still_works_and_warns() -> None:
    tel = Telemetry()
    labels = _labels(tel)
    scripted = ScriptedProvider([end()])
    await run(scripted, handler=Recorder(), prompt="go", metadata={"tenant": "a"}, telemetry=tel)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        await run(
            ScriptedProvider([end()]),
            handler=Recorder(),
            prompt="go",
            telemetry_metadata={"t": 1},
            telemetry=tel,
        )
    _one_warning(caught, "telemetry_metadata", "metadata")
    assert labels[0]["tenant"] == "a" and labels[1]["t"] == 1
    both = await run(
        ScriptedProvider([end()]), handler=Recorder(), prompt="go", metadata={"a": "1"}, telemetry_metadata={}
    )
    assert isinstance(both, Failure) and isinstance(both.failure(), InvalidOpts)
    assert (both.failure().option, both.failure().suggestion) == ("telemetry_metadata", "metadata")
    typo = await run(ScriptedProvider([end()]), handler=Recorder(), prompt="go", metdat={"a": "1"})
    assert typo.failure().suggestion == "metadata"  # type: ignore[union-attr]


def _labels(tel: Telemetry) -> list[dict[str, Any]]:
    """The metadata of each ``rma.session.terminal`` event ``tel`` carries, in order."""
    seen: list[dict[str, Any]] = []

    def listen(name: str, measurements: Any, metadata: dict[str, Any]) -> None:
        if name == "rma.session.terminal":
            seen.append(dict(metadata))

    tel.attach("labels", "rma.session.*", listen)
    return seen


def _created_session_bodies(emu: CMAEmulator) -> list[Any]:
    return [q.body for q in emu.requests if q.method == "POST" and q.path.rstrip("/").endswith("/sessions")]


async def test_on_claude_metadata_is_the_sessions_too_and_the_old_names_keep_their_meaning() -> None:
    tel = Telemetry()
    labels = _labels(tel)
    with CMAEmulator([text_turn("a"), text_turn("b"), text_turn("c")], api_key=KEY) as emu:
        ids = cma_agent_and_environment(emu, KEY)
        provider = ClaudeManagedAgents(
            api_key=KEY, base_url=emu.base_url, env={}, metadata={"team": "x"}, **ids
        )
        go = {"handler": Recorder(), "prompt": "go", "telemetry": tel}
        try:
            assert isinstance(await run(provider, **go, metadata={"ticket": "7"}), Success)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                assert isinstance(await run(provider, **go, session_metadata={"s": "1"}), Success)
                assert isinstance(await run(provider, **go, telemetry_metadata={"t": "1"}), Success)
            _one_warning(caught, "session_metadata", "metadata")
            _one_warning(caught, "telemetry_metadata", "metadata")
            refused = await run(provider, **go, metadata={"n": 1})
        finally:
            await provider.close()
        bodies = _created_session_bodies(emu)
    assert [b.get("metadata") for b in bodies] == [
        {"team": "x", "ticket": "7"},  # metadata=: the session's and the telemetry's
        {"team": "x", "s": "1"},  # session_metadata=: the session's only
        {"team": "x"},  # telemetry_metadata=: the telemetry's only
    ]
    assert labels[0]["ticket"] == "7" and "s" not in labels[1] and labels[2]["t"] == "1"
    assert isinstance(refused, Failure) and refused.failure().option == "metadata"  # Claude: strings only
    assert labels[3]["terminal"] == "error"  # refused before any session was created (3 bodies)


async def test_the_agent_passes_its_metadata_as_the_runs_metadata() -> None:
    tel = Telemetry()
    labels = _labels(tel)
    agent = Agent(host=ScriptedProvider([end()]), metadata={"team": "x"}, telemetry=tel)
    assert isinstance(await agent.run("go"), Success)
    assert labels[0]["team"] == "x"


# ── values recorded in Temporal histories read the same before and after ────────────────────


def test_timeouts_are_recorded_under_their_old_keys_and_read_under_either() -> None:
    recorded = Timeouts(heartbeat=2.0, retry_initial=0.1).to_json()
    assert recorded["heartbeat_s"] == 2.0 and recorded["retry_initial_s"] == 0.1  # what old workers read
    assert "heartbeat" not in recorded
    assert Timeouts.from_json(recorded) == Timeouts(heartbeat=2.0, retry_initial=0.1)
    assert Timeouts.from_json({"turn": 5.0}).turn == 5.0


def test_a_spec_recorded_with_telemetry_metadata_keeps_its_telemetry_only_meaning() -> None:
    old = SessionSpec.from_json({"provider": "p", "handler": "h", "telemetry_metadata": {"t": 1}})
    assert old.metadata is None and old.provider_opts == {"telemetry_metadata": {"t": 1}}
    made, caught = _constructed(
        lambda **kw: SessionSpec(provider="p", handler="h", **kw), telemetry_metadata={"t": 1}
    )
    assert made == old
    _one_warning(caught, "telemetry_metadata", "metadata")
    new = SessionSpec(provider="p", handler="h", metadata={"a": "1"})
    assert SessionSpec.from_json(new.to_json()) == new
    assert "metadata" not in SessionSpec(provider="p", handler="h").to_json()  # as a pre-#22 worker reads it


async def test_provision_takes_the_old_harness_read_timeout_name_and_refuses_both() -> None:
    from rma.provisioning import AgentSpec

    host = BedrockAgentCore(harness_arn=None)
    spec = AgentSpec.create("a", system_prompt="s").unwrap()
    both = await provision(host, spec, execution_role_arn="r", receive_timeout_s=1, read_timeout=1)
    assert isinstance(both, Failure) and (both.failure().option, both.failure().suggestion) == (
        "receive_timeout_s",
        "read_timeout",
    )
    typo = await provision(host, spec, execution_role_arn="r", read_timout=1)
    assert isinstance(typo, Failure) and typo.failure().suggestion == "read_timeout"
