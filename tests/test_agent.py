"""``Agent``: one configuration, any host — declared to each host by the library, run four ways
(``run``, ``run_or_raise``, ``run_sync``, ``stream``), live, resumed, with its options checked."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from typing import Any

import anyio
import pydantic
import pytest
from returns.result import Failure, Success

from rma.errors import InvalidOpts
from rma.journal import AwaitingApproval
from rma.live import TextDelta, ToolCallFinished, ToolCallStarted
from rma_shell import Agent, RunFinished
from rma_shell.options import InvalidOptions
from rma_shell.providers.agentcore import BedrockAgentCore
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.providers.local import Local
from rma_shell.testing import CMAEmulator, OpenAIEmulator, cma
from rma_shell.testing import agentcore as ace
from rma_shell.testing.agentcore import AgentCoreEmulator
from rma_shell.tools import Toolbox, tool

PROMPT = "What plan is ada@example.com on?"


class Answer(pydantic.BaseModel):
    email: str
    plan: str


@tool
def lookup_customer(email: str) -> str:
    """Find a customer by email.

    Args:
        email: the customer's email address
    """
    return f"{email}: pro"


CALLS: list[tuple[str, dict[str, Any]]] = [
    ("lookup_customer", {"email": "ada@example.com"}),
    ("final_result", {"email": "ada@example.com", "plan": "pro"}),
]


def support_agent(**options: Any) -> Agent:
    return Agent(
        name="support_bot",
        instructions="Answer billing questions.",
        tools=[lookup_customer],
        output_type=Answer,
        **options,
    )


def local_script(runs: int = 1) -> list[Any]:
    one = [{"tool_calls": [{"id": f"c{i}", "name": n, "arguments": a}]} for i, (n, a) in enumerate(CALLS)]
    return [*one, {"content": "Done."}] * runs


def agentcore_script(runs: int = 1) -> list[Any]:
    one = [ace.tool_turn((n, a, f"tooluse_{i}")) for i, (n, a) in enumerate(CALLS)]
    return [*one, ace.text_turn("Done.")] * runs


def claude_script(runs: int = 1) -> list[Any]:
    return [*(cma.tool_turn((n, a)) for n, a in CALLS), cma.text_turn("Done.")] * runs


@contextlib.contextmanager
def hosts(runs: int = 1) -> Iterator[dict[str, Any]]:
    with (
        OpenAIEmulator(local_script(runs)) as openai_emu,
        AgentCoreEmulator(agentcore_script(runs)) as agentcore_emu,
        CMAEmulator(claude_script(runs), api_key="sk-ant-test") as claude_emu,
    ):
        yield {
            "local": (Local(base_url=openai_emu.base_url, model="qwen3:8b"), openai_emu),
            "agentcore": (
                BedrockAgentCore(
                    harness_arn=agentcore_emu.harness_arn,
                    data_url=agentcore_emu.base_url,
                    control_url=agentcore_emu.base_url,
                    env=agentcore_emu.credentials_env(),
                ),
                agentcore_emu,
            ),
            "claude": (
                ClaudeManagedAgents(
                    api_key="sk-ant-test", base_url=claude_emu.base_url, env={}, model="claude-sonnet-4-6"
                ),
                claude_emu,
            ),
        }


def posts(emu: Any, path: str) -> list[Any]:
    return [r for r in emu.requests if r.method == "POST" and r.path.split("?")[0] == path]


# ── one agent, the host one line ──


async def test_one_agent_gives_the_same_typed_answer_on_every_host_with_only_the_host_changed() -> None:
    agent = support_agent()
    with hosts() as by_name:
        for name, (host, _emu) in by_name.items():
            result = await agent.run_or_raise(PROMPT, host=host)
            assert result.output == Answer(email="ada@example.com", plan="pro"), name
            assert "lookup_customer" in [u.name for u in result.custom_tool_uses], name
            await host.close()


async def test_local_requests_carry_the_agents_instructions_and_tools() -> None:
    with OpenAIEmulator(local_script()) as emu:
        host = Local(base_url=emu.base_url, model="qwen3:8b")
        await support_agent().run_or_raise(PROMPT, host=host)
        await host.close()
    body = emu.requests[0].body
    assert body["messages"][0] == {"role": "system", "content": "Answer billing questions."}
    assert [t["function"]["name"] for t in body["tools"]] == ["lookup_customer", "final_result"]
    assert body["model"] == "qwen3:8b"


async def test_an_agents_model_wins_over_the_hosts() -> None:
    with OpenAIEmulator(local_script()) as emu:
        host = Local(base_url=emu.base_url, model="qwen3:8b")
        await support_agent(model="llama3.2:3b").run_or_raise(PROMPT, host=host)
        await host.close()
    assert emu.requests[0].body["model"] == "llama3.2:3b"


async def test_agentcore_gets_the_instructions_and_tools_as_overrides_and_a_fresh_session_per_run() -> None:
    with AgentCoreEmulator(agentcore_script(runs=2)) as emu:
        host = BedrockAgentCore(
            harness_arn=emu.harness_arn,
            data_url=emu.base_url,
            control_url=emu.base_url,
            env=emu.credentials_env(),
        )
        agent = support_agent()
        first = await agent.run_or_raise(PROMPT, host=host)
        second = await agent.run_or_raise(PROMPT, host=host)
        await host.close()
    assert first.session_id != second.session_id
    for sid in (first.session_id, second.session_id):
        assert sid is not None and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{32,99}", sid)
    invoke = next(r for r in emu.requests if r.method == "POST" and "invoke" in r.path)
    assert invoke.body["systemPrompt"] == [{"text": "Answer billing questions."}]
    names = [t.get("inlineFunction", t).get("name") or json.dumps(t) for t in invoke.body["tools"]]
    assert any("lookup_customer" in n for n in names) and any("final_result" in n for n in names)


async def test_agentcore_keeps_a_runtime_session_id_the_run_gives() -> None:
    sid = "rma-given-0123456789abcdef0123456789"
    with AgentCoreEmulator(agentcore_script()) as emu:
        host = BedrockAgentCore(
            harness_arn=emu.harness_arn,
            data_url=emu.base_url,
            control_url=emu.base_url,
            env=emu.credentials_env(),
        )
        result = await support_agent().run_or_raise(PROMPT, host=host, runtime_session_id=sid)
        await host.close()
    assert result.session_id == sid


async def test_claude_provisions_the_agent_once_and_reuses_it_across_runs() -> None:
    with CMAEmulator(claude_script(runs=3), api_key="sk-ant-test") as emu:
        host = ClaudeManagedAgents(
            api_key="sk-ant-test", base_url=emu.base_url, env={}, model="claude-sonnet-4-6"
        )
        agent = support_agent()
        for _ in range(2):
            await agent.run_or_raise(PROMPT, host=host)
        # Another process: a new Agent, its own empty store, the same spec — adopted, not made.
        await support_agent().run_or_raise(PROMPT, host=host)
        await host.close()
    assert len(posts(emu, "/v1/agents")) == 1
    assert len(posts(emu, "/v1/environments")) == 1
    created = posts(emu, "/v1/agents")[0].body
    assert created["system"] == "Answer billing questions."
    assert {t["name"] for t in created["tools"]} >= {"lookup_customer", "final_result"}
    assert created["model"] in ("claude-sonnet-4-6", {"id": "claude-sonnet-4-6"})


async def test_claude_without_a_model_is_invalid_opts_naming_model() -> None:
    with CMAEmulator(claude_script(), api_key="sk-ant-test") as emu:
        host = ClaudeManagedAgents(api_key="sk-ant-test", base_url=emu.base_url, env={})
        outcome = await support_agent().run(PROMPT, host=host)
        await host.close()
    assert isinstance(outcome, Failure) and isinstance(outcome.failure(), InvalidOpts)
    assert outcome.failure().option == "model"
    assert posts(emu, "/v1/agents") == []


# ── run_sync ──


def test_run_sync_runs_without_an_event_loop_and_twice_on_one_host() -> None:
    with CMAEmulator(claude_script(runs=2), api_key="sk-ant-test") as emu:
        host = ClaudeManagedAgents(
            api_key="sk-ant-test", base_url=emu.base_url, env={}, model="claude-sonnet-4-6"
        )
        agent = support_agent(host=host)
        first = agent.run_sync(PROMPT)
        second = agent.run_sync(PROMPT)  # a new loop: the host's connections were closed with the first
    assert isinstance(first, Success) and isinstance(second, Success)
    assert second.unwrap().output == Answer(email="ada@example.com", plan="pro")


def test_run_sync_or_raise_raises_the_session_error() -> None:
    agent = support_agent()
    with pytest.raises(InvalidOpts, match="host"):
        agent.run_sync_or_raise(PROMPT)


async def test_run_sync_inside_a_running_loop_says_to_await_run() -> None:
    with pytest.raises(RuntimeError, match=r"await agent\.run"):
        support_agent().run_sync(PROMPT)


# ── stream and live sessions ──


async def test_stream_yields_the_runs_updates_then_its_result_and_ends() -> None:
    with OpenAIEmulator(local_script()) as emu:
        host = Local(base_url=emu.base_url, model="qwen3:8b", stream=True)
        seen: list[Any] = []
        async with support_agent(host=host).stream(PROMPT) as updates:
            async for update in updates:
                seen.append(update)
        await host.close()
    assert isinstance(seen[-1], RunFinished)
    assert isinstance(seen[-1].result, Success)
    assert seen[-1].result.unwrap().output == Answer(email="ada@example.com", plan="pro")
    kinds = [type(u) for u in seen[:-1]]
    assert ToolCallStarted in kinds and ToolCallFinished in kinds and TextDelta in kinds
    assert not any(isinstance(u, RunFinished) for u in seen[:-1])


async def test_stream_of_a_run_that_cannot_start_ends_with_its_failure() -> None:
    async with support_agent().stream(PROMPT) as updates:
        seen = [u async for u in updates]
    assert len(seen) == 1 and isinstance(seen[0], RunFinished)
    assert isinstance(seen[0].result, Failure) and seen[0].result.failure().option == "host"


async def test_leaving_a_stream_early_cancels_the_run() -> None:
    with OpenAIEmulator(local_script()) as emu:
        host = Local(base_url=emu.base_url, model="qwen3:8b", stream=True)
        with anyio.fail_after(30):
            async with support_agent(host=host).stream(PROMPT) as updates:
                async for _update in updates:
                    break
        await host.close()


async def test_a_live_session_takes_follow_ups() -> None:
    with OpenAIEmulator([{"content": "Hello."}, {"content": "Again."}]) as emu:
        host = Local(base_url=emu.base_url, model="qwen3:8b")
        agent = Agent(instructions="Be brief.", host=host)
        async with agent.session("Hi") as live:
            first = await live.next_result()
            await live.message("Once more")
            second = await live.next_result()
        await host.close()
    assert first.unwrap().text == "Hello." and second.unwrap().text == "Again."
    assert emu.requests[1].body["messages"][0] == {"role": "system", "content": "Be brief."}


# ── options ──


async def test_a_misspelled_run_override_is_invalid_opts_with_a_suggestion() -> None:
    with OpenAIEmulator(local_script()) as emu:
        host = Local(base_url=emu.base_url, model="qwen3:8b")
        outcome = await support_agent(host=host).run(PROMPT, max_turn=3)
        await host.close()
    assert isinstance(outcome, Failure)
    error = outcome.failure()
    assert isinstance(error, InvalidOpts) and error.option == "max_turn" and error.suggestion == "max_turns"
    assert emu.requests == []


async def test_a_hosts_own_per_run_option_passes_and_another_hosts_is_refused() -> None:
    with OpenAIEmulator(local_script()) as emu:
        host = Local(base_url=emu.base_url, model="qwen3:8b")
        outcome = await support_agent(host=host).run(PROMPT, runtime_session_id="x" * 40)
        await host.close()
    assert isinstance(outcome, Failure) and outcome.failure().option == "runtime_session_id"


def test_the_agent_refuses_a_misspelled_setting_at_construction() -> None:
    with pytest.raises(InvalidOptions) as caught:
        Agent(instructions="x", max_turn=3)  # type: ignore[call-arg]
    assert caught.value.error.suggestion == "max_turns"


def test_the_agent_refuses_tools_it_cannot_use() -> None:
    with pytest.raises(InvalidOptions, match="tools"):
        Agent(tools=[42])
    with pytest.raises(InvalidOptions, match="handler"):
        Agent(tools=[{"name": "x", "description": "x", "input_schema": {"type": "object"}}])


async def test_a_runs_limits_are_the_agents_unless_overridden() -> None:
    turns = [
        {"tool_calls": [{"id": f"c{i}", "name": "lookup_customer", "arguments": {"email": "a"}}]}
        for i in range(5)
    ]
    with OpenAIEmulator(turns) as emu:
        host = Local(base_url=emu.base_url, model="qwen3:8b")
        agent = Agent(tools=[lookup_customer], host=host, max_turns=3)
        outcome = await agent.run("loop")
        assert isinstance(outcome, Failure) and outcome.failure().kind == "max_turns_exceeded"
        assert len(emu.requests) == 3
        outcome = await agent.run("loop", max_turns=1)
        await host.close()
    assert isinstance(outcome, Failure) and len(emu.requests) == 4


# ── tools: a toolbox, a raw handler ──


async def test_a_toolbox_given_as_a_tool_keeps_its_tools_and_approval_names() -> None:
    box = Toolbox(lookup_customer, require_approval=["lookup_customer"])
    with OpenAIEmulator(local_script()) as emu:
        host = Local(base_url=emu.base_url, model="qwen3:8b")
        agent = Agent(tools=[box], host=host, output_type=Answer, journal=":memory:")
        outcome = await agent.run(PROMPT, journal_key="k1")
        await host.close()
    assert isinstance(outcome, Failure) and isinstance(outcome.failure(), AwaitingApproval)


PLAN_OF = {
    "name": "plan_of",
    "description": "A customer's plan",
    "input_schema": {"type": "object", "properties": {"email": {"type": "string"}}, "required": ["email"]},
}
"""A hand-written declaration, answered by a raw handler."""


async def test_a_raw_handler_answers_declared_tools() -> None:
    seen: list[tuple[str, Any]] = []

    def handle(name: str, input: Any, ctx: Any) -> str:
        seen.append((name, input))
        return "pro"

    turns = [
        {"tool_calls": [{"id": "c1", "name": "plan_of", "arguments": {"email": "a@x"}}]},
        {"content": "pro"},
    ]
    with OpenAIEmulator(turns) as emu:
        host = Local(base_url=emu.base_url, model="qwen3:8b")
        result = await Agent(tools=[PLAN_OF], handler=handle, host=host).run_or_raise("plan?")
        await host.close()
    assert seen == [("plan_of", {"email": "a@x"})] and result.text == "pro"
    assert [t["function"]["name"] for t in emu.requests[0].body["tools"]] == ["plan_of"]


async def test_a_raw_handler_and_typed_functions_answer_their_own_tools_in_one_run() -> None:
    seen: list[str] = []

    def handle(name: str, input: Any, ctx: Any) -> str:  # sync: runs in a worker thread
        seen.append(name)
        return "pro"

    turns = [
        {"tool_calls": [{"id": "c1", "name": "plan_of", "arguments": {"email": "a@x"}}]},
        {"tool_calls": [{"id": "c2", "name": "lookup_customer", "arguments": {"email": "a@x"}}]},
        {"tool_calls": [{"id": "c3", "name": "plan_of", "arguments": {"email": 7}}]},
        {"content": "done"},
    ]
    with OpenAIEmulator(turns) as emu:
        host = Local(base_url=emu.base_url, model="qwen3:8b")
        result = await Agent(tools=[lookup_customer, PLAN_OF], handler=handle, host=host).run_or_raise(
            "plan?"
        )
        await host.close()
    assert seen == ["plan_of"]  # the bad arguments of c3 never reached it
    assert [t["function"]["name"] for t in emu.requests[0].body["tools"]] == ["lookup_customer", "plan_of"]
    tool_messages = [m for m in emu.requests[3].body["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages][:2] == ["pro", "a@x: pro"]
    assert "email" in tool_messages[2]["content"] and result.text == "done"


# ── durable: approvals and resume through the agent ──


async def test_an_approval_decided_through_the_agent_lets_resume_finish_the_run(tmp_path: Any) -> None:
    ran: list[str] = []

    @tool(requires_approval=True)
    def refund(email: str) -> str:
        """Refund a customer.

        Args:
            email: whom to refund
        """
        ran.append(email)
        return "refunded"

    turns = [
        {"tool_calls": [{"id": "c1", "name": "refund", "arguments": {"email": "a@x"}}]},
        {"content": "Done."},
    ]
    with OpenAIEmulator(turns) as emu:
        host = Local(base_url=emu.base_url, model="qwen3:8b")
        agent = Agent(tools=[refund], host=host, journal=str(tmp_path / "j.db"))
        paused = await agent.run("refund a@x", journal_key="order-1")
        assert isinstance(paused, Failure) and isinstance(paused.failure(), AwaitingApproval)
        waiting = agent.pending_approvals("order-1").unwrap()
        assert [(p.name, p.input) for p in waiting] == [("refund", {"email": "a@x"})]
        assert agent.approve("order-1", waiting[0].tool_use_id, "allow") == Success(None)
        done = await agent.resume("order-1")
        await host.close()
    assert isinstance(done, Success) and done.unwrap().text == "Done."
    assert ran == ["a@x"]


async def test_resume_without_a_journal_is_invalid_opts() -> None:
    outcome = await support_agent().resume("k")
    assert isinstance(outcome, Failure) and outcome.failure().option == "journal"


def test_an_agent_of_declared_tools_runs_on_the_base_install(tmp_path: Any) -> None:
    """No tools extra (pydantic, docstring-parser, jsonschema): declared schemas and a handler,
    or no tools at all, still make an agent; only typed functions need the extra."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("pydantic", "docstring_parser", "jsonschema"):
                    raise ImportError(name)
        sys.meta_path.insert(0, Block())
        from rma_shell import Agent
        from rma_shell.providers.local import Local
        from rma_shell.testing import OpenAIEmulator
        declared = {"name": "x", "description": "x", "input_schema": {"type": "object"}}
        turns = [{"tool_calls": [{"name": "x", "arguments": {}}]}, {"content": "ok"}, {"content": "plain"}]
        with OpenAIEmulator(turns) as emu:
            host = Local(base_url=emu.base_url, model="m")
            agent = Agent(tools=[declared], handler=lambda n, i, c: "r", host=host)
            print(agent.run_sync_or_raise("hi").text)
            print(Agent(host=host).run_sync_or_raise("hi").text)
        try:
            from rma_shell.tools import tool
        except ImportError as exc:
            print("typed:", exc)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:2] == ["ok", "plain"]
    assert "pip install 'rma-agents[tools]'" in done.stdout
