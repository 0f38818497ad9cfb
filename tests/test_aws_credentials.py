"""rma_shell.aws_credentials: static keys by option > app config > environment, else botocore's
chain with refreshing credentials (B-42, K-4…K-7).

botocore's chain is exercised on temporary ``AWS_CONFIG_FILE`` / ``AWS_SHARED_CREDENTIALS_FILE``
profiles — static keys and a ``credential_process`` whose keys change on every call — with
every other ``AWS_*`` variable removed, ``HOME`` moved to a temporary folder and the instance
metadata endpoint disabled: the real ``~/.aws`` is never read and nothing leaves the machine.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from returns.result import Failure, Success

from rma.errors import AuthenticationError, InvalidOpts
from rma.wire.sigv4 import Credentials
from rma_shell.aws_credentials import (
    AWS_EXTRA_HINT,
    BotocoreCredentialSource,
    FailedCredentialSource,
    StaticCredentialSource,
    botocore_available,
    botocore_source,
    resolve_credential_source,
    resolve_credentials,
)

KEYS = {"AWS_ACCESS_KEY_ID": "AKIAENV", "AWS_SECRET_ACCESS_KEY": "env-secret"}
NOTHING: dict[str, Any] = {}


@pytest.fixture
def aws_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty, private AWS world: no AWS_* variables, empty config files, no metadata endpoint."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "config").write_text("")
    (tmp_path / "credentials").write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return tmp_path


def _process_profile(folder: Path, *, minutes_left: int, fail_after: int) -> str:
    """A ``credential_process`` that hands out new keys on every call (``ASIAPROC<n>``) and
    fails once it has been called ``fail_after`` times."""
    script = folder / "creds.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import datetime, json, pathlib, sys
            counter = pathlib.Path({str(folder / "count")!r})
            n = int(counter.read_text()) + 1 if counter.exists() else 1
            counter.write_text(str(n))
            if n > {fail_after}:
                sys.exit("no more credentials")
            now = datetime.datetime.now(datetime.timezone.utc)
            expires = now + datetime.timedelta(minutes={minutes_left})
            print(json.dumps({{
                "Version": 1,
                "AccessKeyId": f"ASIAPROC{{n}}",
                "SecretAccessKey": f"process-secret-{{n}}",
                "SessionToken": f"process-token-{{n}}",
                "Expiration": expires.isoformat(),
            }}))
            """
        )
    )
    return f"{sys.executable} {script}"


# ── static keys: options > app config > environment (B-42, K-4, K-5) ──────────────────────────


async def test_B42_explicit_options_win_over_app_config_and_environment() -> None:
    opts = {"aws_access_key_id": "AKIAOPT", "aws_secret_access_key": "opt-secret", "aws_region": "eu-west-1"}
    app = {"aws_access_key_id": "AKIAAPP", "aws_secret_access_key": "app-secret"}
    got = await resolve_credentials(opts=opts, app=app, env={**KEYS, "AWS_REGION": "ap-south-1"})
    assert got == Success((Credentials("AKIAOPT", "opt-secret"), "eu-west-1"))


async def test_B42_app_config_wins_over_the_environment() -> None:
    app = {"aws_access_key_id": "AKIAAPP", "aws_secret_access_key": "app-secret", "aws_session_token": "tok"}
    source = (await resolve_credential_source(app=app, env=KEYS)).unwrap()
    assert source == StaticCredentialSource(
        Credentials("AKIAAPP", "app-secret", "tok"), "us-east-1", "app config"
    )
    assert await source.get() == Success(Credentials("AKIAAPP", "app-secret", "tok"))


@pytest.mark.parametrize(
    ("env", "region"),
    [
        ({**KEYS, "AWS_REGION": "eu-west-3", "AWS_DEFAULT_REGION": "eu-north-1"}, "eu-west-3"),
        ({**KEYS, "AWS_DEFAULT_REGION": "eu-north-1"}, "eu-north-1"),
        (KEYS, "us-east-1"),
    ],
)
async def test_B42_environment_keys_and_region_fallback(env: dict[str, str], region: str) -> None:
    source = (await resolve_credential_source(env=env)).unwrap()
    assert source.origin == "environment"
    assert source.region == region
    assert await source.get() == Success(Credentials("AKIAENV", "env-secret"))


async def test_one_key_without_the_other_names_the_missing_one_and_never_falls_back(aws_files: Path) -> None:
    (aws_files / "credentials").write_text(
        "[default]\naws_access_key_id = AKIAFILE\naws_secret_access_key = s\n"
    )
    got = await resolve_credential_source(opts={"aws_access_key_id": "AKIAOPT"}, env={})
    assert isinstance(got, Failure)
    assert isinstance(got.failure(), InvalidOpts)
    assert got.failure().option == "aws_secret_access_key"


async def test_static_sources_never_print_their_secrets() -> None:
    source = (await resolve_credential_source(env={**KEYS, "AWS_SESSION_TOKEN": "env-token"})).unwrap()
    for text in (repr(source), str(source)):
        assert "env-secret" not in text
        assert "env-token" not in text


# ── without botocore ───────────────────────────────────────────────────────────────────────


async def test_without_botocore_and_without_keys_the_error_names_the_key_and_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "botocore", None)
    monkeypatch.setitem(sys.modules, "botocore.session", None)
    assert not botocore_available()
    got = await resolve_credentials(env={"AWS_REGION": "eu-west-1"})
    assert isinstance(got, Failure)
    error = got.failure()
    assert isinstance(error, InvalidOpts)
    assert error.option == "aws_access_key_id"
    assert "pip install 'rma-agents[aws]'" in error.detail
    assert AWS_EXTRA_HINT in error.message


async def test_without_botocore_static_keys_still_work(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "botocore", None)
    monkeypatch.setitem(sys.modules, "botocore.session", None)
    assert await resolve_credentials(env=KEYS) == Success((Credentials("AKIAENV", "env-secret"), "us-east-1"))


# ── botocore's chain ───────────────────────────────────────────────────────────────────────


async def test_botocore_chain_reads_the_shared_credentials_file_and_the_profile_region(
    aws_files: Path,
) -> None:
    (aws_files / "credentials").write_text(
        "[default]\naws_access_key_id = AKIAFILE\naws_secret_access_key = file-secret\n"
    )
    (aws_files / "config").write_text("[default]\nregion = eu-west-2\n")
    source = (await resolve_credential_source(env={})).unwrap()
    assert isinstance(source, BotocoreCredentialSource)
    assert source.origin == "botocore:shared-credentials-file"
    assert source.region == "eu-west-2"
    assert await source.get() == Success(Credentials("AKIAFILE", "file-secret"))
    assert "file-secret" not in repr(source)


async def test_a_given_region_wins_over_botocores(aws_files: Path) -> None:
    (aws_files / "credentials").write_text(
        "[default]\naws_access_key_id = AKIAFILE\naws_secret_access_key = s\n"
    )
    (aws_files / "config").write_text("[default]\nregion = eu-west-2\n")
    got = await resolve_credentials(env={"AWS_DEFAULT_REGION": "sa-east-1"})
    assert got.unwrap()[1] == "sa-east-1"
    got = await resolve_credentials(opts={"aws_region": "ca-central-1"}, env={"AWS_REGION": "sa-east-1"})
    assert got.unwrap()[1] == "ca-central-1"


async def test_botocore_chain_without_a_region_anywhere_uses_us_east_1(aws_files: Path) -> None:
    (aws_files / "credentials").write_text(
        "[default]\naws_access_key_id = AKIAFILE\naws_secret_access_key = s\n"
    )
    assert (await resolve_credentials(env={})).unwrap()[1] == "us-east-1"


async def test_aws_profile_selects_a_config_profile_from_options_or_the_environment(aws_files: Path) -> None:
    (aws_files / "config").write_text(
        "[profile dev]\naws_access_key_id = AKIADEV\naws_secret_access_key = dev-secret\n"
        "region = eu-south-1\n"
    )
    expected = Success((Credentials("AKIADEV", "dev-secret"), "eu-south-1"))
    assert await resolve_credentials(opts={"aws_profile": "dev"}, env={}) == expected
    assert await resolve_credentials(env={"AWS_PROFILE": "dev"}) == expected


async def test_an_unknown_profile_is_an_invalid_aws_profile_option(aws_files: Path) -> None:
    got = await resolve_credential_source(opts={"aws_profile": "nope"}, env={})
    assert isinstance(got, Failure)
    assert isinstance(got.failure(), InvalidOpts)
    assert got.failure().option == "aws_profile"


async def test_no_credentials_anywhere_names_aws_access_key_id(aws_files: Path) -> None:
    got = await resolve_credential_source(env={})
    assert isinstance(got, Failure)
    error = got.failure()
    assert isinstance(error, InvalidOpts)
    assert error.option == "aws_access_key_id"
    assert "botocore's chain" in error.detail


async def test_refreshing_credentials_are_fetched_again_when_due(aws_files: Path) -> None:
    # 12 minutes left: inside botocore's advisory refresh window (15 min), so every get
    # refreshes, outside the mandatory one (10 min), so a refresh result is accepted.
    command = _process_profile(aws_files, minutes_left=12, fail_after=100)
    (aws_files / "config").write_text(f"[default]\ncredential_process = {command}\nregion = eu-west-1\n")
    source = (await resolve_credential_source(env={})).unwrap()
    assert source.origin == "botocore:custom-process"
    first = (await source.get()).unwrap()
    second = (await source.get()).unwrap()
    assert first.access_key_id.startswith("ASIAPROC")
    assert first.session_token == f"process-token-{first.access_key_id.removeprefix('ASIAPROC')}"
    assert second.access_key_id != first.access_key_id


async def test_credentials_not_due_for_refresh_are_reused_without_calling_the_process(
    aws_files: Path,
) -> None:
    command = _process_profile(aws_files, minutes_left=60, fail_after=1)
    (aws_files / "config").write_text(f"[default]\ncredential_process = {command}\n")
    source = (await resolve_credential_source(env={})).unwrap()
    first = await source.get()
    assert first == Success(Credentials("ASIAPROC1", "process-secret-1", "process-token-1"))
    assert await source.get() is first


async def test_a_failed_refresh_is_an_authentication_error_without_secrets(aws_files: Path) -> None:
    # 5 minutes left: a mandatory refresh on the first get, and the process now fails.
    command = _process_profile(aws_files, minutes_left=5, fail_after=1)
    (aws_files / "config").write_text(f"[default]\ncredential_process = {command}\n")
    source = (await resolve_credential_source(env={})).unwrap()
    got = await source.get()
    assert isinstance(got, Failure)
    error = got.failure()
    assert isinstance(error, AuthenticationError)
    assert "custom-process" in error.detail
    assert "process-secret" not in error.detail
    assert isinstance(await resolve_credentials(env={}), Failure)


async def test_a_chain_that_fails_to_load_is_an_authentication_error(aws_files: Path) -> None:
    command = _process_profile(aws_files, minutes_left=60, fail_after=0)
    (aws_files / "config").write_text(f"[default]\ncredential_process = {command}\n")
    got = await resolve_credential_source(env={})
    assert isinstance(got, Failure)
    assert isinstance(got.failure(), AuthenticationError)
    assert "botocore could not load" in got.failure().detail


async def test_a_given_botocore_session_is_used_as_is(aws_files: Path) -> None:
    (aws_files / "config").write_text(
        "[profile other]\naws_access_key_id = AKIAOTHER\naws_secret_access_key = other-secret\n"
    )
    session = botocore.session.Session(profile="other")
    got = await resolve_credentials(env={}, botocore_session=session)
    assert got == Success((Credentials("AKIAOTHER", "other-secret"), "us-east-1"))


async def test_an_empty_region_or_profile_option_is_invalid(aws_files: Path) -> None:
    for option in ("aws_region", "aws_profile"):
        got = await resolve_credential_source(opts={option: ""}, env={})
        assert isinstance(got, Failure)
        assert got.failure().option == option


# ── botocore_source: the chain alone, for a provider that tried static keys itself ──────────


async def test_botocore_source_finds_the_chain_or_says_none(aws_files: Path) -> None:
    assert await botocore_source() is None
    (aws_files / "credentials").write_text(
        "[default]\naws_access_key_id = AKIAFILE\naws_secret_access_key = s\n"
    )
    source = await botocore_source(region="eu-west-1")
    assert isinstance(source, BotocoreCredentialSource)
    assert source.region == "eu-west-1"
    assert await source.get() == Success(Credentials("AKIAFILE", "s"))


async def test_botocore_source_without_botocore_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "botocore", None)
    monkeypatch.setitem(sys.modules, "botocore.session", None)
    assert await botocore_source() is None


async def test_botocore_source_that_cannot_load_fails_every_get_with_the_reason(aws_files: Path) -> None:
    source = await botocore_source(profile="nope")
    assert isinstance(source, FailedCredentialSource)
    got = await source.get()
    assert isinstance(got, Failure)
    assert isinstance(got.failure(), InvalidOpts)
    assert got.failure().option == "aws_profile"


def test_process_script_output_is_valid_json(aws_files: Path) -> None:
    # Guards the helper itself: a broken script would make the refresh tests pass for the wrong reason.
    command = _process_profile(aws_files, minutes_left=12, fail_after=5)
    out = subprocess.run(shlex.split(command), capture_output=True, check=True, text=True).stdout
    assert json.loads(out)["AccessKeyId"] == "ASIAPROC1"
