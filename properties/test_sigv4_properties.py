"""Properties of rma.wire.sigv4: on any request, botocore's ``SigV4Auth`` (dev oracle) sends the
same headers — the same Authorization byte for byte (B-41).

Apples to apples: botocore gets the very URL string we sign, already encoded, as
``AWSRequest(method, url, headers, body)`` with no ``params`` — which is what its client
does too (``prepare_request_dict`` appends the query, percent-encoded, to the URL before the
signer sees it). Its clock is patched to our ``now`` converted to naive UTC.
"""

from __future__ import annotations

import datetime
import string
from unittest import mock

import botocore.auth
import botocore.credentials
import botocore.utils
from botocore.awsrequest import AWSRequest
from hypothesis import given, settings
from hypothesis import strategies as st

from rma.wire.sigv4 import SERVICE, Credentials, canonical_request, encode_query, quote_label, sign

_TCHAR = string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~"
_WHITESPACE = " \t\n\r\x0b\x0c\x1c\x1f\x85\xa0\u2003\u3000"

# Free text, unicode included, never surrogates (they cannot be UTF-8 encoded at all).
_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
_arn = st.builds(
    "arn:aws:bedrock-agentcore:{}:{}:{}/{}".format,
    st.sampled_from(["us-east-1", "eu-west-3", "ap-southeast-2"]),
    st.from_regex(r"\d{12}", fullmatch=True),
    st.sampled_from(["harness", "runtime"]),
    st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,20}-[A-Za-z0-9]{10}", fullmatch=True),
)
# Characters that may stand bare in a wire path besides the unreserved ones.
_raw_segment = st.text(alphabet=string.ascii_letters + string.digits + "-._~!$&'()*+,;=:@%é", max_size=8)
_segment = st.one_of(
    _arn.map(quote_label),
    _text.map(quote_label),
    _raw_segment,
    st.sampled_from(["", ".", "..", "%2F", "%3A", "%252F", "%7E", "harnesses", "invoke"]),
)
_path = st.one_of(
    st.just(""),
    st.lists(_segment, max_size=6).map(lambda segs: "/" + "/".join(segs)),
)

_pairs = st.lists(
    st.tuples(
        st.one_of(st.sampled_from(["harnessArn", "qualifier", "a", "a", ""]), _text),
        st.one_of(st.just(""), _arn, _text),
    ),
    max_size=5,
)
# Also queries the encoder would never write: bare keys, '=' in values, empty pairs.
_raw_query = st.text(alphabet=string.ascii_letters + string.digits + "=&%+/:-._~", max_size=20)
_query = st.one_of(st.just(""), _pairs.map(encode_query), _raw_query)

_host = st.one_of(
    st.sampled_from(
        [
            "bedrock-agentcore.us-east-1.amazonaws.com",
            "Bedrock-AgentCore-Control.EU-west-1.amazonaws.com",
            "127.0.0.1",
            "[::1]",
            "localhost",
        ]
    ),
    st.from_regex(r"[a-zA-Z0-9]([a-zA-Z0-9-]{0,10}[a-zA-Z0-9])?(\.[a-zA-Z0-9]{1,8}){0,3}", fullmatch=True),
)
_port = st.one_of(st.just(""), st.sampled_from([":80", ":443"]), st.integers(0, 65535).map(":{}".format))
_userinfo = st.sampled_from(["", "user@", "user:pw@"])


@st.composite
def urls(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["https", "http"]))
    url = f"{scheme}://{draw(_userinfo)}{draw(_host)}{draw(_port)}{draw(_path)}"
    query = draw(_query)
    return f"{url}?{query}" if query or draw(st.booleans()) else url


_header_name = st.one_of(
    st.sampled_from(
        [
            "Content-Type",
            "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id",
            "User-Agent",
            "x-amzn-trace-id",
            "traceparent",
            "Connection",
            "Expect",
            "Transfer-Encoding",
            "Authorization",
            "X-Amz-Date",
            "x-amz-security-token",
            "X-Amz-Content-SHA256",
            "Host",
            "Date",
            "Accept",
        ]
    ),
    st.text(alphabet=_TCHAR, min_size=1, max_size=12),
)
_header_value = st.one_of(
    st.text(alphabet=string.printable, max_size=20),
    st.text(alphabet=st.sampled_from(_WHITESPACE + "ab,;é✓"), max_size=20),
    _text,
)


@st.composite
def headers(draw: st.DrawFn) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in draw(st.lists(st.tuples(_header_name, _header_value), max_size=8)):
        # A repeated name differs only in case (a dict cannot hold it twice otherwise).
        variant = name.swapcase() if name in out and draw(st.booleans()) else name
        out[variant] = value
    return out


_offsets = st.integers(-14 * 60, 14 * 60).map(lambda m: datetime.timezone(datetime.timedelta(minutes=m)))
_now = st.one_of(
    st.datetimes(datetime.datetime(2000, 1, 1), datetime.datetime(2099, 12, 31)),
    st.datetimes(datetime.datetime(2000, 1, 2), datetime.datetime(2099, 12, 30), timezones=_offsets),
)
_credentials = st.builds(
    Credentials,
    st.from_regex(r"(AKIA|ASIA)[A-Z0-9]{16}", fullmatch=True),
    st.text(alphabet=string.ascii_letters + string.digits + "+/", min_size=1, max_size=40),
    st.one_of(
        st.none(), st.just(""), st.text(alphabet=string.ascii_letters + string.digits + "+/=", max_size=60)
    ),
)


def _naive_utc(now: datetime.datetime) -> datetime.datetime:
    offset = now.utcoffset()
    return now if offset is None else (now - offset).replace(tzinfo=None)


def botocore_headers(
    method: str,
    url: str,
    hdrs: dict[str, str],
    body: bytes,
    credentials: Credentials,
    region: str,
    service: str,
    now: datetime.datetime,
) -> list[tuple[str, str]]:
    request = AWSRequest(method, url, dict(hdrs), body)
    creds = botocore.credentials.Credentials(
        credentials.access_key_id, credentials.secret_access_key, credentials.session_token
    )
    with mock.patch.object(botocore.auth, "get_current_datetime", return_value=_naive_utc(now)):
        botocore.auth.SigV4Auth(creds, service, region).add_auth(request)
    return list(request.headers.items())


@settings(max_examples=400, deadline=None)
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "post"]),
    url=urls(),
    hdrs=headers(),
    body=st.one_of(st.just(b""), st.binary(max_size=2048)),
    credentials=_credentials,
    region=st.sampled_from(["us-east-1", "eu-central-1", "cn-north-1", "us-gov-west-1"]),
    service=st.sampled_from([SERVICE, SERVICE, "bedrock-agentcore-control", "s3-like"]),
    now=_now,
)
def test_sign_sends_exactly_what_botocore_sigv4auth_sends(
    method: str,
    url: str,
    hdrs: dict[str, str],
    body: bytes,
    credentials: Credentials,
    region: str,
    service: str,
    now: datetime.datetime,
) -> None:
    ours = sign(method, url, hdrs, body, credentials=credentials, region=region, service=service, now=now)
    assert list(ours.items()) == botocore_headers(method, url, hdrs, body, credentials, region, service, now)


@settings(max_examples=300, deadline=None)
@given(pairs=_pairs)
def test_the_wire_query_from_encode_query_canonicalizes_like_botocore_params(
    pairs: list[tuple[str, str]],
) -> None:
    url = "https://bedrock-agentcore.us-east-1.amazonaws.com/harnesses/invoke"
    if pairs:
        url += "?" + encode_query(pairs)
    canonical, _ = canonical_request("POST", url, {}, "")
    signer = botocore.auth.SigV4Auth(botocore.credentials.Credentials("a", "b"), SERVICE, "us-east-1")
    assert canonical.split("\n")[2] == signer._canonical_query_string_params(pairs)
    assert encode_query(pairs) == botocore.utils.percent_encode_sequence(pairs)


@settings(max_examples=300, deadline=None)
@given(value=st.one_of(_text, _arn, st.text(alphabet=st.characters(codec="utf-8"))))
def test_quote_label_is_botocores_percent_encode(value: str) -> None:
    assert quote_label(value) == botocore.utils.percent_encode(value)
