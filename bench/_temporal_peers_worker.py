"""One worker process of ``bench/temporal_peers.py``: rma's, the OpenAI Agents SDK's or Pydantic AI's.

``python bench/_temporal_peers_worker.py PATH ADDRESS QUEUE BASE_URL`` runs a Temporal worker
for one path (``rma``, ``openai_agents``, ``openai_agents_local``, ``pydantic_ai``) on QUEUE,
its model pointed at the loopback OpenAI emulator at BASE_URL, its one tool ``charge(amount)`` answering
``charged {amount}``. It prints ``ready`` once it polls and runs until killed. rma's workflow is
``rma.session`` (its options come in each ``SessionSpec``: ``local_activities`` …); the peers'
are in ``_temporal_peers_agents.py`` and ``_temporal_peers_pydantic.py``.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

CHARGE = {
    "name": "charge",
    "description": "Charge an amount, once",
    "input_schema": {"type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"]},
}


class Tools:
    def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        return f"charged {input['amount']}"


async def serve(path: str, address: str, queue: str, base_url: str) -> None:
    from temporalio.client import Client
    from temporalio.worker import Worker

    worker: Any
    if path == "rma":
        from rma_shell.providers.local import Local
        from rma_shell.temporal import connect, session_worker

        client = await connect(address)
        provider = Local(base_url=base_url, model="m", tools=[CHARGE])
        worker = session_worker(
            client, task_queue=queue, providers={"local": provider}, handlers={"tools": Tools()}
        )
    elif path.startswith("openai_agents"):
        import _temporal_peers_agents as flows
        from agents.models.openai_provider import OpenAIProvider
        from openai import AsyncOpenAI
        from temporalio.contrib.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin

        plugin = OpenAIAgentsPlugin(
            model_params=ModelActivityParameters(
                start_to_close_timeout=flows.TIMEOUT, use_local_activity=path == "openai_agents_local"
            ),
            model_provider=OpenAIProvider(
                openai_client=AsyncOpenAI(base_url=base_url, api_key="k"), use_responses=False
            ),
        )
        client = await Client.connect(address, plugins=[plugin])
        worker = Worker(client, task_queue=queue, workflows=[flows.AgentsWorkflow], activities=[flows.charge])
    elif path == "pydantic_ai":
        os.environ["RMA_BENCH_BASE_URL"] = base_url
        import _temporal_peers_pydantic as flows
        from _temporal_peers_pydantic_agent import temporal_agent
        from pydantic_ai.durable_exec.temporal import AgentPlugin, PydanticAIPlugin

        client = await Client.connect(address, plugins=[PydanticAIPlugin()])
        worker = Worker(
            client,
            task_queue=queue,
            workflows=[flows.PydanticWorkflow],
            plugins=[AgentPlugin(temporal_agent)],
        )
    else:
        raise SystemExit(f"unknown path {path!r}")
    async with worker:
        print("ready", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(serve(*sys.argv[1:5]))
