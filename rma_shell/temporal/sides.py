"""What ``SessionWorkflow`` provides to the mixins it is built from, declared once.

The workflow's side of fused turns (``fusing.FusedTurns``) and of continue-as-new
(``continuing.ContinuesAsNew``) live in their own modules and read the workflow's state and
call its helpers. ``WorkflowSides`` declares those for the type checker, so each mixin names
its base instead of repeating the declarations; at run time it is an empty class.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from returns.result import Result

    from rma.errors import SessionError
    from rma.session.events import Event
    from rma.session.state import State
    from rma.vocabulary import JSON, ToolResult, ToolUse
    from rma_shell.temporal.spec import SessionSpec, Timeouts


class WorkflowSides:
    """The state and helpers of ``SessionWorkflow`` its mixins use (declarations only)."""

    if TYPE_CHECKING:
        _state: State | None
        _spec: SessionSpec
        _spec_json: dict[str, Any]
        _timeouts: Timeouts
        _carried: dict[str, Any] | None
        _continuing: bool
        _fed: int
        _busy: int
        _reporting: int
        _approvals: dict[str, tuple[str, str | None]]
        _inbox: list[Event]
        _ahead: dict[str, Any] | None
        _snap: JSON
        _snap_bytes: int
        _version: int
        _gen: int
        _last_boundary: str | None
        _last_boundary_at: str | None
        _has_transcript: bool
        _fresh: bool
        _results: list[Any]
        _first: int
        _expected: int
        _recorded: dict[str, ToolResult]
        _awaiting: dict[str, dict[str, Any]]
        _confirmed: dict[str, ToolResult]
        _batches: dict[int, dict[str, Any]]
        _key: str | None
        _at_most_once: frozenset[str]
        _final: Result[Any, SessionError] | None

        def _done(self) -> bool: ...
        async def _stop_tasks(self) -> None: ...
        def _post(self, ev: Event) -> None: ...
        def _spawn(self, fn: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None: ...
        def _take_snap(self, out: dict[str, Any]) -> None: ...
        def _stream_read(self, gen: int, events: list[JSON], end: Any) -> None: ...

        async def _activity(
            self,
            name: str,
            fields: dict[str, Any],
            timeout_s: float,
            *,
            attempts: int,
            schedule_to_close_s: float | None = None,
        ) -> dict[str, Any]: ...

        async def _run_tools(
            self,
            batch: int,
            uses: tuple[ToolUse, ...],
            confirmations: tuple[ToolUse, ...],
            verdicts: list[ToolResult] | None = None,
            resumed: bool = False,
        ) -> None: ...
