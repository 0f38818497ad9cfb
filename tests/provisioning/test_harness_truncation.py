"""AgentCore's context-window setting (issue #26): ``truncation_config`` builds the harness's
``truncation`` member, checked against botocore's ``CreateHarnessRequest`` (the oracle), and
``create_body`` carries it; a setting the model does not have is refused naming the option."""

from __future__ import annotations

from typing import Any

import botocore.session
import pytest
from botocore.validate import ParamValidator

from rma.provisioning import AgentSpec
from rma.provisioning.harness import create_body, truncation_config

ROLE = "arn:aws:iam::123456789012:role/harness"


def shape() -> Any:
    model = botocore.session.get_session().get_service_model("bedrock-agentcore-control")
    return model.operation_model("CreateHarness").input_shape


@pytest.mark.parametrize(
    ("strategy", "options"),
    [
        ("sliding_window", {"messages_count": 40}),
        ("sliding_window", {}),
        (
            "summarization",
            {"summary_ratio": 0.3, "preserve_recent_messages": 6, "summarization_system_prompt": "Be brief."},
        ),
        ("none", {}),
    ],
)
def test_every_strategy_builds_a_body_botocore_accepts(strategy: str, options: dict[str, Any]) -> None:
    truncation = truncation_config(strategy, **options).unwrap()
    spec = AgentSpec.create("a", system_prompt="S", model_config="m").unwrap()
    body = create_body("h", ROLE, spec, truncation=truncation).unwrap()
    assert body["truncation"]["strategy"] == strategy
    report = ParamValidator().validate(body, shape())
    assert not report.has_errors(), report.generate_report()


@pytest.mark.parametrize(
    ("strategy", "options", "says"),
    [
        ("fifo", {}, "strategy must be one of"),
        ("sliding_window", {"messages_count": 0}, "messages_count must be a positive integer"),
        ("sliding_window", {"summary_ratio": 0.5}, "sliding_window takes messages_count only"),
        ("summarization", {"summary_ratio": 1.5}, "summary_ratio must be a number between 0 and 1"),
        ("none", {"messages_count": 3}, "none takes no settings"),
    ],
)
def test_settings_the_model_does_not_have_are_refused(
    strategy: str, options: dict[str, Any], says: str
) -> None:
    error = truncation_config(strategy, **options).failure()
    assert error.option == "truncation" and says in error.detail


def test_a_truncation_not_built_by_the_helper_is_refused() -> None:
    spec = AgentSpec.create("a").unwrap()
    assert create_body("h", ROLE, spec, truncation={"strategy": "all"}).failure().option == "truncation"
