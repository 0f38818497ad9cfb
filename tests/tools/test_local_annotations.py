"""``@tool`` on a function whose annotations name types local to another function, under
``from __future__ import annotations`` (issue #26): resolved where the decorator was applied, or
refused with a message saying how to fix it — never a bare NameError."""

from __future__ import annotations

import pydantic
import pytest

from rma_shell.tools import tool


def test_a_type_defined_before_the_tool_in_the_same_function_is_resolved() -> None:
    class Point(pydantic.BaseModel):
        x: int
        y: int

    @tool
    def norm(p: Point) -> int:
        """Manhattan norm."""
        return abs(p.x) + abs(p.y)

    assert norm.input_schema["properties"]["p"] == {"$ref": "#/$defs/Point"}
    assert norm.validate({"p": {"x": 1, "y": -2}}).unwrap() == {"p": Point(x=1, y=-2)}


def make_tool() -> object:
    @tool
    def late(p: Later) -> int:  # type: ignore[name-defined]  # noqa: F821 - defined after, on purpose
        """Uses a type defined after the decorator ran."""
        return 0

    return late


def test_a_type_the_decorator_cannot_see_is_refused_with_how_to_fix_it() -> None:
    with pytest.raises(
        TypeError, match=r"tool late: the annotation 'Later' names a type .* Define the type at module level"
    ):
        make_tool()
