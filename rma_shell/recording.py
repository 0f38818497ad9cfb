"""The session recorder: writes a session's log (``record=``) in ``rma.recording``'s format.

Recording never changes a run's outcome. What can be checked before the session starts is: a
``record=`` target that is neither a path nor a writable text stream, a path that cannot be
opened for writing, a configuration that is not JSON (``metadata``,
``model_config``) — ``open_recorder`` returns a typed ``InvalidOpts("record", …)`` for each, and
the run does not start. What fails later (a full disk, a stream that raises) stops the
recording, never the run: the recorder logs one warning on ``rma.session`` (``recording
stopped: …``), writes nothing more, and the run's result is the one an unrecorded run would
have returned. Its log then has no end record, which ``rma replay`` reports as truncated.
"""

from __future__ import annotations

import logging
import os
from typing import Any, TextIO

import attrs
from returns.result import Failure, Result, Success

from rma.errors import InvalidOpts, SessionError
from rma.recording import (
    GENESIS,
    encode,
    end_body,
    event_body,
    header_body,
    result_body,
    seal,
    transcript_body,
)
from rma.session.events import Event
from rma.session.options import SessionConfig
from rma.vocabulary import JSON

log = logging.getLogger("rma.session")

Recordable = str | os.PathLike[str] | TextIO | None
"""What ``record=`` takes: a file path (created or truncated) or an open text stream (not closed)."""


class Recorder:
    """Writes one session's log line by line; a write that fails stops the recording, not the run."""

    def __init__(self, file: TextIO, *, own: bool, name: str) -> None:
        self._file: TextIO | None = file
        self._own = own
        self._name = name
        self._chain = GENESIS
        self.failed: str | None = None
        """Why the recording stopped early (None while it is whole)."""

    def _write(self, body: str) -> None:
        if self._file is None:
            return
        line, chain = seal(self._chain, body)
        try:
            self._file.write(line + "\n")
        except Exception as exc:  # a full disk, a closed or raising stream: the run goes on
            self._stop(f"{type(exc).__name__}: {exc}")
            return
        self._chain = chain

    def _stop(self, reason: str) -> None:
        self.failed = reason
        log.warning(
            "recording stopped: %s (the session goes on unrecorded)", reason, extra={"record": self._name}
        )
        self._release()

    def _release(self) -> None:
        file, self._file = self._file, None
        if file is None:
            return
        try:
            file.flush()
            if self._own:
                file.close()
        except Exception as exc:
            if self.failed is None:
                self.failed = f"{type(exc).__name__}: {exc}"
                log.warning("recording stopped: %s", self.failed, extra={"record": self._name})

    def _encoded(self, value: Any) -> str | None:
        try:
            return encode(value)
        except Exception as exc:  # a value with no JSON form (a codec bug): stop, do not crash
            self._stop(f"cannot encode {type(value).__name__}: {exc}")
            return None

    def event(self, ev: Event) -> None:
        if self._file is not None and (text := self._encoded(ev)) is not None:
            self._write(event_body(text))

    def transcript(self, transcript: tuple[JSON, ...] | None) -> None:
        if self._file is not None and (text := self._encoded(transcript)) is not None:
            self._write(transcript_body(text))

    def result(self, outcome: object) -> None:
        """A result the session reported: its digest, so a replay can be checked against it."""
        if self._file is not None and (text := self._encoded(outcome)) is not None:
            self._write(result_body(text))

    def end(self, outcome: object = None, *, stopped: str | None = None, at: str | None = None) -> None:
        """The end record: ``outcome`` when the core did not produce it; ``stopped`` if cut short."""
        if self._file is None:
            return
        text = None if outcome is None else self._encoded(outcome)
        self._write(end_body(text, stopped, at))

    def close(self) -> None:
        self._release()


def _not_json(config: SessionConfig) -> str | None:
    """The first config field (by its option name) that has no JSON form, with why."""
    for field in attrs.fields(SessionConfig):
        if field.name == "codec" or not field.init:
            continue
        try:
            encode(getattr(config, field.name))
        except (TypeError, ValueError) as exc:
            name = field.name
            return f"{name} is not JSON ({exc}); a recording needs JSON values"
    return None


def open_recorder(target: object, config: SessionConfig) -> Result[Recorder, SessionError]:
    """Open ``target`` and write the header; every problem here is ``InvalidOpts('record')``."""
    if isinstance(target, str | os.PathLike):
        path = os.fspath(target)
        if not isinstance(path, str):
            return Failure(InvalidOpts("record", f"expected a str path, got {type(path).__name__}"))
    elif not callable(getattr(target, "write", None)):
        return Failure(
            InvalidOpts(
                "record", f"expected a file path or a writable text stream, got {type(target).__name__}"
            )
        )
    problem = _not_json(config)
    if problem is not None:
        return Failure(InvalidOpts("record", problem))
    header = header_body(encode(config))
    if isinstance(target, str | os.PathLike):
        try:
            file: TextIO = open(path, "w", encoding="utf-8")  # noqa: SIM115 - the recorder closes it
        except OSError as exc:
            return Failure(InvalidOpts("record", f"cannot write {path}: {exc.strerror or exc}"))
        recorder = Recorder(file, own=True, name=path)
    else:
        recorder = Recorder(target, own=False, name=type(target).__name__)  # type: ignore[arg-type]
    recorder._write(header)
    if recorder.failed is not None:
        return Failure(InvalidOpts("record", f"cannot write the recording: {recorder.failed}"))
    return Success(recorder)
