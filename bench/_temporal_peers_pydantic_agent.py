"""Pydantic AI's agent for ``bench/temporal_peers.py``, built once at import (outside Temporal's
sandbox: the workflow module imports it passed through) — ``TemporalAgent`` over an ``Agent``
with one function tool, ``charge(amount)``, and the model ``m`` at ``RMA_BENCH_BASE_URL``."""

from __future__ import annotations

import os
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.durable_exec.temporal import TemporalAgent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

_base_url = os.environ.get("RMA_BENCH_BASE_URL", "http://127.0.0.1:9/v1")
_agent: Any = Agent(
    OpenAIChatModel("m", provider=OpenAIProvider(base_url=_base_url, api_key="k")),
    name="bench",
    instructions="Charge what you are asked to.",
)


@_agent.tool_plain(name="charge")
async def charge(amount: int) -> str:
    """Charge an amount, once."""
    return f"charged {amount}"


temporal_agent = TemporalAgent(_agent)
