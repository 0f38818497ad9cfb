"""Standard-library logging for rma: the logger hierarchy, structured fields, a JSON formatter.

Every logger the library uses sits under ``rma``:

==================================  ===========================================================
``rma.session``                     loop decisions (reconnects, duplicate tool ids), crashes,
                                    a provider that failed to open
``rma.handler``                     the user's handler: raising tools, observers, confirmations
``rma.telemetry``                   telemetry subscribers that raised and were detached
``rma.telemetry.otel``              the OpenTelemetry bridge (``rma_shell.otel``)
``rma.providers.local.codec``             Local: retried chat calls
``rma.providers.claude.codec``  Claude Managed Agents: retried API calls
==================================  ===========================================================

Records carry structured fields as attributes (``logging``'s ``extra=``), so a formatter or a
filter can read them without parsing messages: ``session_id``, ``provider``, ``turn``,
``tool``, ``tool_use_id``, ``attempt``, ``error`` (an error kind), and whatever else the
message is about (``delay_ms``, ``duplicates``, ``method``, ``path``, ``status`` …). The
library installs no handler beyond a ``NullHandler`` on ``rma``; ``StructuredFormatter``
renders records as JSON lines::

    import logging, sys
    from rma_shell.logging import StructuredFormatter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(StructuredFormatter())
    logging.getLogger("rma").addHandler(handler)
    logging.getLogger("rma").setLevel(logging.INFO)

No record the library writes carries an API key, a bearer token or an AWS secret.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

ROOT_LOGGER = "rma"

# Attributes every LogRecord has: a structured field may not overwrite them.
_RESERVED = frozenset(vars(logging.LogRecord("x", logging.INFO, "", 0, "", (), None))) | {
    "message",
    "asctime",
}


def log_fields(fields: Mapping[str, Any] | None = None, **more: Any) -> dict[str, Any]:
    """Structured fields for ``extra=``: Nones dropped, names that clash with a LogRecord
    attribute prefixed with ``rma_`` (so logging never refuses the record)."""
    out: dict[str, Any] = {}
    for source in (fields or {}, more):
        for key, value in source.items():
            if value is None:
                continue
            out[f"rma_{key}" if key in _RESERVED else key] = value
    return out


class StructuredFormatter(logging.Formatter):
    """One JSON object per record: ``ts``, ``level``, ``logger``, ``message``, the record's
    structured fields, and ``exc_type``/``exception`` when it carries an exception."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RESERVED and not key.startswith("_"):
                out[key] = value
        if record.exc_info and record.exc_info[0] is not None:
            out["exc_type"] = record.exc_info[0].__name__
            out["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, default=_fallback, ensure_ascii=False)


def _fallback(value: object) -> object:
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return repr(value)


logging.getLogger(ROOT_LOGGER).addHandler(logging.NullHandler())
