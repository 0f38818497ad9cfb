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
from collections.abc import Collection, Iterable, Mapping

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
        "telemetry_metadata",
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


def suggest(name: str, candidates: Iterable[str]) -> str | None:
    """The accepted name closest to ``name`` (difflib, case-insensitive), or None."""
    by_lower = {c.lower(): c for c in sorted(candidates)}
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
        known = ", ".join(sorted(accepted))
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
