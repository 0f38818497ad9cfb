"""rma._unchecked: unchecked builders equal the checked constructors, and refuse a stale field list."""

from __future__ import annotations

import pytest

from rma._unchecked import field_setters, usage_of
from rma.vocabulary import ToolUse, Usage


def test_usage_of_equals_the_checked_usage() -> None:
    built = usage_of(1, 2, 3, 4, ({"input_tokens": 1},))
    assert built == Usage(1, 2, 3, 4, raw=({"input_tokens": 1},))
    assert type(built) is Usage
    assert hash(usage_of(5, 6, 7, 8, ())) == hash(Usage(5, 6, 7, 8))


@pytest.mark.parametrize("names", [("id", "name"), ("name", "id", "input"), ("id", "name", "input", "extra")])
def test_a_field_list_that_is_not_the_class_fields_in_order_is_refused(names: tuple[str, ...]) -> None:
    with pytest.raises(RuntimeError, match="ToolUse's fields"):
        field_setters(ToolUse, *names)
