"""Configuration resolution: explicit option > application config > environment > default (K-1…K-20).

What this module is: the one place every setting is looked up (K-7), over mappings the
caller passes in — the options of one call, the host application's config, and an
environment mapping (the shell passes ``os.environ``; tests pass a dict). It also holds
the key tables for Anthropic (K-3) and AWS (K-4, K-5), the Anthropic auth-source choice
(K-12…K-14) and the pure check of a bearer-token file's content (K-15, K-17).
What it is not: it never reads the process environment, a file or the clock — the
shell reads the bearer-token file on every attempt (K-16) and hands its text and the
current time to ``parse_bearer_file``.

Rules:

- **Presence, not truthiness** (K-1, K-13): the first layer that *has* the key wins, even
  with None or False — an explicit ``api_key=None`` in the options hides a configured key.
- **Environment variables** are tried in the order given (``AWS_REGION`` then
  ``AWS_DEFAULT_REGION``, K-5). An empty variable counts as unset: the environment cannot
  say None, and the SDK reads ``os.environ.get(...) or None`` the same way.
- **Required values** (K-2) come back as ``Failure(InvalidOpts)`` naming the option, the
  application-config key and the environment variables when the resolved value is None —
  every layer missed, or an explicit None won.
- **Secrets** (API key, bearer-token file path and token, AWS keys) are wrapped in
  ``Secret``, whose repr and str are ``***`` (K-10, K-20); ``reveal()`` gives the value.
- **Defaults** (K-3): ``anthropic-version`` is what the SDK 2.10.0 sends, ``2026-10-21``
  (wire reference §15 #2: where the SDK and the reference disagree, follow the SDK); the
  reference ran live with ``2023-06-01`` (``REFERENCE_ANTHROPIC_VERSION``), and the key is
  configurable. The files beta defaults to
  ``files-api-2025-04-14`` (§15 #3; None sends none, as the SDK does). ``base_url`` also
  honours ``ANTHROPIC_BASE_URL``, as the SDK does.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Final

import attrs
from returns.result import Failure, Result, Success

from rma.errors import AuthenticationError, InvalidOpts
from rma.session.option_checks import check_seconds, check_url
from rma.vocabulary import JSON


@attrs.frozen(repr=False)
class Secret:
    """A value that must never be printed: repr and str are ``***`` (K-10, K-20)."""

    _value: str = attrs.field(alias="value")

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "***"

    def __str__(self) -> str:
        return "***"


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()
"""The default of a key with no default: resolution may end with nothing."""


@attrs.frozen
class Key:
    """One setting: its option name, app-config key, environment variables and default."""

    name: str
    env_vars: tuple[str, ...] = ()
    default: JSON = MISSING
    secret: bool = False
    app_key: str | None = None
    """The application-config key, when it differs from ``name``."""

    @property
    def config_key(self) -> str:
        return self.app_key if self.app_key is not None else self.name


def resolve(
    key: str,
    *,
    opts: Mapping[str, JSON],
    app: Mapping[str, JSON],
    env: Mapping[str, str],
    env_vars: tuple[str, ...] = (),
    default: JSON = None,
    app_key: str | None = None,
) -> JSON:
    """K-1: ``opts[key]``, else ``app[app_key or key]``, else the first set env var, else
    ``default``. The first layer that has the key wins, whatever its value."""
    if key in opts:
        return opts[key]
    config_key = app_key or key
    if config_key in app:
        return app[config_key]
    for var in env_vars:
        value = env.get(var)
        if value:  # an empty variable is unset: the environment cannot say None
            return value
    return default


def _missing_detail(key: str, app_key: str, env_vars: tuple[str, ...]) -> str:
    where = f"pass {key}=…, set {app_key!r} in the application config"
    if env_vars:
        where += f", or set the environment variable {' or '.join(env_vars)}"
    return f"required but not set: {where}"


def resolve_required(
    key: str,
    *,
    opts: Mapping[str, JSON],
    app: Mapping[str, JSON],
    env: Mapping[str, str],
    env_vars: tuple[str, ...] = (),
    default: JSON = None,
    app_key: str | None = None,
) -> Result[JSON, InvalidOpts]:
    """K-2: like ``resolve``, but a None result is ``Failure(InvalidOpts)`` naming the
    option, the application-config key and the environment variables."""
    value = resolve(key, opts=opts, app=app, env=env, env_vars=env_vars, default=default, app_key=app_key)
    if value is None:
        return Failure(InvalidOpts(option=key, detail=_missing_detail(key, app_key or key, env_vars)))
    return Success(value)


def resolve_key(
    key: Key, *, opts: Mapping[str, JSON], app: Mapping[str, JSON], env: Mapping[str, str]
) -> JSON:
    """Resolve a table key; a secret string comes back wrapped in ``Secret``.

    A key without a default that no layer has resolves to ``MISSING``.
    """
    value = resolve(
        key.name, opts=opts, app=app, env=env, env_vars=key.env_vars, default=key.default, app_key=key.app_key
    )
    if key.secret and isinstance(value, str):
        return Secret(value)
    return value


# --- the key tables (K-3, K-4, K-5, K-12) ----------------------------------------------------

DEFAULT_BASE_URL: Final = "https://api.anthropic.com"
MANAGED_AGENTS_BETA: Final = "managed-agents-2026-04-01"
FILES_BETA: Final = "files-api-2025-04-14"
SDK_ANTHROPIC_VERSION: Final = "2026-10-21"
"""What ``anthropic`` 2.10.0 sends: the default (issue #3: the SDK's current values)."""
REFERENCE_ANTHROPIC_VERSION: Final = "2023-06-01"
"""What the Elixir reference ran live with; pass ``anthropic_version=`` to use it."""
ANTHROPIC_VERSION: Final = SDK_ANTHROPIC_VERSION
DEFAULT_RECEIVE_TIMEOUT_MS: Final = 60_000
DEFAULT_READ_TIMEOUT: Final = DEFAULT_RECEIVE_TIMEOUT_MS / 1000
"""Seconds: the read timeout of each Claude HTTP call (``read_timeout``)."""
DEFAULT_PROFILE: Final = "anthropic"
DEFAULT_AWS_REGION: Final = "us-east-1"

API_KEY: Final = Key("api_key", ("ANTHROPIC_API_KEY",), secret=True)
BEARER_TOKEN_FILE: Final = Key("bearer_token_file", ("ANTHROPIC_BEARER_TOKEN_FILE",), secret=True)
BASE_URL: Final = Key("base_url", ("ANTHROPIC_BASE_URL",), default=DEFAULT_BASE_URL)
BETA: Final = Key("beta", default=MANAGED_AGENTS_BETA)
FILES_BETA_KEY: Final = Key("files_beta", default=FILES_BETA)
ANTHROPIC_VERSION_KEY: Final = Key("anthropic_version", default=ANTHROPIC_VERSION)
READ_TIMEOUT: Final = Key("read_timeout")
"""Seconds (issue #22); without it the older ``receive_timeout`` (milliseconds) is read."""
RECEIVE_TIMEOUT: Final = Key("receive_timeout", default=DEFAULT_RECEIVE_TIMEOUT_MS)
"""Milliseconds: the older name of ``read_timeout``, still read (an option of that name is
converted to ``read_timeout`` by the provider; an ``app_config`` key is read here)."""
PROFILE: Final = Key("profile", default=DEFAULT_PROFILE)

ANTHROPIC_KEYS: Final[tuple[Key, ...]] = (
    API_KEY,
    BEARER_TOKEN_FILE,
    BASE_URL,
    BETA,
    FILES_BETA_KEY,
    ANTHROPIC_VERSION_KEY,
    READ_TIMEOUT,
    RECEIVE_TIMEOUT,
    PROFILE,
)
"""K-3 (+ K-12). Only the credentials and the base URL read the environment."""

AWS_ACCESS_KEY_ID: Final = Key("aws_access_key_id", ("AWS_ACCESS_KEY_ID",), secret=True)
AWS_SECRET_ACCESS_KEY: Final = Key("aws_secret_access_key", ("AWS_SECRET_ACCESS_KEY",), secret=True)
AWS_SESSION_TOKEN: Final = Key("aws_session_token", ("AWS_SESSION_TOKEN",), default=None, secret=True)
AWS_REGION: Final = Key("aws_region", ("AWS_REGION", "AWS_DEFAULT_REGION"), default=DEFAULT_AWS_REGION)

AWS_KEYS: Final[tuple[Key, ...]] = (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION)
"""K-4, K-5."""


def _required_secret(
    key: Key, opts: Mapping[str, JSON], app: Mapping[str, JSON], env: Mapping[str, str]
) -> Result[Secret, InvalidOpts]:
    value = resolve_key(key, opts=opts, app=app, env=env)
    if value is MISSING or value is None:
        return Failure(
            InvalidOpts(option=key.name, detail=_missing_detail(key.name, key.config_key, key.env_vars))
        )
    return _as_secret(key.name, value)


def _as_secret(option: str, value: JSON) -> Result[Secret, InvalidOpts]:
    if isinstance(value, Secret) and value.reveal():
        return Success(value)
    if isinstance(value, str) and value:
        return Success(Secret(value))
    # Never echo the value: it may be a credential of the wrong type.
    return Failure(
        InvalidOpts(option=option, detail=f"must be a non-empty string, got {type(value).__name__}")
    )


def _nonempty_str(option: str, value: JSON) -> Result[str, InvalidOpts]:
    if isinstance(value, str) and value:
        return Success(value)
    return Failure(InvalidOpts(option=option, detail=f"must be a non-empty string, got {value!r}"))


# --- Anthropic auth (K-12…K-14) --------------------------------------------------------------


@attrs.frozen
class ApiKeyAuth:
    """Authenticate with an API key."""

    api_key: Secret


@attrs.frozen
class BearerFileAuth:
    """Authenticate with the token in a JSON file, re-read on every attempt (K-15, K-16)."""

    path: Secret


AnthropicAuth = ApiKeyAuth | BearerFileAuth


def select_anthropic_auth(
    *, opts: Mapping[str, JSON], app: Mapping[str, JSON], env: Mapping[str, str]
) -> Result[AnthropicAuth, InvalidOpts]:
    """K-12…K-14: exactly one of ``api_key`` / ``bearer_token_file`` must resolve to a value.

    Each is resolved with presence semantics, so an explicit ``api_key=None`` selects the
    bearer file even when ``ANTHROPIC_API_KEY`` is set, and an explicit
    ``bearer_token_file=None`` selects the API key (K-13). Both set, or neither →
    ``InvalidOpts`` (option ``auth``) saying how to pick one.
    """
    api_key = resolve_key(API_KEY, opts=opts, app=app, env=env)
    bearer = resolve_key(BEARER_TOKEN_FILE, opts=opts, app=app, env=env)
    has_key = api_key is not MISSING and api_key is not None
    has_bearer = bearer is not MISSING and bearer is not None
    if has_key and has_bearer:
        return Failure(
            InvalidOpts(
                option="auth",
                detail=(
                    "both an API key and a bearer token file are configured; exactly one auth source "
                    "is allowed — pass api_key=None to use the bearer token file, or "
                    "bearer_token_file=None to use the API key"
                ),
            )
        )
    if has_key:
        return _as_secret(API_KEY.name, api_key).map(ApiKeyAuth)
    if has_bearer:
        return _as_secret(BEARER_TOKEN_FILE.name, bearer).map(BearerFileAuth)
    return Failure(
        InvalidOpts(
            option="auth",
            detail=(
                "one auth source is required: pass api_key=… (or set ANTHROPIC_API_KEY), or "
                "bearer_token_file=… (or set ANTHROPIC_BEARER_TOKEN_FILE)"
            ),
        )
    )


@attrs.frozen
class AnthropicSettings:
    """Resolved settings for the Claude Managed Agents client (K-3, K-12)."""

    auth: AnthropicAuth
    base_url: str = DEFAULT_BASE_URL
    beta: str = MANAGED_AGENTS_BETA
    files_beta: str | None = FILES_BETA
    anthropic_version: str = ANTHROPIC_VERSION
    read_timeout: float = DEFAULT_READ_TIMEOUT
    """Seconds."""
    profile: str = DEFAULT_PROFILE


def resolve_anthropic(
    *, opts: Mapping[str, JSON], app: Mapping[str, JSON], env: Mapping[str, str]
) -> Result[AnthropicSettings, InvalidOpts]:
    """Every Anthropic key, validated; the first invalid one is the error."""

    def get(key: Key) -> JSON:
        return resolve_key(key, opts=opts, app=app, env=env)

    auth = select_anthropic_auth(opts=opts, app=app, env=env)
    if isinstance(auth, Failure):
        return auth
    strings: dict[str, str] = {}
    for key in (BASE_URL, BETA, ANTHROPIC_VERSION_KEY, PROFILE):
        checked = _nonempty_str(key.name, get(key))
        if isinstance(checked, Failure):
            return checked
        strings[key.name] = checked.unwrap()
    url = check_url(strings["base_url"], "base_url")  # an impossible port fails here, not in retries
    if isinstance(url, Failure):
        return url
    files_beta = get(FILES_BETA_KEY)
    if files_beta is not None and not (isinstance(files_beta, str) and files_beta):
        return Failure(
            InvalidOpts(option="files_beta", detail=f"must be a string or None, got {files_beta!r}")
        )
    seconds = get(READ_TIMEOUT)
    if seconds is MISSING:  # the older key, in milliseconds
        timeout = get(RECEIVE_TIMEOUT)
        if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout <= 0:
            return Failure(
                InvalidOpts(option="receive_timeout", detail=f"must be a positive int (ms), got {timeout!r}")
            )
        seconds = timeout / 1000
    read = check_seconds(seconds, "read_timeout")
    if isinstance(read, Failure):
        return Failure(read.failure())
    read_timeout = read.unwrap()
    assert read_timeout is not None
    return Success(
        AnthropicSettings(
            auth=auth.unwrap(),
            base_url=strings["base_url"],
            beta=strings["beta"],
            files_beta=files_beta,
            anthropic_version=strings["anthropic_version"],
            read_timeout=read_timeout,
            profile=strings["profile"],
        )
    )


# --- AWS (K-4, K-5) ------------------------------------------------------------------------


@attrs.frozen
class AwsSettings:
    """Resolved AWS credentials and region (SigV4 inputs)."""

    access_key_id: Secret
    secret_access_key: Secret
    session_token: Secret | None = None
    region: str = DEFAULT_AWS_REGION


def resolve_aws(
    *, opts: Mapping[str, JSON], app: Mapping[str, JSON], env: Mapping[str, str]
) -> Result[AwsSettings, InvalidOpts]:
    """K-4/K-5: access key id and secret required, session token optional, region from
    ``aws_region`` → ``AWS_REGION`` → ``AWS_DEFAULT_REGION`` → ``us-east-1``."""
    access = _required_secret(AWS_ACCESS_KEY_ID, opts, app, env)
    if isinstance(access, Failure):
        return access
    secret = _required_secret(AWS_SECRET_ACCESS_KEY, opts, app, env)
    if isinstance(secret, Failure):
        return secret
    token_value = resolve_key(AWS_SESSION_TOKEN, opts=opts, app=app, env=env)
    token: Secret | None = None
    if token_value is not None:
        checked = _as_secret(AWS_SESSION_TOKEN.name, token_value)
        if isinstance(checked, Failure):
            return checked
        token = checked.unwrap()
    region = _nonempty_str(AWS_REGION.name, resolve_key(AWS_REGION, opts=opts, app=app, env=env))
    if isinstance(region, Failure):
        return region
    return Success(AwsSettings(access.unwrap(), secret.unwrap(), token, region.unwrap()))


# --- the bearer-token file (K-15, K-17) ------------------------------------------------------

BEARER_MIN_REMAINING_S: Final = 30
"""A token with this many seconds or fewer left is refused before dispatch (K-17)."""


def parse_bearer_file(text: str, now_epoch_s: float) -> Result[Secret, AuthenticationError]:
    """Check a bearer-token file's content: JSON ``{"access_token", "expires_at"}`` with
    ``expires_at`` in UTC Unix seconds and more than 30 s left (K-15, K-17).

    The token comes back as a ``Secret``; no error message carries the token or the
    file's content (K-20).
    """
    try:
        data = json.loads(text)
    except ValueError:
        return Failure(AuthenticationError(detail="bearer token file is not valid JSON"))
    if not isinstance(data, dict):
        return Failure(AuthenticationError(detail="bearer token file must hold a JSON object"))
    token = data.get("access_token")
    if not isinstance(token, str) or not token:
        return Failure(AuthenticationError(detail="bearer token file has no access_token string"))
    expires_at = data.get("expires_at")
    if (
        not isinstance(expires_at, int | float)
        or isinstance(expires_at, bool)
        or not math.isfinite(expires_at)
    ):
        return Failure(AuthenticationError(detail="bearer token file has no numeric expires_at"))
    remaining = expires_at - now_epoch_s
    if remaining <= BEARER_MIN_REMAINING_S:
        return Failure(
            AuthenticationError(
                detail=f"bearer token expires in {remaining:.0f}s (needs more than {BEARER_MIN_REMAINING_S}s)"
            )
        )
    return Success(Secret(token))
