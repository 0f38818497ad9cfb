"""Pure checks of option names and values, shared by ``run``/``open_session`` and the providers.

Names: ``run()`` and ``open_session()`` accept their own options (``RUN_OPTIONS``,
``LIVE_OPTIONS``) plus the per-run options their provider declares; provider constructors
accept their own parameters. Anything else is an ``InvalidOpts`` naming it, with the closest
accepted name as a "did you mean …?" suggestion, and — when the name is a real option that
belongs elsewhere (a provider setting given to a run, a per-session option given to a
provider) — a detail saying where it goes. Values: seconds (no NaN, no negative, infinity
only where it means "no bound") and connection URLs (http/https, a host, a port in 1–65535).

Everything here is a function of its arguments: no I/O, no clock.
"""

from __future__ import annotations

import difflib
import math
import urllib.parse
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

import attrs
from returns.result import Failure, Result, Success

from rma.errors import InvalidOpts

RUN_OPTIONS = frozenset(
    {
        "handler",
        "prompt",
        "context",
        "max_turns",
        "timeout",
        "turn_guard",
        "require_terminal_tool",
        "terminal_tool",
        "max_reprompts",
        "outcome",
        "budget",
        "session_id",
        "metadata",
        "model_config",
        "max_concurrency",
        "telemetry",
        "record",
        "output_type",
        "tool_timeout",
        "max_tool_result_chars",
        "journal",
        "journal_key",
        "stop_grace",
    }
)
"""The options ``run()`` itself takes (its keyword parameters); a provider adds its own."""

LIVE_OPTIONS = RUN_OPTIONS - {"timeout"}
"""The options ``open_session()`` itself takes: ``run()``'s without the overall ``timeout``."""

LIVE_ELSEWHERE: Mapping[str, str] = {
    "timeout": "a live session has no overall deadline; bound the block with anyio.fail_after "
    "or anyio.move_on_after",
}
"""Names ``open_session`` refuses with a pointer to what to use instead."""


@attrs.frozen
class Renamed:
    """An option's old name, still accepted as a deprecated alias of its new one (issue #22).

    Options follow one naming rule: durations are seconds with no unit suffix, retries are
    ``max_retries``, metadata is ``metadata``. An old name is taken from the caller's keywords
    (it is in no signature), warned about, and passed on under the new name — converted when
    its unit differed — or, when ``keeps_meaning``, as itself: its meaning is narrower than
    the new name's. Giving both names is refused.
    """

    old: str
    new: str
    owner: str
    """Whose option: ``"run"`` (``run``/``open_session``'s own), a class name (its
    constructor's), ``"Class.run"`` (a provider's per-run option), or ``"Class.method"`` /
    ``"function"`` (a public method's or function's)."""
    convert: Callable[[Any], Any] | None = None
    """The old value as the new name takes it (milliseconds to seconds); None: as it is."""
    keeps_meaning: bool = False
    """Passed on under the old name, which keeps its own, narrower meaning."""
    note: str = ""
    """Said after "use NEW=" in the warning (a unit, what differs)."""

    def message(self, where: str) -> str:
        note = f" {self.note}" if self.note else ""
        return f"rma option {self.old}= of {where} is deprecated: use {self.new}={note} (issue #22)"


def _ms_to_s(value: Any) -> Any:
    """Milliseconds as seconds; a value that is not a number is left for the check to name."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    return value / 1000


def _renames(owner: str, pairs: Mapping[str, str]) -> tuple[Renamed, ...]:
    return tuple(Renamed(old, new, owner) for old, new in pairs.items())


_LOCAL = {"timeout_s": "timeout", "backoff_base_s": "backoff_base", "backoff_cap_s": "backoff_cap"}
_AGENTCORE = {
    "timeout_seconds": "invoke_timeout",
    "idle_timeout_s": "idle_timeout",
    "invoke_retries": "max_retries",
    "backoff_base_s": "backoff_base",
    "backoff_cap_s": "backoff_cap",
}
_AGENTCORE_CLIENT = {
    "connect_timeout_s": "connect_timeout",
    "read_timeout_s": "read_timeout",
    "idle_timeout_s": "idle_timeout",
    "backoff_base_s": "backoff_base",
    "backoff_cap_s": "backoff_cap",
}
_ENSURE_RECORD = {"lease_s": "lease", "poll_s": "poll_interval", "renew_every_s": "renew_every"}
_TIMEOUTS = {
    "heartbeat_s": "heartbeat",
    "open_s": "open",
    "turn_s": "turn",
    "tool_s": "tool",
    "guard_s": "guard",
    "retry_initial_s": "retry_initial",
    "retry_max_s": "retry_max",
}

RENAMED: tuple[Renamed, ...] = (
    Renamed(
        "telemetry_metadata",
        "metadata",
        "run",
        keeps_meaning=True,
        note="(metadata= also labels the session on hosts whose sessions carry metadata)",
    ),
    *_renames("Local", _LOCAL),
    *_renames("BedrockAgentCore", _AGENTCORE),
    Renamed("timeout_seconds", "invoke_timeout", "BedrockAgentCore.run"),
    Renamed("timeout_seconds", "timeout", "BedrockAgentCore.run_command"),
    Renamed("timeout_seconds", "timeout", "BedrockAgentCore.storage"),
    *_renames("AgentCoreClient", _AGENTCORE_CLIENT),
    Renamed("timeout_s", "timeout", "AgentCoreClient.run_command"),
    Renamed("receive_timeout_s", "read_timeout", "AgentCoreClient.request_json"),
    Renamed("stream_idle_timeout_s", "stream_idle_timeout", "ClaudeManagedAgents"),
    Renamed("cleanup_timeout_s", "cleanup_timeout", "ClaudeManagedAgents"),
    Renamed(
        "receive_timeout",
        "read_timeout",
        "ClaudeManagedAgents",
        convert=_ms_to_s,
        note="in seconds (receive_timeout was in milliseconds)",
    ),
    Renamed(
        "session_metadata",
        "metadata",
        "ClaudeManagedAgents.run",
        keeps_meaning=True,
        note="(metadata= labels the session and its telemetry)",
    ),
    *_renames("provision_harness", {"receive_timeout_s": "read_timeout"}),
    *_renames("teardown_harness", {"receive_timeout_s": "read_timeout"}),
    *_renames("list_harnesses", {"receive_timeout_s": "read_timeout"}),
    *_renames("SqliteStore", {"busy_timeout_s": "busy_timeout"}),
    *_renames("SQLiteJournal", {"busy_timeout_s": "busy_timeout"}),
    *_renames("ensure_record", _ENSURE_RECORD),
    *_renames("Store.claim", {"lease_s": "lease"}),
    *_renames("Store.renew", {"lease_s": "lease"}),
    *_renames("Timeouts", _TIMEOUTS),
    Renamed(
        "telemetry_metadata",
        "metadata",
        "SessionSpec",
        keeps_meaning=True,
        note="(metadata= also labels the session on hosts whose sessions carry metadata)",
    ),
    *_renames("connect", {"timeout_s": "timeout"}),
)
"""Every renamed option (issue #22). ``renamed_for`` picks an owner's."""


def renamed_for(owners: Iterable[str]) -> dict[str, Renamed]:
    """The renamed options of ``owners`` (the first owner naming an old name wins), by old name."""
    out: dict[str, Renamed] = {}
    for owner in owners:
        for entry in RENAMED:
            if entry.owner == owner:
                out.setdefault(entry.old, entry)
    return out


def apply_renamed(
    given: Mapping[str, Any], renamed: Mapping[str, Renamed], *, present: Collection[str] = ()
) -> Result[tuple[dict[str, Any], tuple[Renamed, ...]], InvalidOpts]:
    """``given`` with each old name replaced by its new one (its value converted), or kept
    when the old name keeps its meaning; and the renames used, for the caller to warn about.

    An old name given together with its new one — in ``given`` or among ``present`` (names
    the caller bound already, such as a function's own parameters) — is an ``InvalidOpts``.
    """
    if not renamed or renamed.keys().isdisjoint(given):
        return Success((dict(given), ()))
    out: dict[str, Any] = {}
    used: list[Renamed] = []
    for name, value in given.items():
        entry = renamed.get(name)
        if entry is None:
            out.setdefault(name, value)
            continue
        if entry.new in given or entry.new in present:
            detail = f"{name} is the deprecated name of {entry.new}: give only {entry.new}"
            return Failure(InvalidOpts(option=name, detail=detail, suggestion=entry.new))
        used.append(entry)
        if entry.keeps_meaning:
            out[name] = value
        else:
            out[entry.new] = entry.convert(value) if entry.convert is not None else value
    return Success((out, tuple(used)))


def suggest(name: str, candidates: Iterable[str]) -> str | None:
    """The accepted name closest to ``name`` (difflib, case-insensitive), or None."""
    by_lower = {c.lower(): c for c in sorted(candidates) if not c.startswith("_")}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[close[0]] if close else None


def check_names(
    given: Iterable[str],
    accepted: Collection[str],
    *,
    where: str,
    elsewhere: Mapping[str, str] | None = None,
) -> Result[None, InvalidOpts]:
    """The first name in ``given`` that ``accepted`` lacks, as an ``InvalidOpts``.

    ``elsewhere`` maps real option names that belong somewhere else to a sentence saying
    where; such a name gets that sentence instead of "unknown". A suggestion is drawn from
    ``accepted`` first, then from ``elsewhere``'s names (with their sentence).
    """
    moved = elsewhere or {}
    for name in given:
        if name in accepted:
            continue
        if name in moved:  # a real option, misplaced; still say which name here is close
            detail = f"not an option of {where}: {moved[name]}"
            return Failure(InvalidOpts(option=name, detail=detail, suggestion=suggest(name, accepted)))
        match = suggest(name, accepted)
        if match is not None:
            return Failure(InvalidOpts(option=name, detail=f"unknown option of {where}", suggestion=match))
        match = suggest(name, moved)
        if match is not None:
            detail = f"unknown option of {where} ({match} is not one either: {moved[match]})"
            return Failure(InvalidOpts(option=name, detail=detail, suggestion=match))
        known = ", ".join(sorted(n for n in accepted if not n.startswith("_")))
        return Failure(InvalidOpts(option=name, detail=f"unknown option of {where} (accepted: {known})"))
    return Success(None)


def check_seconds(
    value: object,
    option: str,
    *,
    allow_none: bool = False,
    allow_zero: bool = False,
    allow_inf: bool = False,
) -> Result[float | None, InvalidOpts]:
    """A duration in seconds: a real number, never NaN or negative; zero and infinity only
    where the caller says they mean something (infinity: "no bound")."""
    if value is None and allow_none:
        return Success(None)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return Failure(InvalidOpts(option=option, detail=f"expected seconds (a number), got {value!r}"))
    seconds = float(value)
    floor = "seconds >= 0" if allow_zero else "seconds > 0"
    if math.isnan(seconds) or seconds < 0 or (seconds == 0 and not allow_zero):
        return Failure(InvalidOpts(option=option, detail=f"expected {floor}, got {value!r}"))
    if math.isinf(seconds) and not allow_inf:
        hint = " or None for no bound" if allow_none else ""
        return Failure(InvalidOpts(option=option, detail=f"expected finite {floor}{hint}, got {value!r}"))
    return Success(seconds)


def check_count(value: object, option: str, *, minimum: int = 0) -> Result[int, InvalidOpts]:
    """An integer count (not a bool) of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        return Failure(InvalidOpts(option=option, detail=f"expected an int >= {minimum}, got {value!r}"))
    return Success(value)


def check_url(value: object, option: str) -> Result[str, InvalidOpts]:
    """A connection URL: http or https, a host, and a port (when given) in 1–65535.

    Catches what would otherwise be retried as a connection failure for seconds: an
    impossible port (``:99999``, ``:0``), a missing scheme (``localhost:8080``), no host.
    """
    if not isinstance(value, str) or not value:
        return Failure(InvalidOpts(option=option, detail=f"expected an http(s) URL, got {value!r}"))
    parts = urllib.parse.urlsplit(value)
    if parts.scheme not in ("http", "https"):
        return Failure(
            InvalidOpts(option=option, detail=f"expected an http:// or https:// URL, got {value!r}")
        )
    if not parts.hostname:
        return Failure(InvalidOpts(option=option, detail=f"the URL has no host: {value!r}"))
    try:
        port = parts.port
    except ValueError:
        port = -1
    if port is not None and not 1 <= port <= 65535:
        return Failure(InvalidOpts(option=option, detail=f"the URL's port must be 1–65535, got {value!r}"))
    return Success(value)


def check_model_config(
    model_config: object,
    *,
    provider: str,
    per_run_model: bool,
    keys: frozenset[str] = frozenset({"metadata"}),
) -> Result[None, InvalidOpts]:
    """``model_config`` per run: any mapping (or a model name) where the provider picks its
    model per run; elsewhere only its ``metadata`` (S-16) means anything, so other keys are
    refused rather than ignored."""
    if model_config is None:
        return Success(None)
    if per_run_model:
        if isinstance(model_config, Mapping | str):
            return Success(None)
        return Failure(InvalidOpts(option="model_config", detail="expected a mapping or a model name"))
    if not isinstance(model_config, Mapping):
        return Failure(
            InvalidOpts(
                option="model_config",
                detail=f"{provider} takes no model per run; model_config may only carry metadata here",
            )
        )
    ignored = sorted(str(k) for k in model_config if k not in keys)
    if ignored:
        read = ", ".join(sorted(keys))
        return Failure(
            InvalidOpts(
                option="model_config",
                detail=f"{provider} takes no model per run (its agent has one); only "
                f"model_config keys {read} are read here, not {', '.join(ignored)}",
            )
        )
    return Success(None)
