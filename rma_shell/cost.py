"""Cost: token usage priced per model, and a turn guard that caps a run's spending in currency.

    from rma_shell.cost import price, spending_cap
    price(result.usage, "gpt-4o")                  # Price(amount=Decimal('0.0035'), ...) or None
    Agent(..., turn_guard=spending_cap("0.50", model="gpt-4o"))   # or run(..., turn_guard=)

Prices come from a maintained table — the ``genai-prices`` package (``pip install
"rma-agents[cost]"``; its bundled snapshot, never fetched at run time) — or from ``rates=``,
your own per-million-token figures, which win for the models they name (a local model, a
negotiated price). Where the host reports a figure of its own — Claude Managed Agents'
``session.usage`` snapshot carries the session's ``list_cost`` — ``reported(result)`` reads it
(the whole session's, so far; ``price`` prices the request's usage). List prices either way,
not an invoice. What this is not: a billing system, or a fetcher of price updates.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

import attrs

from rma.providers.claude.codec import usage_snapshot
from rma.session.options import CONTINUE, Halt
from rma.vocabulary import SessionResult, Usage

CACHE_APART = frozenset({"claude_managed_agents", "bedrock_agentcore"})
"""Hosts whose ``input_tokens`` leave out cached tokens (Anthropic's and Bedrock's usage
shape); Local's (OpenAI's ``prompt_tokens``) include them."""

TABLE_PROVIDERS = {"claude_managed_agents": "anthropic", "bedrock_agentcore": "aws"}
"""The price table's provider for a host whose models only one provider serves. Local speaks
to any OpenAI-compatible server, so its model id alone is matched."""

MILLION = Decimal(1_000_000)


def _input_rate(value: object) -> Decimal:
    return _decimal(value, "rates.input")


def _output_rate(value: object) -> Decimal:
    return _decimal(value, "rates.output")


def _cache_read_rate(value: object) -> Decimal | None:
    return None if value is None else _decimal(value, "rates.cache_read")


def _cache_write_rate(value: object) -> Decimal | None:
    return None if value is None else _decimal(value, "rates.cache_write")


@attrs.frozen
class Rates:
    """Your own prices, per million tokens, in ``currency``. Cache reads and writes cost the
    input rate unless given."""

    input: Decimal = attrs.field(converter=_input_rate)
    output: Decimal = attrs.field(converter=_output_rate)
    cache_read: Decimal | None = attrs.field(default=None, converter=_cache_read_rate)
    cache_write: Decimal | None = attrs.field(default=None, converter=_cache_write_rate)
    currency: str = "USD"


@attrs.frozen
class Price:
    """What a usage cost: ``amount`` in ``currency``, of which ``input`` (cache reads and
    writes included) and ``output``; ``model``/``provider`` as the table named them;
    ``source``: ``"genai-prices"``, ``"rates"``, or ``"host"`` (``reported``: the whole amount
    in ``input``, the host does not split it, and ``model`` empty)."""

    amount: Decimal
    input: Decimal
    output: Decimal
    currency: str
    model: str
    provider: str | None
    source: str


def host_name(host: object) -> str | None:
    """A host's name (``"local"``, ``"claude_managed_agents"``, ``"bedrock_agentcore"``) from a
    host object or the name itself; None when unknown."""
    if host is None or isinstance(host, str):
        return host
    name = getattr(getattr(host, "codec", None), "name", None)
    return name if isinstance(name, str) else None


def inclusive_input_tokens(usage: Usage, host: object = None) -> int:
    """Input tokens counting cache reads and writes in, whatever the host's own convention
    (what OpenTelemetry, AG-UI and the price table count)."""
    if host_name(host) in CACHE_APART:
        return usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens
    return usage.input_tokens


def price(
    usage: Usage,
    model: str,
    *,
    host: object = None,
    provider: str | None = None,
    rates: Mapping[str, Rates] | None = None,
) -> Price | None:
    """What ``usage`` cost on ``model``, or None when no price is known for it.

    ``host``: the host object (or its name) the usage came from, which says whether its input
    count includes cached tokens and which provider serves its models; ``provider``: the
    table's provider id, to choose among providers serving one model id (``"openai"``,
    ``"anthropic"``, ``"aws"``, …). ``rates`` (model → ``Rates``) is consulted first.
    """
    if not isinstance(model, str) or not model:
        raise ValueError(f"model: must be a non-empty string, got {model!r}")
    if not isinstance(usage, Usage):
        raise TypeError(f"usage: must be rma.vocabulary.Usage, got {type(usage).__name__}")
    name = host_name(host)
    total_in = inclusive_input_tokens(usage, name)
    own = (rates or {}).get(model)
    if own is not None:
        cached = usage.cache_read_input_tokens * (own.cache_read if own.cache_read is not None else own.input)
        written = usage.cache_creation_input_tokens * (
            own.cache_write if own.cache_write is not None else own.input
        )
        plain = (total_in - usage.cache_read_input_tokens - usage.cache_creation_input_tokens) * own.input
        inp = (plain + cached + written) / MILLION
        out = usage.output_tokens * own.output / MILLION
        return Price(inp + out, inp, out, own.currency, model, provider, "rates")
    return _from_table(usage, total_in, model, provider or TABLE_PROVIDERS.get(name or ""))


def _from_table(usage: Usage, total_in: int, model: str, provider: str | None) -> Price | None:
    try:
        import genai_prices
    except ImportError:
        raise ImportError(
            'pricing from the maintained table needs genai-prices: pip install "rma-agents[cost]" '
            "(or give rates= for your models)"
        ) from None
    counts = {
        "input_tokens": total_in,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_input_tokens,
        "cache_write_tokens": usage.cache_creation_input_tokens,
    }
    try:
        calc = genai_prices.calc_price(
            genai_prices.Usage(**{k: v for k, v in counts.items() if v}),
            model_ref=model,
            provider_id=provider,
        )
    except LookupError:
        return None
    return Price(
        calc.total_price,
        calc.input_price,
        calc.output_price,
        "USD",  # the table's prices are in US dollars
        calc.model.id,
        calc.provider.id,
        "genai-prices",
    )


def reported(result: SessionResult) -> Price | None:
    """The cost the host itself reported for the session ``result`` belongs to, or None: Claude
    Managed Agents' latest ``session.usage`` ``list_cost`` (cumulative over the session, in
    the currency's minor units on the wire — cents — here in units)."""
    snapshot = usage_snapshot(result.events)
    cost = snapshot.get("list_cost") if isinstance(snapshot, Mapping) else None
    if not isinstance(cost, Mapping):
        return None
    amount, currency = cost.get("amount"), cost.get("currency")
    if not isinstance(amount, str | int) or isinstance(amount, bool) or not isinstance(currency, str):
        return None
    try:
        units = Decimal(amount) / 100  # USD, the only currency the API takes: cents
    except InvalidOperation:
        return None
    return Price(units, units, Decimal(0), currency, "", "anthropic", "host")


def spending_cap(
    limit: Decimal | str | int | float,
    *,
    model: str,
    currency: str = "USD",
    host: object = None,
    provider: str | None = None,
    rates: Mapping[str, Rates] | None = None,
) -> Callable[[Mapping[str, Any]], Any]:
    """A ``turn_guard`` that halts the request once its usage so far costs ``limit`` or more
    (``Halted`` with reason ``{"spending_cap": limit, "spent": amount, "currency": …}``).

    Checked after each turn, on the request's accumulated usage — so the turn that crosses the
    cap has run; what it stops is the next one. The model must have a known price (else
    ``ValueError`` naming ``model``), in ``currency``."""
    cap = _decimal(limit, "limit")
    if cap <= 0:
        raise ValueError(f"limit: must be a positive amount, got {limit!r}")
    known = price(Usage(), model, host=host, provider=provider, rates=rates)
    if known is None:
        raise ValueError(f"model: no price known for {model!r} (give rates={{{model!r}: Rates(...)}})")
    if known.currency != currency:
        raise ValueError(f"currency: {model!r} is priced in {known.currency}, not {currency}")

    def guard(payload: Mapping[str, Any]) -> Any:
        usage = payload.get("usage")
        spent = price(usage, model, host=host, provider=provider, rates=rates) if usage else None
        if spent is not None and spent.amount >= cap:
            return Halt({"spending_cap": str(cap), "spent": str(spent.amount), "currency": currency})
        return CONTINUE

    return guard


def _decimal(value: object, field: str) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, Decimal | str | int | float):
        raise ValueError(f"{field}: must be an amount (Decimal, str, int or float), got {value!r}")
    try:
        amount = Decimal(str(value)) if isinstance(value, float) else Decimal(value)
    except InvalidOperation:
        raise ValueError(f"{field}: not an amount: {value!r}") from None
    if not amount.is_finite() or amount < 0:
        raise ValueError(f"{field}: must be a finite, non-negative amount, got {value!r}")
    return amount


def label(model: str, *, rates: Mapping[str, Rates] | None = None) -> Callable[[str, Usage], str | None]:
    """A display of what a usage cost on ``model`` — ``"$0.0123"``, ``"0.0123 EUR"`` — or None
    where no price is known: the inspector's cost seam (``rma inspect --model``,
    ``rma_shell.inspect.app(journal, price=label("gpt-4.1"))``), given the host's name and a
    usage."""
    if not isinstance(model, str) or not model:
        raise ValueError(f"model: must be a non-empty string, got {model!r}")

    def shown(host: str, usage: Usage) -> str | None:
        cost = price(usage, model, host=host or None, rates=rates)
        if cost is None:
            return None
        return f"${cost.amount:.4f}" if cost.currency == "USD" else f"{cost.amount:.4f} {cost.currency}"

    return shown
