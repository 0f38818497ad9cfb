"""The OpenAI Agents SDK's side of ``bench/temporal_peers.py``: its workflow, as its documentation
shows (``temporalio.contrib.openai_agents``: the model call an activity through
``OpenAIAgentsPlugin``, the tool ``activity_as_tool``). One tool, ``charge(amount)``."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from agents import Agent, Runner
    from temporalio.contrib.openai_agents import workflow as agents_workflow

TIMEOUT = timedelta(seconds=60)


@activity.defn(name="charge")
async def charge(amount: int) -> str:
    """Charge an amount, once."""
    return f"charged {amount}"


@workflow.defn(name="AgentsWorkflow")
class AgentsWorkflow:
    @workflow.run
    async def run(self, prompt: str) -> str:
        agent = Agent(
            name="bench",
            instructions="Charge what you are asked to.",
            model="m",
            tools=[agents_workflow.activity_as_tool(charge, start_to_close_timeout=TIMEOUT)],
        )
        result = await Runner.run(agent, prompt, max_turns=1000)
        return str(result.final_output)
