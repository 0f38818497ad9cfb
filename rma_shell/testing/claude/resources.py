"""The Claude Managed Agents emulator's control plane: agents, environments, sessions, files.

Create, get, update, list, archive and delete of agents (versioned), environments, sessions
(and their resources) and files (upload, metadata, download), with the API's validation and
pagination. Session creation hands ``initial_events`` to the data plane (``streams``). Not
the events and streams themselves, nor the HTTP plumbing (``server``).
"""

from __future__ import annotations

import copy
import mimetypes
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from rma_shell.testing.claude.state import (
    _END,
    _SESSION_AGENT_KEYS,
    _Agent,
    _File,
    _Reply,
    _Resource,
    _Session,
)
from rma_shell.testing.claude.threads import _Threads
from rma_shell.testing.claude.wire import (
    _budget,
    _check_mcp_references,
    _env_config,
    _in_range,
    _invalid,
    _list,
    _mcp_servers,
    _metadata,
    _metadata_patch,
    _model,
    _multipart,
    _not_found,
    _optional_str,
    _Query,
    _Rejected,
    _require_object,
    _scope,
    _tools,
)

JSONDict = dict[str, Any]


class _Resources(_Threads):
    """The resource routes (called under the emulator's lock)."""

    # -- agents --

    def _route_agents(self, method: str, rest: list[str], q: _Query, body: Any) -> Any:
        if not rest:
            if method == "POST":
                return self._create_agent(_require_object(body))
            if method == "GET":
                return self._list_agents(q)
        elif len(rest) == 1:
            agent = self._agent(rest[0])
            if method == "GET":
                version = q.int("version", None, 1, None)
                if version is None:
                    return agent.versions[-1]
                if version > len(agent.versions):
                    raise _not_found("Agent version", f"{rest[0]}@{version}")
                return agent.versions[version - 1]
            if method == "POST":
                return self._update_agent(agent, _require_object(body))
        elif len(rest) == 2 and rest[1] == "archive" and method == "POST":
            agent = self._agent(rest[0])
            stamp = self._now()
            for snapshot in agent.versions:
                snapshot["archived_at"] = snapshot["archived_at"] or stamp
            return agent.versions[-1]
        elif len(rest) == 2 and rest[1] == "versions" and method == "GET":
            agent = self._agent(rest[0])
            items = [(v["version"], v) for v in reversed(agent.versions)]
            return self._page(items, q, kind=f"versions:{rest[0]}", ascending=False)
        raise _Rejected(404, f"Not found: {method} /v1/agents/{'/'.join(rest)}")

    def _agent(self, agent_id: str) -> _Agent:
        agent = self._agents.get(agent_id)
        if agent is None:
            raise _not_found("Agent", agent_id)
        return agent

    def _create_agent(self, body: JSONDict) -> JSONDict:
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise _invalid("name: Field required (a non-empty string)")
        if "model" not in body:
            raise _invalid("model: Field required")
        if self._unique_names and any(a.versions[-1]["name"] == name for a in self._agents.values()):
            raise _Rejected(409, f"An agent named {name!r} already exists.", "conflict_error")
        stamp = self._now()
        agent: JSONDict = {
            "id": self._id("agent"),
            "type": "agent",
            "name": name,
            "description": _optional_str(body, "description"),
            "model": _model(body["model"]),
            "system": _optional_str(body, "system"),
            "tools": _tools(body.get("tools")),
            "mcp_servers": _mcp_servers(body.get("mcp_servers")),
            "skills": _list(body.get("skills"), "skills"),
            "metadata": _metadata(body.get("metadata"), {}),
            "multiagent": body.get("multiagent"),
            "execution_identity": body.get("execution_identity") or {"type": "service_account"},
            "version": 1,
            "created_at": stamp,
            "updated_at": stamp,
            "archived_at": None,
        }
        _check_mcp_references(agent)
        self._agents[agent["id"]] = _Agent(self._next(), [agent])
        return agent

    def _update_agent(self, agent: _Agent, body: JSONDict) -> JSONDict:
        current = agent.versions[-1]
        expected = body.get("version")
        if expected is not None:
            if not isinstance(expected, int) or isinstance(expected, bool) or expected < 1:
                raise _invalid("version: must be an integer >= 1")
            if expected != current["version"]:
                raise _Rejected(
                    409,
                    f"Agent {current['id']} is at version {current['version']}, not {expected}.",
                    "conflict_error",
                )
        new = copy.deepcopy(current)
        if "name" in body:
            if not isinstance(body["name"], str) or not body["name"]:
                raise _invalid("name: cannot be cleared")
            new["name"] = body["name"]
        if "model" in body:
            new["model"] = _model(body["model"])
        for key in ("description", "system"):
            if key in body:
                new[key] = _optional_str(body, key) or None
        if "tools" in body:
            new["tools"] = _tools(body["tools"])
        if "mcp_servers" in body:
            new["mcp_servers"] = _mcp_servers(body["mcp_servers"])
        if "skills" in body:
            new["skills"] = _list(body["skills"], "skills")
        if "multiagent" in body:
            new["multiagent"] = body["multiagent"]
        if "execution_identity" in body:
            new["execution_identity"] = body["execution_identity"] or {"type": "service_account"}
        if "metadata" in body:
            new["metadata"] = _metadata_patch(current["metadata"], body["metadata"])
        _check_mcp_references(new)
        comparable = ("updated_at", "version")
        if {k: v for k, v in new.items() if k not in comparable} == {
            k: v for k, v in current.items() if k not in comparable
        }:
            return current
        new["version"] = current["version"] + 1
        new["updated_at"] = self._now()
        agent.versions.append(new)
        return new

    def _list_agents(self, q: _Query) -> JSONDict:
        include_archived = q.bool("include_archived")
        gte, lte = q.time("created_at[gte]"), q.time("created_at[lte]")
        items = []
        for agent in sorted(self._agents.values(), key=lambda a: -a.seq):
            latest = agent.versions[-1]
            if latest["archived_at"] and not include_archived:
                continue
            if not _in_range(latest["created_at"], gte=gte, lte=lte):
                continue
            items.append((agent.seq, latest))
        return self._page(items, q, kind="agents", ascending=False)

    # -- environments --

    def _route_environments(self, method: str, rest: list[str], q: _Query, body: Any) -> Any:
        if not rest:
            if method == "POST":
                return self._create_environment(_require_object(body))
            if method == "GET":
                include_archived = q.bool("include_archived")
                items = [
                    (e.seq, e.data)
                    for e in sorted(self._environments.values(), key=lambda e: -e.seq)
                    if include_archived or not e.data["archived_at"]
                ]
                return self._page(items, q, kind="environments", ascending=False)
        elif len(rest) == 1:
            env = self._environment(rest[0])
            if method == "GET":
                return env.data
            if method == "POST":
                return self._update_environment(env, _require_object(body))
            if method == "DELETE":
                del self._environments[rest[0]]
                return {"id": rest[0], "type": "environment_deleted"}
        elif len(rest) == 2 and rest[1] == "archive" and method == "POST":
            env = self._environment(rest[0])
            stamp = self._now()
            env.data["archived_at"] = env.data["archived_at"] or stamp
            env.data["updated_at"] = stamp
            return env.data
        raise _Rejected(404, f"Not found: {method} /v1/environments/{'/'.join(rest)}")

    def _environment(self, environment_id: str) -> _Resource:
        env = self._environments.get(environment_id)
        if env is None:
            raise _not_found("Environment", environment_id, error_code="environment_not_found")
        return env

    def _create_environment(self, body: JSONDict) -> JSONDict:
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise _invalid("name: Field required (a non-empty string)")
        if self._unique_names and any(e.data["name"] == name for e in self._environments.values()):
            raise _Rejected(409, f"An environment named {name!r} already exists.", "conflict_error")
        stamp = self._now()
        data: JSONDict = {
            "id": self._id("env"),
            "type": "environment",
            "name": name,
            "description": _optional_str(body, "description"),
            "config": _env_config(body.get("config"), None),
            "metadata": _metadata(body.get("metadata"), {}),
            "scope": _scope(body.get("scope")),
            "created_at": stamp,
            "updated_at": stamp,
            "archived_at": None,
        }
        self._environments[data["id"]] = _Resource(self._next(), data)
        return data

    def _update_environment(self, env: _Resource, body: JSONDict) -> JSONDict:
        data = env.data
        if body.get("name") is not None:
            if not isinstance(body["name"], str) or not body["name"]:
                raise _invalid("name: must be a non-empty string")
            data["name"] = body["name"]
        if "description" in body:
            data["description"] = _optional_str(body, "description") or None
        if body.get("config") is not None:
            data["config"] = _env_config(body["config"], data["config"])
        if "metadata" in body:
            data["metadata"] = _metadata_patch(data["metadata"], body["metadata"], empty_deletes=True)
        if body.get("scope") is not None:
            data["scope"] = _scope(body["scope"])
        data["updated_at"] = self._now()
        return data

    # -- sessions --

    def _route_sessions(self, method: str, rest: list[str], q: _Query, body: Any) -> Any:
        if not rest:
            if method == "POST":
                return self._create_session(_require_object(body))
            if method == "GET":
                return self._list_sessions(q)
        elif len(rest) == 1:
            session = self._session(rest[0])
            if method == "GET":
                return self._session_out(session)
            if method == "POST":
                return self._update_session(session, _require_object(body))
            if method == "DELETE":
                return self._delete_session(session)
        elif rest[1:] == ["archive"] and method == "POST":
            session = self._session(rest[0])
            stamp = self._now()
            session.data["archived_at"] = session.data["archived_at"] or stamp
            session.data["updated_at"] = stamp
            return self._session_out(session)
        elif rest[1:] == ["events"]:
            session = self._session(rest[0])
            if method == "POST":
                return self._post_events(session, _require_object(body))
            if method == "GET":
                return self._list_events(session, q)
        elif len(rest) >= 2 and rest[1] == "resources":
            return self._route_resources(method, self._session(rest[0]), rest[2:], body, q)
        elif len(rest) >= 2 and rest[1] == "threads":
            return self._route_threads(method, self._session(rest[0]), rest[2:], q)
        raise _Rejected(404, f"Not found: {method} /v1/sessions/{'/'.join(rest)}")

    def _session_agent(self, spec: Any) -> JSONDict:
        if isinstance(spec, str):
            return self._agent(spec).versions[-1]
        if not isinstance(spec, dict) or not isinstance(spec.get("id"), str):
            raise _invalid("agent: expected an agent id, {type: agent, id, version?} or agent_with_overrides")
        kind = spec.get("type", "agent")
        if kind not in ("agent", "agent_with_overrides"):
            raise _invalid(f"agent.type: unknown value {kind!r}")
        agent = self._agent(spec["id"])
        version = spec.get("version")
        if version is None:
            snapshot = agent.versions[-1]
        elif not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise _invalid("agent.version: must be an integer >= 1")
        elif version > len(agent.versions):
            raise _not_found("Agent version", f"{spec['id']}@{version}")
        else:
            snapshot = agent.versions[version - 1]
        if kind == "agent_with_overrides":
            snapshot = copy.deepcopy(snapshot)
            if "model" in spec:
                snapshot["model"] = _model(spec["model"])
            if "system" in spec:
                snapshot["system"] = _optional_str(spec, "system") or None
            if "tools" in spec:
                snapshot["tools"] = _tools(spec["tools"])
            if "mcp_servers" in spec:
                snapshot["mcp_servers"] = _mcp_servers(spec["mcp_servers"])
            if "skills" in spec:
                snapshot["skills"] = _list(spec["skills"], "skills")
        return snapshot

    def _create_session(self, body: JSONDict) -> JSONDict:
        if "agent" not in body:
            raise _invalid("agent: Field required")
        environment_id = body.get("environment_id")
        if not isinstance(environment_id, str):
            raise _invalid("environment_id: Field required")
        snapshot = self._session_agent(body["agent"])
        env = self._environment(environment_id)
        if env.data["archived_at"]:
            raise _invalid(f"Environment {environment_id} is archived.", error_code="environment_archived")
        budget = _budget(body.get("budget"))
        if budget is not None and self._take("drop_budget"):
            budget = None
        initial = body.get("initial_events")
        if initial is not None and (not isinstance(initial, list) or len(initial) > 50):
            raise _invalid("initial_events: at most 50 events")
        vault_ids = body.get("vault_ids") or []
        if not isinstance(vault_ids, list) or not all(isinstance(v, str) for v in vault_ids):
            raise _invalid("vault_ids: expected a list of strings")
        stamp = self._now()
        session_id = self._id("sesn")
        data: JSONDict = {
            "id": session_id,
            "type": "session",
            "status": "idle",
            "agent": {k: copy.deepcopy(snapshot.get(k)) for k in _SESSION_AGENT_KEYS},
            "environment_id": environment_id,
            "title": _optional_str(body, "title"),
            "metadata": _metadata(body.get("metadata"), {}),
            "resources": [],
            "vault_ids": list(vault_ids),
            "budget": budget,
            "usage": {
                "input_tokens": 0,
                "output_tokens": 0,
                "cache_read_input_tokens": 0,
                "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
            },
            "stats": {"active_seconds": 0.0, "duration_seconds": 0.0},
            "outcome_evaluations": [],
            "created_at": stamp,
            "updated_at": stamp,
            "archived_at": None,
            "deployment_id": None,
        }
        session = _Session(
            self._next(),
            data,
            list(self._script),
            self_hosted=env.data["config"].get("type") == "self_hosted",
            created=time.monotonic(),
        )
        resources = [
            self._make_resource(r, f"resources[{i}]") for i, r in enumerate(body.get("resources") or [])
        ]
        if initial:
            self._validate_inputs(session, initial, initial=True)
        session.resources = [(self._next(), r) for r in resources]
        self._sessions[session_id] = session
        if initial:
            try:
                self._accept_inputs(session, initial)
            except _Rejected:
                del self._sessions[session_id]
                raise
        return self._session_out(session)

    def _update_session(self, session: _Session, body: JSONDict) -> JSONDict:
        data = session.data
        if "vault_ids" in body:
            raise _invalid("vault_ids: cannot be updated")
        changed: JSONDict = {}
        if "title" in body:
            data["title"] = changed["title"] = _optional_str(body, "title")
        if "metadata" in body:
            data["metadata"] = changed["metadata"] = _metadata_patch(data["metadata"], body["metadata"])
        if "budget" in body:
            if data["status"] == "terminated":
                raise _invalid("budget: the session is terminated")
            if body["budget"] is not None and data["budget"] is None:
                raise _invalid("budget: rejected with reason budget_create_only")
            data["budget"] = changed["budget"] = _budget(body["budget"])
        if "agent" in body:
            update = _require_object(body["agent"], "agent")
            if data["status"] == "running":
                raise _invalid("agent: cannot be updated while the session is running")
            if "tools" in update:
                data["agent"]["tools"] = _tools(update["tools"])
            if "mcp_servers" in update:
                data["agent"]["mcp_servers"] = _mcp_servers(update["mcp_servers"])
            changed["agent"] = data["agent"]
        if changed:
            data["updated_at"] = self._now()
            self._emit(session, {"type": "session.updated", **copy.deepcopy(changed)})
        return self._session_out(session)

    def _delete_session(self, session: _Session) -> JSONDict:
        event = {"type": "session.deleted", "id": self._id("sevt"), "processed_at": self._now()}
        for sub in session.subscribers:
            sub.queue.put(event)
            sub.queue.put(_END)
        session.subscribers.clear()
        session.deferred.clear()
        del self._sessions[session.data["id"]]
        self._changed.notify_all()
        return {"id": session.data["id"], "type": "session_deleted"}

    def _list_sessions(self, q: _Query) -> JSONDict:
        include_archived = q.bool("include_archived")
        agent_id = q.get("agent_id")
        agent_version = q.int("agent_version", None, 1, None)
        statuses = set(q.list("statuses"))
        bounds = {op: q.time(f"created_at[{op}]") for op in ("gt", "gte", "lt", "lte")}
        order = q.get("order") or "desc"
        if order not in ("asc", "desc"):
            raise _invalid("order: must be 'asc' or 'desc'")
        items = []
        for session in sorted(self._sessions.values(), key=lambda s: s.seq, reverse=order == "desc"):
            data = session.data
            if data["archived_at"] and not include_archived:
                continue
            if agent_id is not None and data["agent"]["id"] != agent_id:
                continue
            if agent_version is not None and data["agent"]["version"] != agent_version:
                continue
            if statuses and data["status"] not in statuses:
                continue
            if not _in_range(data["created_at"], **bounds):
                continue
            items.append((session.seq, self._session_out(session)))
        return self._page(items, q, kind="sessions", ascending=order == "asc", bidirectional=True)

    # -- session resources --

    def _make_resource(self, spec: Any, where: str) -> JSONDict:
        spec = _require_object(spec, where)
        kind = spec.get("type")
        stamp = self._now()
        if kind == "file":
            file_id = spec.get("file_id")
            if not isinstance(file_id, str):
                raise _invalid(f"{where}.file_id: Field required")
            if file_id not in self._files:
                raise _not_found("File", file_id)
            mount = spec.get("mount_path") or f"/mnt/session/uploads/{file_id}"
            return {
                "id": self._id("sesrsc"),
                "type": "file",
                "file_id": file_id,
                "mount_path": mount,
                "created_at": stamp,
                "updated_at": stamp,
            }
        if kind == "github_repository":
            url = spec.get("url")
            if not isinstance(url, str):
                raise _invalid(f"{where}.url: Field required")
            repo = url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
            return {
                "id": self._id("sesrsc"),
                "type": "github_repository",
                "url": url,
                "checkout": spec.get("checkout"),
                "mount_path": spec.get("mount_path") or f"/workspace/{repo}",
                "created_at": stamp,
                "updated_at": stamp,
            }
        if kind == "memory_store":
            store = spec.get("memory_store_id")
            if not isinstance(store, str):
                raise _invalid(f"{where}.memory_store_id: Field required")
            return {
                "type": "memory_store",
                "memory_store_id": store,
                "access": spec.get("access") or "read_write",
                "instructions": spec.get("instructions"),
                "mount_path": f"/mnt/memory/{store}",
            }
        raise _invalid(f"{where}.type: unknown resource type {kind!r}")

    def _route_resources(self, method: str, session: _Session, rest: list[str], body: Any, q: _Query) -> Any:
        if not rest:
            if method == "POST":
                spec = _require_object(body)
                if spec.get("type") != "file":
                    raise _invalid("type: only 'file' resources can be added")
                resource = self._make_resource(spec, "resource")
                session.resources.append((self._next(), resource))
                return resource
            if method == "GET":
                items = [(seq, r) for seq, r in session.resources]
                return self._page(
                    items, q, kind=f"resources:{session.data['id']}", ascending=True, max_limit=1000
                )
        elif len(rest) == 1:
            found = [(seq, r) for seq, r in session.resources if r.get("id") == rest[0]]
            if not found:
                raise _not_found("Session resource", rest[0])
            resource = found[0][1]
            if method == "GET":
                return resource
            if method == "POST":
                resource["updated_at"] = self._now()
                return resource
            if method == "DELETE":
                session.resources.remove(found[0])
                return {"id": rest[0], "type": "session_resource_deleted"}
        raise _Rejected(404, f"Not found: {method} resources/{'/'.join(rest)}")

    # -- files --

    def _new_file(
        self, filename: str, content: bytes, mime_type: str | None, *, downloadable: bool
    ) -> JSONDict:
        name = filename.replace("\\", "/").rsplit("/", 1)[-1]
        mime = mime_type or mimetypes.guess_type(name)[0] or "application/octet-stream"
        if not name:
            name = "unnamed" + (mimetypes.guess_extension(mime) or "")
        meta: JSONDict = {
            "id": self._id("file"),
            "type": "file",
            "filename": name,
            "mime_type": mime,
            "size_bytes": len(content),
            "created_at": self._now(),
            "downloadable": downloadable,
        }
        self._files[meta["id"]] = _File(self._next(), meta, content)
        return meta

    def _upload(self, headers: Mapping[str, str], raw: bytes) -> JSONDict:
        fields = _multipart(headers.get("content-type", ""), raw)
        filename, content_type, content = fields.get("file") or (None, None, b"")
        if filename is None:
            raise _invalid("file: Field required (a multipart file part)")
        expires = fields.get("expires_in_seconds")
        expires_at = None
        if expires is not None:
            try:
                seconds = int(expires[2].decode())
            except ValueError:
                raise _invalid("expires_in_seconds: expected an integer") from None
            if not 3600 <= seconds <= 7_776_000:
                raise _invalid("expires_in_seconds: must be between 3600 and 7776000")
            expires_at = (datetime.now(UTC) + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        mime = content_type if content_type and content_type != "application/octet-stream" else None
        meta = self._new_file(filename, content, mime, downloadable=self._uploads_downloadable)
        if expires_at is not None:
            meta["expires_at"] = expires_at
        return meta

    def _route_files(self, method: str, rest: list[str], q: _Query) -> _Reply:
        if not rest and method == "GET":
            ids = q.list("ids")
            if ids:
                if q.get("page") is not None or q.get("limit") is not None:
                    raise _invalid("ids: mutually exclusive with page and limit")
                if len(set(ids)) > 100:
                    raise _invalid("ids: at most 100 entries")
                data = [self._files[i].meta for i in dict.fromkeys(ids) if i in self._files]
                return self._json(200, {"data": data, "next_page": None})
            scope_id = q.get("scope_id")
            items = [
                (f.seq, f.meta)
                for f in sorted(self._files.values(), key=lambda f: -f.seq)
                if scope_id is None or (f.meta.get("scope") or {}).get("id") == scope_id
            ]
            return self._json(200, self._page(items, q, kind="files", ascending=False, max_limit=1000))
        if len(rest) >= 1:
            stored = self._files.get(rest[0])
            if stored is None:
                raise _not_found("File", rest[0])
            if len(rest) == 1 and method == "GET":
                return self._json(200, stored.meta)
            if len(rest) == 1 and method == "DELETE":
                del self._files[rest[0]]
                return self._json(200, {"id": rest[0], "type": "file_deleted"})
            if rest[1:] == ["content"] and method == "GET":
                if not stored.meta.get("downloadable"):
                    raise _invalid(f"File {rest[0]} is not downloadable.", error_code="file_not_downloadable")
                return _Reply(200, stored.content, stored.meta["mime_type"])
        raise _Rejected(404, f"Not found: {method} /v1/files/{'/'.join(rest)}")
