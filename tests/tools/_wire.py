"""What a run sent back for its tool calls, read off each host's wire as (text, is_error).

Shared by the tests that run one toolbox on all three emulators: Local's chat-completions tool
messages (an error is sent as ``{"error": …, "isError": true}``: chat completions have no
is_error), AgentCore's ``toolResult`` blocks and Claude's ``user.custom_tool_result`` events.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

ToolTexts = list[tuple[str, bool]]


def local_tool_results(messages: Iterable[Mapping[str, Any]]) -> ToolTexts:
    """From the messages of Local's last request (its whole history)."""
    out: ToolTexts = []
    for message in messages:
        if message["role"] == "tool":
            content = message["content"]
            wrapped = json.loads(content) if content.startswith('{"error"') else None
            out.append((wrapped["error"], True) if wrapped else (content, False))
    return out


def agentcore_tool_results(invokes: Iterable[Mapping[str, Any]]) -> ToolTexts:
    """From the bodies of every InvokeHarness after the first (each carries the last results)."""
    out: ToolTexts = []
    for body in invokes:
        for block in body["messages"][-1]["content"]:
            if "toolResult" in block:
                result = block["toolResult"]
                out.append((result["content"][0]["text"], result.get("status") == "error"))
    return out


def cma_tool_results(posts: Iterable[Mapping[str, Any]]) -> ToolTexts:
    """From the bodies of every events POST (the kickoff has none)."""
    out: ToolTexts = []
    for body in posts:
        for event in body["events"]:
            if event["type"] == "user.custom_tool_result":
                out.append((event["content"][0]["text"], bool(event["is_error"])))
    return out
