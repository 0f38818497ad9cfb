"""What the AgentCore emulator's runtime session keeps of a conversation, and Bedrock's rules for it.

``_Assembler`` folds the frames a turn sent into the messages the service keeps (and the
client tool uses left waiting); ``_conversation_problem`` applies the rules Bedrock applies
to the whole conversation (stored + new) and the emulator's exact-echo check of pending tool
uses, with Bedrock's wording. Not the stream (``stream``) nor the invoke (``invoke``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from rma_shell.testing.agentcore._common import JSONDict
from rma_shell.testing.agentcore.frames import Frame


class _Assembler:
    """Folds the frames a turn sent into messages, the way a Converse client would."""

    def __init__(self) -> None:
        self.messages: list[JSONDict] = []
        self.current: JSONDict | None = None
        self.active: dict[Any, JSONDict] = {}
        self.final_stop: str | None = None
        self.failed = False

    def _message(self) -> JSONDict:
        if self.current is None:
            self.current = {"role": "assistant", "blocks": []}
            self.messages.append(self.current)
        return self.current

    def feed(self, item: Frame) -> None:
        if item.kind in ("exception", "error"):
            self.failed = True
            return
        payload = item.payload
        if item.kind != "event" or not isinstance(payload, dict):
            return
        index = payload.get("contentBlockIndex")
        if item.name == "messageStart":
            self.current = {"role": payload.get("role", "assistant"), "blocks": []}
            self.messages.append(self.current)
            self.active = {}
        elif item.name == "contentBlockStart":
            start = payload.get("start") or {}
            if isinstance(start.get("toolUse"), dict):
                block = {"kind": "toolUse", **start["toolUse"], "fragments": ""}
            elif isinstance(start.get("toolResult"), dict):
                block = {"kind": "toolResult", **start["toolResult"], "content": []}
            else:
                return
            self._message()["blocks"].append(block)
            self.active[index] = block
        elif item.name == "contentBlockDelta":
            self._delta(index, payload.get("delta") or {})
        elif item.name == "contentBlockStop":
            self.active.pop(index, None)
        elif item.name == "messageStop":
            self.final_stop = payload.get("stopReason")
            self._message()["stop"] = self.final_stop
            self.current = None

    def _delta(self, index: Any, delta: Mapping[str, Any]) -> None:
        block = self.active.get(index)
        if isinstance(delta.get("text"), str):
            if block is None or block["kind"] != "text":
                block = {"kind": "text", "text": ""}
                self._message()["blocks"].append(block)
                self.active[index] = block
            block["text"] += delta["text"]
        elif isinstance(delta.get("toolUse"), dict):
            if block is not None and block["kind"] == "toolUse":
                block["fragments"] += str(delta["toolUse"].get("input", ""))
        elif isinstance(delta.get("toolResult"), list):
            if block is not None and block["kind"] == "toolResult":
                block["content"].extend(delta["toolResult"])
        elif isinstance(delta.get("reasoningContent"), dict):
            if block is None or block["kind"] != "reasoning":
                block = {"kind": "reasoning", "text": "", "signature": None}
                self._message()["blocks"].append(block)
                self.active[index] = block
            part = delta["reasoningContent"]
            block["text"] += str(part.get("text", ""))
            if part.get("signature") is not None:
                block["signature"] = part["signature"]

    def outcome(self) -> tuple[list[JSONDict], list[JSONDict]] | None:
        """(messages the service keeps, client tool uses awaiting results), or None when the
        turn did not end properly (no messageStop, or an exception frame)."""
        if self.failed or self.final_stop is None:
            return None
        messages = [m for m in self.messages if m["blocks"]]
        pending: list[JSONDict] = []
        if self.final_stop == "tool_use" and messages and messages[-1]["role"] == "assistant":
            client = [b for b in messages[-1]["blocks"] if _is_client_tool(b)]
            if client:
                pending = [
                    {"toolUseId": b["toolUseId"], "name": b["name"], "input": _parse_input(b)} for b in client
                ]
                messages = messages[:-1]
        elif messages and messages[-1]["role"] == "assistant":
            # Unanswered client tool uses in a kept message would break the next request.
            messages[-1]["blocks"] = [b for b in messages[-1]["blocks"] if not _is_client_tool(b)]
        committed = [m for m in (_as_message(m) for m in messages) if m["content"]]
        if not pending and (not committed or committed[-1]["role"] != "assistant"):
            committed.append({"role": "assistant", "content": [{"text": "(emulated reply)"}]})
        return committed, pending


def _is_client_tool(block: Mapping[str, Any]) -> bool:
    return block["kind"] == "toolUse" and block.get("type") in (None, "tool_use")


def _parse_input(block: Mapping[str, Any]) -> Any:
    """The input the conversation keeps for a streamed tool use: its fragments as a JSON object,
    or ``{}`` when they are not one (broken JSON, an array, a string) — a tool use's input is an
    object on the model's side of the wire, so that is the only echo the model would accept."""
    try:
        value = json.loads(block["fragments"]) if block["fragments"] else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _as_message(message: Mapping[str, Any]) -> JSONDict:
    content: list[JSONDict] = []
    for block in message["blocks"]:
        if block["kind"] == "text" and block["text"]:
            content.append({"text": block["text"]})
        elif block["kind"] == "toolUse":
            tool_use = {"toolUseId": block["toolUseId"], "name": block["name"], "input": _parse_input(block)}
            if block.get("type") is not None:
                tool_use["type"] = block["type"]
            content.append({"toolUse": tool_use})
        elif block["kind"] == "toolResult":
            result: JSONDict = {"toolUseId": block["toolUseId"], "content": block["content"]}
            if block.get("status") is not None:
                result["status"] = block["status"]
            content.append({"toolResult": result})
        elif block["kind"] == "reasoning" and block["text"]:
            text: JSONDict = {"text": block["text"]}
            if block["signature"] is not None:
                text["signature"] = block["signature"]
            content.append({"reasoningContent": {"reasoningText": text}})
    return {"role": message["role"], "content": content}


def _bedrock(text: str) -> str:
    return f"An error occurred (ValidationException) when calling the ConverseStream operation: {text}"


def _ids(content: Sequence[Mapping[str, Any]], kind: str) -> list[str]:
    return [str(block[kind].get("toolUseId")) for block in content if isinstance(block.get(kind), dict)]


def _conversation_problem(
    stored: Sequence[JSONDict], pending: Sequence[JSONDict], new: Sequence[JSONDict]
) -> str | None:
    """The ``runtimeClientError`` message for a conversation the service would refuse, or None."""
    base = len(stored)
    combined = [*stored, *new]
    if pending and new and new[0].get("role") == "assistant":
        echoed = {
            str(b["toolUse"].get("toolUseId")): b["toolUse"]
            for b in new[0].get("content", [])
            if isinstance(b.get("toolUse"), dict)
        }
        expected = {p["toolUseId"]: p for p in pending}
        same = echoed.keys() == expected.keys() and all(
            echoed[i].get("name") == expected[i]["name"] and echoed[i].get("input") == expected[i]["input"]
            for i in expected
        )
        if not same:
            return (
                f"agentcore emulator: messages.{base}.content must echo exactly the toolUse blocks of the "
                f"previous turn ({json.dumps(list(pending))}); got {json.dumps(list(echoed.values()))}"
            )
    # The stored part is the emulator's own; check from the last stored message on.
    for i in range(max(0, base - 1), len(combined)):
        content = combined[i].get("content") or []
        if not content:
            return _bedrock(
                f"The content field in the Message object at messages.{i} is empty. Add a ContentBlock "
                "object to the content field and try again."
            )
        uses, results = _ids(content, "toolUse"), _ids(content, "toolResult")
        duplicates = sorted(
            {x for x in uses if uses.count(x) > 1} | {x for x in results if results.count(x) > 1}
        )
        if duplicates:
            return _bedrock(f"The request has duplicate Ids at messages.{i}.content: {', '.join(duplicates)}")
        if results:
            previous = combined[i - 1] if i > 0 and combined[i - 1].get("role") == "assistant" else None
            previous_uses = _ids(previous.get("content") or [], "toolUse") if previous else []
            if len(results) > len(previous_uses):
                return _bedrock(
                    f"The number of toolResult blocks at messages.{i}.content exceeds the number of toolUse "
                    "blocks of previous turn."
                )
        if uses and combined[i].get("role") == "assistant" and i + 1 < len(combined):
            answered = set(_ids(combined[i + 1].get("content") or [], "toolResult"))
            missing = [x for x in uses if x not in answered]
            if missing:
                return _bedrock(
                    f"Expected toolResult blocks at messages.{i + 1}.content for the following Ids: "
                    f"{', '.join(missing)}"
                )
    if not combined or combined[0].get("role") != "user":
        return _bedrock(
            "A conversation must start with a user message. Try again with a conversation that starts with a "
            "user message."
        )
    for i in range(max(1, base), len(combined)):
        if combined[i].get("role") == combined[i - 1].get("role"):
            return _bedrock(
                "A conversation must alternate between user and assistant roles. Make sure the conversation "
                "alternates between user and assistant roles and try again."
            )
    if combined[-1].get("role") != "user":
        return _bedrock(
            "A conversation must end with a user message. Try again with a conversation that ends with a "
            "user message."
        )
    return None
