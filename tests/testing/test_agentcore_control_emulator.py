"""The loopback AgentCore emulator speaks the control plane's wire; boto3's control client is the oracle.

Lifecycles run on a trio ``MockClock`` that the tests move by hand (or autojump), so no test sleeps.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import anyio
import boto3
import botocore.auth
import botocore.exceptions
import botocore.session
import httpx
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.validate import ParamValidator
from trio.testing import MockClock

import rma_shell.testing
from rma_shell.testing import agentcore
from rma_shell.testing.agentcore import (
    CONTROL_SERVICE,
    AgentCoreEmulator,
    ControlPlane,
    HarnessView,
    error_once,
    text_turn,
    throttle_once,
)

ROLE = "arn:aws:iam::123456789012:role/harness_role"
SID = "rma-session-0123456789abcdef0123456789"
TOKEN = "rma-token-0123456789abcdef0123456789"


def emulator(lifecycle: MockClock, **kwargs: Any) -> AgentCoreEmulator:
    kwargs.setdefault("ready_after_s", 10.0)
    kwargs.setdefault("endpoint_ready_after_s", 30.0)
    kwargs.setdefault("delete_after_s", 8.0)
    return AgentCoreEmulator(lifecycle_clock=lambda: lifecycle.current_time(), **kwargs)


def session(emu: AgentCoreEmulator, **kwargs: Any) -> boto3.session.Session:
    return boto3.session.Session(
        aws_access_key_id=kwargs.pop("aws_access_key_id", emu.access_key_id),
        aws_secret_access_key=kwargs.pop("aws_secret_access_key", emu.secret_access_key),
        region_name=emu.region,
    )


def control(emu: AgentCoreEmulator, *, attempts: int = 1, **kwargs: Any) -> Any:
    config = Config(retries={"total_max_attempts": attempts}, read_timeout=10, connect_timeout=5)
    return session(emu, **kwargs).client(CONTROL_SERVICE, endpoint_url=emu.base_url, config=config)


def data(emu: AgentCoreEmulator) -> Any:
    config = Config(retries={"total_max_attempts": 1}, read_timeout=10, connect_timeout=5)
    return session(emu).client("bedrock-agentcore", endpoint_url=emu.base_url, config=config)


def create(sdk: Any, name: str, **body: Any) -> dict[str, Any]:
    harness: dict[str, Any] = sdk.create_harness(harnessName=name, executionRoleArn=ROLE, **body)["harness"]
    return harness


def status(sdk: Any, harness_id: str) -> str:
    value: str = sdk.get_harness(harnessId=harness_id)["harness"]["status"]
    return value


def endpoint_status(sdk: Any, harness_id: str, name: str = "DEFAULT") -> str | None:
    try:
        value: str = sdk.get_harness_endpoint(harnessId=harness_id, endpointName=name)["endpoint"]["status"]
    except botocore.exceptions.ClientError as error:
        assert error.response["Error"]["Code"] == "ResourceNotFoundException"
        assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 404
        return None
    return value


def code(error: pytest.ExceptionInfo[botocore.exceptions.ClientError]) -> str:
    value: str = error.value.response["Error"]["Code"]
    return value


def listed(sdk: Any) -> dict[str, str]:
    """name -> status over the complete (paginated) listing."""
    pages = sdk.get_paginator("list_harnesses").paginate()
    return {h["harnessName"]: h["status"] for page in pages for h in page["harnesses"]}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"text": text}]}


def signed(
    emu: AgentCoreEmulator,
    method: str,
    path: str,
    body: bytes = b"",
    *,
    secret: str | None = None,
    sign: bool = True,
) -> httpx.Response:
    """A request signed by botocore's SigV4Auth (service bedrock-agentcore), sent by httpx."""
    url = f"{emu.base_url}{path}"
    headers = {"Content-Type": "application/json"} if body else {}
    request = AWSRequest(method=method, url=url, data=body, headers=headers)
    if sign:
        credentials = Credentials(emu.access_key_id, secret or emu.secret_access_key)
        SigV4Auth(credentials, "bedrock-agentcore", emu.region).add_auth(request)
    return httpx.request(method, url, content=body, headers=dict(request.headers.items()))


# -- Lifecycle on the injected clock ----------------------------------------------------------


def test_a_created_harness_is_creating_until_ready_after_s_on_the_injected_clock() -> None:
    clock = MockClock()
    with emulator(clock, ready_after_s=12.0) as emu:
        sdk = control(emu)
        reply = sdk.create_harness(harnessName="billing_support", executionRoleArn=ROLE)
        harness = reply["harness"]
        seen = []
        while (current := status(sdk, harness["harnessId"])) != "READY":
            seen.append((clock.current_time(), current))
            clock.jump(5)
        polls = emu.control.count("GetHarness", harness_id=harness["harnessId"])
        ready_at = clock.current_time()
    assert reply["ResponseMetadata"]["HTTPStatusCode"] == 201
    assert harness["status"] == "CREATING" and harness["harnessName"] == "billing_support"
    assert harness["harnessId"].startswith("billing_support-") and len(harness["harnessId"]) == 26
    assert (
        harness["arn"] == f"arn:aws:bedrock-agentcore:us-east-1:123456789012:harness/{harness['harnessId']}"
    )
    runtime = harness["environment"]["agentCoreRuntimeEnvironment"]
    assert runtime["agentRuntimeArn"] == (
        f"arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/{runtime['agentRuntimeId']}"
    )
    assert runtime["lifecycleConfiguration"] == {"idleRuntimeSessionTimeout": 900, "maxLifetime": 28800}
    assert seen == [(0.0, "CREATING"), (5.0, "CREATING"), (10.0, "CREATING")]
    assert ready_at == 15.0 and polls == 4


def test_the_default_endpoint_is_absent_then_creating_then_ready() -> None:
    clock = MockClock()
    with emulator(clock, ready_after_s=10, endpoint_appear_after_s=5, endpoint_ready_after_s=30) as emu:
        sdk = control(emu)
        harness_id = create(sdk, "canary")["harnessId"]
        timeline = []
        for at in (0, 9, 10, 14, 15, 39, 40):
            clock.jump(at - clock.current_time())
            timeline.append((at, status(sdk, harness_id), endpoint_status(sdk, harness_id)))
        endpoint = sdk.get_harness_endpoint(harnessId=harness_id, endpointName="DEFAULT")["endpoint"]
        unknown = endpoint_status(sdk, harness_id, "nightly")
        polls = emu.control.count("GetHarnessEndpoint", endpoint_name="DEFAULT")
        not_found = emu.control.count("GetHarnessEndpoint", endpoint_name="DEFAULT", http_status=404)
    assert timeline == [
        (0, "CREATING", None),
        (9, "CREATING", None),
        (10, "READY", None),
        (14, "READY", None),
        (15, "READY", "CREATING"),
        (39, "READY", "CREATING"),
        (40, "READY", "READY"),
    ]
    assert (
        endpoint["arn"]
        == f"arn:aws:bedrock-agentcore:us-east-1:123456789012:harness/{harness_id}/harness-endpoint/DEFAULT"
    )
    assert endpoint["liveVersion"] == endpoint["targetVersion"] == "1"
    assert (endpoint["updatedAt"] - endpoint["createdAt"]).total_seconds() == 25.0
    assert unknown is None
    assert (polls, not_found) == (8, 4)


async def test_a_poll_loop_on_trios_autojump_clock_needs_no_real_sleep(autojump_clock: MockClock) -> None:
    with emulator(autojump_clock, ready_after_s=11, endpoint_ready_after_s=151) as emu:
        sdk = await anyio.to_thread.run_sync(control, emu)
        harness = await anyio.to_thread.run_sync(create, sdk, "autojump")
        started = anyio.current_time()
        for poll in (status, endpoint_status):
            for _ in range(100):
                if await anyio.to_thread.run_sync(poll, sdk, harness["harnessId"]) == "READY":
                    break
                await anyio.sleep(5)
        waited = anyio.current_time() - started
    assert waited == 165.0
    assert emu.control.count("GetHarness") == 4
    assert emu.control.count("GetHarnessEndpoint") == 31


# -- Listing ----------------------------------------------------------------------------------


def test_listings_page_with_opaque_tokens_and_boto3_paginates_them() -> None:
    clock = MockClock()
    with emulator(clock, page_size=2) as emu:
        sdk = control(emu)
        ids = [create(sdk, f"fleet_{i}")["harnessId"] for i in range(6)]
        pages = list(sdk.get_paginator("list_harnesses").paginate())
        small = list(sdk.get_paginator("list_harnesses").paginate(PaginationConfig={"PageSize": 1}))
        first = sdk.list_harnesses(maxResults=100)
        sdk.delete_harness(harnessId=ids[2])
        clock.jump(60)
        after_delete = sdk.list_harnesses(nextToken=first["nextToken"])
        with pytest.raises(botocore.exceptions.ClientError) as bogus:
            sdk.list_harnesses(nextToken="not-a-token-we-issued")
    names = [[h["harnessName"] for h in page["harnesses"]] for page in pages]
    assert names == [
        ["emulated_harness", "fleet_0"],
        ["fleet_1", "fleet_2"],
        ["fleet_3", "fleet_4"],
        ["fleet_5"],
    ]
    assert [p.get("nextToken") is not None for p in pages] == [True, True, True, False]
    assert len({p["nextToken"] for p in pages[:-1]}) == 3
    assert len(small) == 7 and all(len(p["harnesses"]) == 1 for p in small)
    assert len(first["harnesses"]) == 2  # page_size caps maxResults
    assert [h["harnessName"] for h in after_delete["harnesses"]] == ["fleet_1", "fleet_3"]
    assert code(bogus) == "ValidationException"
    assert bogus.value.response["fieldList"][0]["name"] == "nextToken"


def test_the_constructors_harness_is_listed_ready_with_its_endpoints() -> None:
    clock = MockClock()
    with emulator(clock, endpoints=("DEFAULT", "canary")) as emu:
        sdk = control(emu)
        got = sdk.get_harness(harnessId=emu.harness_id)["harness"]
        endpoints = sdk.list_harness_endpoints(harnessId=emu.harness_id)["endpoints"]
    assert got["status"] == "READY" and got["arn"] == emu.harness_arn
    assert got["environment"]["agentCoreRuntimeEnvironment"]["agentRuntimeArn"] == emu.runtime_arn
    assert [(e["endpointName"], e["status"]) for e in endpoints] == [
        ("DEFAULT", "READY"),
        ("canary", "READY"),
    ]


# -- Conflicts and deletion -------------------------------------------------------------------


def test_creating_a_taken_name_is_a_409_in_every_status_including_deleting() -> None:
    clock = MockClock()
    with emulator(clock, ready_after_s=10, delete_after_s=20) as emu:
        emu.control.script_harness("broken", create="CREATE_FAILED")
        sdk = control(emu)
        first = create(sdk, "taken")
        create(sdk, "broken")
        statuses = []
        for move in (0, 10, None):
            if move is None:
                sdk.delete_harness(harnessId=first["harnessId"])
            else:
                clock.jump(move)
            with pytest.raises(botocore.exceptions.ClientError) as again:
                create(sdk, "taken")
            statuses.append((status(sdk, first["harnessId"]), code(again)))
        with pytest.raises(botocore.exceptions.ClientError) as failed:
            create(sdk, "broken")
        clock.jump(20)
        recreated = create(sdk, "taken")
    assert statuses == [
        ("CREATING", "ConflictException"),
        ("READY", "ConflictException"),
        ("DELETING", "ConflictException"),
    ]
    assert again.value.response["ResponseMetadata"]["HTTPStatusCode"] == 409
    assert "DELETING" in again.value.response["Error"]["Message"]
    assert code(failed) == "ConflictException"
    assert recreated["harnessId"] != first["harnessId"]


def test_a_deletion_is_accepted_then_deleting_then_gone() -> None:
    clock = MockClock()
    with emulator(clock, ready_after_s=1, endpoint_ready_after_s=1, delete_after_s=8) as emu:
        sdk = control(emu)
        harness_id = create(sdk, "short_lived")["harnessId"]
        clock.jump(5)
        accepted = sdk.delete_harness(harnessId=harness_id, deleteManagedMemory=False)
        during = (status(sdk, harness_id), endpoint_status(sdk, harness_id), listed(sdk).get("short_lived"))
        view = emu.control.harness("short_lived")
        with pytest.raises(botocore.exceptions.ClientError) as twice:
            sdk.delete_harness(harnessId=harness_id)
        clock.jump(8)
        with pytest.raises(botocore.exceptions.ClientError) as gone:
            sdk.get_harness(harnessId=harness_id)
        with pytest.raises(botocore.exceptions.ClientError) as gone_delete:
            sdk.delete_harness(harnessId=harness_id)
        after = listed(sdk)
        query = next(r.path for r in emu.requests if r.method == "DELETE")
    assert accepted["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert accepted["harness"]["status"] == "DELETING"
    assert during == ("DELETING", "DELETING", "DELETING")
    assert (
        isinstance(view, HarnessView) and view.delete_managed_memory is False and view.deleting_since == 5.0
    )
    assert code(twice) == "ConflictException"
    assert code(gone) == code(gone_delete) == "ResourceNotFoundException"
    assert gone.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    assert "short_lived" not in after and "emulated_harness" in after
    assert emu.control.deleted == (harness_id,) and emu.control.harness(harness_id) is None
    assert "deleteManagedMemory=false" in query and "clientToken=" in query


def test_a_scripted_delete_failed_stays_listed_until_deleted_again() -> None:
    clock = MockClock()
    with emulator(clock, ready_after_s=0, delete_after_s=4) as emu:
        sdk = control(emu)
        harness_id = create(sdk, "sticky")["harnessId"]
        emu.control.script_harness("sticky", delete="DELETE_FAILED", failure_reason="ENI still attached")
        sdk.delete_harness(harnessId=harness_id)
        clock.jump(4)
        failed = sdk.get_harness(harnessId=harness_id)["harness"]
        clock.jump(100)
        still = listed(sdk).get("sticky")
        with pytest.raises(botocore.exceptions.ClientError) as conflict:
            create(sdk, "sticky")
        emu.control.script_harness("sticky")
        sdk.delete_harness(harnessId=harness_id)
        clock.jump(4)
        final = listed(sdk).get("sticky")
    assert failed["status"] == "DELETE_FAILED" and failed["failureReason"] == "ENI still attached"
    assert still == "DELETE_FAILED" and code(conflict) == "ConflictException"
    assert final is None


# -- Scripted outcomes ------------------------------------------------------------------------


def test_scripted_creations_can_fail_stay_creating_or_show_an_unknown_status() -> None:
    clock = MockClock()
    with emulator(clock, ready_after_s=10) as emu:
        emu.control.script_harness("fails", create="CREATE_FAILED", failure_reason="role cannot be assumed")
        emu.control.script_harness("stuck", create="CREATING")
        emu.control.script_harness("odd", create="MIGRATING", ready_after_s=3)
        emu.control.script_harness("slow", ready_after_s=math.inf)
        sdk = control(emu)
        ids = {name: create(sdk, name)["harnessId"] for name in ("fails", "stuck", "odd", "slow")}
        clock.jump(3)
        early = {name: status(sdk, harness_id) for name, harness_id in ids.items()}
        clock.jump(10_000)
        late = {name: sdk.get_harness(harnessId=harness_id)["harness"] for name, harness_id in ids.items()}
        endpoints = {name: endpoint_status(sdk, harness_id) for name, harness_id in ids.items()}
    assert early == {"fails": "CREATING", "stuck": "CREATING", "odd": "MIGRATING", "slow": "CREATING"}
    assert {name: h["status"] for name, h in late.items()} == {
        "fails": "CREATE_FAILED",
        "stuck": "CREATING",
        "odd": "MIGRATING",
        "slow": "CREATING",
    }
    assert late["fails"]["failureReason"] == "role cannot be assumed"
    assert "failureReason" not in late["stuck"]
    assert set(endpoints.values()) == {None}


def test_a_scripted_endpoint_can_fail_stay_creating_or_never_appear() -> None:
    clock = MockClock()
    with emulator(clock, ready_after_s=5, endpoint_ready_after_s=20) as emu:
        emu.control.script_harness("ep_fails", endpoint="CREATE_FAILED")
        emu.control.script_harness("ep_stuck", endpoint="CREATING")
        emu.control.script_harness("ep_absent", endpoint_appear_after_s=math.inf)
        sdk = control(emu)
        ids = {name: create(sdk, name)["harnessId"] for name in ("ep_fails", "ep_stuck", "ep_absent")}
        clock.jump(10)
        mid = {name: endpoint_status(sdk, harness_id) for name, harness_id in ids.items()}
        clock.jump(1000)
        end = {name: endpoint_status(sdk, harness_id) for name, harness_id in ids.items()}
        harnesses = {view.name: view.status for view in emu.control.harnesses.values()}
    assert mid == {"ep_fails": "CREATING", "ep_stuck": "CREATING", "ep_absent": None}
    assert end == {"ep_fails": "CREATE_FAILED", "ep_stuck": "CREATING", "ep_absent": None}
    assert harnesses == {
        "emulated_harness": "READY",
        "ep_fails": "READY",
        "ep_stuck": "READY",
        "ep_absent": "READY",
    }


# -- Idempotency ------------------------------------------------------------------------------


def test_a_client_token_replays_the_same_create_and_refuses_a_different_body() -> None:
    clock = MockClock()
    with emulator(clock, ready_after_s=10) as emu:
        sdk = control(emu)
        first = create(sdk, "idem", clientToken=TOKEN)
        clock.jump(10)
        replay = sdk.create_harness(harnessName="idem", executionRoleArn=ROLE, clientToken=TOKEN)
        with pytest.raises(botocore.exceptions.ClientError) as mismatch:
            create(sdk, "idem", clientToken=TOKEN, maxIterations=3)
        with pytest.raises(botocore.exceptions.ClientError) as fresh_token:
            create(sdk, "idem")
        names = [v.name for v in emu.control.harnesses.values()]
        bodies = emu.control.create_bodies
    assert replay["ResponseMetadata"]["HTTPStatusCode"] == 201
    assert replay["harness"]["harnessId"] == first["harnessId"]
    assert replay["harness"]["status"] == "READY"
    assert code(mismatch) == "ValidationException"
    assert mismatch.value.response["reason"] == "IdempotentParameterMismatchException"
    assert code(fresh_token) == "ConflictException"  # botocore fills in a new token itself
    assert names.count("idem") == 1
    assert [b["clientToken"] for b in bodies[:3]] == [TOKEN, TOKEN, TOKEN]
    assert len(bodies[3]["clientToken"]) == 36 and bodies[2]["maxIterations"] == 3


def test_a_throttled_create_is_retried_by_boto3_with_the_same_token_and_makes_one_harness() -> None:
    clock = MockClock()
    faults = [
        throttle_once(operation="CreateHarness"),
        error_once(500, "InternalServerException", operation="GetHarness"),
    ]
    with emulator(clock, faults=faults) as emu:
        sdk = control(emu, attempts=3)
        harness = create(sdk, "retried")
        got = sdk.get_harness(harnessId=harness["harnessId"])["harness"]
        calls = [(c.operation, c.http_status, c.error) for c in emu.control.calls]
        tokens = {b["clientToken"] for b in emu.control.create_bodies}
    assert got["harnessId"] == harness["harnessId"]
    assert calls == [
        ("CreateHarness", 429, "ThrottlingException"),
        ("CreateHarness", 201, None),
        ("GetHarness", 500, "InternalServerException"),
        ("GetHarness", 200, None),
    ]
    assert len(tokens) == 1
    assert [v.name for v in emu.control.harnesses.values()] == ["emulated_harness", "retried"]


# -- Validation (the model is the authority) --------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body", "field", "text"),
    [
        (
            "POST",
            "/harnesses",
            b'{"harnessName": "bad-name", "executionRoleArn": "%s"}',
            "harnessName",
            "pattern",
        ),
        ("POST", "/harnesses", b'{"harnessName": "ok"}', "executionRoleArn", "Member must not be null"),
        (
            "POST",
            "/harnesses",
            b'{"harnessName": "ok", "executionRoleArn": "%s", "systemPrompt": null}',
            "systemPrompt",
            "Member must not be null",
        ),
        (
            "POST",
            "/harnesses",
            b'{"harnessName": "ok", "executionRoleArn": "%s", "systemPrompt": "plain text"}',
            "systemPrompt",
            "Invalid type",
        ),
        (
            "POST",
            "/harnesses",
            b'{"harnessName": "ok", "executionRoleArn": "%s", "environment": {"agentCoreRuntimeEnvironment":'
            b' {"lifecycleConfiguration": {"maxLifetime": 30000}}}}',
            "environment.agentCoreRuntimeEnvironment.lifecycleConfiguration.maxLifetime",
            "less than or equal to 28800",
        ),
        (
            "POST",
            "/harnesses",
            b'{"harnessName": "ok", "executionRoleArn": "%s", "environment": {"agentCoreRuntimeEnvironment":'
            b' {"lifecycleConfiguration": {"idleRuntimeSessionTimeout": 3600, "maxLifetime": 600}}}}',
            "environment.agentCoreRuntimeEnvironment.lifecycleConfiguration.idleRuntimeSessionTimeout",
            "maxLifetime",
        ),
        (
            "POST",
            "/harnesses",
            b'{"harnessName": "ok", "executionRoleArn": "%s", "colour": 1}',
            "input",
            "Unknown",
        ),
        ("GET", "/harnesses?maxResults=0", b"", "maxResults", "greater than or equal to 1"),
        ("GET", "/harnesses/not_an_id", b"", "harnessId", "pattern"),
        ("GET", "/harnesses/ok-AbCdEfGhIj/endpoints/9bad", b"", "endpointName", "pattern"),
        (
            "DELETE",
            "/harnesses/ok-AbCdEfGhIj?deleteManagedMemory=maybe",
            b"",
            "deleteManagedMemory",
            "Invalid type",
        ),
    ],
)
def test_requests_are_validated_against_the_control_model(
    method: str, path: str, body: bytes, field: str, text: str
) -> None:
    with emulator(MockClock()) as emu:
        response = signed(emu, method, path, body.replace(b"%s", ROLE.encode()))
        calls = emu.control.calls
    assert response.status_code == 400
    assert response.headers["x-amzn-ErrorType"] == "ValidationException"
    payload = response.json()
    assert payload["reason"] == "FieldValidationFailed"
    assert field in [f["name"] for f in payload["fieldList"]]
    assert text in payload["message"]
    assert [(c.http_status, c.error) for c in calls] == [(400, "ValidationException")]


def test_a_control_body_that_is_not_json_cannot_be_parsed() -> None:
    with emulator(MockClock()) as emu:
        response = signed(emu, "POST", "/harnesses", b"[1, 2]")
    assert response.status_code == 400 and response.json()["reason"] == "CannotParse"


# -- SigV4 ------------------------------------------------------------------------------------


def test_raw_http_sees_201_json_and_409_with_the_error_type_header() -> None:
    body = b'{"harnessName": "raw", "executionRoleArn": "%s"}' % ROLE.encode()
    with emulator(MockClock()) as emu:
        created = signed(emu, "POST", "/harnesses", body)
        again = signed(emu, "POST", "/harnesses", body)
        missing = signed(emu, "GET", "/harnesses/raw-AbCdEfGhIj")
        unknown = signed(emu, "GET", "/harnesses/raw-AbCdEfGhIj/versions")
    assert created.status_code == 201 and created.headers["Content-Type"] == "application/json"
    assert created.headers["x-amzn-RequestId"] and created.json()["harness"]["status"] == "CREATING"
    assert again.status_code == 409 and again.headers["x-amzn-ErrorType"] == "ConflictException"
    assert set(again.json()) == {"message"}
    assert missing.status_code == 404 and missing.headers["x-amzn-ErrorType"] == "ResourceNotFoundException"
    assert unknown.status_code == 404 and unknown.headers["x-amzn-ErrorType"] == "UnknownOperationException"


def test_control_plane_calls_are_checked_like_the_data_plane() -> None:
    with emulator(MockClock()) as emu:
        unsigned = signed(emu, "GET", "/harnesses", sign=False)
        wrong_secret = signed(emu, "GET", "/harnesses", secret="not-the-secret")
        good = signed(emu, "GET", "/harnesses?maxResults=1")
        with pytest.raises(botocore.exceptions.ClientError) as unknown_key:
            control(emu, aws_access_key_id="AKIDUNKNOWN").list_harnesses()
        scoped_to_control = AWSRequest(method="GET", url=f"{emu.base_url}/harnesses")
        SigV4Auth(
            Credentials(emu.access_key_id, emu.secret_access_key), CONTROL_SERVICE, emu.region
        ).add_auth(scoped_to_control)
        wrong_service = httpx.get(scoped_to_control.url, headers=dict(scoped_to_control.headers.items()))
        calls = len(emu.control.calls)
    assert unsigned.status_code == 403
    assert unsigned.headers["x-amzn-ErrorType"] == "MissingAuthenticationTokenException"
    assert wrong_secret.status_code == 403
    assert wrong_secret.headers["x-amzn-ErrorType"] == "InvalidSignatureException"
    assert good.status_code == 200 and [h["harnessName"] for h in good.json()["harnesses"]] == [
        "emulated_harness"
    ]
    assert "nextToken" not in good.json()
    assert code(unknown_key) == "UnrecognizedClientException"
    assert wrong_service.status_code == 403
    assert "correct service: 'bedrock-agentcore'" in wrong_service.json()["message"]
    assert calls == 1  # only the signed listing reached the control plane


# -- The data plane serves control-plane harnesses --------------------------------------------


def test_a_harness_created_through_the_control_plane_is_invokable_once_its_endpoint_is_ready() -> None:
    clock = MockClock()
    with emulator(
        clock,
        script=[text_turn("Hello from the new harness.")],
        ready_after_s=10,
        endpoint_appear_after_s=5,
        endpoint_ready_after_s=30,
    ) as emu:
        sdk, runtime = control(emu), data(emu)
        harness = create(sdk, "fresh")
        arn = harness["arn"]

        def invoke() -> Any:
            reply = runtime.invoke_harness(harnessArn=arn, runtimeSessionId=SID, messages=[user("hi")])
            return list(reply["stream"])

        outcomes = []
        for at in (0, 10, 20):
            clock.jump(at - clock.current_time())
            with pytest.raises(botocore.exceptions.ClientError) as refused:
                invoke()
            outcomes.append((code(refused), refused.value.response.get("reason")))
        clock.jump(40 - clock.current_time())
        events = invoke()
        runtime_arn = harness["environment"]["agentCoreRuntimeEnvironment"]["agentRuntimeArn"]
        command = runtime.invoke_agent_runtime_command(
            agentRuntimeArn=runtime_arn, runtimeSessionId=SID, body={"command": "echo ok"}
        )
        chunks = [e["chunk"] for e in command["stream"]]
        sdk.delete_harness(harnessId=harness["harnessId"])
        with pytest.raises(botocore.exceptions.ClientError) as deleting:
            invoke()
        clock.jump(60)
        with pytest.raises(botocore.exceptions.ClientError) as gone:
            invoke()
    assert outcomes == [
        ("ValidationException", "ResourceConflict"),  # harness CREATING
        ("ResourceNotFoundException", None),  # harness READY, DEFAULT not there yet
        ("ValidationException", "ResourceConflict"),  # DEFAULT CREATING
    ]
    assert "".join(e["contentBlockDelta"]["delta"]["text"] for e in events if "contentBlockDelta" in e) == (
        "Hello from the new harness."
    )
    assert chunks[-1]["contentStop"] == {"exitCode": 0, "status": "COMPLETED"}
    assert (code(deleting), deleting.value.response["reason"]) == ("ValidationException", "ResourceConflict")
    assert "DELETING" in deleting.value.response["Error"]["Message"]
    assert code(gone) == "ResourceNotFoundException"


def test_the_constructors_harness_can_be_deleted_and_then_serves_no_more() -> None:
    clock = MockClock()
    with emulator(clock, script=[text_turn("x")], delete_after_s=1) as emu:
        control(emu).delete_harness(harnessId=emu.harness_id)
        clock.jump(1)
        with pytest.raises(botocore.exceptions.ClientError) as gone:
            list(
                data(emu).invoke_harness(
                    harnessArn=emu.harness_arn, runtimeSessionId=SID, messages=[user("x")]
                )["stream"]
            )
    assert code(gone) == "ResourceNotFoundException"


# -- Updates and named endpoints --------------------------------------------------------------


def test_an_update_makes_a_new_version_and_default_follows_it() -> None:
    clock = MockClock()
    with emulator(clock, ready_after_s=0, endpoint_ready_after_s=5, update_after_s=3) as emu:
        sdk = control(emu)
        harness_id = create(sdk, "evolving", systemPrompt=[{"text": "v1"}])["harnessId"]
        clock.jump(5)
        updated = sdk.update_harness(
            harnessId=harness_id, systemPrompt=[{"text": "v2"}], memory={"optionalValue": {"disabled": {}}}
        )["harness"]
        with pytest.raises(botocore.exceptions.ClientError) as busy:
            sdk.update_harness(harnessId=harness_id, maxIterations=2)
        default = sdk.get_harness_endpoint(harnessId=harness_id, endpointName="DEFAULT")["endpoint"]
        clock.jump(3)
        harness_ready = (status(sdk, harness_id), endpoint_status(sdk, harness_id))
        clock.jump(5)
        followed = sdk.get_harness_endpoint(harnessId=harness_id, endpointName="DEFAULT")["endpoint"]
        latest = sdk.get_harness(harnessId=harness_id)["harness"]
        first = sdk.get_harness(harnessId=harness_id, harnessVersion="1")["harness"]
    assert updated["status"] == "UPDATING" and updated["harnessVersion"] == "2"
    assert code(busy) == "ConflictException"
    assert (default["status"], default["liveVersion"], default["targetVersion"]) == ("UPDATING", "1", "2")
    assert harness_ready == ("READY", "UPDATING")
    assert (followed["status"], followed["liveVersion"]) == ("READY", "2")
    assert latest["systemPrompt"] == [{"text": "v2"}] and latest["memory"] == {"disabled": {}}
    assert first["systemPrompt"] == [{"text": "v1"}] and "memory" not in first


def test_named_endpoints_are_created_listed_and_deleted() -> None:
    clock = MockClock()
    with emulator(
        clock,
        script=[text_turn("canary")],
        ready_after_s=0,
        endpoint_ready_after_s=4,
        delete_after_s=2,
        page_size=1,
    ) as emu:
        sdk = control(emu)
        harness = create(sdk, "with_canary")
        harness_id = harness["harnessId"]
        created = sdk.create_harness_endpoint(
            harnessId=harness_id, endpointName="canary", description="pinned"
        )

        def invoke() -> list[Any]:
            reply = data(emu).invoke_harness(
                harnessArn=harness["arn"], qualifier="canary", runtimeSessionId=SID, messages=[user("hi")]
            )
            return list(reply["stream"])

        with pytest.raises(botocore.exceptions.ClientError) as not_ready:
            invoke()
        with pytest.raises(botocore.exceptions.ClientError) as duplicate:
            sdk.create_harness_endpoint(harnessId=harness_id, endpointName="canary")
        with pytest.raises(botocore.exceptions.ClientError) as default:
            sdk.create_harness_endpoint(harnessId=harness_id, endpointName="DEFAULT")
        clock.jump(4)
        served = invoke()
        pages = list(sdk.get_paginator("list_harness_endpoints").paginate(harnessId=harness_id))
        with pytest.raises(botocore.exceptions.ClientError) as default_delete:
            sdk.delete_harness_endpoint(harnessId=harness_id, endpointName="DEFAULT")
        deleted = sdk.delete_harness_endpoint(harnessId=harness_id, endpointName="canary")["endpoint"]
        clock.jump(2)
        after = endpoint_status(sdk, harness_id, "canary")
    assert created["ResponseMetadata"]["HTTPStatusCode"] == 201
    assert created["endpoint"]["status"] == "CREATING" and created["endpoint"]["description"] == "pinned"
    assert created["endpoint"]["arn"].endswith(f"harness/{harness_id}/harness-endpoint/canary")
    assert code(duplicate) == code(default) == code(default_delete) == "ConflictException"
    assert [[(e["endpointName"], e["status"]) for e in p["endpoints"]] for p in pages] == [
        [("DEFAULT", "READY")],
        [("canary", "READY")],
    ]
    assert deleted["status"] == "DELETING" and after is None
    assert not_ready.value.response["reason"] == "ResourceConflict" and "'canary'" in str(not_ready.value)
    assert any("contentBlockDelta" in e for e in served)


# -- Shapes and helpers -----------------------------------------------------------------------


def test_every_answer_matches_the_models_output_shape() -> None:
    model = botocore.session.get_session().get_service_model(CONTROL_SERVICE)
    clock = MockClock()
    with emulator(clock, ready_after_s=0, endpoint_ready_after_s=0) as emu:
        emu.control.script_harness("failing", create="CREATE_FAILED")
        sdk = control(emu)
        full = {
            "model": {"bedrockModelConfig": {"modelId": "us.anthropic.claude-sonnet-4-6", "maxTokens": 512}},
            "systemPrompt": [{"text": "Be brief."}],
            "tools": [
                {
                    "type": "inline_function",
                    "name": "lookup_customer",
                    "config": {"inlineFunction": {"description": "d", "inputSchema": {"type": "object"}}},
                }
            ],
            "environment": {
                "agentCoreRuntimeEnvironment": {
                    "lifecycleConfiguration": {"idleRuntimeSessionTimeout": 600, "maxLifetime": 3600},
                    "filesystemConfigurations": [{"sessionStorage": {"mountPath": "/mnt/data"}}],
                }
            },
            "environmentVariables": {"MODE": "test"},
            "timeoutSeconds": 300,
            "tags": {"team": "rma"},
        }
        harness_id = create(sdk, "shaped", **full)["harnessId"]
        create(sdk, "failing")
        clock.jump(1)
        answers = {
            "GetHarness": sdk.get_harness(harnessId=harness_id),
            "ListHarnesses": sdk.list_harnesses(),
            "CreateHarnessEndpoint": sdk.create_harness_endpoint(harnessId=harness_id, endpointName="pinned"),
            "GetHarnessEndpoint": sdk.get_harness_endpoint(harnessId=harness_id, endpointName="DEFAULT"),
            "ListHarnessEndpoints": sdk.list_harness_endpoints(harnessId=harness_id),
            "DeleteHarnessEndpoint": sdk.delete_harness_endpoint(harnessId=harness_id, endpointName="pinned"),
            "UpdateHarness": sdk.update_harness(harnessId=harness_id, maxTokens=100),
            "DeleteHarness": sdk.delete_harness(harnessId=harness_id),
        }
        failing_view = emu.control.harness("failing")
        assert failing_view is not None
        failing = sdk.get_harness(harnessId=failing_view.id)
    for operation, answer in [*answers.items(), ("GetHarness", failing)]:
        answer = {k: v for k, v in answer.items() if k != "ResponseMetadata"}
        report = ParamValidator().validate(answer, model.operation_model(operation).output_shape)
        assert not report.has_errors(), (operation, report.generate_report())
    got = answers["GetHarness"]["harness"]
    assert got["model"] == full["model"] and got["tools"] == full["tools"]
    runtime = got["environment"]["agentCoreRuntimeEnvironment"]
    assert runtime["lifecycleConfiguration"] == {"idleRuntimeSessionTimeout": 600, "maxLifetime": 3600}
    assert runtime["filesystemConfigurations"] == [{"sessionStorage": {"mountPath": "/mnt/data"}}]
    assert runtime["networkConfiguration"] == {"networkMode": "PUBLIC"}
    assert got["environmentVariables"] == {"MODE": "test"} and "tags" not in got
    assert failing["harness"]["status"] == "CREATE_FAILED" and failing["harness"]["failureReason"]


def test_timestamps_follow_the_lifecycle_clock_from_the_signing_clocks_reading(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = MockClock()
    wall = datetime(2026, 8, 1, 12, 0, 0, tzinfo=UTC)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: wall.replace(tzinfo=None))
    with emulator(clock, ready_after_s=7, clock=lambda: wall) as emu:
        sdk = control(emu)
        harness_id = create(sdk, "stamped")["harnessId"]
        clock.jump(9)
        got = sdk.get_harness(harnessId=harness_id)["harness"]
    assert got["createdAt"].astimezone(UTC) == wall
    assert (got["updatedAt"] - got["createdAt"]).total_seconds() == 7.0


def test_helpers_expose_harnesses_calls_and_scripts() -> None:
    clock = MockClock()
    with emulator(clock, ready_after_s=2) as emu:
        seeded = emu.control.add_harness("someone_elses", model={"bedrockModelConfig": {"modelId": "m"}})
        with pytest.raises(ValueError, match="exists"):
            emu.control.add_harness("someone_elses")
        with pytest.raises(ValueError, match="non-negative"):
            emu.control.script_harness("x", ready_after_s=-1)
        with pytest.raises(ValueError, match="invalid harness name"):
            emu.control.add_harness("bad-name")
        sdk = control(emu)
        with pytest.raises(botocore.exceptions.ClientError):
            create(sdk, "someone_elses")
        status(sdk, seeded.id)
        clock.jump(2)
        status(sdk, seeded.id)
        views = emu.control.harnesses
    assert isinstance(emu.control, ControlPlane)
    assert seeded.status == "CREATING" and seeded.config["model"] == {"bedrockModelConfig": {"modelId": "m"}}
    assert {v.name: v.status for v in views.values()} == {
        "emulated_harness": "READY",
        "someone_elses": "READY",
    }
    assert views[seeded.id].endpoints == {"DEFAULT": "CREATING"}
    assert emu.control.count("GetHarness", harness_id=seeded.id) == 2
    assert emu.control.count("GetHarness", status="READY") == 1
    assert [c.at for c in emu.control.calls] == [0.0, 0.0, 2.0]
    assert len(emu.requests) == 3 and emu.requests[0].method == "POST"


def test_credentials_env_points_both_boto3_clients_at_the_emulator(monkeypatch: pytest.MonkeyPatch) -> None:
    with emulator(MockClock()) as emu:
        for name, value in emu.credentials_env().items():
            monkeypatch.setenv(name, value)
        listing = boto3.session.Session().client(CONTROL_SERVICE).list_harnesses()
    assert [h["harnessId"] for h in listing["harnesses"]] == [emu.harness_id]


def test_the_control_plane_is_exported_under_rma_shell_testing_agentcore() -> None:
    assert agentcore.ControlPlane is ControlPlane and agentcore.HarnessView is HarnessView
    assert rma_shell.testing.ControlPlane is ControlPlane and rma_shell.testing.HarnessView is HarnessView
