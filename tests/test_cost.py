"""rma_shell.cost: usage priced from the maintained table (genai-prices) or one's own rates,
cache tokens counted in once whatever the host's convention, the host's own reported figure
read, and ``spending_cap`` halting a run whose usage reaches a cap in currency."""

from __future__ import annotations

from decimal import Decimal

import pytest
from returns.result import Failure

from rma.errors import Halted
from rma.vocabulary import SessionResult, Terminal, Usage
from rma_shell import Agent
from rma_shell.cost import Price, Rates, price, reported, spending_cap
from rma_shell.providers.local import Local
from rma_shell.testing import OpenAIEmulator
from rma_shell.testing.local import Turn
from tests.ui.common import lookup_customer

pytest.importorskip("genai_prices", reason="the price table: pip install 'rma-agents[cost]'")


def test_a_known_model_is_priced_from_the_table() -> None:
    got = price(Usage(1_000_000, 1_000_000), "gpt-4o", provider="openai")
    assert got is not None and got.source == "genai-prices" and got.currency == "USD"
    assert got.model == "gpt-4o" and got.provider == "openai"
    assert got.amount == got.input + got.output and got.input > 0 and got.output > got.input


def test_an_unknown_model_has_no_price() -> None:
    assert price(Usage(10, 10), "qwen3:8b") is None


def test_cached_tokens_count_once_whatever_the_hosts_convention() -> None:
    # Local (OpenAI's usage) counts cached tokens inside input_tokens; Claude's and Bedrock's
    # count them apart. The same traffic costs the same.
    local = price(Usage(2000, 10, cache_read_input_tokens=1500), "claude-sonnet-4-5", host="local")
    claude = price(
        Usage(500, 10, cache_read_input_tokens=1500),
        "claude-sonnet-4-5",
        host="claude_managed_agents",
    )
    uncached = price(Usage(2000, 10), "claude-sonnet-4-5", host="local")
    assert local is not None and claude is not None and uncached is not None
    assert local.amount == claude.amount < uncached.amount


def test_own_rates_win_and_price_cache_reads_at_their_rate() -> None:
    rates = {"qwen3:8b": Rates(input="2", output="4", cache_read="1")}
    got = price(Usage(1_000_000, 500_000, cache_read_input_tokens=400_000), "qwen3:8b", rates=rates)
    # input: 600k plain at $2/M + 400k cached at $1/M; output: 500k at $4/M
    assert got == Price(Decimal("3.6"), Decimal("1.6"), Decimal("2"), "USD", "qwen3:8b", None, "rates")


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: price(Usage(), ""), "model"),
        (lambda: Rates(input="cheap", output=1), "rates.input"),
        (lambda: Rates(input=1, output=-1), "rates.output"),
        (lambda: spending_cap("1", model="qwen3:8b"), "model"),
        (lambda: spending_cap(0, model="gpt-4o"), "limit"),
        (lambda: spending_cap("1", model="gpt-4o", currency="EUR"), "currency"),
    ],
)
def test_bad_input_is_a_value_error_naming_the_field(call: object, field: str) -> None:
    with pytest.raises(ValueError, match=rf"^{field}:"):
        call()  # type: ignore[operator]


def test_the_hosts_own_list_cost_is_read_from_its_usage_snapshot() -> None:
    events = (
        {"type": "session.usage", "usage": {"list_cost": {"amount": "120", "currency": "USD"}}},
        {"type": "session.usage", "usage": {"list_cost": {"amount": "250", "currency": "USD"}}},
    )
    got = reported(SessionResult(Terminal.END_TURN, events=events))
    assert got is not None and got.amount == Decimal("2.5") and got.source == "host"
    assert reported(SessionResult(Terminal.END_TURN)) is None


TEN_EACH = {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}
THREE_TURNS = [
    Turn({"tool_calls": [{"name": "lookup_customer", "arguments": {"email": "a@x.com"}}]}, usage=TEN_EACH),
    Turn({"tool_calls": [{"name": "lookup_customer", "arguments": {"email": "b@x.com"}}]}, usage=TEN_EACH),
    Turn({"content": "done"}, usage=TEN_EACH),
]


async def test_a_spending_cap_halts_the_run_once_its_usage_costs_the_cap() -> None:
    # Each turn reports 10 input and 10 output tokens; at $1 an input token a turn
    # costs $10, so a $15 cap lets turn 1 through and halts after turn 2.
    cap = spending_cap("15", model="m", rates={"m": Rates(input=1_000_000, output=0)})
    with OpenAIEmulator(THREE_TURNS) as model:
        host = Local(base_url=model.base_url, model="m")
        outcome = await Agent(tools=[lookup_customer], host=host, turn_guard=cap).run("go")
        await host.close()
        asked = len(model.requests)
    assert isinstance(outcome, Failure) and isinstance(outcome.failure(), Halted)
    assert outcome.failure().reason == {"spending_cap": "15", "spent": "20", "currency": "USD"}
    assert asked == 2
