"""Budgets on Claude Managed Agents: validated the way the API validates them, before any request,
and an unconfirmed budget's session cleaned up within a total deadline (S-72, S-73; issue #12 item 3)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from rma.errors import BudgetNotConfirmed, InvalidOpts, Timeout
from rma.vocabulary import Budget
from rma_shell import run
from rma_shell.testing import CMAEmulator, cma, status_once, text_turn
from tests.providers.test_cma_session import KEY, Tools, setup


def _session_creates(emu: CMAEmulator) -> list[Any]:
    return [q for q in emu.requests if q.method == "POST" and q.path == "/v1/sessions"]


@pytest.mark.parametrize(
    ("budget", "field"),
    [
        ({"max_list_cost": 1.0}, "budget.max_list_cost"),
        ({"max_list_cost": "12.5"}, "budget.max_list_cost"),
        ({"max_list_cost": "1e3"}, "budget.max_list_cost"),
        ({"max_list_cost": "-5"}, "budget.max_list_cost"),
        ({"max_list_cost": "0"}, "budget.max_list_cost"),
        ({"max_list_cost": 0}, "budget.max_list_cost"),
        ({"max_list_cost": " 25"}, "budget.max_list_cost"),
        ({"max_list_cost": "٢٥"}, "budget.max_list_cost"),  # Unicode digits are not the API's digits
        ({"max_list_cost": True}, "budget.max_list_cost"),
        ({"max_list_cost": "2500", "currency": "EUR"}, "budget.currency"),
        ({"max_list_cost": 2500, "currency": "usd"}, "budget.currency"),
        ({"max_list_cost": "25", "cap": 1}, "budget"),
        ({"currency": "USD"}, "budget"),
    ],
)
async def test_S72_a_budget_the_API_would_refuse_is_invalid_opts_naming_the_field_and_nothing_is_sent(
    budget: dict[str, Any], field: str
) -> None:
    with CMAEmulator([text_turn("x")], api_key=KEY) as emu:
        provider = setup(emu)
        try:
            outcome = await run(provider, handler=Tools(), prompt="go", budget=budget)
        finally:
            await provider.close()
        creates = _session_creates(emu)
    error = outcome.failure()
    assert isinstance(error, InvalidOpts) and error.option == field, error
    assert creates == []


@pytest.mark.parametrize("value", [1.0, "12.5", "1e3", "0", -1, "EUR"])
def test_S72_a_Budget_value_the_API_would_refuse_cannot_be_built(value: object) -> None:
    with pytest.raises(ValueError, match=r"budget\.(max_list_cost|currency)"):
        if value == "EUR":
            Budget("100", currency="EUR")
        else:
            Budget(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(("given", "wire"), [(2500, "2500"), ("2500", "2500"), ("0100", "100")])
async def test_S72_whole_cents_reach_the_wire_as_the_digit_string_the_API_takes(
    given: object, wire: str
) -> None:
    with CMAEmulator([text_turn("capped")], api_key=KEY) as emu:
        provider = setup(emu)
        try:
            outcome = await run(provider, handler=Tools(), prompt="go", budget={"max_list_cost": given})
        finally:
            await provider.close()
        (create,) = _session_creates(emu)
    assert outcome.unwrap().text == "capped"
    assert create.body["budget"] == {"type": "limit", "max_list_cost": {"amount": wire, "currency": "USD"}}


async def test_S73_an_unconfirmed_budget_names_its_session_and_says_it_was_deleted() -> None:
    with CMAEmulator([text_turn("x")], api_key=KEY, faults=[cma.budget_not_echoed()]) as emu:
        provider = setup(emu)
        try:
            outcome = await run(provider, handler=Tools(), prompt="go", budget=Budget(25))
        finally:
            await provider.close()
        remaining = emu.session_ids
        posted = [q for q in emu.requests if q.method == "POST" and q.path.endswith("/events")]
        deleted = [q.path for q in emu.requests if q.method == "DELETE"]
    error = outcome.failure()
    assert isinstance(error, BudgetNotConfirmed)
    assert error.requested == {"type": "limit", "max_list_cost": {"amount": "25", "currency": "USD"}}
    assert error.confirmed is None
    assert error.session_id is not None and deleted == [f"/v1/sessions/{error.session_id}"]
    assert error.cleanup == "deleted" and error.cleanup_error is None
    assert remaining == [] and posted == []
    assert error.session_id in error.message and "deleted" in error.message


async def test_S73_a_failed_cleanup_says_which_error_it_failed_with() -> None:
    faults = [cma.budget_not_echoed(), status_once(403, method="DELETE", message="no delete for you")]
    with CMAEmulator([text_turn("x")], api_key=KEY, faults=faults) as emu:
        provider = setup(emu)
        try:
            outcome = await run(provider, handler=Tools(), prompt="go", budget=Budget(25))
        finally:
            await provider.close()
        remaining = emu.session_ids
    error = outcome.failure()
    assert isinstance(error, BudgetNotConfirmed) and error.cleanup == "failed"
    assert remaining == [error.session_id]
    assert error.cleanup_error is not None and getattr(error.cleanup_error, "status", None) == 403
    assert "no delete for you" in error.message


async def test_S73_the_cleanup_has_a_total_deadline_that_a_trickling_server_cannot_stretch() -> None:
    # 4096 bytes at one per 50 ms: ~200 s to answer, never silent long enough for a read timeout.
    faults = [cma.budget_not_echoed(), cma.trickle(method="DELETE", interval=0.05)]
    with CMAEmulator([text_turn("x")], api_key=KEY, faults=faults) as emu:
        provider = setup(emu, cleanup_timeout=0.5)
        try:
            started = time.monotonic()
            outcome = await run(provider, handler=Tools(), prompt="go", budget=Budget(25), timeout=60)
            elapsed = time.monotonic() - started
        finally:
            await provider.close()
    error = outcome.failure()
    assert isinstance(error, BudgetNotConfirmed) and error.cleanup == "timed_out"
    assert error.cleanup_error == Timeout(timeout_s=0.5, operation="delete_session")
    assert elapsed < 30, elapsed  # the trickle takes ~200 s; the cleanup deadline is 0.5 s


def test_S73_the_cleanup_deadline_defaults_to_five_seconds() -> None:
    from rma_shell.providers.claude import ClaudeManagedAgents

    assert ClaudeManagedAgents(env={}).cleanup_timeout == 5.0
