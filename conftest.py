"""Test wiring: every async test runs on both anyio backends; virtual-time tests on trio.

anyio's pytest plugin runs in auto mode (pyproject), so a plain ``async def test_...`` is
collected and run once on trio and once on asyncio. A test that asks for ``autojump_clock``
or ``mock_clock`` runs on trio only, with trio's ``MockClock`` as the run's clock (trio is the
reference backend and the only one with virtual time). ``@pytest.mark.trio_only`` pins any
other test to trio when it inspects trio internals.

Hypothesis runs under the ``rma`` profile: no per-example ``deadline`` and no ``too_slow``
health check, both of which measure wall time and fail a correct property on a busy machine.
A test's own ``@settings(...)`` inherit these unless it sets them.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio.testing
from hypothesis import HealthCheck, settings

settings.register_profile("rma", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("rma")

_VIRTUAL = {"autojump_clock": "trio-autojump", "mock_clock": "trio-mockclock"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "trio_only: run this async test on the trio backend only")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "anyio_backend" not in metafunc.fixturenames:
        return
    virtual = [v for k, v in _VIRTUAL.items() if k in metafunc.fixturenames]
    if virtual:
        params = virtual[:1]
    elif metafunc.definition.get_closest_marker("trio_only"):
        params = ["trio"]
    else:
        params = ["trio", "asyncio"]
    ids = [p.split("-")[0] for p in params]
    metafunc.parametrize("anyio_backend", params, ids=ids, indirect=True)


@pytest.fixture
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    name = getattr(request, "param", "trio")
    if name == "trio-autojump":
        return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})
    if name == "trio-mockclock":
        return ("trio", {"clock": trio.testing.MockClock()})
    return name


@pytest.fixture
def autojump_clock(anyio_backend: Any) -> trio.testing.MockClock:
    clock: trio.testing.MockClock = anyio_backend[1]["clock"]
    return clock


@pytest.fixture
def mock_clock(anyio_backend: Any) -> trio.testing.MockClock:
    clock: trio.testing.MockClock = anyio_backend[1]["clock"]
    return clock
