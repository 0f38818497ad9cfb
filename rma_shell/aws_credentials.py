"""AWS credentials for Bedrock AgentCore: static keys, or botocore's full chain (B-42, K-4…K-7).

What this is: the shell's credential resolution. ``resolve_credential_source`` picks where
credentials come from, in this order:

1. ``aws_access_key_id`` / ``aws_secret_access_key`` (and ``aws_session_token``) from the
   explicit options, else the application config, else ``AWS_*`` in the environment
   mapping — all through ``rma.config.resolve_aws``; region ``aws_region`` → ``AWS_REGION``
   → ``AWS_DEFAULT_REGION`` → ``us-east-1``. Keys found this way never change.
2. When no layer has either key and botocore is importable (the optional ``aws`` extra),
   botocore's own chain: the shared credentials and config files (profile ``aws_profile``
   → ``AWS_PROFILE``), ``credential_process``, SSO, assume-role, web identity, container
   and instance roles. Its credentials may refresh themselves, so the provider asks the
   source before every request (``await source.get()``). The region is the one given,
   else botocore's (the profile's ``region``), else ``us-east-1``.

Without botocore and without keys the answer is ``InvalidOpts`` naming
``aws_access_key_id`` and the extra that enables the chain. One key without the other is
``InvalidOpts`` for the missing one: a half-configured identity is not silently swapped for
another.

What it is not: it signs nothing (``rma.wire.sigv4`` does). botocore's chain reads the
process environment and may do I/O (files, the instance or container metadata endpoint,
SSO, STS): it always runs in a worker thread; only a refresh does, afterwards. The
``env`` mapping feeds the static layers, the region and the profile name only.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from typing import Any, Final, Protocol

import anyio
import attrs
from returns.result import Failure, Result, Success

from rma.config import (
    AWS_ACCESS_KEY_ID,
    AWS_REGION,
    AWS_SECRET_ACCESS_KEY,
    DEFAULT_AWS_REGION,
    MISSING,
    resolve,
    resolve_aws,
    resolve_key,
)
from rma.errors import AuthenticationError, InvalidOpts, SessionError
from rma.vocabulary import JSON
from rma.wire.sigv4 import Credentials

AWS_EXTRA_HINT: Final = "pip install 'rma-agents[aws]' enables profiles, SSO and container/instance roles"
PROFILE_OPTION: Final = "aws_profile"
PROFILE_ENV_VARS: Final = ("AWS_PROFILE",)

_NO_OPTS: Final[Mapping[str, JSON]] = {}
_NO_KEYS: Final = (
    f"required but not set: pass {AWS_ACCESS_KEY_ID.name}=… and {AWS_SECRET_ACCESS_KEY.name}=…, "
    "set them in the application config, or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
)


class CredentialSource(Protocol):
    """Where a provider gets the credentials for each request it signs."""

    @property
    def region(self) -> str: ...

    @property
    def origin(self) -> str:
        """Where the credentials come from: ``options``, ``app config``, ``environment`` or
        ``botocore:<method>`` (e.g. ``botocore:shared-credentials-file``, ``botocore:sso``)."""
        ...

    async def get(self) -> Result[Credentials, SessionError]:
        """The credentials to sign the next request with; refreshed first when due."""
        ...


@attrs.frozen
class StaticCredentialSource:
    """Keys that never change (options, application config or environment)."""

    credentials: Credentials
    region: str = DEFAULT_AWS_REGION
    origin: str = "options"
    _result: Success[Credentials] = attrs.field(init=False, repr=False, eq=False)

    @_result.default
    def _make_result(self) -> Success[Credentials]:
        return Success(self.credentials)

    async def get(self) -> Result[Credentials, SessionError]:
        return self._result


@attrs.frozen
class FailedCredentialSource:
    """A source that could not be set up: every ``get`` is the error that says why."""

    error: SessionError
    region: str = DEFAULT_AWS_REGION
    origin: str = "botocore"

    async def get(self) -> Result[Credentials, SessionError]:
        return Failure(self.error)


class BotocoreCredentialSource:
    """botocore credentials, refreshable or not.

    ``get`` hands back the current frozen credentials. While botocore says no refresh is
    due, that is a memory read done in place; when one is due (botocore refreshes ahead of
    expiry, 15 minutes by default), ``get_frozen_credentials`` runs in a worker thread,
    since refreshing may call a process, a metadata endpoint or STS.
    """

    def __init__(self, credentials: Any, region: str, origin: str) -> None:
        self._credentials = credentials
        self._refresh_needed = getattr(credentials, "refresh_needed", None)
        self.region = region
        self.origin = origin
        self._last: tuple[Any, Success[Credentials]] | None = None

    def __repr__(self) -> str:
        return f"BotocoreCredentialSource(region={self.region!r}, origin={self.origin!r})"

    async def get(self) -> Result[Credentials, SessionError]:
        creds = self._credentials
        try:
            if self._refresh_needed is not None and self._refresh_needed():
                frozen = await anyio.to_thread.run_sync(creds.get_frozen_credentials, abandon_on_cancel=True)
            else:
                frozen = creds.get_frozen_credentials()
        except Exception as exc:  # botocore's refresh failures are many types; all mean "cannot sign"
            return Failure(
                AuthenticationError(
                    detail=f"refreshing AWS credentials ({self.origin}) failed: {_describe(exc)}"
                )
            )
        last = self._last
        if last is not None and last[0] == frozen:
            return last[1]
        if not frozen.access_key or not frozen.secret_key:
            return Failure(AuthenticationError(detail=f"AWS credentials from {self.origin} have no keys"))
        result = Success(Credentials(frozen.access_key, frozen.secret_key, frozen.token or None))
        self._last = (frozen, result)
        return result


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def _given(value: JSON) -> bool:
    return value is not MISSING and value is not None


def _optional_str(option: str, value: JSON) -> Result[str | None, InvalidOpts]:
    if value is None or (isinstance(value, str) and value):
        return Success(value)
    return Failure(InvalidOpts(option=option, detail=f"must be a non-empty string, got {value!r}"))


def _layer(opts: Mapping[str, JSON], app: Mapping[str, JSON]) -> str:
    if AWS_ACCESS_KEY_ID.name in opts:
        return "options"
    if AWS_ACCESS_KEY_ID.config_key in app:
        return "app config"
    return "environment"


def botocore_available() -> bool:
    """Whether botocore is importable (install ``rma-agents[aws]``)."""
    try:
        importlib.import_module("botocore.session")
    except ImportError:
        return False
    return True


def _load_chain(profile: str | None, session: Any) -> tuple[Any, str | None]:
    # Runs in a worker thread: building the chain reads files and may call endpoints.
    if session is None:
        module: Any = importlib.import_module("botocore.session")
        session = module.Session(profile=profile) if profile else module.get_session()
    credentials = session.get_credentials()
    region = session.get_config_variable("region") if credentials is not None else None
    return credentials, region if isinstance(region, str) and region else None


async def resolve_credential_source(
    *,
    opts: Mapping[str, JSON] = _NO_OPTS,
    app: Mapping[str, JSON] = _NO_OPTS,
    env: Mapping[str, str] | None = None,
    botocore_session: Any = None,
) -> Result[CredentialSource, InvalidOpts | AuthenticationError]:
    """Pick the credential source (see the module docstring for the order).

    ``env`` defaults to the process environment. ``botocore_session`` (a
    ``botocore.session.Session``) replaces the one built for the chain; it is used as it
    is, so its own profile wins over ``aws_profile``.
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    has_access = _given(resolve_key(AWS_ACCESS_KEY_ID, opts=opts, app=app, env=environ))
    has_secret = _given(resolve_key(AWS_SECRET_ACCESS_KEY, opts=opts, app=app, env=environ))
    if has_access or has_secret:
        settings = resolve_aws(opts=opts, app=app, env=environ)
        if isinstance(settings, Failure):
            return Failure(settings.failure())
        resolved = settings.unwrap()
        return Success(
            StaticCredentialSource(Credentials.from_settings(resolved), resolved.region, _layer(opts, app))
        )

    region = _optional_str(
        AWS_REGION.name,
        resolve(AWS_REGION.name, opts=opts, app=app, env=environ, env_vars=AWS_REGION.env_vars),
    )
    if isinstance(region, Failure):
        return region
    profile = _optional_str(
        PROFILE_OPTION, resolve(PROFILE_OPTION, opts=opts, app=app, env=environ, env_vars=PROFILE_ENV_VARS)
    )
    if isinstance(profile, Failure):
        return profile

    if botocore_session is None and not botocore_available():
        return Failure(InvalidOpts(option=AWS_ACCESS_KEY_ID.name, detail=f"{_NO_KEYS}; {AWS_EXTRA_HINT}"))
    chain = await _chain_source(profile.unwrap(), region.unwrap(), botocore_session)
    if isinstance(chain, Failure):
        return Failure(chain.failure())
    found = chain.unwrap()
    if found is None:
        return Failure(
            InvalidOpts(
                option=AWS_ACCESS_KEY_ID.name,
                detail=f"{_NO_KEYS}; botocore's chain (profiles, SSO, container/instance roles) found none",
            )
        )
    return Success(found)


async def _chain_source(
    profile: str | None, region: str | None, botocore_session: Any
) -> Result[BotocoreCredentialSource | None, InvalidOpts | AuthenticationError]:
    try:
        credentials, chain_region = await anyio.to_thread.run_sync(
            _load_chain, profile, botocore_session, abandon_on_cancel=True
        )
    except Exception as exc:  # botocore raises a different type per provider in the chain
        if type(exc).__name__ == "ProfileNotFound":
            return Failure(InvalidOpts(option=PROFILE_OPTION, detail=_describe(exc)))
        return Failure(
            AuthenticationError(detail=f"botocore could not load AWS credentials: {_describe(exc)}")
        )
    if credentials is None:
        return Success(None)
    method = getattr(credentials, "method", None) or "unknown"
    chosen = region or chain_region or DEFAULT_AWS_REGION
    return Success(BotocoreCredentialSource(credentials, chosen, f"botocore:{method}"))


async def botocore_source(
    *, profile: str | None = None, region: str | None = None, botocore_session: Any = None
) -> CredentialSource | None:
    """botocore's chain alone, for a caller that tried static keys itself.

    None when botocore is not installed or its chain finds no credentials. A chain that
    fails to load (unknown profile, a failing ``credential_process``, an expired SSO
    login) still gives a source, whose every ``get`` is that error: the failure surfaces
    at the first request instead of being mistaken for "no credentials".
    """
    if botocore_session is None and not botocore_available():
        return None
    chain = await _chain_source(profile, region, botocore_session)
    if isinstance(chain, Failure):
        return FailedCredentialSource(chain.failure(), region or DEFAULT_AWS_REGION)
    return chain.unwrap()


async def resolve_credentials(
    *,
    opts: Mapping[str, JSON] = _NO_OPTS,
    app: Mapping[str, JSON] = _NO_OPTS,
    env: Mapping[str, str] | None = None,
    botocore_session: Any = None,
) -> Result[tuple[Credentials, str], InvalidOpts | AuthenticationError]:
    """The credentials and region to sign with, once (B-42). A long-lived provider should
    keep ``resolve_credential_source``'s source instead, so refreshing credentials refresh."""
    source = await resolve_credential_source(opts=opts, app=app, env=env, botocore_session=botocore_session)
    if isinstance(source, Failure):
        return Failure(source.failure())
    chosen = source.unwrap()
    got = await chosen.get()
    if isinstance(got, Failure):
        error = got.failure()
        return Failure(
            error if isinstance(error, AuthenticationError) else AuthenticationError(detail=str(error))
        )
    return Success((got.unwrap(), chosen.region))
