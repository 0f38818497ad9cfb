"""rma.provisioning.harness: wait budget, status vocabulary, errors, create body (B-48, B-60…B-67)."""

from __future__ import annotations

import pytest
from returns.result import Failure, Success

from rma.errors import InvalidOpts
from rma.provisioning.harness import (
    DEFAULT_TIMEOUT_S,
    HarnessError,
    HarnessHandle,
    Phase,
    StatusClass,
    WaitBudget,
    WaitContext,
    attempt_share,
    backoff_steps,
    classify,
    create_body,
    tag_for,
)
from rma.provisioning.spec import AgentSpec, EnvironmentSpec

TOOL = {"name": "lookup", "description": "Find", "input_schema": {"type": "object", "properties": {}}}


class TestWaitBudget:
    def test_B62_the_default_budget_is_365_s_at_a_5_s_cadence(self) -> None:
        budget = WaitBudget.start(100.0).unwrap()
        assert budget.deadline_at - 100.0 == DEFAULT_TIMEOUT_S == 365.0
        assert (budget.poll_s, budget.polls_left) == (5.0, 72)

    def test_B61_an_explicit_timeout_derives_the_cadence_and_drops_the_count(self) -> None:
        budget = WaitBudget.start(0.0, timeout=600, max_polls=2).unwrap()
        assert (budget.deadline_at, budget.poll_s, budget.polls_left) == (600.0, 5.0, None)
        assert WaitBudget.start(0.0, timeout=0.6).unwrap().poll_s == 0.05  # clamped to 50 ms
        assert WaitBudget.start(0.0, timeout=12).unwrap().poll_s == 1.0

    def test_B62_a_legacy_count_keeps_the_365_s_floor(self) -> None:
        budget = WaitBudget.start(0.0, poll_interval=0, max_polls=3).unwrap()
        assert budget.deadline_at == 365.0 and budget.polls_left == 3

    @pytest.mark.parametrize(
        ("kwargs", "option"),
        [
            ({"timeout": -1}, "timeout"),
            ({"timeout": float("inf")}, "timeout"),
            ({"timeout": "10"}, "timeout"),
            ({"poll_interval": -0.1}, "poll_interval"),
            ({"max_polls": 1.5}, "max_polls"),
            ({"max_polls": True}, "max_polls"),
        ],
    )
    def test_B60_bad_budget_options_name_themselves(self, kwargs: dict[str, object], option: str) -> None:
        got = WaitBudget.start(0.0, **kwargs)  # type: ignore[arg-type]
        assert isinstance(got, Failure) and got.failure().option == option

    def test_B63_a_poll_needs_a_whole_cadence_before_the_deadline(self) -> None:
        budget = WaitBudget.start(0.0, timeout=10, poll_interval=2).unwrap()
        assert budget.may_poll(7.9) and not budget.may_poll(8.0)
        counted = WaitBudget.start(0.0, poll_interval=1, max_polls=1).unwrap()
        assert counted.may_poll(0.0) and not counted.spend().may_poll(0.0)

    def test_B71_attempt_timeouts_shrink_with_the_budget(self) -> None:
        budget = WaitBudget.start(0.0, timeout=30).unwrap()
        assert 25 < budget.attempt_timeout(600, 1, 1.0) <= 30
        assert 5 < budget.attempt_timeout(600, 3, 1.0) <= 10
        assert budget.attempt_timeout(600, 3, 40.0) == 0.001

    def test_B71_the_attempts_the_client_makes_and_their_backoff_share_the_budget(self) -> None:
        steps = backoff_steps(2, 0.5, 20.0)  # AgentCoreClient's defaults: 3 attempts
        assert steps == (0.5, 1.0)
        budget = WaitBudget.start(0.0, timeout=30).unwrap()
        share = budget.attempt_timeout(600, 0, 0.0, backoff=steps)
        assert 3 * share + sum(steps) == pytest.approx(30)
        # 1 s cannot hold three attempts and 1.5 s of sleeps: planned for two (0.25 + 0.5 + 0.25).
        assert attempt_share(1.0, 600, steps) == pytest.approx(0.25)
        assert attempt_share(0.3, 600, steps) == pytest.approx(0.3)  # one attempt, all of it
        assert attempt_share(300, 10, steps) == 10  # the configured receive timeout still caps it
        assert attempt_share(5, 600, ()) == 5  # a client that never retries


def test_B67_classification_is_total() -> None:
    assert classify("READY") is StatusClass.READY
    assert classify("CREATING") is classify("UPDATING") is StatusClass.CREATING
    assert classify("DELETING") is StatusClass.TERMINATING
    for failed in ("CREATE_FAILED", "UPDATE_FAILED", "DELETE_FAILED"):
        assert classify(failed) is StatusClass.FAILED
    assert classify("PAUSED") is classify(None) is StatusClass.UNKNOWN


def test_B81_every_phase_has_its_own_tags() -> None:
    assert tag_for(Phase.READY, "timeout") == "harness_ready_timeout"
    assert tag_for(Phase.ENDPOINT, "failed") == "endpoint_failed"
    assert tag_for(Phase.DELETED, "timeout") == "harness_still_deleting"
    error = HarnessError(
        tag="endpoint_ready_timeout", context=WaitContext("h-1", Phase.ENDPOINT, "DEFAULT", None, 3.0, 2)
    )
    assert "endpoint=DEFAULT" in error.message and "last status none" in error.message


class TestCreateBody:
    def test_B48_only_what_is_set_and_never_null(self) -> None:
        agent = AgentSpec.create("support").unwrap()
        got = create_body("support_1a2b3c4d", " arn:aws:iam::123456789012:role/r ", agent)
        assert got == Success(
            {"harnessName": "support_1a2b3c4d", "executionRoleArn": "arn:aws:iam::123456789012:role/r"}
        )

    def test_B48_prompt_tools_model_and_environment_verbatim(self) -> None:
        model = {"bedrockModelConfig": {"modelId": "us.anthropic.claude-sonnet-4-6"}}
        agent = AgentSpec.create("s", system_prompt="Be brief", tools=[TOOL], model_config=model).unwrap()
        config = {
            "agentCoreRuntimeEnvironment": {
                "filesystemConfigurations": [{"sessionStorage": {"mountPath": "/mnt/data"}}]
            }
        }
        env = EnvironmentSpec.create(config=config).unwrap()
        body = create_body("s_1", "arn:aws:iam::1:role/r", agent, env, client_token="t" * 40).unwrap()
        assert body["systemPrompt"] == [{"text": "Be brief"}]
        assert body["model"] == model and body["environment"] == config and body["clientToken"] == "t" * 40
        assert body["tools"][0]["type"] == "inline_function"

    def test_B47_a_blank_role_is_refused(self) -> None:
        agent = AgentSpec.create("s").unwrap()
        for role in ("", "   ", None):
            got = create_body("s_1", role, agent)  # type: ignore[arg-type]
            assert isinstance(got, Failure) and got.failure() == InvalidOpts(
                option="execution_role_arn", detail=got.failure().detail
            )


def test_B4_a_handle_reads_like_a_mapping() -> None:
    handle = HarnessHandle(
        "arn:aws:bedrock-agentcore:us-east-1:1:harness/h-AbCdEfGhIj", "h-AbCdEfGhIj", "h", "d" * 64
    )
    assert handle.get("harness_arn") == handle.harness_arn and handle.get("missing") is None


def test_a_bare_model_id_becomes_the_bedrock_model_union() -> None:
    from rma.provisioning.harness import model_union

    assert model_union("us.anthropic.claude-sonnet-4-6") == {
        "bedrockModelConfig": {"modelId": "us.anthropic.claude-sonnet-4-6"}
    }
    assert model_union({"modelId": "m", "maxTokens": 10}) == {
        "bedrockModelConfig": {"modelId": "m", "maxTokens": 10}
    }
    union = {"openAiModelConfig": {"modelId": "gpt", "apiKeyArn": "arn"}}
    assert model_union(union) == union
