"""``@tool``: schemas from type hints and docstrings, strict validation, injected parameters,
serialised returns (issue #14, tools from functions)."""

from __future__ import annotations

import dataclasses
import enum
from typing import Literal

import pydantic
import pytest
from returns.result import Failure, Success
from typing_extensions import TypedDict

from rma.vocabulary import SessionInfo
from rma_shell.tools import ToolCall, serialise, strict_schema, tool


class Plan(enum.Enum):
    FREE = "free"
    PRO = "pro"


class Address(pydantic.BaseModel):
    city: str
    zip: str | None = None


@dataclasses.dataclass
class Window:
    days: int


class Tag(TypedDict):
    key: str
    value: str


@tool
def find_customers(
    city: str,
    plan: Plan,
    address: Address,
    window: Window,
    tags: list[Tag],
    limit: int = 10,
    sort: Literal["name", "age"] = "name",
    note: str | None = None,
    info: SessionInfo | None = None,
) -> list[str]:
    """Find customers of a plan.

    Searches the CRM.

    Args:
        city: the city to search
        plan: which plan they are on
        limit: at most this many
    """
    return [city]


def test_the_name_description_and_parameter_descriptions_come_from_the_function() -> None:
    spec = find_customers.spec
    assert spec.name == "find_customers"
    assert spec.description == "Find customers of a plan.\n\nSearches the CRM."
    props = spec.input_schema["properties"]
    assert isinstance(props, dict)
    assert props["city"]["description"] == "the city to search"
    assert props["limit"]["description"] == "at most this many"
    assert props["limit"]["default"] == 10


def test_the_schema_covers_nested_models_enums_literals_optionals_and_defaults() -> None:
    schema = find_customers.spec.input_schema
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert sorted(schema["required"]) == ["address", "city", "plan", "tags", "window"]  # type: ignore[arg-type]
    defs = schema["$defs"]
    assert isinstance(defs, dict)
    assert defs["Plan"]["enum"] == ["free", "pro"]
    assert set(defs["Address"]["properties"]) == {"city", "zip"}
    assert set(defs["Window"]["properties"]) == {"days"}
    assert set(defs["Tag"]["properties"]) == {"key", "value"}
    props = schema["properties"]
    assert isinstance(props, dict)
    assert props["sort"]["enum"] == ["name", "age"]


def test_parameters_asking_for_session_info_or_the_call_are_never_shown_to_the_model() -> None:
    @tool
    def whoami(call: ToolCall, info: SessionInfo, greeting: str = "hi") -> str:
        return f"{greeting} {info.session_id} {call.name}"

    assert set(whoami.spec.input_schema["properties"]) == {"greeting"}  # type: ignore[arg-type]
    # ``SessionInfo | None`` is injected too (a function callable without rma keeps its default).
    assert "info" not in find_customers.spec.input_schema["properties"]  # type: ignore[operator]
    assert find_customers.injected == {"info": "info"}


def test_a_number_sent_as_a_string_is_refused_with_the_field_named() -> None:
    @tool
    def add(a: float, b: float) -> float:
        return a + b

    got = add.validate({"a": "2", "b": 3})
    assert isinstance(got, Failure)
    assert got.failure() == 'invalid arguments for add:\n- a: Input should be a valid number (got "2")'
    assert add.validate({"a": 2, "b": 3.5}) == Success({"a": 2.0, "b": 3.5})


def test_every_bad_field_is_named_missing_and_unexpected_ones_included() -> None:
    got = find_customers.validate({"city": 5, "plan": "gold", "extra": 1})
    assert isinstance(got, Failure)
    text = got.failure()
    assert text.startswith("invalid arguments for find_customers:\n")
    for line in (
        "- city: Input should be a valid string (got 5)",
        "- plan:",
        "- address: Field required",
        "- extra: Extra inputs are not permitted",
    ):
        assert line in text


def test_valid_arguments_arrive_as_their_declared_types() -> None:
    got = find_customers.validate(
        {
            "city": "Oslo",
            "plan": "pro",
            "address": {"city": "Oslo"},
            "window": {"days": 3},
            "tags": [{"key": "k", "value": "v"}],
        }
    ).unwrap()
    assert got["plan"] is Plan.PRO
    assert got["address"] == Address(city="Oslo") and got["window"] == Window(days=3)
    assert got["limit"] == 10 and got["sort"] == "name" and got["note"] is None


def test_the_decorated_function_is_still_callable() -> None:
    @tool(name="sum_two", timeout=2.5)
    def add(a: int, b: int) -> int:
        return a + b

    assert add(2, 3) == 5 and add.name == "sum_two" and add.timeout == 2.5


def test_a_signature_that_cannot_be_declared_is_refused_when_decorated() -> None:
    with pytest.raises(TypeError, match=r"\*\*kw"):

        @tool
        def bad(**kw: int) -> None: ...

    with pytest.raises(ValueError, match="timeout"):
        tool(timeout=0)(lambda: None)


def test_strict_schemas_require_every_property_and_make_optional_ones_nullable() -> None:
    @tool(strict=True)
    def search(q: str, limit: int = 5) -> str:
        return q

    schema = search.spec.input_schema
    assert search.spec.strict is True
    assert schema["required"] == ["q", "limit"] and schema["additionalProperties"] is False
    assert schema["properties"]["limit"] == {
        "anyOf": [{"type": "integer", "title": "Limit"}, {"type": "null"}]
    }  # type: ignore[index]
    nested = strict_schema(
        {"type": "object", "properties": {"o": {"type": "object", "properties": {"x": {}}}}}
    )
    assert nested["properties"]["o"]["anyOf"][0]["additionalProperties"] is False  # type: ignore[index]


def test_returns_are_serialised_for_the_model() -> None:
    assert serialise("plain") == "plain"
    assert serialise({"a": [1, 2]}) == '{"a":[1,2]}'
    assert serialise(Address(city="Oslo")) == '{"city":"Oslo","zip":null}'
    assert serialise(Window(days=2)) == '{"days":2}'
    assert serialise(Plan.PRO) == '"pro"'
    assert serialise(Failure("nope")) == Failure("nope")
    bad = serialise(object())
    assert isinstance(bad, Failure) and "object, which cannot be serialised to JSON" in bad.failure()


def test_repeatable_reaches_the_declaration_rma_reads_and_defaults_to_off() -> None:
    @tool(repeatable=True)
    def now() -> str:
        """The time."""
        return "12:00"

    @tool
    def weather(city: str) -> str:
        """Weather."""
        return city

    assert now.repeatable and now.spec.repeatable
    assert not weather.repeatable and not weather.spec.repeatable


async def test_a_repeatable_tool_runs_each_identical_call_on_local() -> None:
    from rma_shell import run
    from rma_shell.providers.local import Local
    from rma_shell.testing import OpenAIEmulator
    from rma_shell.tools import Toolbox

    ran: list[str] = []

    @tool(repeatable=True)
    def now() -> str:
        """The time."""
        ran.append("now")
        return f"12:0{len(ran)}"

    script = [
        {"tool_calls": [{"id": "a", "name": "now", "arguments": {}}]},
        {"tool_calls": [{"id": "b", "name": "now", "arguments": {}}]},
        {"content": "done"},
    ]
    with OpenAIEmulator(script) as emu:
        box = Toolbox(now)
        outcome = await run(
            Local(base_url=emu.base_url, model="m", tools=box.tools()), handler=box, prompt="t?"
        )
        last = emu.requests[-1].body["messages"]
    assert outcome.unwrap().text == "done"
    assert ran == ["now", "now"]
    assert [m["content"] for m in last if m["role"] == "tool"] == ["12:01", "12:02"]
