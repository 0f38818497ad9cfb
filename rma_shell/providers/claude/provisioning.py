# Over 800 lines on purpose: ensure, tag, prune and provision share one build-if-absent core.
"""Claude Managed Agents provisioning: agents and environments as content-addressed resources.

What this is: the control-plane flows over ``CMAClient`` and a store (``rma_shell.stores``):

- ``ensure_agent`` / ``ensure_environment`` — build-if-absent (V-20…V-31). The store key is
  (``claude_managed_agents``, ``agent``/``environment``, base) and the record is keyed by the
  spec's full digest; ``ensure_record`` makes sure one create happens across tasks and
  processes. The build itself first lists every page for a *live* resource with the exact
  provider-side name ``<base>_<digest8>`` and adopts it (a store that lost its record, a
  creator that crashed after the create, a provider that accepts duplicate names); only then
  does it create. A 409 on create is a name collision: every page is listed again — live →
  adopt, archived only → ``AgentArchived``/``EnvironmentArchived``, none →
  ``*NameConflict``. Other create errors pass through.
- ``tag`` / ``resolve`` — movable ``base:tag`` pointers (V-32…V-34), never a fallback.
- ``prune`` — archive old versions of a base over the API (V-35…V-39, with every page and
  ``created_at`` compared as datetimes).
- ``provision`` / ``teardown`` — an agent and its environment together, with rollback of
  what the call created (C-22…C-25, V-10…V-15).

Store failures never block provisioning (V-13): when the store raises ``StoreError``, the
flow logs it and runs the build unguarded — the name lookup keeps it from duplicating.
What it is not: no spec validation or naming rules (``rma.provisioning``), no session
driving (``rma_shell.providers.claude.provider``), and nothing about AgentCore
harnesses (``rma_shell.providers.agentcore.provisioning``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Final, Literal, overload

import anyio
import attrs
from returns.result import Failure, Result, Success

from rma.codec_json import register
from rma.errors import HttpError, InvalidOpts, SessionError
from rma.providers.claude.codec import wire_model
from rma.provisioning import identity
from rma.provisioning.errors import InvalidSpec, UntrackedDigest
from rma.provisioning.flow_errors import (
    AgentArchived,
    AgentBaseTooLong,
    AgentNameConflict,
    BaseTooLong,
    EnvironmentArchived,
    EnvironmentBaseTooLong,
    EnvironmentNameConflict,
    KeepRequired,
    NameArchived,
    NameConflict,
    ProvisionFailed,
    PrunePartial,
    TeardownFailed,
    UnexpectedCreateResponse,
)
from rma.provisioning.runtimes import Bootstrap, bootstrap, wire_config
from rma.provisioning.spec import AgentSpec, EnvironmentSpec, Runtime
from rma.vocabulary import JSON
from rma_shell.logging import log_fields
from rma_shell.providers.claude.client import CMAClient
from rma_shell.stores import Entry, Record, ResolveError, Store, StoreError, StoreKey, TagError, ensure_record

log = logging.getLogger("rma.provisioning.claude_managed_agents")

PROVIDER: Final = "claude_managed_agents"
"""The store key's provider slug for everything this module records."""

DEFAULT_PAGE_LIMIT: Final = 100
"""Items per listing page (the API's maximum for agents)."""

ROLLBACK_BUDGET_S: Final = 30.0
"""How long a rollback archive may take, shielded from the caller's cancellation."""

DEFAULT_ENVIRONMENT_CONFIG: Final[Mapping[str, JSON]] = {
    "type": "cloud",
    "networking": {"type": "unrestricted"},
}
"""What ``provision`` creates when no environment is given (C-23)."""

Kind = Literal["agent", "environment"]
_KINDS: Final = ("agent", "environment")


# --- handles ---------------------------------------------------------------------------------


@attrs.frozen
class AgentHandle:
    """A provisioned agent (V-6). Pass it as ``run(..., agent=handle)``: the session reads
    ``agent_id``. ``digest`` is the spec's full digest (the name carries its first 8 hex)."""

    agent_id: str
    name: str
    digest: str
    version: int | None = None

    @property
    def short_digest(self) -> str:
        return identity.short_digest(self.digest)

    def to_json(self) -> dict[str, JSON]:
        return {"agent_id": self.agent_id, "name": self.name, "digest": self.digest, "version": self.version}


@attrs.frozen
class EnvironmentHandle:
    """A provisioned environment (V-6). Pass it as ``run(..., environment=handle)``.

    ``bootstrap`` is set when the spec declares runtimes (V-30): put
    ``bootstrap.instructions`` in the agent's system prompt (or run ``bootstrap.script``
    yourself). It is computed from the runtimes on every path and never serialized.
    """

    environment_id: str
    name: str
    digest: str
    bootstrap: Bootstrap | None = None

    @property
    def short_digest(self) -> str:
        return identity.short_digest(self.digest)

    def to_json(self) -> dict[str, JSON]:
        """The identity fields only — never the bootstrap (V-6)."""
        return {"environment_id": self.environment_id, "name": self.name, "digest": self.digest}


Handle = AgentHandle | EnvironmentHandle


@attrs.frozen
class Provisioned:
    """What ``provision`` returns: both handles. It also passes as either handle
    (``run(..., agent=p, environment=p)``) since it has ``agent_id`` and ``environment_id``."""

    agent: AgentHandle
    environment: EnvironmentHandle
    created: tuple[str, ...] = attrs.field(default=(), eq=False)
    """Names of the resources this call created (empty on a full reuse)."""

    @property
    def agent_id(self) -> str:
        return self.agent.agent_id

    @property
    def environment_id(self) -> str:
        return self.environment.environment_id

    def to_json(self) -> dict[str, JSON]:
        return {"agent": self.agent.to_json(), "environment": self.environment.to_json()}


@attrs.frozen
class Pruned:
    """What ``prune`` did (V-38): names archived, oldest first; names kept — the newest
    ``keep`` first, then the tagged ones."""

    archived: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()


# --- helpers ---------------------------------------------------------------------------------


@attrs.define
class _Made:
    """What one ensure call created (not adopted or reused), for provision's rollback."""

    created: bool = False


def _key(kind: str, base: str) -> StoreKey:
    return StoreKey(provider=PROVIDER, kind=kind, base=base)


def _check_base(base: object) -> Result[str, SessionError]:
    checked = identity.check_base(base)
    if isinstance(checked, Failure):
        return Failure(InvalidOpts(option="base", detail=checked.failure().detail))
    return Success(checked.unwrap())


def _check_kind(kind: object) -> Result[Kind, SessionError]:
    if kind == "agent":
        return Success("agent")
    if kind == "environment":
        return Success("environment")
    return Failure(InvalidOpts(option="kind", detail=f"must be 'agent' or 'environment', got {kind!r}"))


def _path(kind: Kind) -> str:
    return "/v1/agents" if kind == "agent" else "/v1/environments"


async def _list(
    client: CMAClient, kind: Kind, *, include_archived: bool, page_limit: int
) -> Result[list[JSON], SessionError]:
    """Every page of agents or environments. Goes through ``_list_all`` (which follows
    ``next_page`` and stops on a repeated cursor) because ``list_environments`` takes no
    page size."""
    params = {"include_archived": include_archived, "limit": page_limit}
    return await client._list_all(_path(kind), params)


def _created_at(item: Mapping[str, JSON]) -> datetime | None:
    stamp = item.get("created_at")
    if not isinstance(stamp, str):
        return None
    try:
        parsed = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


_NEVER: Final = datetime.max.replace(tzinfo=UTC)


def _oldest_first(items: Iterable[dict[str, JSON]]) -> list[dict[str, JSON]]:
    # An unreadable timestamp sorts as the newest: never archive what cannot be aged.
    return sorted(items, key=lambda i: (_created_at(i) or _NEVER, str(i.get("id"))))


def _live(item: Mapping[str, JSON]) -> bool:
    return not item.get("archived_at")


async def _named(
    client: CMAClient, kind: Kind, name: str, page_limit: int
) -> Result[tuple[list[dict[str, JSON]], list[dict[str, JSON]]], SessionError]:
    """(live, archived) resources named exactly ``name``, oldest first, over every page."""
    listed = await _list(client, kind, include_archived=True, page_limit=page_limit)
    if isinstance(listed, Failure):
        return Failure(listed.failure())
    same = _oldest_first(
        item
        for item in listed.unwrap()
        if isinstance(item, dict) and item.get("name") == name and isinstance(item.get("id"), str)
    )
    return Success(([i for i in same if _live(i)], [i for i in same if not _live(i)]))


def _version(item: Mapping[str, JSON]) -> int | None:
    version = item.get("version")
    return version if isinstance(version, int) and not isinstance(version, bool) else None


def _entry(kind: Kind, item: Mapping[str, JSON], name: str, data: Mapping[str, JSON]) -> Entry:
    return Entry(
        remote_id=str(item["id"]), name=name, version=_version(item) if kind == "agent" else None, data=data
    )


def _archived_error(kind: Kind, name: str, archived: list[dict[str, JSON]]) -> NameArchived:
    ids = tuple(str(i["id"]) for i in archived)
    return (
        AgentArchived(name=name, archived_ids=ids)
        if kind == "agent"
        else EnvironmentArchived(name=name, archived_ids=ids)
    )


def _conflict_error(kind: Kind, name: str, response: JSON) -> NameConflict:
    if kind == "agent":
        return AgentNameConflict(name=name, response=response)
    return EnvironmentNameConflict(name=name, response=response)


async def _create(client: CMAClient, kind: Kind, body: Mapping[str, JSON]) -> Result[JSON, SessionError]:
    if kind == "agent":
        return await client.create_agent(body)
    return await client.create_environment(body)


async def _build(
    client: CMAClient,
    kind: Kind,
    name: str,
    body: Mapping[str, JSON],
    data: Mapping[str, JSON],
    page_limit: int,
    made: _Made,
) -> Result[Entry, SessionError]:
    """Adopt a live resource of this exact name, else create it (recovering a 409 by name)."""
    fields = log_fields(provider=PROVIDER, resource=kind, name=name)
    found = await _named(client, kind, name, page_limit)
    if isinstance(found, Failure):
        return Failure(found.failure())
    live, _archived = found.unwrap()
    if live:
        log.info("%s %s exists (%s); adopting it", kind, name, live[0]["id"], extra=fields)
        return Success(_entry(kind, live[0], name, data))
    created = await _create(client, kind, body)
    if isinstance(created, Success):
        answer = created.unwrap()
        if not isinstance(answer, dict) or not isinstance(answer.get("id"), str) or not answer["id"]:
            return Failure(UnexpectedCreateResponse(resource=kind, name=name, response=answer))
        made.created = True
        log.info("created %s %s (%s)", kind, name, answer["id"], extra=fields)
        return Success(_entry(kind, answer, name, data))
    error = created.failure()
    if not isinstance(error, HttpError) or error.status != 409:
        return Failure(error)
    # V-23/V-28 over every page (§15 row 21): someone else made it, or the name is archived.
    again = await _named(client, kind, name, page_limit)
    if isinstance(again, Failure):
        return Failure(again.failure())
    live, archived = again.unwrap()
    if live:
        log.info("%s %s appeared concurrently (%s); adopting it", kind, name, live[0]["id"], extra=fields)
        return Success(_entry(kind, live[0], name, data))
    if archived:
        return Failure(_archived_error(kind, name, archived))
    return Failure(_conflict_error(kind, name, error.body))


async def _ensure(
    store: Store,
    key: StoreKey,
    digest: str,
    build: Callable[[], Awaitable[Result[Entry, SessionError]]],
) -> Result[Record | Entry, SessionError]:
    try:
        ensured = await ensure_record(store, key, digest, build)
    except StoreError as exc:
        # V-13: a failing store is a miss, not an outage; the name lookup prevents a duplicate.
        log.warning(
            "store failed (%s); provisioning %s without it",
            exc,
            key.base,
            extra=log_fields(provider=PROVIDER, resource=key.kind, base=key.base),
        )
        built = await build()
        if isinstance(built, Failure):
            return Failure(built.failure())
        return Success(built.unwrap())
    if isinstance(ensured, Failure):
        return Failure(ensured.failure())
    return Success(ensured.unwrap().record)


def _agent_handle(found: Record | Entry, digest: str) -> AgentHandle:
    return AgentHandle(agent_id=found.remote_id, name=found.name, digest=digest, version=found.version)


def _environment_handle(found: Record | Entry, digest: str, runtimes: Iterable[Runtime]) -> EnvironmentHandle:
    return EnvironmentHandle(
        environment_id=found.remote_id, name=found.name, digest=digest, bootstrap=bootstrap(runtimes)
    )


def _runtimes_json(spec: EnvironmentSpec) -> list[JSON]:
    return [{"lang": r.lang, "version": r.version, "via": r.via} for r in spec.runtimes]


def _compose(kind: Kind, base: str, digest: str) -> Result[str, BaseTooLong]:
    """V-20: ``<base>_<digest8>``, or a refusal when the base would have to be cut."""
    name = identity.compose_name(base, digest, identity.CLAUDE_NAMES)
    if identity.preserves_base(name, base):
        return Success(name)
    max_bytes = identity.CLAUDE_NAMES.max_bytes
    if kind == "agent":
        return Failure(AgentBaseTooLong(base=base, max_bytes=max_bytes))
    return Failure(EnvironmentBaseTooLong(base=base, max_bytes=max_bytes))


# --- ensure ----------------------------------------------------------------------------------


def agent_body(spec: AgentSpec, name: str) -> dict[str, JSON]:
    """V-22: ``{name, model, system, tools}`` — the model config with its id bare (C-26:
    ``anthropic:claude-sonnet-4-6`` is sent as ``claude-sonnet-4-6``; the identity digest is
    still of the spec as written), tools as custom tools; the terminal tool is the session
    loop's business and never sent."""
    body: dict[str, JSON] = {"name": name, "model": wire_model(spec.model_config)}
    if spec.system_prompt is not None:
        body["system"] = spec.system_prompt
    if spec.tools:
        body["tools"] = [{"type": "custom", **tool.to_json()} for tool in spec.tools]
    body.update(spec.extensions())  # skills, mcp_servers, multiagent: as written, when set
    return body


def environment_body(spec: EnvironmentSpec, name: str) -> dict[str, JSON]:
    """V-28: ``{name, config}`` with the runtimes' hosts merged (``wire_config``); an empty
    config is omitted (the provider's default: cloud, unrestricted)."""
    body: dict[str, JSON] = {"name": name}
    config = wire_config(spec)
    if config:
        body["config"] = config
    return body


@attrs.frozen
class _Plan:
    """A validated ensure: the store key, the digest, the provider-side name, the body."""

    kind: Kind
    key: StoreKey
    digest: str
    name: str
    body: dict[str, JSON]
    data: dict[str, JSON]
    runtimes: tuple[Runtime, ...] = ()


def _plan_agent(spec: object, base: str | None) -> Result[_Plan, SessionError]:
    coerced = AgentSpec.coerce(spec)
    if isinstance(coerced, Failure):
        return Failure(coerced.failure())
    agent = coerced.unwrap()
    if agent.model_config is None:
        return Failure(
            InvalidSpec(
                spec="agent",
                path="model_config",
                detail='Claude Managed Agents needs a model: a model id or {"id": …}',
            )
        )
    checked = _check_base(agent.name if base is None else base)
    if isinstance(checked, Failure):
        return Failure(checked.failure())
    root, digest = checked.unwrap(), agent.digest
    named = _compose("agent", root, digest)
    if isinstance(named, Failure):
        return Failure(named.failure())
    name = named.unwrap()
    return Success(_Plan("agent", _key("agent", root), digest, name, agent_body(agent, name), {}))


def _plan_environment(spec: object, base: str | None) -> Result[_Plan, SessionError]:
    if spec is None:
        return Failure(InvalidSpec(spec="environment", detail="an environment spec is required"))
    coerced = EnvironmentSpec.coerce(spec)
    if isinstance(coerced, Failure):
        return Failure(coerced.failure())
    env = coerced.unwrap()
    checked = _check_base(base if base is not None else env.name or "env")
    if isinstance(checked, Failure):
        return Failure(checked.failure())
    root, digest = checked.unwrap(), env.digest
    named = _compose("environment", root, digest)
    if isinstance(named, Failure):
        return Failure(named.failure())
    name = named.unwrap()
    # The runtimes ride along in the record so ``resolve`` can rebuild the bootstrap.
    data: dict[str, JSON] = {"runtimes": _runtimes_json(env)} if env.runtimes else {}
    body = environment_body(env, name)
    return Success(_Plan("environment", _key("environment", root), digest, name, body, data, env.runtimes))


async def _run_plan(
    client: CMAClient, store: Store, plan: _Plan, page_limit: int, made: _Made
) -> Result[Record | Entry, SessionError]:
    build = functools.partial(
        _build, client, plan.kind, plan.name, plan.body, plan.data, _page_limit(page_limit), made
    )
    return await _ensure(store, plan.key, plan.digest, build)


async def _ensure_agent(
    client: CMAClient, plan: _Plan, store: Store, page_limit: int, made: _Made
) -> Result[AgentHandle, SessionError]:
    found = await _run_plan(client, store, plan, page_limit, made)
    return found.map(lambda f: _agent_handle(f, plan.digest))


async def _ensure_environment(
    client: CMAClient, plan: _Plan, store: Store, page_limit: int, made: _Made
) -> Result[EnvironmentHandle, SessionError]:
    found = await _run_plan(client, store, plan, page_limit, made)
    return found.map(lambda f: _environment_handle(f, plan.digest, plan.runtimes))


def _page_limit(page_limit: int) -> int:
    if isinstance(page_limit, bool) or not isinstance(page_limit, int) or not 1 <= page_limit <= 100:
        raise ValueError(f"page_limit must be an integer in 1..100, got {page_limit!r}")
    return page_limit


async def ensure_agent(
    client: CMAClient,
    spec: AgentSpec | Mapping[str, Any],
    *,
    store: Store,
    base: str | None = None,
    page_limit: int = DEFAULT_PAGE_LIMIT,
) -> Result[AgentHandle, SessionError]:
    """The agent for ``spec``, created only if no live one exists (V-20…V-24).

    ``base`` (default ``spec.name``) names the lineage: the agent is ``<base>_<digest8>``;
    a base that does not fit 256 bytes with its digest is ``AgentBaseTooLong`` with no
    create. A spec without ``model_config`` is ``InvalidSpec`` (the API requires a model).
    Errors: ``InvalidSpec``, ``InvalidOpts`` (base), ``AgentBaseTooLong``, ``AgentArchived``,
    ``AgentNameConflict``, ``UnexpectedCreateResponse``, or the client's error as is.
    ``page_limit`` is the listing page size (1–100).
    """
    plan = _plan_agent(spec, base)
    if isinstance(plan, Failure):
        return Failure(plan.failure())
    return await _ensure_agent(client, plan.unwrap(), store, page_limit, _Made())


async def ensure_environment(
    client: CMAClient,
    spec: EnvironmentSpec | Mapping[str, Any] | None,
    *,
    store: Store,
    base: str | None = None,
    page_limit: int = DEFAULT_PAGE_LIMIT,
) -> Result[EnvironmentHandle, SessionError]:
    """The environment for ``spec``, created only if no live one exists (V-25…V-31).

    ``base`` defaults to the spec's name, else ``"env"``; the environment is
    ``<base>_<digest8>`` (a base too long is ``EnvironmentBaseTooLong``). The config goes on
    the wire through ``wire_config`` (runtimes' hosts merged into limited networking); the
    handle's ``bootstrap`` is set whenever runtimes are declared, on every path. ``None`` is
    ``InvalidSpec`` (V-25). Errors as ``ensure_agent``, with the environment names.
    """
    plan = _plan_environment(spec, base)
    if isinstance(plan, Failure):
        return Failure(plan.failure())
    return await _ensure_environment(client, plan.unwrap(), store, page_limit, _Made())


# --- tags ------------------------------------------------------------------------------------


def _digest_for(
    store: Store, key: StoreKey, kind: Kind, tag_name: str, target: object
) -> Result[str, TagError | InvalidOpts]:
    if isinstance(target, AgentHandle | EnvironmentHandle):
        if (kind == "agent") != isinstance(target, AgentHandle):
            return Failure(InvalidOpts(option="kind", detail=f"a {type(target).__name__} is not a {kind}"))
        return Success(target.digest)
    if identity.is_digest(target):
        assert isinstance(target, str)
        return Success(target)
    if isinstance(target, str) and len(target) == identity.SHORT_DIGEST_LEN:
        matches = [d for d in store.digests(key) if d.startswith(target)]
        if len(matches) == 1:
            return Success(matches[0])
        if len(matches) > 1:
            return Failure(InvalidOpts(option="digest", detail=f"{target} matches {len(matches)} records"))
        return Failure(UntrackedDigest(base=key.base, digest=target, tag=tag_name))
    return Failure(
        InvalidOpts(option="digest", detail=f"expected a handle, a digest or its 8 hex, got {target!r}")
    )


def tag(
    store: Store, kind: Kind, base: str, tag: str, digest_or_handle: Handle | str
) -> Result[None, TagError | InvalidOpts]:
    """Point ``base:tag`` at a stored digest (V-32): a handle (its digest), a full digest or
    its first 8 hex (unique among the base's records). Retagging moves the pointer; an
    unknown digest is ``UntrackedDigest``. Synchronous (a store call): from async code, run it in
    ``anyio.to_thread.run_sync``."""
    if kind not in _KINDS:
        return Failure(InvalidOpts(option="kind", detail=f"must be 'agent' or 'environment', got {kind!r}"))
    checked_base = identity.check_base(base)
    if isinstance(checked_base, Failure):
        return Failure(checked_base.failure())
    key = _key(kind, checked_base.unwrap())
    digest = _digest_for(store, key, kind, tag, digest_or_handle)
    if isinstance(digest, Failure):
        return Failure(digest.failure())
    result: Result[None, TagError | InvalidOpts] = store.set_tag(key, tag, digest.unwrap())
    return result


@overload
def resolve(store: Store, ref: str, kind: Literal["agent"]) -> Result[AgentHandle, ResolveError]: ...


@overload
def resolve(
    store: Store, ref: str, kind: Literal["environment"]
) -> Result[EnvironmentHandle, ResolveError]: ...


def resolve(
    store: Store, ref: str, kind: Kind
) -> Result[AgentHandle, ResolveError] | Result[EnvironmentHandle, ResolveError]:
    """``"base:tag"`` → the tagged handle (V-33, V-34): ``UnknownTag`` when the tag is not
    set, ``UntrackedDigest`` when its record is gone, ``InvalidRef`` for a malformed ref —
    never another version. An environment handle gets its bootstrap back from the runtimes
    recorded with it. Synchronous, like ``tag``."""
    if kind not in _KINDS:
        raise ValueError(f"kind must be 'agent' or 'environment', got {kind!r}")
    found = store.resolve(ref, provider=PROVIDER, kind=kind)
    if kind == "agent":
        return found.map(lambda r: _agent_handle(r, r.digest))
    return found.map(lambda r: _environment_handle(r, r.digest, _recorded_runtimes(r)))


def _recorded_runtimes(record: Record) -> tuple[Runtime, ...]:
    listed = record.data.get("runtimes")
    checked = EnvironmentSpec.create(runtimes=listed if isinstance(listed, list) else [])
    # A record written by hand or by another version may hold garbage: no bootstrap then.
    return checked.unwrap().runtimes if isinstance(checked, Success) else ()


# --- prune -----------------------------------------------------------------------------------


def _check_keep(keep: object) -> Result[int, KeepRequired]:
    if isinstance(keep, bool) or not isinstance(keep, int) or keep <= 0:
        return Failure(KeepRequired(keep=repr(keep)))
    return Success(keep)


async def _archive(client: CMAClient, kind: Kind, remote_id: str) -> Result[None, SessionError]:
    """Archive; a resource already gone (404) counts as archived."""
    if kind == "agent":
        done = await client.archive_agent(remote_id)
    else:
        done = await client.archive_environment(remote_id)
    if isinstance(done, Failure):
        error = done.failure()
        if isinstance(error, HttpError) and error.status == 404:
            return Success(None)
        return Failure(error)
    return Success(None)


async def _evict(store: Store, remote_id: str) -> None:
    try:
        await anyio.to_thread.run_sync(store.delete_remote, PROVIDER, remote_id)
    except StoreError as exc:
        log.warning(
            "archived %s but could not evict its store records: %s",
            remote_id,
            exc,
            extra=log_fields(provider=PROVIDER, remote_id=remote_id),
        )


async def prune(
    client: CMAClient,
    store: Store,
    kind: Kind,
    base: str,
    *,
    keep: int | None = None,
    page_limit: int = DEFAULT_PAGE_LIMIT,
) -> Result[Pruned, SessionError]:
    """Archive old versions of ``base`` (V-35…V-39), keeping the newest ``keep`` and every
    tagged digest.

    ``keep`` is required, an integer > 0 (else ``KeepRequired``, before any call). Candidates
    are the live resources named exactly ``<base>_<8 hex>`` on every listing page, ordered by
    ``created_at`` as datetimes. The rest is archived oldest first; after each archive the
    store records holding that resource are removed. The first failure stops the prune:
    ``PrunePartial`` says what was archived and what failed (its records are kept).
    """
    kept_n = _check_keep(keep)
    if isinstance(kept_n, Failure):
        return Failure(kept_n.failure())
    checked_kind = _check_kind(kind)
    if isinstance(checked_kind, Failure):
        return Failure(checked_kind.failure())
    checked_base = _check_base(base)
    if isinstance(checked_base, Failure):
        return Failure(checked_base.failure())
    resource, root = checked_kind.unwrap(), checked_base.unwrap()
    listed = await _list(client, resource, include_archived=False, page_limit=_page_limit(page_limit))
    if isinstance(listed, Failure):
        return Failure(listed.failure())
    candidates = [
        item
        for item in listed.unwrap()
        if isinstance(item, dict)
        and isinstance(item.get("id"), str)
        and isinstance(item.get("name"), str)
        and _live(item)
        and identity.digest_of_name(str(item["name"]), root, identity.CLAUDE_NAMES) is not None
    ]
    newest_first = list(reversed(_oldest_first(candidates)))
    tags = await anyio.to_thread.run_sync(store.tags, _key(resource, root))
    tagged = {identity.short_digest(d) for d in tags.values()}
    newest, rest = newest_first[: kept_n.unwrap()], newest_first[kept_n.unwrap() :]
    kept_tagged = [i for i in rest if str(i["name"])[-identity.SHORT_DIGEST_LEN :] in tagged]
    spared = {str(i["id"]) for i in kept_tagged}
    doomed = [i for i in reversed(rest) if str(i["id"]) not in spared]
    archived: list[str] = []
    for item in doomed:
        name, remote_id = str(item["name"]), str(item["id"])
        done = await _archive(client, resource, remote_id)
        if isinstance(done, Failure):
            return Failure(PrunePartial(archived=tuple(archived), failed=name, reason=done.failure()))
        archived.append(name)
        await _evict(store, remote_id)
    log.info(
        "pruned %d %s(s) of %s, kept %d",
        len(archived),
        resource,
        root,
        len(newest) + len(kept_tagged),
        extra=log_fields(provider=PROVIDER, resource=resource, base=root),
    )
    return Success(
        Pruned(archived=tuple(archived), kept=tuple(str(i["name"]) for i in [*newest, *kept_tagged]))
    )


# --- provision / teardown --------------------------------------------------------------------


async def _roll_back(client: CMAClient, store: Store, kind: Kind, remote_id: str, name: str) -> bool:
    """Archive what this call created; best effort on its own budget, shielded from the
    caller's cancellation. True when it is archived."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(ROLLBACK_BUDGET_S):
        try:
            done = await _archive(client, kind, remote_id)
        except Exception as exc:
            log.error("could not roll back %s %s (it is left behind): %r", kind, name, exc)
            return False
        if isinstance(done, Failure):
            log.error("could not roll back %s %s (it is left behind): %s", kind, name, done.failure().message)
            return False
        await _evict(store, remote_id)
        log.info("rolled back %s %s", kind, name)
        return True
    log.error(
        "could not roll back %s %s (it is left behind): no answer in %.0fs", kind, name, ROLLBACK_BUDGET_S
    )
    return False


async def provision(
    provider_kind: str,
    client: CMAClient,
    agent_spec: AgentSpec | Mapping[str, Any],
    environment_spec: EnvironmentSpec | Mapping[str, Any] | None = None,
    *,
    store: Store,
    agent_base: str | None = None,
    environment_base: str | None = None,
    page_limit: int = DEFAULT_PAGE_LIMIT,
) -> Result[Provisioned, SessionError]:
    """An agent and its environment, created or reused (V-10…V-12, C-22…C-24).

    ``provider_kind`` must be ``"claude_managed_agents"`` (AgentCore harnesses are provisioned
    by ``rma_shell.providers.agentcore.provisioning``). Both resources go through ``ensure_agent`` and
    ``ensure_environment``, so the cache is the store: a second call with the same specs is
    a hit for both (no create, no listing). No environment means the default
    ``{"type": "cloud", "networking": {"type": "unrestricted"}}``; the environment's base is
    ``environment_base``, else its spec's name, else ``<agent base>_env``.

    When the environment step fails, an agent *this call created* is archived again (never
    one it adopted or reused) — also on cancellation, shielded, within
    ``ROLLBACK_BUDGET_S``. Failures are ``ProvisionFailed(step, reason, rolled_back,
    rollback_failed)``; specs are validated before anything is created.
    """
    if provider_kind != PROVIDER:
        return Failure(
            InvalidOpts(
                option="provider",
                detail=f"this flow provisions {PROVIDER!r}; for AgentCore harnesses use "
                f"rma_shell.providers.agentcore.provisioning (got {provider_kind!r})",
            )
        )
    agent_plan = _plan_agent(agent_spec, agent_base)
    if isinstance(agent_plan, Failure):
        return Failure(agent_plan.failure())
    env_spec = EnvironmentSpec.coerce(
        environment_spec if environment_spec is not None else {"config": DEFAULT_ENVIRONMENT_CONFIG}
    )
    if isinstance(env_spec, Failure):
        return Failure(env_spec.failure())
    # Everything is validated before the first create, so a bad environment never costs an
    # agent create and its rollback (V-12).
    env_root = environment_base or env_spec.unwrap().name or f"{agent_plan.unwrap().key.base}_env"
    env_plan = _plan_environment(env_spec.unwrap(), env_root)
    if isinstance(env_plan, Failure):
        return Failure(env_plan.failure())
    agent_made = _Made()
    got_agent = await _ensure_agent(client, agent_plan.unwrap(), store, page_limit, agent_made)
    if isinstance(got_agent, Failure):
        return Failure(ProvisionFailed(step="agent", reason=got_agent.failure()))
    handle = got_agent.unwrap()
    env_made = _Made()
    try:
        got_env = await _ensure_environment(client, env_plan.unwrap(), store, page_limit, env_made)
    except BaseException:
        if agent_made.created:
            await _roll_back(client, store, "agent", handle.agent_id, handle.name)
        raise
    if isinstance(got_env, Failure):
        rolled: tuple[str, ...] = ()
        failed: tuple[str, ...] = ()
        if agent_made.created:
            ok = await _roll_back(client, store, "agent", handle.agent_id, handle.name)
            rolled, failed = ((handle.name,), ()) if ok else ((), (handle.name,))
        return Failure(
            ProvisionFailed(
                step="environment", reason=got_env.failure(), rolled_back=rolled, rollback_failed=failed
            )
        )
    env_handle = got_env.unwrap()
    created = tuple(
        name for name, made in ((handle.name, agent_made), (env_handle.name, env_made)) if made.created
    )
    return Success(Provisioned(agent=handle, environment=env_handle, created=created))


def _flatten(handles: object) -> list[Handle]:
    if isinstance(handles, Provisioned):
        return [handles.agent, handles.environment]
    if isinstance(handles, AgentHandle | EnvironmentHandle):
        return [handles]
    if isinstance(handles, Iterable) and not isinstance(handles, str | bytes | Mapping):
        return [h for item in handles for h in _flatten(item)]
    raise TypeError(f"expected handles (AgentHandle, EnvironmentHandle, Provisioned), got {handles!r}")


async def teardown(
    client: CMAClient,
    store: Store,
    handles: Provisioned | Handle | Iterable[Provisioned | Handle],
) -> Result[tuple[str, ...], SessionError]:
    """Archive every resource of ``handles`` (agents first, in order) and evict its store
    records (C-25, V-15). Every handle is attempted; one already gone (404) counts as
    archived. ``Success(names archived)``, or ``TeardownFailed`` listing the failures (their
    records are kept, so a retry finds them)."""
    archived: list[str] = []
    failures: list[tuple[str, SessionError]] = []
    ordered = sorted(_flatten(handles), key=lambda h: 0 if isinstance(h, AgentHandle) else 1)
    for handle in ordered:
        if isinstance(handle, AgentHandle):
            kind: Kind = "agent"
            remote_id = handle.agent_id
        else:
            kind, remote_id = "environment", handle.environment_id
        done = await _archive(client, kind, remote_id)
        if isinstance(done, Failure):
            failures.append((handle.name, done.failure()))
            continue
        archived.append(handle.name)
        await _evict(store, remote_id)
    if failures:
        return Failure(TeardownFailed(archived=tuple(archived), failures=tuple(failures)))
    return Success(tuple(archived))


__all__ = [
    "DEFAULT_ENVIRONMENT_CONFIG",
    "DEFAULT_PAGE_LIMIT",
    "PROVIDER",
    "ROLLBACK_BUDGET_S",
    "AgentHandle",
    "EnvironmentHandle",
    "Handle",
    "Kind",
    "Provisioned",
    "Pruned",
    "agent_body",
    "ensure_agent",
    "ensure_environment",
    "environment_body",
    "provision",
    "prune",
    "resolve",
    "tag",
    "teardown",
]

# A run's request keeps the handles it was given (``agent=``, ``environment=``): a journal
# records them, so a resume — in this process or another — must decode them.
for _recorded in (AgentHandle, EnvironmentHandle, Provisioned, Bootstrap):
    register(_recorded)
