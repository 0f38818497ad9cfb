"""The recording format: JSONL lines sealed in a digest chain, and its check. Pure.

A recording (``run(..., record=...)``, ``rma demo --record``) is one JSON object per line:

- ``header`` — ``format`` and the session's ``config``;
- ``event`` — one per input event, in the order the core saw it;
- ``transcript`` — after each successful result, the provider's transcript;
- ``result`` — after each result the session reported, the SHA-256 of its JSON encoding;
- ``end`` — the last line, written when the run or session is over: ``outcome`` holds what
  the run returned when the core did not produce it (a failure at open — then ``at`` is
  ``"open"`` — or a crash), ``stopped`` names what ended it early (``KeyboardInterrupt``,
  ``cancelled``).

Format 2 seals every line onto a chain: its last member is ``"chain":"<hex>"``, the SHA-256
of the previous line's chain value, a newline, and the line's own text without that member
(the first line chains onto ``GENESIS``). So an edited line breaks its own digest, a moved or
deleted line breaks the next one, and a cut-off log has no ``end`` line: ``check`` reports
which. Format-1 logs (no chain, no ``result`` or ``end`` lines) are still read, unchecked.

Every line is valid UTF-8 JSON: a value that cannot be encoded as UTF-8 (a lone surrogate in a
model's reply) is written with ASCII escapes instead, which decode to the same value.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

import attrs
from returns.result import Failure, Result, Success

from rma.codec_json import dumps, plain_dumps, to_jsonable
from rma.errors import SessionError

FORMAT = 2
GENESIS = "rma-recording"
"""The chain value the first line is sealed onto."""

_SEAL = re.compile(r'(\{.*),"chain":"([0-9a-f]{64})"\}', re.DOTALL)


@attrs.frozen
class DamagedLog(SessionError):
    """A recording that is not what was written: ``line`` (1-based, 0 for the whole log) says where."""

    kind: ClassVar[str] = "damaged_log"
    line: int = 0
    detail: str = ""

    @property
    def message(self) -> str:
        where = f"line {self.line}: " if self.line else ""
        return f"{where}{self.detail}"


def encode(value: Any) -> str:
    """``dumps(value)``, with ASCII escapes when the text would not encode as UTF-8."""
    return _utf8(dumps(value), lambda: to_jsonable(value))


def encode_plain(value: Any) -> str:
    """``plain_dumps(value)`` (untagged JSON: a snapshot), with ASCII escapes when the text would
    not encode as UTF-8."""
    return _utf8(plain_dumps(value), lambda: value)


def _utf8(text: str, jsonable: Callable[[], Any]) -> str:
    """``text``, or when it would not encode as UTF-8 (a lone surrogate) the same JSON with
    ASCII escapes, which decode to the same str."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(jsonable(), ensure_ascii=True, separators=(",", ":"))
    return text


def _digest(previous: str, body: str) -> str:
    data = previous.encode("ascii") + b"\n" + body.encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest()


def seal(previous: str, body: str) -> tuple[str, str]:
    """The line for a JSON object text ``body`` chained onto ``previous``, and its chain value."""
    digest = _digest(previous, body)
    return body[:-1] + ',"chain":"' + digest + '"}', digest


def header_body(config_json: str) -> str:
    return '{"kind":"header","format":' + str(FORMAT) + ',"config":' + config_json + "}"


def event_body(event_json: str) -> str:
    return '{"kind":"event","event":' + event_json + "}"


def transcript_body(transcript_json: str) -> str:
    return '{"kind":"transcript","transcript":' + transcript_json + "}"


def result_digest(outcome_json: str) -> str:
    """The SHA-256 a ``result`` line stores for an encoded result."""
    return hashlib.sha256(outcome_json.encode("utf-8", "surrogatepass")).hexdigest()


def result_body(outcome_json: str) -> str:
    return '{"kind":"result","digest":"' + result_digest(outcome_json) + '"}'


def end_body(outcome_json: str | None = None, stopped: str | None = None, at: str | None = None) -> str:
    parts = ['"kind":"end"']
    if outcome_json is not None:
        parts.append('"outcome":' + outcome_json)
    if at is not None:
        parts.append('"at":' + json.dumps(at))
    if stopped is not None:
        parts.append('"stopped":' + json.dumps(stopped))
    return "{" + ",".join(parts) + "}"


@attrs.frozen
class Checked:
    """A log's records (parsed lines, in order, with their line numbers) and whether it was sealed."""

    records: tuple[tuple[int, dict[str, Any]], ...]
    sealed: bool
    complete: bool = True
    """False for a log checked with ``partial=True`` that was cut short (it has no end record)."""


def _parse(n: int, text: str) -> Result[dict[str, Any], SessionError]:
    try:
        record = json.loads(text)
    except ValueError as exc:
        return Failure(DamagedLog(n, f"not JSON ({exc})"))
    if not isinstance(record, dict) or not isinstance(record.get("kind"), str):
        return Failure(DamagedLog(n, "not a recording line (no kind)"))
    return Success(record)


def check(lines: Iterable[str], *, partial: bool = False) -> Result[Checked, SessionError]:
    """Parse a recording and verify its chain: edited, moved, deleted or cut-off lines fail.

    ``partial`` accepts a log that was cut short (a process that died while recording): an
    incomplete last line is dropped and the end record may be missing. Every line that is
    there is still checked."""
    numbered = [(n, line) for n, line in enumerate(lines, 1) if line.strip()]
    if not numbered:
        return Failure(DamagedLog(0, "the log is empty (no header line)"))
    first_n, first = numbered[0]
    head = _SEAL.fullmatch(first)
    parsed = _parse(first_n, head.group(1) + "}" if head else first)
    if isinstance(parsed, Failure):
        return Failure(parsed.failure())
    header = parsed.unwrap()
    if header.get("kind") != "header":
        return Failure(DamagedLog(first_n, "the log has no header line (its first line was removed?)"))
    if head is None:
        if header.get("format", 1) != 1:
            return Failure(DamagedLog(first_n, "the header's digest is missing (the line was edited)"))
        return _unsealed(numbered)
    return _sealed(numbered, partial)


def _unsealed(numbered: Sequence[tuple[int, str]]) -> Result[Checked, SessionError]:
    records = []
    for n, line in numbered:
        parsed = _parse(n, line)
        if isinstance(parsed, Failure):
            return Failure(parsed.failure())
        records.append((n, parsed.unwrap()))
    return Success(Checked(tuple(records), sealed=False))


def _sealed(numbered: Sequence[tuple[int, str]], partial: bool) -> Result[Checked, SessionError]:
    matches = [(n, _SEAL.fullmatch(line)) for n, line in numbered]
    if partial and len(matches) > 1 and matches[-1][1] is None:
        matches.pop()  # the line the process was writing when it died
    previous = GENESIS
    records = []
    for index, (n, match) in enumerate(matches):
        if match is None:
            if index == len(matches) - 1:
                return Failure(DamagedLog(n, "the log is truncated: its last line is incomplete"))
            return Failure(DamagedLog(n, "the line has no digest (it was edited or added by hand)"))
        body, chain = match.group(1) + "}", match.group(2)
        if _digest(previous, body) != chain:
            return Failure(_mismatch(n, body, chain, matches))
        parsed = _parse(n, body)
        if isinstance(parsed, Failure):
            return Failure(parsed.failure())
        record = parsed.unwrap()
        if index and record.get("kind") == "header":
            return Failure(DamagedLog(n, "a second header: two recordings were joined"))
        records.append((n, record))
        previous = chain
    last_n, last = records[-1]
    if last.get("kind") != "end":
        if partial:
            return Success(Checked(tuple(records), sealed=True, complete=False))
        return Failure(
            DamagedLog(
                0,
                f"the log is truncated: it ends at line {last_n} without its end record "
                "(the file was cut short, or the recording process died)",
            )
        )
    ends = [n for n, record in records if record.get("kind") == "end"]
    if len(ends) > 1:
        return Failure(DamagedLog(ends[1], "lines follow the end record"))
    return Success(Checked(tuple(records), sealed=True))


def _mismatch(
    n: int, body: str, chain: str, matches: Sequence[tuple[int, re.Match[str] | None]]
) -> DamagedLog:
    """Tell an edited line (its own digest is wrong) from a moved one (it chains onto another)."""
    candidates = [GENESIS, *(m.group(2) for _, m in matches if m is not None)]
    if any(_digest(p, body) == chain for p in candidates):
        return DamagedLog(n, "the line is out of place: lines before it were removed or reordered")
    return DamagedLog(
        n, "the line does not match its digest: it was edited, or the line before it was removed"
    )
