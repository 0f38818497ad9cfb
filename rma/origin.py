"""Where an error came from: the host, port, provider error code and request id of a failure.

Pure helpers the provider shells use to stamp ``HttpError``, ``TransportError``,
``ProviderError``, ``StreamDropped`` and ``MalformedResponse`` (and their subclasses) with
the facts a user needs to report a failure: which host answered (or could not be reached,
and on which port — a URL's ``:0`` stays ``0``, a missing port is the scheme's default), the
provider's own error code, and the id the host gave the request. Strings and mappings in,
values out: no I/O.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any, TypeVar, cast

import attrs

from rma.errors import InvalidOpts, SessionError
from rma.vocabulary import JSON

E = TypeVar("E", bound=SessionError)

REQUEST_ID_HEADERS = ("request-id", "x-amzn-requestid", "x-request-id", "x-amz-request-id")
"""Where hosts put a request's id: Anthropic ``request-id``, AWS ``x-amzn-RequestId``,
OpenAI-compatible servers ``x-request-id`` (S3-style ``x-amz-request-id`` last)."""

_DEFAULT_PORTS = {"http": 80, "https": 443}


def host_and_port(url: str) -> tuple[str | None, int | None]:
    """The host and the port a connection to ``url`` dials: the URL's port when it names one
    (``0`` included), else the scheme's default; ``(None, None)`` when there is no host."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        return None, None
    if not parts.hostname:
        return None, None
    if port is None:
        port = _DEFAULT_PORTS.get(parts.scheme.lower())
    return parts.hostname, port


def undialable(url: str, option: str) -> InvalidOpts | None:
    """Why ``url`` cannot be dialled as given, naming ``option``; None when it can.

    A URL naming port ``0`` is refused: httpx would silently dial the scheme's default port
    (``:80``/``:443``) instead — another service, and an error message that reads ``:80``.
    """
    try:
        port = urllib.parse.urlsplit(url).port
    except ValueError:
        return None  # not this check's business: httpx refuses the URL as it always did
    if port == 0:
        return InvalidOpts(
            option=option,
            detail=f"{url!r} names port 0, which cannot be dialled (httpx would dial the "
            "scheme's default port instead); give the server's real port",
        )
    return None


def host_label(url: str) -> str | None:
    """``host`` or ``host:port`` (the port only when it is not the scheme's default)."""
    host, port = host_and_port(url)
    if host is None:
        return None
    shown = f"[{host}]" if ":" in host else host
    try:
        scheme = urllib.parse.urlsplit(url).scheme.lower()
    except ValueError:  # pragma: no cover - host_and_port already parsed it
        scheme = ""
    if port is None or _DEFAULT_PORTS.get(scheme) == port:
        return shown
    return f"{shown}:{port}"


def request_id(headers: Mapping[str, str] | None, body: JSON = None) -> str | None:
    """The host's id for a request: a ``REQUEST_ID_HEADERS`` header, else a JSON body's
    top-level ``request_id`` (Anthropic puts it in its error envelope too)."""
    if headers:
        lowered = {k.lower(): v for k, v in headers.items()}
        for name in REQUEST_ID_HEADERS:
            value = lowered.get(name)
            if value:
                return value
    if isinstance(body, Mapping):
        value = body.get("request_id")
        if isinstance(value, str) and value:
            return value
    return None


def error_code(body: JSON) -> str | None:
    """The provider's error code in an error body: Anthropic ``{"error": {"type"}}``, OpenAI
    ``{"error": {"code"|"type"}}``, AWS ``{"code"|"Code"|"__type"}``."""
    if not isinstance(body, Mapping):
        return None
    inner = body.get("error")
    if isinstance(inner, Mapping):
        for key in ("code", "type"):
            value = inner.get(key)
            if isinstance(value, str) and value:
                return value
    for key in ("code", "Code", "__type"):
        value = body.get(key)
        if isinstance(value, str) and value:
            return value.rsplit("#", 1)[-1]
    return None


def with_origin(
    error: E,
    *,
    url: str | None = None,
    host: str | None = None,
    port: int | None = None,
    request_id: str | None = None,
    code: str | None = None,
) -> E:
    """``error`` with its origin fields filled where the class has them and they are empty.

    ``url`` gives the host (``host_label``: with the port when not the default) and, for a
    ``TransportError``, the bare host and the port dialled. Fields already set are kept, so
    the innermost layer that knew better wins.
    """
    cls: Any = type(error)
    if not attrs.has(cls):
        return error
    names = {f.name for f in attrs.fields(cls)}
    wanted: dict[str, object] = {}
    if url is not None:
        if "port" in names:  # a connection failure: the bare host and the port as dialled
            dial_host, dial_port = host_and_port(url)
            wanted["host"] = host or dial_host
            wanted["port"] = port if port is not None else dial_port
        else:
            wanted["host"] = host or host_label(url)
    else:
        wanted["host"] = host
        wanted["port"] = port
    wanted["request_id"] = request_id
    wanted["code"] = code
    changes = {
        name: value
        for name, value in wanted.items()
        if value is not None and name in names and getattr(error, name) is None
    }
    return cast(E, attrs.evolve(cast(Any, error), **changes)) if changes else error
