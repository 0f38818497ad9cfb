"""rma.config: option > app config > environment > default, auth selection, bearer files (K-1…K-20)."""

from __future__ import annotations

import json
import math
from typing import Any

import anthropic
import attrs
import pytest
from anthropic._constants import ANTHROPIC_API_VERSION
from anthropic.lib.tools._beta_session_runner import MANAGED_AGENTS_BETA as SDK_BETA
from hypothesis import given
from hypothesis import strategies as st
from returns.result import Failure, Success

from rma import config
from rma.config import (
    ANTHROPIC_KEYS,
    AWS_KEYS,
    MISSING,
    AnthropicSettings,
    ApiKeyAuth,
    AwsSettings,
    BearerFileAuth,
    Secret,
    parse_bearer_file,
    resolve,
    resolve_anthropic,
    resolve_aws,
    resolve_key,
    resolve_required,
    select_anthropic_auth,
)
from rma.errors import AuthenticationError, InvalidOpts

NOTHING: dict[str, Any] = {}


# --- K-1: presence semantics and layer order ---------------------------------------------------


def test_K1_each_layer_wins_over_the_next() -> None:
    kw: dict[str, Any] = {"env_vars": ("V",), "default": "d"}
    assert resolve("k", opts={"k": "o"}, app={"k": "a"}, env={"V": "e"}, **kw) == "o"
    assert resolve("k", opts={}, app={"k": "a"}, env={"V": "e"}, **kw) == "a"
    assert resolve("k", opts={}, app={}, env={"V": "e"}, **kw) == "e"
    assert resolve("k", opts={}, app={}, env={}, **kw) == "d"
    assert resolve("k", opts={}, app={}, env={}) is None


def test_K1_K13_an_explicit_none_or_false_wins() -> None:
    assert (
        resolve("k", opts={"k": None}, app={"k": "a"}, env={"V": "e"}, env_vars=("V",), default="d") is None
    )
    assert resolve("k", opts={"k": False}, app={"k": True}, env={}, default=True) is False
    assert resolve("k", opts={}, app={"k": None}, env={"V": "e"}, env_vars=("V",)) is None


def test_K1_an_empty_environment_variable_counts_as_unset() -> None:
    assert resolve("k", opts={}, app={}, env={"V": ""}, env_vars=("V",), default="d") == "d"


def test_K1_the_app_key_may_differ_from_the_option_name() -> None:
    assert resolve("k", opts={}, app={"rma_k": "a", "k": "wrong"}, env={}, app_key="rma_k") == "a"


ABSENT = object()


@given(
    opts=st.one_of(st.just(ABSENT), st.none(), st.booleans(), st.integers()),
    app=st.one_of(st.just(ABSENT), st.none(), st.booleans(), st.integers()),
    env=st.one_of(st.just(ABSENT), st.just(""), st.text(min_size=1)),
)
def test_K1_property_the_first_layer_that_has_the_key_wins(opts: Any, app: Any, env: Any) -> None:
    o = {} if opts is ABSENT else {"k": opts}
    a = {} if app is ABSENT else {"k": app}
    e = {} if env is ABSENT else {"V": env}
    got = resolve("k", opts=o, app=a, env=e, env_vars=("V",), default="default")
    if o:
        assert got is o["k"] or got == o["k"]
    elif a:
        assert got is a["k"] or got == a["k"]
    elif e and e["V"]:
        assert got == e["V"]
    else:
        assert got == "default"


# --- K-2: required values name every layer --------------------------------------------------------


def test_K2_a_missing_required_value_names_the_option_the_app_key_and_the_env_vars() -> None:
    got = resolve_required(
        "aws_region", opts={}, app={}, env={}, env_vars=("AWS_REGION", "AWS_DEFAULT_REGION")
    )
    assert isinstance(got, Failure)
    error = got.failure()
    assert isinstance(error, InvalidOpts) and error.option == "aws_region"
    assert "'aws_region'" in error.detail and "AWS_REGION or AWS_DEFAULT_REGION" in error.detail
    named = resolve_required("api_key", opts={}, app={}, env={}, env_vars=("X",), app_key="anthropic_api_key")
    assert "'anthropic_api_key'" in named.failure().detail


def test_K2_an_explicit_none_for_a_required_value_fails_and_a_value_succeeds() -> None:
    assert isinstance(resolve_required("k", opts={"k": None}, app={"k": "a"}, env={}), Failure)
    assert resolve_required("k", opts={}, app={}, env={"V": "e"}, env_vars=("V",)) == Success("e")
    assert resolve_required("k", opts={"k": 0}, app={}, env={}) == Success(0)


# --- K-3…K-5: the key tables -------------------------------------------------------------------


def test_K3_anthropic_keys_and_defaults_match_the_sdk_where_it_is_authoritative() -> None:
    table = {k.name: k for k in ANTHROPIC_KEYS}
    assert set(table) == {
        "api_key",
        "bearer_token_file",
        "base_url",
        "beta",
        "files_beta",
        "anthropic_version",
        "read_timeout",
        "receive_timeout",
        "profile",
    }
    assert table["beta"].default == SDK_BETA == "managed-agents-2026-04-01"
    assert table["base_url"].default == str(anthropic.Anthropic(api_key="k").base_url).rstrip("/")
    assert table["anthropic_version"].default == "2026-10-21"  # the SDK's value (wire reference §15 #2)
    assert config.SDK_ANTHROPIC_VERSION == ANTHROPIC_API_VERSION
    assert table["files_beta"].default == "files-api-2025-04-14"
    assert table["receive_timeout"].default == 60_000 and table["profile"].default == "anthropic"
    assert table["read_timeout"].default is config.MISSING  # unset: receive_timeout (ms) is read
    # Only the credentials (and the base URL, as the SDK does) read the environment.
    with_env = {k.name: k.env_vars for k in ANTHROPIC_KEYS if k.env_vars}
    assert with_env == {
        "api_key": ("ANTHROPIC_API_KEY",),
        "bearer_token_file": ("ANTHROPIC_BEARER_TOKEN_FILE",),
        "base_url": ("ANTHROPIC_BASE_URL",),
    }
    assert {k.name for k in ANTHROPIC_KEYS if k.secret} == {"api_key", "bearer_token_file"}


def test_K3_K11_resolve_anthropic_with_only_a_key_in_the_environment_gives_the_defaults() -> None:
    got = resolve_anthropic(opts={}, app={}, env={"ANTHROPIC_API_KEY": "sk-env"})
    settings = got.unwrap()
    assert settings == AnthropicSettings(auth=ApiKeyAuth(Secret("sk-env")))
    assert settings.base_url == "https://api.anthropic.com"
    assert (settings.beta, settings.files_beta) == ("managed-agents-2026-04-01", "files-api-2025-04-14")
    assert (settings.anthropic_version, settings.read_timeout) == ("2026-10-21", 60.0)


def test_K3_options_override_and_files_beta_may_be_switched_off() -> None:
    opts = {
        "api_key": "sk",
        "base_url": "http://127.0.0.1:9",
        "anthropic_version": "2026-10-21",
        "files_beta": None,
        "read_timeout": 5,
    }
    settings = resolve_anthropic(opts=opts, app={"beta": "b1,b2"}, env={}).unwrap()
    assert settings.base_url == "http://127.0.0.1:9" and settings.beta == "b1,b2"
    assert settings.files_beta is None and settings.read_timeout == 5.0
    assert settings.anthropic_version == "2026-10-21"


def test_K3_read_timeout_is_seconds_and_the_older_receive_timeout_milliseconds_is_still_read() -> None:
    key = {"api_key": "sk"}
    assert resolve_anthropic(opts=key, app={"receive_timeout": 2500}, env={}).unwrap().read_timeout == 2.5
    # read_timeout wins over receive_timeout at every layer it is given in (issue #22)
    app = {"receive_timeout": 2500, "read_timeout": 7}
    assert resolve_anthropic(opts=key, app=app, env={}).unwrap().read_timeout == 7.0
    opts = {**key, "read_timeout": 0.5}
    assert resolve_anthropic(opts=opts, app={"receive_timeout": 2500}, env={}).unwrap().read_timeout == 0.5


@pytest.mark.parametrize(
    "opts,option",
    [
        ({"base_url": ""}, "base_url"),
        ({"beta": None}, "beta"),
        ({"anthropic_version": 3}, "anthropic_version"),
        ({"receive_timeout": 0}, "receive_timeout"),
        ({"receive_timeout": True}, "receive_timeout"),
        ({"read_timeout": 0}, "read_timeout"),
        ({"read_timeout": math.nan}, "read_timeout"),
        ({"read_timeout": True}, "read_timeout"),
        ({"files_beta": ""}, "files_beta"),
        ({"api_key": 42}, "api_key"),
    ],
)
def test_K3_invalid_anthropic_values_name_the_option(opts: dict[str, Any], option: str) -> None:
    got = resolve_anthropic(opts={"api_key": "sk", **opts}, app={}, env={})
    assert isinstance(got, Failure) and got.failure().option == option


def test_K4_aws_keys() -> None:
    table = {k.name: k for k in AWS_KEYS}
    assert table["aws_access_key_id"].env_vars == ("AWS_ACCESS_KEY_ID",)
    assert table["aws_secret_access_key"].env_vars == ("AWS_SECRET_ACCESS_KEY",)
    assert table["aws_session_token"].env_vars == ("AWS_SESSION_TOKEN",)
    assert table["aws_session_token"].default is None
    assert table["aws_access_key_id"].default is MISSING


def test_K4_K6_resolve_aws_from_the_environment_alone_and_opts_override() -> None:
    env = {"AWS_ACCESS_KEY_ID": "AKIA1", "AWS_SECRET_ACCESS_KEY": "s3cr3t", "AWS_SESSION_TOKEN": "tok"}
    got = resolve_aws(opts={}, app={}, env=env).unwrap()
    assert got == AwsSettings(Secret("AKIA1"), Secret("s3cr3t"), Secret("tok"), "us-east-1")
    over = resolve_aws(
        opts={"aws_access_key_id": "AKIA2", "aws_session_token": None}, app={}, env=env
    ).unwrap()
    assert over.access_key_id.reveal() == "AKIA2" and over.session_token is None


def test_K4_missing_aws_credentials_fail_naming_the_variable() -> None:
    got = resolve_aws(opts={}, app={}, env={"AWS_ACCESS_KEY_ID": "AKIA1"})
    assert isinstance(got, Failure)
    error = got.failure()
    assert error.option == "aws_secret_access_key" and "AWS_SECRET_ACCESS_KEY" in error.detail


@pytest.mark.parametrize(
    "opts,app,env,region",
    [
        ({"aws_region": "eu-west-1"}, {"aws_region": "x"}, {"AWS_REGION": "y"}, "eu-west-1"),
        ({}, {"aws_region": "ap-south-1"}, {"AWS_REGION": "y"}, "ap-south-1"),
        ({}, {}, {"AWS_REGION": "us-west-2", "AWS_DEFAULT_REGION": "eu-central-1"}, "us-west-2"),
        ({}, {}, {"AWS_DEFAULT_REGION": "eu-central-1"}, "eu-central-1"),
        ({}, {}, {"AWS_REGION": "", "AWS_DEFAULT_REGION": "eu-central-1"}, "eu-central-1"),
        ({}, {}, {}, "us-east-1"),
    ],
)
def test_K5_region_falls_back_through_two_variables_then_us_east_1(
    opts: dict[str, Any], app: dict[str, Any], env: dict[str, str], region: str
) -> None:
    creds = {"aws_access_key_id": "a", "aws_secret_access_key": "s"}
    assert resolve_aws(opts={**creds, **opts}, app=app, env=env).unwrap().region == region


def test_K5_an_explicit_none_region_is_invalid_not_defaulted() -> None:
    got = resolve_aws(
        opts={"aws_access_key_id": "a", "aws_secret_access_key": "s", "aws_region": None}, app={}, env={}
    )
    assert isinstance(got, Failure) and got.failure().option == "aws_region"


# --- K-10, K-20: secrets never print ---------------------------------------------------------------


def test_K10_K20_secrets_print_as_stars_everywhere() -> None:
    secret = Secret("sk-ant-very-secret")
    assert repr(secret) == str(secret) == f"{secret}" == "***"
    assert secret.reveal() == "sk-ant-very-secret"
    assert secret == Secret("sk-ant-very-secret") and hash(secret) == hash(Secret("sk-ant-very-secret"))
    settings = resolve_anthropic(opts={"api_key": "sk-ant-very-secret"}, app={}, env={}).unwrap()
    bearer = resolve_anthropic(opts={"api_key": None, "bearer_token_file": "/run/tok.json"}, app={}, env={})
    aws = resolve_aws(opts={"aws_access_key_id": "AKIAX", "aws_secret_access_key": "wJalr"}, app={}, env={})
    for value in (settings, bearer.unwrap(), aws.unwrap(), bearer, aws):
        printed = repr(value) + str(value)
        for leaked in ("sk-ant-very-secret", "/run/tok.json", "AKIAX", "wJalr"):
            assert leaked not in printed
    assert "***" in repr(settings) and "***" in repr(attrs.asdict(settings, recurse=False))


def test_K10_resolve_key_wraps_secret_strings_only() -> None:
    got = resolve_key(config.API_KEY, opts={}, app={}, env={"ANTHROPIC_API_KEY": "sk"})
    assert isinstance(got, Secret) and got.reveal() == "sk"
    assert resolve_key(config.API_KEY, opts={}, app={}, env={}) is MISSING
    assert resolve_key(config.BASE_URL, opts={}, app={}, env={}) == "https://api.anthropic.com"
    wrapped = Secret("already")
    assert resolve_key(config.API_KEY, opts={"api_key": wrapped}, app={}, env={}) is wrapped


# --- K-12…K-14: exactly one auth source -------------------------------------------------------------


def test_K12_the_bearer_file_may_come_from_any_layer() -> None:
    env = {"ANTHROPIC_BEARER_TOKEN_FILE": "/run/tok.json"}
    assert select_anthropic_auth(opts={}, app={}, env=env) == Success(BearerFileAuth(Secret("/run/tok.json")))
    app = {"bearer_token_file": "/etc/tok.json"}
    assert select_anthropic_auth(opts={}, app=app, env={}) == Success(BearerFileAuth(Secret("/etc/tok.json")))


def test_K13_an_explicit_none_selects_the_other_source() -> None:
    env = {"ANTHROPIC_API_KEY": "sk-env", "ANTHROPIC_BEARER_TOKEN_FILE": "/run/tok.json"}
    bearer = select_anthropic_auth(opts={"api_key": None}, app={}, env=env)
    assert bearer == Success(BearerFileAuth(Secret("/run/tok.json")))
    key = select_anthropic_auth(opts={"bearer_token_file": None}, app={}, env=env)
    assert key == Success(ApiKeyAuth(Secret("sk-env")))
    # The app layer's explicit None works the same way.
    from_app = select_anthropic_auth(opts={}, app={"api_key": None}, env=env)
    assert from_app == Success(BearerFileAuth(Secret("/run/tok.json")))


def test_K14_both_sources_or_neither_fail_saying_how_to_choose() -> None:
    both = select_anthropic_auth(opts={"bearer_token_file": "/t"}, app={}, env={"ANTHROPIC_API_KEY": "sk"})
    assert isinstance(both, Failure)
    assert both.failure().option == "auth" and "api_key=None" in both.failure().detail
    neither = select_anthropic_auth(opts={}, app={}, env={})
    assert isinstance(neither, Failure)
    assert "ANTHROPIC_API_KEY" in neither.failure().detail
    assert "ANTHROPIC_BEARER_TOKEN_FILE" in neither.failure().detail
    both_none = select_anthropic_auth(opts={"api_key": None, "bearer_token_file": None}, app={}, env={})
    assert isinstance(both_none, Failure)
    assert isinstance(resolve_anthropic(opts={}, app={}, env={}), Failure)


def test_K9_an_api_key_client_and_a_bearer_client_coexist() -> None:
    env = {"ANTHROPIC_API_KEY": "sk"}
    one = resolve_anthropic(opts={}, app={}, env=env).unwrap()
    two = resolve_anthropic(opts={"api_key": None, "bearer_token_file": "/t"}, app={}, env=env).unwrap()
    assert isinstance(one.auth, ApiKeyAuth) and isinstance(two.auth, BearerFileAuth)


# --- K-15, K-17, K-20: the bearer-token file ----------------------------------------------------------

NOW = 1_780_000_000.0


def bearer_text(token: Any = "tok-abc", expires_at: Any = NOW + 3600) -> str:
    return json.dumps({"access_token": token, "expires_at": expires_at})


def test_K15_a_valid_file_gives_the_token_as_a_secret() -> None:
    got = parse_bearer_file(bearer_text(), NOW)
    assert isinstance(got, Success)
    assert got.unwrap().reveal() == "tok-abc" and "tok-abc" not in repr(got)
    assert parse_bearer_file(bearer_text(expires_at=int(NOW) + 60), NOW).unwrap().reveal() == "tok-abc"


@pytest.mark.parametrize(
    "remaining,ok",
    [(3600, True), (31, True), (30.5, True), (30, False), (1, False), (0, False), (-100, False)],
)
def test_K17_a_token_with_30_seconds_or_less_left_is_refused(remaining: float, ok: bool) -> None:
    got = parse_bearer_file(bearer_text(expires_at=NOW + remaining), NOW)
    assert isinstance(got, Success) is ok
    if not ok:
        error = got.failure()
        assert isinstance(error, AuthenticationError) and "expires" in error.detail


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "[1, 2]",
        json.dumps({"expires_at": NOW + 3600}),
        bearer_text(token=""),
        bearer_text(token=5),
        json.dumps({"access_token": "tok-abc"}),
        bearer_text(expires_at="soon"),
        bearer_text(expires_at=True),
        bearer_text(expires_at=None),
        '{"access_token": "tok-abc", "expires_at": Infinity}',
    ],
)
def test_K17_an_invalid_file_is_an_authentication_error_that_never_echoes_it(text: str) -> None:
    got = parse_bearer_file(text, NOW)
    assert isinstance(got, Failure)
    error = got.failure()
    assert isinstance(error, AuthenticationError) and error.kind == "authentication_error"
    assert "tok-abc" not in error.detail and "tok-abc" not in repr(got)  # K-20
