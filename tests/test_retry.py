"""rma.retry: transient classification, equal-jitter backoff and Retry-After (L-31, L-32 Better)."""

from __future__ import annotations

import email.utils

import pytest

from rma.errors import AuthenticationError, HttpError, MalformedResponse, StreamDropped, TransportError
from rma.retry import (
    backoff_delay_s,
    is_transient_error,
    is_transient_status,
    is_transient_transport,
    next_delay_s,
    retry_after_s,
)


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504, 529])
def test_L32_transient_statuses(status: int) -> None:
    assert is_transient_status(status)


@pytest.mark.parametrize("status", [200, 400, 401, 403, 404, 409, 422])
def test_L32_non_transient_statuses(status: int) -> None:
    assert not is_transient_status(status)


def test_L32_transient_transport_kinds() -> None:
    for kind in ("timeout", "connect_timeout", "closed", "econnrefused", "econnreset"):
        assert is_transient_transport(kind)
    assert not is_transient_transport("protocol")


def test_L32_transient_error_values() -> None:
    assert is_transient_error(HttpError(status=503))
    assert is_transient_error(HttpError(status=429))
    assert not is_transient_error(HttpError(status=400))
    assert is_transient_error(TransportError(detail="reset", error_type="econnreset"))
    assert not is_transient_error(TransportError(detail="bad url", error_type="protocol"))
    assert is_transient_error(StreamDropped(detail="no [DONE]", clean_close=True))
    assert not is_transient_error(MalformedResponse(detail="x"))
    assert not is_transient_error(AuthenticationError(detail="401"))


def test_L31_backoff_schedule_doubles_with_equal_jitter() -> None:
    # jitter 0 gives the lower half of the step, jitter 1 the full step.
    assert [backoff_delay_s(n, jitter=0.0) for n in range(3)] == [0.5, 1.0, 2.0]
    assert [backoff_delay_s(n, jitter=0.5) for n in range(3)] == [0.75, 1.5, 3.0]
    assert [backoff_delay_s(n, jitter=1.0) for n in range(3)] == [1.0, 2.0, 4.0]


def test_backoff_is_capped_and_never_overflows() -> None:
    assert backoff_delay_s(10, base_s=1.0, cap_s=30.0, jitter=0.0) == 15.0
    assert backoff_delay_s(10_000, jitter=0.5) == 22.5


def test_backoff_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        backoff_delay_s(-1, jitter=0.0)
    with pytest.raises(ValueError):
        backoff_delay_s(0, jitter=1.5)
    with pytest.raises(ValueError):
        backoff_delay_s(0, jitter=-0.1)


def test_retry_after_seconds_and_decimal() -> None:
    assert retry_after_s({"Retry-After": "7"}, 0.0) == 7.0
    assert retry_after_s({"retry-after": "0.25"}, 0.0) == 0.25


def test_retry_after_ms_wins() -> None:
    assert retry_after_s({"retry-after-ms": "1500", "retry-after": "9"}, 0.0) == 1.5
    assert retry_after_s({"Retry-After-Ms": "20"}, 0.0) == 0.02


def test_retry_after_http_date() -> None:
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert retry_after_s({"retry-after": date}, now) == pytest.approx(30.0)
    past = email.utils.formatdate(now - 30, usegmt=True)
    assert retry_after_s({"retry-after": past}, now) == 0.0


@pytest.mark.parametrize("value", ["", "soon", "-3", "nan", "inf", "Wed, 99 Foo 2015 07:28:00 GMT"])
def test_retry_after_garbage_ignored(value: str) -> None:
    assert retry_after_s({"retry-after": value}, 0.0) is None


def test_retry_after_absent() -> None:
    assert retry_after_s({}, 0.0) is None
    assert retry_after_s({"retry-after-ms": "x"}, 0.0) is None


def test_next_delay_prefers_sane_retry_after_else_backoff() -> None:
    assert next_delay_s(0, headers={"retry-after": "2"}, now_epoch_s=0.0, jitter=0.0) == 2.0
    # Absurd waits fall back to our own backoff, as the SDKs do.
    assert next_delay_s(1, headers={"retry-after": "3600"}, now_epoch_s=0.0, jitter=0.0) == 1.0
    assert next_delay_s(1, headers=None, now_epoch_s=0.0, jitter=0.5, base_s=2.0) == 3.0
