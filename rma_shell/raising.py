"""``run_or_raise`` and ``unwrap``: for callers who want an exception instead of a ``Result``.

``run`` returns ``Success(SessionResult)`` or ``Failure(SessionError)`` and never raises for
expected failures. ``run_or_raise`` takes exactly the same arguments and returns the
``SessionResult``, or raises the ``SessionError`` itself — a typed exception whose message
names what failed (``http_error: HTTP 529 overloaded_error from api.anthropic.com …``), not a
bare ``UnwrapFailedError``. Nothing else differs: same validation, same timeout, same
cleanup.

``unwrap(result)`` does the same for any other ``Result`` rma returns (``next_result()``,
the control-plane clients, artifacts, provisioning): the value, or the error raised as
itself. ``result.unwrap()`` from ``returns`` raises ``UnwrapFailedError`` instead (with the
error only as its ``__cause__``).
"""

from __future__ import annotations

from typing import Any, TypeVar, Unpack

from returns.result import Failure, Result

from rma.vocabulary import SessionResult
from rma_shell.providers.base import Provider
from rma_shell.run_options import RunOptions, spelled_out
from rma_shell.session import run

T = TypeVar("T")


def unwrap(result: Result[T, Any]) -> T:
    """The value of a ``Success``; for a ``Failure``, its error raised as itself.

    A ``SessionError`` (every rma error) is raised directly, so ``except HttpError as err``
    sees its fields; a failure that is not an exception (e.g. an ``OTelError``) falls back to
    ``returns``' ``UnwrapFailedError``.
    """
    if isinstance(result, Failure):
        error = result.failure()
        if isinstance(error, BaseException):
            raise error.with_traceback(None)
    return result.unwrap()


@spelled_out(host_options=True)
async def run_or_raise(
    provider: Provider[Any],
    *,
    handler: object,
    prompt: str | None = None,
    **options: Unpack[RunOptions],
) -> SessionResult:
    """Run a session like ``run``; return its ``SessionResult`` or raise its ``SessionError``.

    The raised error is the very value ``run`` would have put in its ``Failure``: catch it
    with ``except SessionError as err`` (or one of its classes, e.g. ``except HttpError``)
    and read its fields (``err.kind``, ``err.status``, ``err.request_id``…).
    """
    outcome_ = await run(provider, handler=handler, prompt=prompt, **options)
    if isinstance(outcome_, Failure):
        # A fresh traceback each time: the same error value may be raised more than once.
        raise outcome_.failure().with_traceback(None)
    return outcome_.unwrap()
