"""Agent and environment specs: what to provision, validated, as plain frozen data.

What this is: ``AgentSpec`` (name, system prompt, tool *schemas*, terminal tool, model
config) and ``EnvironmentSpec`` (name, provider config handed over verbatim, declared
runtimes), built through ``create``/``coerce`` which return ``Result[..., InvalidSpec]`` with
the path of the offending field (``tools[2].input_schema``, ``runtimes[0].version``). A spec
holds only JSON-ready data: tool objects are read for ``name``/``description``/
``input_schema`` and dropped, JSON values are copied, so mutating what was passed in never
changes a spec or its digest. Digests and names come from ``rma.provisioning.identity``.
What it is not: no provider wire shapes (the flows map a spec onto CMA or AgentCore bodies),
no bootstrap rendering for runtimes, no I/O.

Validation rules (V-1, V-3, V-5 and their Better):

- ``name`` (agent: required; environment: optional) is a non-empty string without colons or
  control characters — it is the *base* that tag references ``base:tag`` address.
- A tool is a mapping with exactly ``name``, ``description``, ``input_schema`` (and optionally
  ``type: "custom"``), or any object with those attributes. Names match ``[A-Za-z0-9_-]{1,64}``
  (what both managed providers accept) and are unique; the description is a non-empty string;
  the schema is a JSON object with ``"type": "object"``.
- ``terminal_tool`` names one of the tools. ``model_config`` is any JSON value, kept verbatim.
- ``config`` is a JSON object, kept verbatim (key order included) for the provider.
- A runtime is ``{lang, version, via: "mise"}``. Both strings are interpolated into a shell
  script, so they are held to strict patterns matched over the whole string: ``lang``
  ``[a-z0-9][a-z0-9_-]{0,63}``, ``version`` ``[0-9A-Za-z][0-9A-Za-z._+-]{0,63}`` (no spaces,
  quotes, ``;``, ``$``, newlines, leading ``-``). A language is declared at most once.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Final

import attrs
from returns.result import Failure, Result, Success

from rma.provisioning import identity
from rma.provisioning.errors import InvalidSpec
from rma.vocabulary import JSON

TOOL_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
RUNTIME_LANG: Final = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
RUNTIME_VERSION: Final = re.compile(r"[0-9A-Za-z][0-9A-Za-z._+-]{0,63}")
RUNTIME_VIA: Final = ("mise",)

_AGENT_FIELDS: Final = (
    "name",
    "system_prompt",
    "tools",
    "terminal_tool",
    "model_config",
    "skills",
    "mcp_servers",
    "multiagent",
)
_TOOL_FIELDS: Final = ("name", "description", "input_schema")
_RUNTIME_FIELDS: Final = ("lang", "version", "via")


class SpecError(ValueError):
    """Raised by a spec's constructor when called directly with invalid data; ``create`` and
    ``coerce`` return the same ``InvalidSpec`` as a value instead."""

    def __init__(self, error: InvalidSpec) -> None:
        super().__init__(error.message)
        self.error = error


class _Bad(Exception):
    def __init__(self, error: InvalidSpec) -> None:
        super().__init__(error.message)
        self.error = error


def _fail(spec: str, path: str, detail: str) -> _Bad:
    return _Bad(InvalidSpec(spec=spec, path=path, detail=detail))


def _json(spec: str, value: object, path: str) -> JSON:
    result = identity.json_value(value, path)
    if isinstance(result, Failure):
        error = result.failure()
        raise _fail(spec, error.path, error.detail)
    return result.unwrap()


def _name(spec: str, value: object, path: str = "name") -> str:
    if not isinstance(value, str) or not value:
        raise _fail(spec, path, f"a non-empty string is required, got {value!r}")
    if ":" in value:
        raise _fail(spec, path, "must not contain ':' (tag references are base:tag)")
    if any(unicodedata.category(ch) in ("Cc", "Cs") for ch in value):
        raise _fail(spec, path, "must not contain control characters or lone surrogates")
    return value


def _sequence(spec: str, value: object, path: str) -> tuple[object, ...]:
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise _fail(spec, path, f"expected a list, got {type(value).__name__}")
    return tuple(value)


def _fields(spec: str, value: object, names: tuple[str, ...], path: str, what: str) -> dict[str, object]:
    """Read ``names`` from a mapping (unknown keys refused) or from an object's attributes."""
    if isinstance(value, Mapping):
        unknown = sorted(str(k) for k in value if k not in names)
        if unknown:
            raise _fail(spec, identity.key_path(path, unknown[0]), f"unknown {what} field")
        return {n: value[n] for n in names if n in value}
    if isinstance(value, str | bytes | int | float | list | tuple) or value is None:
        raise _fail(spec, path, f"expected a {what} (a mapping or an object), got {type(value).__name__}")
    return {n: getattr(value, n) for n in names if hasattr(value, n)}


# --- tools ----------------------------------------------------------------------------------


@attrs.frozen
class ToolSchema:
    """A tool as the loop host sees it: name, description, JSON input schema. No code."""

    name: str
    description: str
    input_schema: dict[str, JSON]

    def to_json(self) -> dict[str, JSON]:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}


def _tool(value: object, path: str) -> ToolSchema:
    if isinstance(value, Mapping) and "type" in value:
        if value["type"] != "custom":
            raise _fail(
                "agent", identity.key_path(path, "type"), "only custom tools (schemas) belong in a spec"
            )
        value = {k: v for k, v in value.items() if k != "type"}
    fields = _fields("agent", value, _TOOL_FIELDS, path, "tool")
    for required in _TOOL_FIELDS:
        if required not in fields:
            raise _fail("agent", identity.key_path(path, required), "required")
    name, description, schema = fields["name"], fields["description"], fields["input_schema"]
    if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
        raise _fail("agent", f"{path}.name", f"must match [A-Za-z0-9_-]{{1,64}}, got {name!r}")
    if not isinstance(description, str) or not description:
        raise _fail("agent", f"{path}.description", "a non-empty string is required")
    if not isinstance(schema, Mapping):
        raise _fail("agent", f"{path}.input_schema", "a JSON schema object is required")
    plain = _json("agent", schema, f"{path}.input_schema")
    if plain.get("type") != "object":
        raise _fail("agent", f"{path}.input_schema.type", 'a tool input schema must have "type": "object"')
    return ToolSchema(
        name=name, description=_json("agent", description, f"{path}.description"), input_schema=plain
    )


# --- agents ---------------------------------------------------------------------------------


def _objects(value: object, path: str, key: str) -> tuple[JSON, ...]:
    """A list of JSON objects, each with a string ``key`` unique in the list (``skills`` by
    ``skill_id``, ``mcp_servers`` by ``name``)."""
    out: list[JSON] = []
    seen: set[str] = set()
    for i, item in enumerate(_sequence("agent", value, path)):
        where = identity.index_path(path, i)
        plain = _json("agent", item, where)
        if not isinstance(plain, dict):
            raise _fail("agent", where, f"an object is required, got {type(item).__name__}")
        ident = plain.get(key)
        if not isinstance(ident, str) or not ident:
            raise _fail("agent", f"{where}.{key}", "a non-empty string is required")
        if ident in seen:
            raise _fail("agent", f"{where}.{key}", f"duplicate {key} {ident!r}")
        seen.add(ident)
        out.append(plain)
    return tuple(out)


def _agent_fields(
    name: object,
    system_prompt: object,
    tools: object,
    terminal_tool: object,
    model_config: object,
    skills: object = (),
    mcp_servers: object = (),
    multiagent: object = None,
) -> dict[str, object]:
    checked_name = _name("agent", name)
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise _fail(
            "agent", "system_prompt", f"a string or None is required, got {type(system_prompt).__name__}"
        )
    prompt = None if system_prompt is None else _json("agent", system_prompt, "system_prompt")
    schemas: list[ToolSchema] = []
    seen: set[str] = set()
    for i, tool in enumerate(_sequence("agent", tools, "tools")):
        schema = _tool(tool, identity.index_path("tools", i))
        if schema.name in seen:
            raise _fail("agent", f"tools[{i}].name", f"duplicate tool name {schema.name!r}")
        seen.add(schema.name)
        schemas.append(schema)
    if terminal_tool is not None and (not isinstance(terminal_tool, str) or terminal_tool not in seen):
        raise _fail(
            "agent", "terminal_tool", f"must name one of the tools {sorted(seen)}, got {terminal_tool!r}"
        )
    return {
        "name": checked_name,
        "system_prompt": prompt,
        "tools": tuple(schemas),
        "terminal_tool": terminal_tool,
        "model_config": _json("agent", model_config, "model_config"),
        "skills": _objects(skills, "skills", "skill_id"),
        "mcp_servers": _objects(mcp_servers, "mcp_servers", "name"),
        "multiagent": None if multiagent is None else _mapping_json(multiagent, "multiagent"),
    }


def _mapping_json(value: object, path: str) -> JSON:
    plain = _json("agent", value, path)
    if not isinstance(plain, dict):
        raise _fail("agent", path, f"an object is required, got {type(value).__name__}")
    return plain


@attrs.frozen
class AgentSpec:
    """An agent to provision (V-1). Build it with ``AgentSpec.create`` or ``AgentSpec.coerce``.

    ``name`` is the base of the provider-side name, not part of the identity; the digest
    covers ``system_prompt``, ``tools``, ``terminal_tool`` and ``model_config`` (V-2), and
    ``skills``, ``mcp_servers`` and ``multiagent`` when set — a spec without them has the
    digest it always had. ``skills`` (objects with a ``skill_id``: ``{"type": "anthropic",
    "skill_id": "xlsx"}``), ``mcp_servers`` (objects with a ``name``: ``{"type": "url",
    "name": "docs", "url": "https://…"}``) and ``multiagent`` (the agent's sub-agent roster)
    go to the host as written; only Claude Managed Agents takes them.
    """

    name: str
    system_prompt: str | None = None
    tools: tuple[ToolSchema, ...] = ()
    terminal_tool: str | None = None
    model_config: JSON = None
    skills: tuple[JSON, ...] = ()
    mcp_servers: tuple[JSON, ...] = ()
    multiagent: JSON = None

    def __attrs_post_init__(self) -> None:
        try:
            fields = _agent_fields(
                self.name,
                self.system_prompt,
                self.tools,
                self.terminal_tool,
                self.model_config,
                self.skills,
                self.mcp_servers,
                self.multiagent,
            )
        except _Bad as bad:
            raise SpecError(bad.error) from None
        if any(fields[k] != getattr(self, k) for k in ("tools", "model_config", "skills", "mcp_servers")):
            raise SpecError(
                InvalidSpec(spec="agent", detail="construct specs with AgentSpec.create or AgentSpec.coerce")
            )

    @classmethod
    def create(
        cls,
        name: object,
        *,
        system_prompt: object = None,
        tools: object = (),
        terminal_tool: object = None,
        model_config: object = None,
        skills: object = (),
        mcp_servers: object = (),
        multiagent: object = None,
    ) -> Result[AgentSpec, InvalidSpec]:
        try:
            fields = _agent_fields(
                name, system_prompt, tools, terminal_tool, model_config, skills, mcp_servers, multiagent
            )
        except _Bad as bad:
            return Failure(bad.error)
        return Success(cls(**fields))  # type: ignore[arg-type]

    @classmethod
    def coerce(cls, value: object) -> Result[AgentSpec, InvalidSpec]:
        """An ``AgentSpec`` as is, or a mapping with the spec's fields (unknown keys refused)."""
        if isinstance(value, AgentSpec):
            return Success(value)
        if not isinstance(value, Mapping):
            return Failure(
                InvalidSpec(spec="agent", detail=f"expected a mapping, got {type(value).__name__}")
            )
        try:
            fields = _fields("agent", value, _AGENT_FIELDS, "", "agent spec")
        except _Bad as bad:
            return Failure(bad.error)
        if "name" not in fields:
            return Failure(InvalidSpec(spec="agent", path="name", detail="required"))
        return cls.create(
            fields["name"],
            system_prompt=fields.get("system_prompt"),
            tools=fields.get("tools", ()),
            terminal_tool=fields.get("terminal_tool"),
            model_config=fields.get("model_config"),
            skills=fields.get("skills", ()),
            mcp_servers=fields.get("mcp_servers", ()),
            multiagent=fields.get("multiagent"),
        )

    @property
    def digest(self) -> str:
        """Full lowercase SHA-256 hex of the spec's identity (name excluded)."""
        return identity.agent_digest(self)

    def to_json(self) -> dict[str, JSON]:
        """A plain mapping ``coerce`` turns back into an equal spec (the newer fields only
        when set, so an older reader takes a spec that does not use them)."""
        out: dict[str, JSON] = {
            "name": self.name,
            "system_prompt": self.system_prompt,
            "tools": [t.to_json() for t in self.tools],
            "terminal_tool": self.terminal_tool,
            "model_config": self.model_config,
        }
        out.update(self.extensions())
        return out

    def extensions(self) -> dict[str, JSON]:
        """``skills``, ``mcp_servers`` and ``multiagent``, those that are set."""
        out: dict[str, JSON] = {}
        if self.skills:
            out["skills"] = list(self.skills)
        if self.mcp_servers:
            out["mcp_servers"] = list(self.mcp_servers)
        if self.multiagent is not None:
            out["multiagent"] = self.multiagent
        return out


# --- runtimes and environments --------------------------------------------------------------


@attrs.frozen
class Runtime:
    """A language runtime the environment installs on first need (V-5): ``lang@version`` via mise."""

    lang: str
    version: str
    via: str = "mise"

    def __attrs_post_init__(self) -> None:
        try:
            _runtime(self, "")
        except _Bad as bad:
            raise SpecError(bad.error) from None

    @classmethod
    def create(cls, lang: object, version: object, via: object = "mise") -> Result[Runtime, InvalidSpec]:
        try:
            return Success(_runtime({"lang": lang, "version": version, "via": via}, ""))
        except _Bad as bad:
            return Failure(bad.error)

    @property
    def mise_spec(self) -> str:
        """``lang@version`` — safe to interpolate into a shell word (the patterns guarantee it)."""
        return f"{self.lang}@{self.version}"


def _runtime(value: object, path: str) -> Runtime:
    fields = _fields("environment", value, _RUNTIME_FIELDS, path, "runtime")
    lang, version, via = fields.get("lang"), fields.get("version"), fields.get("via", "mise")
    if not isinstance(lang, str) or not RUNTIME_LANG.fullmatch(lang):
        raise _fail(
            "environment",
            identity.key_path(path, "lang"),
            f"must match [a-z0-9][a-z0-9_-]{{0,63}}, got {lang!r}",
        )
    if not isinstance(version, str) or not RUNTIME_VERSION.fullmatch(version):
        raise _fail(
            "environment",
            identity.key_path(path, "version"),
            f"must match [0-9A-Za-z][0-9A-Za-z._+-]{{0,63}} (no spaces, quotes or shell syntax), "
            f"got {version!r}",
        )
    if via not in RUNTIME_VIA:
        raise _fail("environment", identity.key_path(path, "via"), f"only 'mise' is supported, got {via!r}")
    if isinstance(value, Runtime):
        return value
    return Runtime(lang=lang, version=version, via="mise")


def _runtimes(value: object) -> tuple[Runtime, ...]:
    out: list[Runtime] = []
    seen: set[str] = set()
    for i, entry in enumerate(_sequence("environment", value, "runtimes")):
        runtime = _runtime(entry, identity.index_path("runtimes", i))
        if runtime.lang in seen:
            raise _fail("environment", f"runtimes[{i}].lang", f"{runtime.lang!r} is declared twice")
        seen.add(runtime.lang)
        out.append(runtime)
    return tuple(out)


def _environment_fields(name: object, config: object, runtimes: object) -> dict[str, object]:
    checked_name = None if name is None else _name("environment", name)
    if config is None:
        config = {}
    if not isinstance(config, Mapping):
        raise _fail("environment", "config", f"a JSON object is required, got {type(config).__name__}")
    return {
        "name": checked_name,
        "config": _json("environment", config, "config"),
        "runtimes": _runtimes(runtimes),
    }


@attrs.frozen
class EnvironmentSpec:
    """Where an agent runs (V-3). Build it with ``EnvironmentSpec.create`` or ``.coerce``.

    ``config`` goes to the provider verbatim (CMA ``config``, AgentCore ``environment``);
    ``runtimes`` never go on the wire but are digest-covered (V-4, V-29).
    """

    name: str | None = None
    config: dict[str, JSON] = attrs.field(factory=dict)
    runtimes: tuple[Runtime, ...] = ()

    def __attrs_post_init__(self) -> None:
        try:
            fields = _environment_fields(self.name, self.config, self.runtimes)
        except _Bad as bad:
            raise SpecError(bad.error) from None
        if fields["runtimes"] != self.runtimes or fields["config"] != self.config:
            raise SpecError(
                InvalidSpec(
                    spec="environment", detail="construct specs with EnvironmentSpec.create or .coerce"
                )
            )

    @classmethod
    def create(
        cls, name: object = None, *, config: object = None, runtimes: object = ()
    ) -> Result[EnvironmentSpec, InvalidSpec]:
        try:
            fields = _environment_fields(name, config, runtimes)
        except _Bad as bad:
            return Failure(bad.error)
        return Success(cls(**fields))  # type: ignore[arg-type]

    @classmethod
    def coerce(cls, value: object) -> Result[EnvironmentSpec, InvalidSpec]:
        """An ``EnvironmentSpec`` as is, or a mapping: ``name``, ``runtimes`` and ``config`` are
        read; every other top-level key is collected into the config, an explicit ``config``
        winning on collision (V-3 — the flat form ``{"type": "cloud", "networking": …}``)."""
        if isinstance(value, EnvironmentSpec):
            return Success(value)
        if not isinstance(value, Mapping):
            detail = (
                "an environment spec is required" if value is None else f"expected a mapping, got {value!r}"
            )
            return Failure(InvalidSpec(spec="environment", detail=detail))
        explicit = value.get("config", {})
        if not isinstance(explicit, Mapping):
            return Failure(InvalidSpec(spec="environment", path="config", detail="a JSON object is required"))
        flat = {k: v for k, v in value.items() if k not in ("name", "runtimes", "config")}
        return cls.create(value.get("name"), config={**flat, **explicit}, runtimes=value.get("runtimes", ()))

    @classmethod
    def coerce_optional(cls, value: object) -> Result[EnvironmentSpec | None, InvalidSpec]:
        """``None`` is "no environment" (V-3); anything else as ``coerce``."""
        if value is None:
            return Success(None)
        result: Result[EnvironmentSpec | None, InvalidSpec] = cls.coerce(value)
        return result

    @property
    def is_empty(self) -> bool:
        """No config and no runtimes: nothing would reach the provider."""
        return not self.config and not self.runtimes

    @property
    def digest(self) -> str:
        """Full lowercase SHA-256 hex of config and runtimes (name excluded)."""
        return identity.environment_digest(self)

    def to_json(self) -> dict[str, JSON]:
        return {
            "name": self.name,
            "config": self.config,
            "runtimes": [{"lang": r.lang, "version": r.version, "via": r.via} for r in self.runtimes],
        }
