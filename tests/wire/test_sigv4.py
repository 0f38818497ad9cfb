"""rma.wire.sigv4: the wire reference §3.7 worked examples byte for byte, and botocore agrees (B-41)."""

from __future__ import annotations

import datetime
import hashlib
import hmac
from collections.abc import Iterator, Mapping
from unittest import mock

import botocore.auth
import botocore.credentials
import pytest
from botocore.awsrequest import AWSRequest

from rma.config import AwsSettings, Secret
from rma.wire import sigv4
from rma.wire.sigv4 import (
    EMPTY_SHA256,
    SERVICE,
    Credentials,
    canonical_request,
    encode_query,
    format_amz_date,
    quote_label,
    sign,
    signing_key,
    string_to_sign,
)

AK = "AKIDEXAMPLE"
SK = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
TOKEN = "EXAMPLE-SESSION-TOKEN"
REGION = "us-east-1"
NOW = datetime.datetime(2026, 8, 1, 12, 0, 0, tzinfo=datetime.UTC)
AMZ_DATE = "20260801T120000Z"
SCOPE = "20260801/us-east-1/bedrock-agentcore/aws4_request"
WITH_TOKEN = Credentials(AK, SK, TOKEN)
NO_TOKEN = Credentials(AK, SK)

HARNESS_ARN = "arn:aws:bedrock-agentcore:us-east-1:123456789012:harness/billing_support_1a2b3c4d-AbCdEfGhIj"
RUNTIME_ARN = "arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/billing_support_1a2b3c4d-AbCdEfGhIj"
DATA_HOST = "https://bedrock-agentcore.us-east-1.amazonaws.com"
CONTROL_HOST = "https://bedrock-agentcore-control.us-east-1.amazonaws.com"
SESSION_HEADERS = {
    "Content-Type": "application/json",
    "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id": "rma-session-0123456789abcdef0123456789",
}

# A — InvokeHarness
URL_A = f"{DATA_HOST}/harnesses/invoke?" + encode_query(
    [("harnessArn", HARNESS_ARN), ("qualifier", "DEFAULT")]
)
BODY_A = (
    b'{"messages": [{"role": "user", "content": [{"text": "Hi"}]}], '
    b'"timeoutSeconds": 900, "maxIterations": 40, "maxTokens": 4096}'
)
HASH_A = "b08a98827985829e3fdb39010adbb8c4a55d7b0bcc2af034704dc7a7fa32d695"
CANONICAL_A = f"""POST
/harnesses/invoke
harnessArn=arn%3Aaws%3Abedrock-agentcore%3Aus-east-1%3A123456789012%3Aharness%2Fbilling_support_1a2b3c4d-AbCdEfGhIj&qualifier=DEFAULT
content-type:application/json
host:bedrock-agentcore.us-east-1.amazonaws.com
x-amz-date:20260801T120000Z
x-amz-security-token:EXAMPLE-SESSION-TOKEN
x-amzn-bedrock-agentcore-runtime-session-id:rma-session-0123456789abcdef0123456789

content-type;host;x-amz-date;x-amz-security-token;x-amzn-bedrock-agentcore-runtime-session-id
{HASH_A}"""

# B — InvokeAgentRuntimeCommand
URL_B = f"{DATA_HOST}/runtimes/{quote_label(RUNTIME_ARN)}/commands"
BODY_B = b'{"command": "ls /mnt/data", "timeout": 60}'

# C — GetHarnessEndpoint
URL_C = f"{CONTROL_HOST}/harnesses/billing_support_1a2b3c4d-AbCdEfGhIj/endpoints/DEFAULT"
CANONICAL_C = f"""GET
/harnesses/billing_support_1a2b3c4d-AbCdEfGhIj/endpoints/DEFAULT

host:bedrock-agentcore-control.us-east-1.amazonaws.com
x-amz-date:20260801T120000Z
x-amz-security-token:EXAMPLE-SESSION-TOKEN

host;x-amz-date;x-amz-security-token
{EMPTY_SHA256}"""


def _signature(headers: Mapping[str, str]) -> str:
    return headers["Authorization"].rsplit("Signature=", 1)[1]


def _signed_headers(headers: Mapping[str, str]) -> str:
    return headers["Authorization"].split("SignedHeaders=", 1)[1].split(",", 1)[0]


# ── the signing key chain ───────────────────────────────────────────────────────────────────


def test_signing_key_chain_matches_the_reference_hex_values() -> None:
    k_date = hmac.digest(f"AWS4{SK}".encode(), b"20260801", "sha256")
    k_region = hmac.digest(k_date, b"us-east-1", "sha256")
    k_service = hmac.digest(k_region, b"bedrock-agentcore", "sha256")
    assert k_date.hex() == "88feda6d73172a9851b8612b485a17f7923a7d75e1227d1795f83c2f3f903e6d"
    assert k_region.hex() == "5bf862e6739ca63d2e4dfcb930d69a0a15251f2fa957a4005cda233109bf437d"
    assert k_service.hex() == "f384c522137dacd1616e9f2d8e140df157f372465c68f7689de8290e00cc014f"
    expected = "8dd9ee35c231226816cf7b45f9af910ebd5add2724390c88afbaa7d99473e450"
    assert hmac.digest(k_service, b"aws4_request", "sha256").hex() == expected
    assert signing_key(SK, "20260801", REGION, SERVICE).hex() == expected


def test_signing_key_is_cached_per_secret_date_region_and_service() -> None:
    first = signing_key(SK, "20260801", REGION, SERVICE)
    assert signing_key(SK, "20260801", REGION, SERVICE) is first
    assert signing_key(SK, "20260802", REGION, SERVICE) != first
    assert signing_key(SK, "20260801", "eu-west-1", SERVICE) != first


# ── A: InvokeHarness ────────────────────────────────────────────────────────────────────────


def test_B41_vector_A_invoke_harness_with_session_token() -> None:
    assert len(BODY_A) == 124
    assert hashlib.sha256(BODY_A).hexdigest() == HASH_A
    out = sign("POST", URL_A, SESSION_HEADERS, BODY_A, credentials=WITH_TOKEN, region=REGION, now=NOW)
    assert out == {
        **SESSION_HEADERS,
        "X-Amz-Date": AMZ_DATE,
        "X-Amz-Security-Token": TOKEN,
        "Authorization": (
            f"AWS4-HMAC-SHA256 Credential={AK}/{SCOPE}, SignedHeaders=content-type;host;x-amz-date;"
            "x-amz-security-token;x-amzn-bedrock-agentcore-runtime-session-id, "
            "Signature=99355edaa310f6fbee49af6e4ddc3ea47922206c777f69fbbb849022e77072b5"
        ),
    }


def test_vector_A_canonical_request_and_string_to_sign_byte_for_byte() -> None:
    headers = {**SESSION_HEADERS, "X-Amz-Date": AMZ_DATE, "X-Amz-Security-Token": TOKEN}
    canonical, signed = canonical_request("POST", URL_A, headers, HASH_A)
    assert canonical == CANONICAL_A
    assert (
        signed
        == "content-type;host;x-amz-date;x-amz-security-token;x-amzn-bedrock-agentcore-runtime-session-id"
    )
    sts = string_to_sign(AMZ_DATE, SCOPE, canonical)
    assert sts == (
        f"AWS4-HMAC-SHA256\n{AMZ_DATE}\n{SCOPE}\n"
        "2e2d30fbfb9a344e7ef1598a86d95390d618c24ee933906040a4e86cd91af0b1"
    )
    key = signing_key(SK, "20260801", REGION, SERVICE)
    signature = hmac.digest(key, sts.encode(), "sha256").hex()
    assert signature == "99355edaa310f6fbee49af6e4ddc3ea47922206c777f69fbbb849022e77072b5"


def test_vector_A_without_token_drops_the_token_header_from_the_signature() -> None:
    out = sign("POST", URL_A, SESSION_HEADERS, BODY_A, credentials=NO_TOKEN, region=REGION, now=NOW)
    assert "X-Amz-Security-Token" not in out
    assert _signed_headers(out) == "content-type;host;x-amz-date;x-amzn-bedrock-agentcore-runtime-session-id"
    assert _signature(out) == "b94ad3aa83bddc68f719c93929db8ffa1fb8b26f5dd3e4c0f983b128bd2f0c99"


def test_vector_A_with_x_amz_content_sha256_signs_that_header_and_uses_it_as_the_payload_hash() -> None:
    headers = {**SESSION_HEADERS, "x-amz-content-sha256": HASH_A}
    out = sign("POST", URL_A, headers, BODY_A, credentials=WITH_TOKEN, region=REGION, now=NOW)
    assert _signed_headers(out) == (
        "content-type;host;x-amz-content-sha256;x-amz-date;x-amz-security-token;"
        "x-amzn-bedrock-agentcore-runtime-session-id"
    )
    assert _signature(out) == "baa560342c3d28590b4db34305422fc71136156b65fa4c08dc0173d9118254f3"
    assert out["x-amz-content-sha256"] == HASH_A


def test_an_existing_x_amz_content_sha256_is_the_payload_hash_whatever_the_body() -> None:
    headers = {**SESSION_HEADERS, "X-Amz-Content-SHA256": HASH_A}
    with_body = sign("POST", URL_A, headers, BODY_A, credentials=WITH_TOKEN, region=REGION, now=NOW)
    other_body = sign(
        "POST", URL_A, headers, b"something else", credentials=WITH_TOKEN, region=REGION, now=NOW
    )
    assert with_body == other_body


# ── B: InvokeAgentRuntimeCommand (double encoding) ──────────────────────────────────────────


def test_B41_vector_B_command_path_label_is_double_encoded() -> None:
    assert quote_label(RUNTIME_ARN) == (
        "arn%3Aaws%3Abedrock-agentcore%3Aus-east-1%3A123456789012%3Aruntime%2Fbilling_support_1a2b3c4d-AbCdEfGhIj"
    )
    body_hash = hashlib.sha256(BODY_B).hexdigest()
    assert body_hash == "1b18096e048939584877621758803c04af102d932b75689b0897294be9272f1b"
    headers = {**SESSION_HEADERS, "X-Amz-Date": AMZ_DATE, "X-Amz-Security-Token": TOKEN}
    canonical, _ = canonical_request("POST", URL_B, headers, body_hash)
    assert canonical.split("\n")[1] == (
        "/runtimes/arn%253Aaws%253Abedrock-agentcore%253Aus-east-1%253A123456789012%253Aruntime"
        "%252Fbilling_support_1a2b3c4d-AbCdEfGhIj/commands"
    )
    assert hashlib.sha256(canonical.encode()).hexdigest() == (
        "2693974e1d272402765635fce1cd07f86b13c4042a56b84bd9d30921e244cc7f"
    )
    out = sign("POST", URL_B, SESSION_HEADERS, BODY_B, credentials=WITH_TOKEN, region=REGION, now=NOW)
    assert _signature(out) == "2c5d48e9ff0ba4d76ac6ec835c6b56bca6fe5cbb7144c4801a6256227481629a"


# ── C: GetHarnessEndpoint ───────────────────────────────────────────────────────────────────


def test_B41_vector_C_get_with_no_body_hashes_the_empty_payload() -> None:
    canonical, signed = canonical_request(
        "GET", URL_C, {"X-Amz-Date": AMZ_DATE, "X-Amz-Security-Token": TOKEN}, EMPTY_SHA256
    )
    assert canonical == CANONICAL_C
    assert signed == "host;x-amz-date;x-amz-security-token"
    assert hashlib.sha256(canonical.encode()).hexdigest() == (
        "d6c18ff76ec0109f9079c093a50cb4f234bdcb4aecd3c51d2cf8b7679e3bdb2b"
    )
    out = sign("GET", URL_C, {}, b"", credentials=WITH_TOKEN, region=REGION, now=NOW)
    assert _signature(out) == "39d08a658709dc37f178685fad6f324fabe70eae1285e4f729dfef8ab92f9c9d"


def test_vector_C_without_token_signs_only_host_and_date() -> None:
    out = sign("GET", URL_C, {}, b"", credentials=NO_TOKEN, region=REGION, now=NOW)
    assert out == {
        "X-Amz-Date": AMZ_DATE,
        "Authorization": (
            f"AWS4-HMAC-SHA256 Credential={AK}/{SCOPE}, SignedHeaders=host;x-amz-date, "
            "Signature=54de1ac663f77128b7f97027db692ca211216229c6b3550f2a6bbd28c28469dc"
        ),
    }


# ── the headers that come back ──────────────────────────────────────────────────────────────


def test_stale_authorization_date_and_token_headers_are_replaced_in_any_case() -> None:
    stale = {
        **SESSION_HEADERS,
        "authorization": "AWS4-HMAC-SHA256 old",
        "x-amz-date": "20200101T000000Z",
        "X-AMZ-SECURITY-TOKEN": "old-token",
    }
    out = sign("POST", URL_A, stale, BODY_A, credentials=WITH_TOKEN, region=REGION, now=NOW)
    fresh = sign("POST", URL_A, SESSION_HEADERS, BODY_A, credentials=WITH_TOKEN, region=REGION, now=NOW)
    assert out == fresh


def test_a_callers_security_token_is_kept_and_signed_when_the_credentials_have_none() -> None:
    headers = {"X-Amz-Security-Token": "caller-token"}
    out = sign("GET", URL_C, headers, b"", credentials=NO_TOKEN, region=REGION, now=NOW)
    assert out["X-Amz-Security-Token"] == "caller-token"
    assert _signed_headers(out) == "host;x-amz-date;x-amz-security-token"


def test_an_empty_session_token_counts_as_none() -> None:
    out = sign("GET", URL_C, {}, b"", credentials=Credentials(AK, SK, ""), region=REGION, now=NOW)
    assert out == sign("GET", URL_C, {}, b"", credentials=NO_TOKEN, region=REGION, now=NOW)


def test_host_is_signed_but_not_returned() -> None:
    out = sign("GET", URL_C, {}, b"", credentials=NO_TOKEN, region=REGION, now=NOW)
    assert "host" in _signed_headers(out).split(";")
    assert not any(name.lower() == "host" for name in out)


def test_unsigned_headers_are_returned_but_not_signed() -> None:
    headers = {
        "User-Agent": "rma/0.1",
        "X-Amzn-Trace-Id": "Root=1-abc",
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "Connection": "keep-alive",
    }
    out = sign("GET", URL_C, headers, b"", credentials=WITH_TOKEN, region=REGION, now=NOW)
    assert {k: out[k] for k in headers} == headers
    assert _signature(out) == "39d08a658709dc37f178685fad6f324fabe70eae1285e4f729dfef8ab92f9c9d"


def test_header_values_fold_whitespace_and_repeated_names_join_with_commas() -> None:
    headers = {"X-Custom": "  a \t  b  ", "x-custom": "c", "X-Other": "d"}
    canonical, signed = canonical_request("GET", URL_C, headers, EMPTY_SHA256)
    assert "x-custom:a b,c\n" in canonical
    assert signed == "host;x-custom;x-other"


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("https://Example.COM/x", "example.com"),
        ("https://example.com:443/x", "example.com"),
        ("https://example.com:8443/x", "example.com:8443"),
        ("http://127.0.0.1:80/x", "127.0.0.1"),
        ("http://127.0.0.1:8080/x", "127.0.0.1:8080"),
        ("http://example.com:443/x", "example.com:443"),
        ("http://user:pw@[::1]:9000/x", "[::1]:9000"),
    ],
)
def test_host_is_the_lowercase_hostname_with_a_non_default_port(url: str, host: str) -> None:
    canonical, _ = canonical_request("GET", url, {}, EMPTY_SHA256)
    assert f"\nhost:{host}\n" in canonical


@pytest.mark.parametrize(
    ("path", "uri"),
    [
        ("", "/"),
        ("/", "/"),
        ("//a//b//", "/a/b/"),
        ("/a/./b/../c", "/a/c"),
        ("/../..", "/"),
        ("/a/b/..", "/a"),
        ("/a%2Fb", "/a%252Fb"),
        ("/caf%C3%A9/é", "/caf%25C3%25A9/%C3%A9"),
        ("/a!b$c'd(e)*f+g,h;i=j:k@l", "/a%21b%24c%27d%28e%29%2Af%2Bg%2Ch%3Bi%3Dj%3Ak%40l"),
    ],
)
def test_canonical_uri_removes_dot_segments_collapses_slashes_and_encodes_again(path: str, uri: str) -> None:
    canonical, _ = canonical_request("GET", f"https://example.com{path}", {}, EMPTY_SHA256)
    assert canonical.split("\n")[1] == uri


def test_canonical_query_sorts_the_wire_query_by_key_then_value_without_reencoding() -> None:
    url = "https://example.com/?b=2&a=z&a=y&c&a%20b=%2F"
    canonical, _ = canonical_request("GET", url, {}, EMPTY_SHA256)
    assert canonical.split("\n")[2] == "a=y&a=z&a%20b=%2F&b=2&c="


def test_naive_and_aware_times_are_the_same_instant_in_utc() -> None:
    plus_two = datetime.timezone(datetime.timedelta(hours=2))
    assert format_amz_date(NOW) == AMZ_DATE
    assert format_amz_date(NOW.replace(tzinfo=None)) == AMZ_DATE
    assert format_amz_date(NOW.astimezone(plus_two)) == AMZ_DATE
    a = sign("GET", URL_C, {}, b"", credentials=WITH_TOKEN, region=REGION, now=NOW.astimezone(plus_two))
    b = sign("GET", URL_C, {}, b"", credentials=WITH_TOKEN, region=REGION, now=NOW.replace(tzinfo=None))
    assert a == b


def test_a_url_without_a_host_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="no host"):
        sign("GET", "/relative/path", {}, b"", credentials=NO_TOKEN, region=REGION, now=NOW)


# ── encoding helpers ────────────────────────────────────────────────────────────────────────


def test_quote_label_leaves_only_unreserved_characters_bare_with_uppercase_hex() -> None:
    assert quote_label(HARNESS_ARN) == (
        "arn%3Aaws%3Abedrock-agentcore%3Aus-east-1%3A123456789012%3Aharness%2Fbilling_support_1a2b3c4d-AbCdEfGhIj"
    )
    assert quote_label("a b+c/d~e.f_g-h") == "a%20b%2Bc%2Fd~e.f_g-h"
    assert quote_label("é✓") == "%C3%A9%E2%9C%93"
    assert quote_label("%2F") == "%252F"


def test_encode_query_keeps_order_repeats_and_empty_values_with_space_as_percent_20() -> None:
    pairs = [("b", "x y"), ("a", ""), ("a", "1"), ("k=v", "&")]
    assert encode_query(pairs) == "b=x%20y&a=&a=1&k%3Dv=%26"
    assert encode_query([]) == ""


# ── credentials ─────────────────────────────────────────────────────────────────────────────


def test_credentials_repr_and_str_hide_the_secret_and_the_token() -> None:
    for text in (repr(WITH_TOKEN), str(WITH_TOKEN), f"{WITH_TOKEN}", repr([WITH_TOKEN])):
        assert SK not in text
        assert TOKEN not in text
        assert AK not in text
        assert "MPLE" in text  # the last four characters tell identities apart
    assert "session_token=None" in repr(NO_TOKEN)


def test_credentials_from_settings_reveals_the_secrets() -> None:
    settings = AwsSettings(Secret(AK), Secret(SK), Secret(TOKEN), "eu-west-1")
    assert Credentials.from_settings(settings) == WITH_TOKEN
    assert Credentials.from_settings(AwsSettings(Secret(AK), Secret(SK))) == NO_TOKEN


def test_the_module_is_pure_and_names_the_agentcore_signing_service() -> None:
    assert SERVICE == "bedrock-agentcore"
    assert not hasattr(sigv4, "os")


# ── botocore as the oracle ──────────────────────────────────────────────────────────────────


@pytest.fixture
def botocore_at_now() -> Iterator[None]:
    with mock.patch.object(botocore.auth, "get_current_datetime", return_value=NOW.replace(tzinfo=None)):
        yield


def botocore_sign(
    method: str, url: str, headers: Mapping[str, str], body: bytes, credentials: Credentials
) -> list[tuple[str, str]]:
    request = AWSRequest(method, url, dict(headers), body)
    creds = botocore.credentials.Credentials(
        credentials.access_key_id, credentials.secret_access_key, credentials.session_token
    )
    botocore.auth.SigV4Auth(creds, SERVICE, REGION).add_auth(request)
    return list(request.headers.items())


@pytest.mark.usefixtures("botocore_at_now")
@pytest.mark.parametrize("credentials", [WITH_TOKEN, NO_TOKEN], ids=["token", "no-token"])
@pytest.mark.parametrize(
    ("method", "url", "headers", "body"),
    [
        ("POST", URL_A, SESSION_HEADERS, BODY_A),
        ("POST", URL_A, {**SESSION_HEADERS, "x-amz-content-sha256": HASH_A}, BODY_A),
        ("POST", URL_B, SESSION_HEADERS, BODY_B),
        ("GET", URL_C, {}, b""),
        ("delete", f"{CONTROL_HOST}/harnesses/h1?clientToken=abc%20def", {"User-Agent": "x  y"}, b""),
        ("GET", "http://127.0.0.1:8080//a/./b/../c/?z=1&a=2&a=1", {"X-A": " 1 ", "x-a": "2"}, b""),
        ("POST", URL_A, {**SESSION_HEADERS, "Date": "yesterday", "Host": "Other.example"}, b"{}"),
        ("PUT", URL_C, {" X-Pad\t": "v", "x-b": "1", "\x85x-a": "2"}, b"body"),
    ],
)
def test_botocore_sigv4auth_sends_the_same_headers(
    method: str, url: str, headers: Mapping[str, str], body: bytes, credentials: Credentials
) -> None:
    ours = sign(method, url, headers, body, credentials=credentials, region=REGION, now=NOW)
    assert list(ours.items()) == botocore_sign(method, url, headers, body, credentials)


@pytest.mark.usefixtures("botocore_at_now")
def test_a_date_header_switches_to_the_date_form_as_botocore_does() -> None:
    out = sign("GET", URL_C, {"date": "stale"}, b"", credentials=NO_TOKEN, region=REGION, now=NOW)
    assert out["Date"] == "Sat, 01 Aug 2026 12:00:00 -0000"
    assert "X-Amz-Date" not in out
    assert _signed_headers(out) == "date;host"
    assert list(out.items()) == botocore_sign("GET", URL_C, {"date": "stale"}, b"", NO_TOKEN)
