"""What the Claude Managed Agents emulator accepts on the wire, and how it refuses.

The API's error envelope (``_Rejected`` and its status → type table), query parsing
(``_Query``, time ranges, pagination cursors) and the validation of request bodies: agents'
models, tools and MCP servers, metadata, environment configs, budgets, content blocks,
outcomes, multipart uploads. Pure functions over JSON values; no state, no I/O. Not the
routing (``resources``, ``streams``).
"""

from __future__ import annotations

import base64
import binascii
import copy
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rma_shell.testing.claude.state import _File

JSONDict = dict[str, Any]

# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------

_ERROR_TYPES: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Invalid request."),
    401: ("authentication_error", "invalid x-api-key"),
    402: ("billing_error", "Your credit balance is too low."),
    403: ("permission_error", "Your API key does not have permission to use the specified resource."),
    404: ("not_found_error", "Not found."),
    408: ("timeout_error", "Request timed out."),
    409: ("conflict_error", "Conflict."),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", "Number of requests has exceeded your rate limit."),
    500: ("api_error", "Internal server error."),
    502: ("api_error", "Bad gateway."),
    503: ("api_error", "Service unavailable."),
    504: ("timeout_error", "Gateway timeout."),
    529: ("overloaded_error", "Overloaded"),
}


class _Rejected(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        error_type: str | None = None,
        *,
        error_code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type or _ERROR_TYPES.get(status, ("api_error", ""))[0]
        self.error_code = error_code
        self.headers = dict(headers or {})


def _invalid(message: str, *, error_code: str | None = None) -> _Rejected:
    return _Rejected(400, message, "invalid_request_error", error_code=error_code)


def _not_found(what: str, ident: str, *, error_code: str | None = None) -> _Rejected:
    return _Rejected(404, f"{what} {ident!r} not found.", "not_found_error", error_code=error_code)


# --------------------------------------------------------------------------------------------
# Input events
# --------------------------------------------------------------------------------------------

_INPUT_TYPES = frozenset(
    {
        "user.message",
        "user.interrupt",
        "user.tool_confirmation",
        "user.custom_tool_result",
        "user.define_outcome",
        "user.tool_result",
        "system.message",
    }
)
_ANSWERS = frozenset({"user.custom_tool_result", "user.tool_confirmation", "user.tool_result"})
_KICKOFFS = frozenset({"user.message", "user.define_outcome"})
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
_AGENT_TOOLSET = "agent_toolset_20260401"


# --------------------------------------------------------------------------------------------
# Queries, pagination and request bodies
# --------------------------------------------------------------------------------------------


class _Query:
    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self._pairs = pairs

    def get(self, key: str) -> str | None:
        for k, v in self._pairs:
            if k == key:
                return v
        return None

    def list(self, key: str) -> list[str]:
        return [v for k, v in self._pairs if k in (key, f"{key}[]")]

    def bool(self, key: str) -> bool:
        value = self.get(key)
        if value is None:
            return False
        if value not in ("true", "false"):
            raise _invalid(f"{key}: expected true or false")
        return value == "true"

    def int(self, key: str, default: int | None, low: int, high: int | None) -> int | None:
        value = self.get(key)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            raise _invalid(f"{key}: expected an integer") from None
        if number < low or (high is not None and number > high):
            raise _invalid(f"{key}: must be between {low} and {high}" if high else f"{key}: must be >= {low}")
        return number

    def time(self, key: str) -> datetime | None:
        value = self.get(key)
        if value is None:
            return None
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise _invalid(f"{key}: expected an RFC 3339 timestamp") from None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _in_range(
    stamp: str,
    *,
    gt: datetime | None = None,
    gte: datetime | None = None,
    lt: datetime | None = None,
    lte: datetime | None = None,
) -> bool:
    at = datetime.fromisoformat(stamp)
    return (
        (gt is None or at > gt)
        and (gte is None or at >= gte)
        and (lt is None or at < lt)
        and (lte is None or at <= lte)
    )


def _encode_cursor(direction: str, key: int, kind: str) -> str:
    token = base64.urlsafe_b64encode(f"{kind}|{direction}|{key}".encode()).decode().rstrip("=")
    return f"page_{token}"


def _decode_cursor(page: str, kind: str) -> tuple[str, int]:
    try:
        token = page.removeprefix("page_")
        decoded = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        cursor_kind, direction, key = decoded.rsplit("|", 2)
        if cursor_kind != kind or direction not in ("n", "p"):
            raise ValueError(decoded)
        return direction, int(key)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise _invalid("page: invalid pagination cursor") from None


def _require_object(body: Any, where: str = "body") -> JSONDict:
    if not isinstance(body, dict):
        raise _invalid(f"{where}: expected a JSON object")
    return body


def _optional_str(body: Mapping[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise _invalid(f"{key}: expected a string")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _invalid(f"{where}: expected an array")
    return copy.deepcopy(value)


def _model(value: Any) -> JSONDict:
    model = value.get("id") if isinstance(value, dict) else value
    if isinstance(model, str) and ":" in model:
        # The API knows its models by their bare ids; "anthropic:claude-…" is another
        # library's provider-qualified spelling (C-26: clients send the id bare).
        raise _invalid(f"model: {model!r} is not a model id (send the bare id, without a provider prefix)")
    if isinstance(value, str) and value:
        return {"id": value}
    if isinstance(value, dict) and isinstance(value.get("id"), str) and value["id"]:
        return copy.deepcopy(value)
    raise _invalid("model: expected a model id string or {id, effort?, speed?, inference_geo?}")


def _tools(value: Any) -> list[JSONDict]:
    tools = _list(value, "tools")
    if len(tools) > 256:
        raise _invalid("tools: at most 256 tools")
    out: list[JSONDict] = []
    names: set[str] = set()
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise _invalid(f"{where}: expected an object")
        kind = tool.get("type")
        if kind == "custom":
            name = tool.get("name")
            if not isinstance(name, str) or not _TOOL_NAME.match(name):
                raise _invalid(f"{where}.name: must match ^[a-zA-Z0-9_-]{{1,128}}$")
            if name in names:
                raise _invalid(f"{where}.name: duplicate tool name {name!r}")
            names.add(name)
            if not isinstance(tool.get("description"), str):
                raise _invalid(f"{where}.description: Field required")
            schema = tool.get("input_schema")
            if not isinstance(schema, dict) or schema.get("type") != "object":
                raise _invalid(f"{where}.input_schema: expected a JSON schema with type 'object'")
            out.append(
                {"type": "custom", "name": name, "description": tool["description"], "input_schema": schema}
            )
        elif kind in (_AGENT_TOOLSET, "mcp_toolset"):
            policy = "always_allow" if kind == _AGENT_TOOLSET else "always_ask"
            default = {
                "enabled": True,
                "permission_policy": {"type": policy},
                **(tool.get("default_config") or {}),
            }
            configs = []
            for config in tool.get("configs") or []:
                if not isinstance(config, dict) or not isinstance(config.get("name"), str):
                    raise _invalid(f"{where}.configs: each config needs a 'name'")
                filled = {
                    "enabled": default["enabled"],
                    "permission_policy": default["permission_policy"],
                    **config,
                }
                if kind == _AGENT_TOOLSET:
                    filled["type"] = config["name"]
                configs.append(filled)
            entry: JSONDict = {"type": kind, "default_config": default, "configs": configs}
            if kind == "mcp_toolset":
                if not isinstance(tool.get("mcp_server_name"), str):
                    raise _invalid(f"{where}.mcp_server_name: Field required")
                entry["mcp_server_name"] = tool["mcp_server_name"]
            out.append(entry)
        else:
            raise _invalid(f"{where}.type: unknown tool type {kind!r}")
    return out


def _mcp_servers(value: Any) -> list[JSONDict]:
    servers = _list(value, "mcp_servers")
    if len(servers) > 20:
        raise _invalid("mcp_servers: at most 20 servers")
    names = [s.get("name") if isinstance(s, dict) else None for s in servers]
    if any(not isinstance(n, str) for n in names) or len(set(names)) != len(names):
        raise _invalid("mcp_servers: each server needs a unique 'name'")
    return [{"type": "url", **s} for s in servers]


def _check_mcp_references(agent: JSONDict) -> None:
    referenced = {t.get("mcp_server_name") for t in agent["tools"] if t["type"] == "mcp_toolset"}
    for server in agent["mcp_servers"]:
        if server["name"] not in referenced:
            raise _invalid(f"mcp_servers: server {server['name']!r} is not referenced by any mcp_toolset")


def _metadata(value: Any, default: JSONDict) -> JSONDict:
    if value is None:
        return dict(default)
    if not isinstance(value, dict):
        raise _invalid("metadata: expected an object", error_code="invalid_metadata")
    _check_metadata(value)
    return dict(value)


def _check_metadata(value: Mapping[str, Any]) -> None:
    if len(value) > 16:
        raise _invalid("metadata: at most 16 keys", error_code="invalid_metadata")
    for key, item in value.items():
        if len(key) > 64 or not isinstance(item, str) or len(item) > 512:
            raise _invalid(
                f"metadata.{key}: keys up to 64 chars, string values up to 512 chars",
                error_code="invalid_metadata",
            )


def _metadata_patch(current: JSONDict, patch: Any, *, empty_deletes: bool = False) -> JSONDict:
    if patch is None:
        return current
    if not isinstance(patch, dict):
        raise _invalid("metadata: expected an object", error_code="invalid_metadata")
    merged = dict(current)
    for key, value in patch.items():
        if value is None or (empty_deletes and value == ""):
            merged.pop(key, None)
        else:
            merged[key] = value
    _check_metadata(merged)
    return merged


def _scope(value: Any) -> str:
    if value is None or value == "organization":
        return "organization"
    if value == "account":
        raise _invalid("scope: 'account' is not accepted for API organizations")
    raise _invalid("scope: must be 'organization' or 'account'")


def _env_config(value: Any, current: JSONDict | None) -> JSONDict:
    if value is None:
        value = {"type": "cloud"}
    if not isinstance(value, dict):
        raise _invalid("config: expected an object")
    kind = value.get("type")
    if current is not None and current.get("type") != kind:
        raise _invalid("config.type: cannot change the config type", error_code="invalid_config_type_change")
    if kind == "self_hosted":
        return {"type": "self_hosted"}
    if kind != "cloud":
        raise _invalid(f"config.type: unknown value {kind!r}")
    base = current or {}
    networking = value.get("networking") or base.get("networking") or {"type": "unrestricted"}
    if networking.get("type") == "limited":
        networking = {
            "type": "limited",
            "allowed_hosts": list(networking.get("allowed_hosts") or []),
            "allow_mcp_servers": bool(networking.get("allow_mcp_servers", False)),
            "allow_package_managers": bool(networking.get("allow_package_managers", False)),
        }
    elif networking.get("type") == "unrestricted":
        networking = {"type": "unrestricted"}
    else:
        raise _invalid(f"config.networking.type: unknown value {networking.get('type')!r}")
    packages: JSONDict = {"type": "packages"}
    given = value.get("packages") or {}
    for manager in ("apt", "cargo", "gem", "go", "npm", "pip"):
        packages[manager] = list(given.get(manager) or (base.get("packages") or {}).get(manager) or [])
    if (
        networking["type"] == "limited"
        and any(packages[m] for m in ("apt", "cargo", "gem", "go", "npm", "pip"))
        and not networking["allow_package_managers"]
    ):
        raise _invalid("config.packages: limited networking needs allow_package_managers: true")
    return {"type": "cloud", "networking": networking, "packages": packages}


def _budget(value: Any) -> JSONDict | None:
    if value is None:
        return None
    cost = value.get("max_list_cost") if isinstance(value, dict) else None
    if (
        not isinstance(value, dict)
        or value.get("type") != "limit"
        or not isinstance(cost, dict)
        or not isinstance(cost.get("amount"), str)
        or not cost["amount"].isdigit()
        or cost.get("currency") != "USD"
    ):
        raise _invalid(
            'budget: expected {"type": "limit", "max_list_cost": {"amount": "<cents>", "currency": "USD"}}'
        )
    return {"type": "limit", "max_list_cost": {"amount": cost["amount"], "currency": "USD"}}


def _blocks(content: Any, where: str, allowed: set[str]) -> None:
    if not isinstance(content, list) or not content:
        raise _invalid(f"{where}: expected a non-empty array of content blocks")
    for i, block in enumerate(content):
        at = f"{where}[{i}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind not in allowed:
            raise _invalid(f"{at}.type: expected one of {sorted(allowed)}")
        if kind == "text" and (not isinstance(block.get("text"), str) or not block["text"]):
            raise _invalid(f"{at}.text: text content blocks must be non-empty")
        if kind in ("image", "document"):
            _source(block.get("source"), f"{at}.source", kind)
        if kind == "search_result" and not (
            isinstance(block.get("source"), str)
            and isinstance(block.get("title"), str)
            and isinstance(block.get("content"), list)
        ):
            raise _invalid(f"{at}: a search_result needs source, title and content")


_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_SOURCES = {"image": ("base64", "url", "file"), "document": ("base64", "text", "url", "file")}


def _source(source: Any, where: str, kind: str) -> None:
    """An image or document block's source, as the API checks it: base64 data that decodes,
    of a media type the kind takes; a file id; a URL; a document's plain text."""
    allowed = _SOURCES[kind]
    if not isinstance(source, dict) or source.get("type") not in allowed:
        raise _invalid(f"{where}: expected one of {', '.join(allowed)} sources for an {kind}")
    if source["type"] == "base64":
        media = source.get("media_type")
        if kind == "image" and media not in _IMAGE_TYPES:
            raise _invalid(f"{where}.media_type: expected one of {sorted(_IMAGE_TYPES)}, got {media!r}")
        if kind == "document" and media != "application/pdf":
            raise _invalid(f"{where}.media_type: a base64 document must be application/pdf, got {media!r}")
        data = source.get("data")
        try:
            if not isinstance(data, str) or not data:
                raise ValueError("empty")
            base64.b64decode(data, validate=True)
        except (ValueError, binascii.Error):
            raise _invalid(f"{where}.data: expected base64 data") from None
    elif source["type"] == "file" and not (isinstance(source.get("file_id"), str) and source["file_id"]):
        raise _invalid(f"{where}.file_id: Field required")
    elif source["type"] == "text" and (
        source.get("media_type") != "text/plain" or not isinstance(source.get("data"), str)
    ):
        raise _invalid(f"{where}: a text source needs media_type text/plain and data")
    elif source["type"] == "url" and not isinstance(source.get("url"), str):
        raise _invalid(f"{where}.url: Field required")


def _result_content(event: JSONDict, where: str) -> None:
    if event.get("content") is not None:
        _blocks(event["content"], f"{where}.content", {"text", "image", "document", "search_result"})
    if event.get("is_error") is not None and not isinstance(event["is_error"], bool):
        raise _invalid(f"{where}.is_error: expected a boolean")


def _define_outcome(event: JSONDict, where: str, files: Mapping[str, _File]) -> None:
    if not isinstance(event.get("description"), str) or not event["description"]:
        raise _invalid(f"{where}.description: Field required")
    rubric = event.get("rubric")
    if not isinstance(rubric, dict):
        raise _invalid(f"{where}.rubric: Field required")
    if rubric.get("type") == "text":
        if not isinstance(rubric.get("content"), str) or not rubric["content"]:
            raise _invalid(f"{where}.rubric.content: Field required")
    elif rubric.get("type") == "file":
        if rubric.get("file_id") not in files:
            raise _invalid(f"{where}.rubric.file_id: unknown file")
    else:
        raise _invalid(f"{where}.rubric.type: must be 'text' or 'file'")
    iterations = event.get("max_iterations")
    if iterations is not None and (
        not isinstance(iterations, int) or isinstance(iterations, bool) or not 1 <= iterations <= 20
    ):
        raise _invalid(f"{where}.max_iterations: must be between 1 and 20")


def _answer_id(event: Mapping[str, Any]) -> str:
    key = "custom_tool_use_id" if event["type"] == "user.custom_tool_result" else "tool_use_id"
    value = event[key]
    assert isinstance(value, str)
    return value


def _is_requires_action(event: Mapping[str, Any]) -> bool:
    stop = event.get("stop_reason")
    return (
        event.get("type") == "session.status_idle"
        and isinstance(stop, Mapping)
        and stop.get("type") == "requires_action"
    )


def _is_terminal(event: Mapping[str, Any]) -> bool:
    kind = event.get("type")
    return kind == "session.status_terminated" or (
        kind == "session.status_idle" and not _is_requires_action(event)
    )


def _add_usage(total: JSONDict, usage: Mapping[str, Any]) -> None:
    for key in ("input_tokens", "output_tokens", "cache_read_input_tokens"):
        total[key] = int(total.get(key) or 0) + int(usage.get(key) or 0)
    cache = total.setdefault(
        "cache_creation", {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0}
    )
    cache["ephemeral_5m_input_tokens"] = int(cache.get("ephemeral_5m_input_tokens") or 0) + int(
        usage.get("cache_creation_input_tokens") or 0
    )


def _multipart(content_type: str, raw: bytes) -> dict[str, tuple[str | None, str | None, bytes]]:
    """Parse multipart/form-data into {name: (filename, content_type, bytes)}."""
    match = re.search(r'boundary="?([^";]+)"?', content_type)
    if not content_type.startswith("multipart/form-data") or match is None:
        raise _invalid("expected a multipart/form-data body")
    delimiter = b"--" + match.group(1).encode()
    fields: dict[str, tuple[str | None, str | None, bytes]] = {}
    for chunk in raw.split(delimiter)[1:]:
        if chunk.startswith(b"--"):
            break
        head, _, body = chunk.removeprefix(b"\r\n").partition(b"\r\n\r\n")
        body = body.removesuffix(b"\r\n")
        headers: dict[str, str] = {}
        for line in head.decode("utf-8", "replace").split("\r\n"):
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        disposition = headers.get("content-disposition", "")
        name_match = re.search(r'\bname="([^"]*)"', disposition)
        if name_match is None:
            continue
        file_match = re.search(r'\bfilename="([^"]*)"', disposition)
        fields[name_match.group(1)] = (
            file_match.group(1) if file_match else None,
            headers.get("content-type"),
            body,
        )
    return fields
