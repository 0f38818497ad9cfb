"""Standard-library logging: the ``rma`` logger hierarchy, structured fields on records, and
the JSON-lines ``StructuredFormatter`` (issue 6)."""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
import pytest
from returns.result import Success

from rma.errors import ProviderError
from rma_shell import run
from rma_shell.logging import StructuredFormatter, log_fields
from rma_shell.providers.local import Local
from rma_shell.seams import Seams
from rma_shell.testing import OpenAIEmulator, ScriptedProvider, status
from tests.helpers import Recorder, end, idle, tool, usage


def test_the_library_logs_under_rma_with_only_a_null_handler() -> None:
    handlers = logging.getLogger("rma").handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers)
    assert not [h for h in handlers if not isinstance(h, logging.NullHandler)]


def test_log_fields_drop_nones_and_never_clash_with_record_attributes() -> None:
    fields = log_fields({"turn": 2, "message": "x", "name": "y"}, session_id=None, tool="t")
    assert fields == {"turn": 2, "rma_message": "x", "rma_name": "y", "tool": "t"}
    logging.getLogger("rma.test").info("ok", extra=fields)  # logging accepts every key


async def test_session_decisions_carry_session_id_turn_and_provider(caplog: pytest.LogCaptureFixture) -> None:
    batch = [tool("a", "dup"), tool("b", "dup"), usage(1, 1), idle("requires_action")]
    with caplog.at_level(logging.WARNING, logger="rma.session"):
        outcome = await run(ScriptedProvider([batch, end()]), handler=Recorder(), prompt="go")
    assert isinstance(outcome, Success)
    [record] = [r for r in caplog.records if r.name == "rma.session"]
    assert (record.session_id, record.turn, record.provider) == ("sess_scripted", 1, "scripted")  # type: ignore[attr-defined]
    assert record.duplicates == ["dup"]  # type: ignore[attr-defined]


async def test_a_provider_that_fails_to_open_is_logged_with_its_error_kind(
    caplog: pytest.LogCaptureFixture,
) -> None:
    provider = ScriptedProvider(open_error=ProviderError(detail="nope"))
    with caplog.at_level(logging.WARNING, logger="rma.session"):
        await run(provider, handler=Recorder(), prompt="go")
    [record] = [r for r in caplog.records if r.name == "rma.session"]
    assert record.error == "provider_error" and record.provider == "scripted"  # type: ignore[attr-defined]


async def test_a_raising_tool_is_logged_with_tool_call_and_session(caplog: pytest.LogCaptureFixture) -> None:
    def handler(name: str, input: dict[str, Any], ctx: object) -> str:
        raise ValueError("bad")

    from tests.helpers import calls

    with caplog.at_level(logging.WARNING, logger="rma.handler"):
        await run(ScriptedProvider([calls(tool("div", "t1")), end()]), handler=handler, prompt="go")
    [record] = [r for r in caplog.records if r.name == "rma.handler"]
    assert (record.tool, record.tool_use_id, record.session_id) == ("div", "t1", "sess_scripted")  # type: ignore[attr-defined]


async def test_provider_retries_carry_session_attempt_and_status(caplog: pytest.LogCaptureFixture) -> None:
    async def no_sleep(_: float) -> None:
        await anyio.lowlevel.checkpoint()

    with (
        caplog.at_level(logging.WARNING, logger="rma.providers.local"),
        OpenAIEmulator([{"content": "ok"}], faults={0: status(503)}) as emu,
    ):
        provider = Local(
            base_url=emu.base_url,
            model="m",
            _seams=Seams(sleep=no_sleep, rand=lambda: 0.0),
        )
        result = (await run(provider, handler=Recorder(), prompt="go")).unwrap()
    [record] = [r for r in caplog.records if r.name == "rma.providers.local"]
    assert record.session_id == result.session_id  # type: ignore[attr-defined]
    assert (record.attempt, record.status, record.error) == (0, 503, "http_error")  # type: ignore[attr-defined]


def test_structured_formatter_writes_one_json_object_per_record() -> None:
    logger = logging.getLogger("rma.test.formatter")
    record = logger.makeRecord(
        "rma.test.formatter",
        logging.WARNING,
        __file__,
        1,
        "tool %s raised",
        ("x",),
        None,
        extra=log_fields(session_id="s1", turn=3, tool="x", ids=("a", "b")),
    )
    line = StructuredFormatter().format(record)
    assert "\n" not in line
    data = json.loads(line)
    assert data["message"] == "tool x raised" and data["level"] == "WARNING"
    assert data["logger"] == "rma.test.formatter" and data["ts"].endswith("+00:00")
    assert (data["session_id"], data["turn"], data["tool"], data["ids"]) == ("s1", 3, "x", ["a", "b"])
    try:
        raise KeyError("k")
    except KeyError:
        import sys

        record = logger.makeRecord("rma.x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    data = json.loads(StructuredFormatter().format(record))
    assert data["exc_type"] == "KeyError" and "Traceback" in data["exception"]
