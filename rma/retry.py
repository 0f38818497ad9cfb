"""Pure retry decisions for HTTP transports: what is transient and how long to wait.

The shell's retry loops ask these functions and only execute the answer (sleep, resend).
Randomness and the clock are arguments: ``jitter`` is a float in [0, 1] the caller drew,
``now_epoch_s`` the wall clock the caller read. Nothing here sleeps or logs.

Backoff uses *equal jitter*: half of the exponential step is fixed and half is random, so
a retry never fires immediately (unlike full jitter) yet concurrent clients still spread.
"""

from __future__ import annotations

import datetime
import email.utils
import math
from collections.abc import Mapping

from rma.errors import HttpError, SessionError, StreamDropped, TransportError

TRANSIENT_TRANSPORT_KINDS = frozenset({"timeout", "connect_timeout", "closed", "econnrefused", "econnreset"})
"""Transport failure kinds worth another attempt (L-32): the request may not have landed."""

DEFAULT_MAX_RETRY_AFTER_S = 60.0
"""A server asking for a longer wait than this gets our own backoff instead (as the SDKs do)."""


def is_transient_status(status: int) -> bool:
    """408 (timeout), 429 (rate limited — L-32 Better) and every 5xx are worth retrying."""
    return status in (408, 429) or status >= 500


def is_transient_transport(kind: str) -> bool:
    """Whether a transport failure of this kind (``TRANSIENT_TRANSPORT_KINDS``) is retried."""
    return kind in TRANSIENT_TRANSPORT_KINDS


def is_transient_error(error: SessionError) -> bool:
    """Whether a failed attempt is worth repeating: a transient HTTP status, a transient
    transport failure (``TransportError.error_type`` holds the kind) or a dropped stream."""
    if isinstance(error, HttpError):
        return is_transient_status(error.status)
    if isinstance(error, TransportError):
        return is_transient_transport(error.error_type or "")
    return isinstance(error, StreamDropped)


def backoff_delay_s(attempt: int, base_s: float = 1.0, cap_s: float = 30.0, *, jitter: float) -> float:
    """Delay before retry number ``attempt`` (0 for the first retry), equal jitter.

    The step is ``min(cap_s, base_s * 2**attempt)`` (1, 2, 4 s with the defaults, as L-31);
    the delay is ``step/2 + jitter * step/2``, i.e. in [step/2, step].
    """
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")
    if not 0.0 <= jitter <= 1.0:
        raise ValueError(f"jitter must be in [0, 1], got {jitter}")
    # Cap the exponent so a huge attempt number cannot overflow the float.
    step = min(cap_s, base_s * 2.0 ** min(attempt, 64))
    half = step / 2.0
    return half + jitter * half


def retry_after_s(headers: Mapping[str, str], now_epoch_s: float) -> float | None:
    """The wait a response asked for, in seconds, or None when it asked for none.

    Honours ``retry-after-ms`` (OpenAI's, milliseconds) first, then ``retry-after`` as
    seconds (integer or decimal) or as an HTTP-date (relative to ``now_epoch_s``). Header
    names match case-insensitively; negative, non-finite or unparsable values are ignored,
    and a date in the past means "now" (0.0).
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    ms = _finite_nonneg(lowered.get("retry-after-ms"))
    if ms is not None:
        return ms / 1000.0
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    seconds = _finite_nonneg(raw)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(raw.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        # RFC 9110 dates are GMT; parsedate gives a naive value for "-0000".
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - now_epoch_s)


def next_delay_s(
    attempt: int,
    *,
    headers: Mapping[str, str] | None,
    now_epoch_s: float,
    jitter: float,
    base_s: float = 1.0,
    cap_s: float = 30.0,
    max_retry_after_s: float = DEFAULT_MAX_RETRY_AFTER_S,
) -> float:
    """The wait before retry ``attempt``: the server's Retry-After when it gave a sane one,
    otherwise exponential backoff with equal jitter."""
    asked = retry_after_s(headers, now_epoch_s) if headers is not None else None
    if asked is not None and asked <= max_retry_after_s:
        return asked
    return backoff_delay_s(attempt, base_s, cap_s, jitter=jitter)


def _finite_nonneg(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return value
