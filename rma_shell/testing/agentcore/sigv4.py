"""The AgentCore emulator's SigV4 check: what a request's signature must be, and AWS's 403s.

Recomputed with botocore's ``SigV4Auth`` over what arrived (method, ``Host``, the raw path
and query, exactly the ``SignedHeaders``, the body) at the time of ``X-Amz-Date``; each
failure is the 403 the service sends (``MissingAuthenticationTokenException``,
``IncompleteSignatureException``, ``UnrecognizedClientException``,
``InvalidSignatureException``). Not the input validation (``validation``).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from rma_shell.testing._loopback import LoopbackHandler
from rma_shell.testing.agentcore._common import (
    _SIGV4_TIME,
    MAX_CLOCK_SKEW,
    SERVICE,
    _forbidden,
)


def _verify_signature(
    h: LoopbackHandler,
    body: bytes,
    *,
    credentials: Callable[[str], tuple[str, str | None] | None],
    region: str,
    clock: Callable[[], datetime],
) -> None:
    """Check the request's SigV4 signature as AWS would, or raise the 403 AWS answers."""
    from botocore.auth import SigV4Auth  # type: ignore[import-untyped]
    from botocore.awsrequest import AWSRequest, HTTPHeaders  # type: ignore[import-untyped]
    from botocore.credentials import Credentials  # type: ignore[import-untyped]

    authorization = h.headers.get("Authorization")
    if authorization is None:
        raise _forbidden("MissingAuthenticationTokenException", "Missing Authentication Token")
    algorithm, _, rest = authorization.strip().partition(" ")
    if algorithm != "AWS4-HMAC-SHA256":
        raise _forbidden(
            "IncompleteSignatureException",
            f"Unsupported AWS 'algorithm': '{algorithm}'. Authorization={authorization}",
        )
    fields: dict[str, str] = {}
    for part in rest.split(","):
        key, _, value = part.strip().partition("=")
        fields[key] = value
    for required in ("Credential", "SignedHeaders", "Signature"):
        if not fields.get(required):
            raise _forbidden(
                "IncompleteSignatureException",
                f"Authorization header requires '{required}' parameter. Authorization={authorization}",
            )
    scope = fields["Credential"].split("/")
    if len(scope) != 5:
        raise _forbidden(
            "IncompleteSignatureException",
            "Credential must have exactly 5 slash-delimited elements, e.g. "
            f"keyid/date/region/service/term, got '{fields['Credential']}'",
        )
    access_key, scope_date, scope_region, scope_service, terminator = scope
    known = credentials(access_key)
    if known is None:
        raise _forbidden(
            "UnrecognizedClientException", "The security token included in the request is invalid."
        )
    secret, token = known
    if h.headers.get("X-Amz-Security-Token") != token:
        raise _forbidden(
            "UnrecognizedClientException", "The security token included in the request is invalid."
        )
    amz_date = h.headers.get("X-Amz-Date")
    if amz_date is None:
        raise _forbidden(
            "IncompleteSignatureException",
            "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header. "
            f"Authorization={authorization}",
        )
    try:
        signed_at = datetime.strptime(amz_date, _SIGV4_TIME).replace(tzinfo=UTC)
    except ValueError:
        raise _forbidden(
            "IncompleteSignatureException",
            f"Date must be in ISO-8601 'basic format'. Got '{amz_date}'. See http://en.wikipedia.org/wiki/ISO_8601",
        ) from None
    if terminator != "aws4_request":
        raise _forbidden(
            "InvalidSignatureException",
            f"Credential should be scoped with a valid terminator: 'aws4_request', not '{terminator}'.",
        )
    if scope_service != SERVICE:
        raise _forbidden(
            "InvalidSignatureException", f"Credential should be scoped to correct service: '{SERVICE}'."
        )
    if scope_region != region:
        raise _forbidden("InvalidSignatureException", "Credential should be scoped to a valid region.")
    if scope_date != amz_date[:8]:
        raise _forbidden(
            "InvalidSignatureException",
            "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: "
            f"'{scope_date}' != '{amz_date[:8]}', from '{amz_date}'.",
        )
    now = clock()
    now = now if now.tzinfo else now.replace(tzinfo=UTC)
    if signed_at < now - MAX_CLOCK_SKEW:
        raise _forbidden(
            "InvalidSignatureException",
            f"Signature expired: {amz_date} is now earlier than "
            f"{(now - MAX_CLOCK_SKEW).strftime(_SIGV4_TIME)} ({now.strftime(_SIGV4_TIME)} - 5 min.)",
        )
    if signed_at > now + MAX_CLOCK_SKEW:
        raise _forbidden(
            "InvalidSignatureException",
            f"Signature not yet current: {amz_date} is still later than "
            f"{(now + MAX_CLOCK_SKEW).strftime(_SIGV4_TIME)} ({now.strftime(_SIGV4_TIME)} + 5 min.)",
        )
    signed_names = fields["SignedHeaders"].split(";")
    if "host" not in signed_names:
        raise _forbidden(
            "IncompleteSignatureException",
            "'Host' or ':authority' must be a 'SignedHeader' in the AWS Authorization.",
        )
    # Stricter than AWS may be: botocore and the reference signer both sign these, and an
    # unsigned date or token would let the request be replayed or re-scoped.
    for name in ("x-amz-date", "x-amz-security-token"):
        if h.headers.get(name) is not None and name not in signed_names:
            raise _forbidden(
                "IncompleteSignatureException",
                f"'{name}' must be a 'SignedHeader' in the AWS Authorization.",
            )
    declared_hash = h.headers.get("X-Amz-Content-SHA256")
    if declared_hash is not None and declared_hash != hashlib.sha256(body).hexdigest():
        raise _forbidden(
            "InvalidSignatureException",
            "The provided 'x-amz-content-sha256' header does not match what was computed"
            + (" (this operation has no unsigned payload)." if declared_hash == "UNSIGNED-PAYLOAD" else "."),
        )
    signed_headers = HTTPHeaders()
    for name in signed_names:
        for value in h.headers.get_all(name) or []:
            signed_headers[name] = value
    request = AWSRequest(method=h.command, url=f"http://{h.headers.get('Host', '')}{h.path}", data=body)
    request.headers = signed_headers
    request.context["timestamp"] = amz_date

    class _Verifier(SigV4Auth):  # type: ignore[misc]
        # Exactly the headers the client named, blacklisted or not: AWS checks what was signed.
        def headers_to_sign(self, req: Any) -> Any:
            return req.headers

    verifier = _Verifier(Credentials(access_key, secret, token), SERVICE, region)
    canonical = verifier.canonical_request(request)
    string_to_sign = verifier.string_to_sign(request, canonical)
    expected = verifier.signature(string_to_sign, request)
    if not hmac.compare_digest(expected, fields["Signature"]):
        raise _forbidden(
            "InvalidSignatureException",
            "The request signature we calculated does not match the signature you provided. Check your "
            "AWS Secret Access Key and signing method. Consult the service documentation for details.\n\n"
            f"The Canonical String for this request should have been\n'{canonical}'\n\n"
            f"The String-to-Sign should have been\n'{string_to_sign}'\n",
        )
