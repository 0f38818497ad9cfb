"""Pydantic AI's side of ``bench/temporal_peers.py``: its workflow, as its documentation shows
(``pydantic_ai.durable_exec.temporal``: ``TemporalAgent`` runs the model request and each
function tool as activities)."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from _temporal_peers_pydantic_agent import temporal_agent


@workflow.defn(name="PydanticWorkflow")
class PydanticWorkflow:
    @workflow.run
    async def run(self, prompt: str) -> str:
        result = await temporal_agent.run(prompt)
        return str(result.output)
