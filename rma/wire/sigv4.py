"""AWS Signature Version 4, exactly as botocore's ``SigV4Auth`` signs Bedrock AgentCore requests.

What this is: a pure signer (B-41). ``sign(method, url, headers, body, credentials=…,
region=…, now=…)`` returns the headers to send — the caller's headers plus ``X-Amz-Date``,
``X-Amz-Security-Token`` (when the credentials carry a session token) and
``Authorization``. The pieces (``canonical_request``, ``string_to_sign``,
``signing_key``) are public so tests can pin each step against the worked examples of the
wire reference (§3.7), and ``quote_label`` / ``encode_query`` build the already-encoded
URL that is signed and sent unchanged.

What it is not: it reads no clock and no environment — the time and the credentials are
arguments (the shell resolves credentials, ``rma_shell.aws_credentials``). It does not
send anything, and it does not re-encode the URL it is given: the URL must be the one the
HTTP client puts on the wire, byte for byte.

Canonicalization follows botocore 1.44.5 (wire reference §3), including its corners:

- the path is taken from the URL as sent, dot segments are removed, empty segments dropped
  (``//`` collapses), and the result is percent-encoded *again* (``%3A`` → ``%253A``);
- the query is split on ``&`` and ``=`` as sent and sorted by (key, value), not re-encoded —
  so it must already be in SigV4 form, which ``encode_query`` produces;
- header names are lowercased, values have whitespace runs folded to one space, repeated
  names (differing only in case) join with ``,`` in order, and botocore's unsigned headers
  (``user-agent``, ``x-amzn-trace-id``, ``traceparent``, hop-by-hop headers…) are left out;
- ``host`` is signed from the URL (lowercase, ``:port`` only when it is not the scheme's
  default) unless the caller passes a ``Host`` header, and is not returned (the HTTP client
  sets it);
- an ``X-Amz-Content-SHA256`` header already present is the payload hash, as given;
- a caller's ``Date`` header switches botocore to the ``Date`` form: it is replaced by the
  RFC 2822 date of ``now`` and no ``X-Amz-Date`` is sent. Callers should not pass one.

Derived signing keys are cached per (secret, date, region, service) and canonical URL
parts per URL: both are deterministic functions of their arguments.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import hmac
from collections.abc import Mapping, Sequence
from typing import Final
from urllib.parse import quote, urlsplit

import attrs

from rma.config import AwsSettings

SERVICE: Final = "bedrock-agentcore"
"""The signing name of both AgentCore planes, the control plane included (wire reference §1)."""

ALGORITHM: Final = "AWS4-HMAC-SHA256"
EMPTY_SHA256: Final = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

UNSIGNED_HEADERS: Final = frozenset(
    {
        "baggage",
        "connection",
        "expect",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "traceparent",
        "tracestate",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "user-agent",
        "x-amzn-trace-id",
    }
)
"""botocore's ``SIGNED_HEADERS_BLACKLIST``: sent when given, never signed."""

_LABEL_SAFE: Final = "-._~"
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_DAYS: Final = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS: Final = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _mask(value: str) -> str:
    # The AWS CLI's convention: enough to tell identities apart, not enough to use one.
    return "*" * max(len(value) - 4, 0) + value[-4:]


@attrs.frozen(repr=False)
class Credentials:
    """An AWS identity. The secret key and the session token never appear in repr or str,
    and the access key id only as its last four characters."""

    access_key_id: str
    secret_access_key: str
    session_token: str | None = None

    @classmethod
    def from_settings(cls, settings: AwsSettings) -> Credentials:
        token = settings.session_token
        return cls(
            settings.access_key_id.reveal(),
            settings.secret_access_key.reveal(),
            token.reveal() if token is not None else None,
        )

    def __repr__(self) -> str:
        token = "None" if self.session_token is None else "***"
        return (
            f"Credentials(access_key_id={_mask(self.access_key_id)!r}, "
            f"secret_access_key=***, session_token={token})"
        )

    __str__ = __repr__


# ── URL encoding ───────────────────────────────────────────────────────────────────────────


def quote_label(value: str) -> str:
    """Percent-encode a path label or query component: only ``A-Za-z0-9-._~`` stay bare, the
    rest is UTF-8 with uppercase hex (``:`` → ``%3A``, ``/`` → ``%2F``, space → ``%20``)."""
    return quote(value, safe=_LABEL_SAFE)


def encode_query(pairs: Sequence[tuple[str, str]]) -> str:
    """The query string to put on the wire, in the order given (``k=v`` joined by ``&``).

    The same encoding as SigV4's canonical query, so the signer can take the wire query as
    it is — what botocore's ``percent_encode_sequence`` does.
    """
    return "&".join(f"{quote(k, safe=_LABEL_SAFE)}={quote(v, safe=_LABEL_SAFE)}" for k, v in pairs)


def _remove_dot_segments(path: str) -> str:
    # botocore.utils.remove_dot_segments: RFC 3986 §5.2.4 plus dropping empty segments.
    out: list[str] = []
    for segment in path.split("/"):
        if not segment or segment == ".":
            continue
        if segment == "..":
            if out:
                out.pop()
        else:
            out.append(segment)
    first = "/" if path[0] == "/" else ""
    last = "/" if path[-1] == "/" and out else ""
    return first + "/".join(out) + last


@functools.lru_cache(maxsize=1024)
def _url_facts(url: str) -> tuple[str, str, str]:
    """(canonical URI, canonical query, host) of a URL, as botocore derives them."""
    parts = urlsplit(url)
    path = parts.path
    uri = quote(_remove_dot_segments(path) if path else "/", safe="/~")
    query = ""
    if parts.query:
        pairs = [(key, value) for key, _, value in (p.partition("=") for p in parts.query.split("&"))]
        pairs.sort()
        query = "&".join(f"{key}={value}" for key, value in pairs)
    hostname = parts.hostname
    if hostname is None:
        raise ValueError("the URL has no host")
    host = f"[{hostname}]" if ":" in hostname else hostname
    port = parts.port
    if port is not None and port != _DEFAULT_PORTS.get(parts.scheme):
        host = f"{host}:{port}"
    return uri, query, host


# ── the steps ──────────────────────────────────────────────────────────────────────────────


def _fold(value: str) -> str:
    # SigV4 "Trimall": strip, and every whitespace run becomes one space (str.split's notion
    # of whitespace, as botocore uses it).
    return " ".join(value.split())


def _assemble(method: str, url: str, canon: dict[str, str], body_hash: str) -> tuple[str, str]:
    uri, query, host = _url_facts(url)
    if "host" not in canon:
        canon["host"] = host
    names = sorted(canon)
    block = "".join([f"{name}:{canon[name]}\n" for name in names])
    signed = ";".join(names)
    if " " in signed or not signed.isprintable():
        # A header name with whitespace (every whitespace character but the space is
        # unprintable): botocore strips names in SignedHeaders only, and sorts again. Never
        # valid HTTP; mirrored for exactness.
        signed = ";".join(sorted(name.strip() for name in names))
    return f"{method.upper()}\n{uri}\n{query}\n{block}\n{signed}\n{body_hash}", signed


def canonical_request(method: str, url: str, headers: Mapping[str, str], body_hash: str) -> tuple[str, str]:
    """The canonical request text and its SignedHeaders list.

    ``headers`` are the headers as they will be signed (``X-Amz-Date`` and any token
    already set); unsigned ones are skipped and ``host`` comes from the URL unless given.
    ``body_hash`` is the payload-hash line, used as given.
    """
    canon: dict[str, str] = {}
    for name, value in headers.items():
        lname = name.lower()
        if lname in UNSIGNED_HEADERS:
            continue
        folded = _fold(value)
        prev = canon.get(lname)
        canon[lname] = folded if prev is None else f"{prev},{folded}"
    return _assemble(method, url, canon, body_hash)


def string_to_sign(amz_date: str, scope: str, canonical: str) -> str:
    """``AWS4-HMAC-SHA256``, the timestamp, the credential scope and the hex SHA-256 of the
    canonical request, one per line."""
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    return f"{ALGORITHM}\n{amz_date}\n{scope}\n{digest}"


@functools.lru_cache(maxsize=64)
def signing_key(secret: str, datestamp: str, region: str, service: str) -> bytes:
    """kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), service), "aws4_request")."""
    key = hmac.digest(f"AWS4{secret}".encode(), datestamp.encode("utf-8"), "sha256")
    key = hmac.digest(key, region.encode("utf-8"), "sha256")
    key = hmac.digest(key, service.encode("utf-8"), "sha256")
    return hmac.digest(key, b"aws4_request", "sha256")


def _utc(now: datetime.datetime) -> datetime.datetime:
    offset = now.utcoffset()
    if not offset:
        return now  # naive (taken as UTC) or already UTC: the fields are the UTC fields
    return (now - offset).replace(tzinfo=None)


def format_amz_date(now: datetime.datetime) -> str:
    """``YYYYMMDD'T'HHMMSS'Z'`` of ``now`` in UTC (naive means UTC)."""
    t = _utc(now)
    return f"{t.year:04d}{t.month:02d}{t.day:02d}T{t.hour:02d}{t.minute:02d}{t.second:02d}Z"


def _http_date(now: datetime.datetime) -> str:
    # email.utils.formatdate(ts) — what botocore writes when the caller passed a Date header.
    t = _utc(now)
    return (
        f"{_DAYS[t.weekday()]}, {t.day:02d} {_MONTHS[t.month - 1]} {t.year:04d} "
        f"{t.hour:02d}:{t.minute:02d}:{t.second:02d} -0000"
    )


def sign(
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    credentials: Credentials,
    region: str,
    service: str = SERVICE,
    now: datetime.datetime,
) -> dict[str, str]:
    """Sign one request; return the headers to send (B-41).

    Those are ``headers`` (less any ``Authorization``, ``X-Amz-Date`` and, when a token is
    set, ``X-Amz-Security-Token`` of the caller's) plus ``X-Amz-Date``, the token and
    ``Authorization``. ``now`` is timezone-aware or naive UTC. Raises ``ValueError`` for a
    URL without a host or with an invalid port.
    """
    stamp = format_amz_date(now)
    token = credentials.session_token
    out: dict[str, str] = {}
    canon: dict[str, str] = {}
    payload_hash: str | None = None
    date_given = False
    for name, value in headers.items():
        lname = name.lower()
        if lname == "authorization" or lname == "x-amz-date":
            continue
        if lname == "date":
            date_given = True
            continue
        if token and lname == "x-amz-security-token":
            continue
        out[name] = value
        if lname in UNSIGNED_HEADERS:
            continue
        if payload_hash is None and lname == "x-amz-content-sha256":
            payload_hash = value
        folded = " ".join(value.split())
        prev = canon.get(lname)
        canon[lname] = folded if prev is None else f"{prev},{folded}"
    if date_given:
        out["Date"] = canon["date"] = _http_date(now)
    else:
        out["X-Amz-Date"] = canon["x-amz-date"] = stamp
    if token:
        out["X-Amz-Security-Token"] = token
        canon["x-amz-security-token"] = _fold(token)
    if payload_hash is None:
        payload_hash = hashlib.sha256(body).hexdigest() if body else EMPTY_SHA256
    canonical, signed = _assemble(method, url, canon, payload_hash)
    datestamp = stamp[:8]
    scope = f"{datestamp}/{region}/{service}/aws4_request"
    to_sign = string_to_sign(stamp, scope, canonical)
    key = signing_key(credentials.secret_access_key, datestamp, region, service)
    signature = hmac.digest(key, to_sign.encode("utf-8"), "sha256").hex()
    out["Authorization"] = (
        f"{ALGORITHM} Credential={credentials.access_key_id}/{scope}, "
        f"SignedHeaders={signed}, Signature={signature}"
    )
    return out
