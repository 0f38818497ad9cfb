"""``ToolSpec`` and the ``ToolSource`` protocol: what a toolbox needs from a source of tools.

A ``ToolSpec`` is a declaration in the neutral form every provider's ``tools=`` takes (an
object with ``name``, ``description`` and ``input_schema``; ``strict`` where the host holds
arguments to the schema; ``repeatable`` where identical calls are meant to run again). A
``ToolSource`` is started and stopped as an async context manager (an MCP source connects or
spawns its server there), lists its tools once started, and runs a call. Not a toolbox: it
does not validate, time out or truncate — the toolbox does that for every source alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

import attrs
from returns.result import Result

from rma.content import Document, Image, Part
from rma.vocabulary import JSON

ToolOutput = str | Result[str, str] | Image | Document | list[Part] | Result[list[Part], str]
"""What a call returns: text, ``Success(text)``, or ``Failure(text)`` (an ``is_error`` result);
or a rich result — an ``Image``, a ``Document``, or a list of parts (``rma.content``), bare or
in a ``Success``."""


@attrs.frozen
class ToolSpec:
    """One tool as the loop host sees it. ``input_schema`` is a JSON Schema object."""

    name: str
    description: str
    input_schema: Mapping[str, JSON] = attrs.field(factory=lambda: {"type": "object", "properties": {}})
    strict: bool = False
    repeatable: bool = False
    """Calls may repeat with the same arguments and each runs (a clock, a status poll, a retried
    answer): Local's duplicate-call guard leaves them alone. Never sent on the wire."""


@runtime_checkable
class ToolSource(Protocol):
    """A source of tools. ``tools()`` is valid between ``__aenter__`` and ``__aexit__``."""

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

    def tools(self) -> Sequence[ToolSpec]: ...

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolOutput: ...
