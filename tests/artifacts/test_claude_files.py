"""Claude Files artifacts against the CMA emulator, through the public API (A-2…A-6)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import attrs
import httpx
import pytest
from returns.result import Failure, Result, Success

from rma.errors import HttpError, InvalidOpts, MalformedResponse, NotFound, SessionError
from rma.vocabulary import JSON
from rma_shell.artifacts import Artifact, ArtifactStore, ClaudeFiles
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.providers.claude.client import CMAClient
from rma_shell.testing import CMAEmulator, status_once

KEY = "sk-ant-test-files"


@attrs.frozen
class Env:
    emu: CMAEmulator
    client: CMAClient
    session_id: str
    other_session_id: str

    def store(self, **kw: Any) -> ClaudeFiles:
        return ClaudeFiles(self.client, self.session_id, **kw)

    def requests(self, method: str, fragment: str) -> list[Any]:
        return [r for r in self.emu.requests if r.method == method and fragment in r.path]


async def _session(client: CMAClient) -> str:
    agent = (await client.create_agent({"name": "a", "model": "claude-sonnet-4-6"})).unwrap()
    env = (await client.create_environment({"name": "e", "config": {"type": "cloud"}})).unwrap()
    session = await client.create_session({"agent": agent["id"], "environment_id": env["id"]})
    return str(session.unwrap()["id"])


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    with CMAEmulator(api_key=KEY) as emu:
        provider = ClaudeManagedAgents(api_key=KEY, base_url=emu.base_url, env={}, max_retries=2)
        client = provider.client().unwrap()
        try:
            first, second = await _session(client), await _session(client)
            emu.requests.clear()
            yield Env(emu, client, first, second)
        finally:
            await provider.close()


# ── list ──


async def test_A4_list_is_scoped_to_the_session_and_walks_every_page(env: Env) -> None:
    for i in range(1001):  # the API's page cap is 1000: the last file is on a second page
        env.emu.add_output_file(env.session_id, f"out-{i:04d}.txt", f"{i}")
    env.emu.add_output_file(env.other_session_id, "theirs.txt", "no")
    await env.client.upload_file("upload.txt", b"unscoped")
    env.emu.requests.clear()

    listed = (await env.store().list()).unwrap()

    assert sorted(a.name for a in listed) == [f"out-{i:04d}.txt" for i in range(1001)]
    pages = env.requests("GET", "/v1/files")
    assert len(pages) == 2
    queries = [parse_qs(urlsplit(r.path).query) for r in pages]
    assert all(q["scope_id"] == [env.session_id] for q in queries)
    assert "page" not in queries[0] and queries[1]["page"][0].startswith("page_")


async def test_A3_A4_a_listed_file_is_an_artifact_with_the_raw_metadata(env: Env) -> None:
    meta = env.emu.add_output_file(env.session_id, "report.md", "# Q3\n")
    [artifact] = (await env.store().list()).unwrap()
    assert (artifact.name, artifact.size, artifact.ref) == ("report.md", 5, meta["id"])
    assert artifact.raw == meta
    assert artifact.created_at is not None and artifact.created_at.tzinfo is not None
    assert artifact.created_at.isoformat().startswith(meta["created_at"][:19])
    encoded = json.dumps(artifact.to_json())
    assert Artifact.from_json(json.loads(encoded)) == artifact


async def test_A4_listing_errors_pass_through(env: Env) -> None:
    env.emu.inject(status_once(403, method="GET", path=r"^/v1/files$"))
    got = await env.store().list()
    error = got.failure()
    assert isinstance(error, HttpError) and error.status == 403


# ── fetch and delete ──


async def test_A2_A5_fetch_and_delete_act_on_the_newest_exact_match(env: Env) -> None:
    store = env.store()
    old = env.emu.add_output_file(env.session_id, "report.md", "first run")
    new = env.emu.add_output_file(env.session_id, "report.md", "second run")
    env.emu.add_output_file(env.session_id, "report.md.bak", "not this one")

    assert [a.ref for a in (await store.list()).unwrap() if a.name == "report.md"] == [new["id"], old["id"]]
    assert (await store.fetch("report.md")).unwrap() == b"second run"

    assert await store.delete("report.md") == Success(None)
    assert [r.path for r in env.requests("DELETE", "/v1/files/")] == [f"/v1/files/{new['id']}"]
    assert (await store.fetch("report.md")).unwrap() == b"first run"  # the older run resurfaces
    assert (await store.fetch("report.md.bak")).unwrap() == b"not this one"


async def test_A2_A5_missing_names_are_not_found_and_touch_nothing(env: Env) -> None:
    env.emu.add_output_file(env.other_session_id, "report.md", "another session's")
    store = env.store()
    assert (await store.fetch("report.md")).failure() == NotFound(resource="artifact", name="report.md")
    assert (await store.delete("report.md")).failure() == NotFound(resource="artifact", name="report.md")
    assert env.requests("DELETE", "/v1/files") == [] and env.requests("GET", "/content") == []


# ── put ──


async def test_A6_put_uploads_then_attaches_at_the_mount_path(env: Env) -> None:
    got = (await env.store().put("notes.md", b"# notes\n")).unwrap()

    [upload] = env.requests("POST", "/v1/files")
    assert b'name="file"; filename="notes.md"' in upload.raw and b"# notes\n" in upload.raw
    assert b'name="purpose"' not in upload.raw  # wire §15 row 4: the SDK's form, no purpose field
    [attach] = env.requests("POST", f"/v1/sessions/{env.session_id}/resources")
    assert attach.body == {"type": "file", "file_id": got.ref, "mount_path": "/mnt/session/uploads/notes.md"}
    assert (got.name, got.size) == ("notes.md", 8)
    assert isinstance(got.raw, dict) and got.raw["resource"]["mount_path"] == "/mnt/session/uploads/notes.md"
    assert got.raw["file"]["id"] == got.ref
    [resource] = env.emu.session(env.session_id)["resources"]
    assert (resource["file_id"], resource["mount_path"]) == (got.ref, "/mnt/session/uploads/notes.md")


def _part_type(upload: Any) -> str:
    """The Content-Type header of the multipart ``file`` part, as sent."""
    head = upload.raw.split(b'name="file"', 1)[1].split(b"\r\n\r\n", 1)[0]
    [line] = [ln for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-type:")]
    return line.split(b":", 1)[1].strip().decode()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("prices.csv", "text/csv"),
        ("config.json", "application/json"),
        ("chart.png", "image/png"),
        ("report.pdf", "application/pdf"),
        ("rows.csv.gz", "application/gzip"),  # the bytes are gzip, whatever they unpack to
        ("bundle.tar.xz", "application/x-xz"),
        ("no_extension", "application/octet-stream"),
        ("data.unknownext", "application/octet-stream"),
    ],
)
async def test_A6_the_upload_part_carries_the_type_inferred_from_the_name(
    name: str, expected: str, env: Env
) -> None:
    got = (await env.store().put(name, b"bytes")).unwrap()
    [upload] = env.requests("POST", "/v1/files")
    assert _part_type(upload) == expected
    assert isinstance(got.raw, dict) and got.raw["file"]["mime_type"] == expected  # as the API recorded it


async def test_A6_an_explicit_mime_type_wins_over_the_name(env: Env) -> None:
    await env.store().put("export.csv", b"{}", mime_type="application/json; charset=utf-8")
    [upload] = env.requests("POST", "/v1/files")
    assert _part_type(upload) == "application/json; charset=utf-8"


@pytest.mark.parametrize("bad", ["", "csv", "text/csv\r\nX-Injected: 1", 7, "text/"])
async def test_A6_a_malformed_mime_type_is_refused_before_any_request(bad: Any, env: Env) -> None:
    got = await env.store().put("a.csv", b"x", mime_type=bad)
    error = got.failure()
    assert isinstance(error, InvalidOpts) and error.option == "mime_type"
    assert env.requests("POST", "/v1/files") == []


async def test_A6_the_client_upload_infers_the_type_too(env: Env) -> None:
    await env.client.upload_file("notes.md", b"# hi")
    [upload] = env.requests("POST", "/v1/files")
    assert _part_type(upload) == "text/markdown"


async def test_A6_mount_dir_and_an_explicit_mount_path(env: Env) -> None:
    store = env.store(mount_dir="/workspace/inputs/")
    assert store.mount_path("a.csv") == "/workspace/inputs/a.csv"
    await store.put("a.csv", b"1,2")
    await store.put("b.csv", b"3,4", mount_path="/workspace/other/data.csv")
    mounts = [r["mount_path"] for r in env.emu.session(env.session_id)["resources"]]
    assert mounts == ["/workspace/inputs/a.csv", "/workspace/other/data.csv"]


async def test_A6_an_upload_is_an_input_not_a_session_output(env: Env) -> None:
    store = env.store()
    await store.put("notes.md", b"x")
    assert (await store.list()).unwrap() == ()
    assert isinstance((await store.fetch("notes.md")).failure(), NotFound)


async def test_A6_a_failed_attach_deletes_the_orphaned_upload(env: Env) -> None:
    env.emu.inject(status_once(404, method="POST", path=r"/resources$", message="session gone"))
    got = await env.store().put("notes.md", b"x")

    error = got.failure()
    assert isinstance(error, HttpError) and error.status == 404
    [attach] = env.requests("POST", "/resources")
    [delete] = env.requests("DELETE", "/v1/files/")
    assert delete.path == f"/v1/files/{attach.body['file_id']}"
    assert (await env.client.list_files()).unwrap() == []  # nothing left behind
    assert env.emu.session(env.session_id)["resources"] == []


async def test_A6_when_the_cleanup_fails_too_the_attach_error_is_returned_and_logged(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    env.emu.inject(
        status_once(400, method="POST", path=r"/resources$", message="bad mount"),
        status_once(403, method="DELETE", path=r"^/v1/files/"),
    )
    with caplog.at_level(logging.WARNING, logger="rma.artifacts"):
        got = await env.store().put("notes.md", b"x")
    error = got.failure()
    assert isinstance(error, HttpError) and error.status == 400
    assert any("orphaned upload" in r.getMessage() for r in caplog.records)


async def test_A6_upload_errors_pass_through_and_nothing_is_attached(env: Env) -> None:
    env.emu.inject(status_once(413, method="POST", path=r"^/v1/files$"))
    got = await env.store().put("big.bin", b"x")
    error = got.failure()
    assert isinstance(error, HttpError) and error.status == 413
    assert env.requests("POST", "/resources") == []


# ── names ──

BAD_NAMES = ["../etc/passwd", "a/b", "/abs", "", ".", "..", "x y", "it's", "x.rma_b64_part", "a" * 256]


@pytest.mark.parametrize("name", BAD_NAMES)
async def test_A6_A10_bad_names_are_refused_before_any_request(name: str, env: Env) -> None:
    store = env.store()
    for got in (await store.fetch(name), await store.put(name, b"x"), await store.delete(name)):
        error = got.failure()
        assert isinstance(error, InvalidOpts) and error.option == "name"
    assert env.emu.requests == []


@pytest.mark.parametrize("path", ["relative/x", "/mnt/../etc/x", "/mnt/./x", "/", "/a\0b"])
async def test_A6_a_traversing_mount_path_is_refused_before_any_request(path: str, env: Env) -> None:
    got = await env.store().put("ok.txt", b"x", mount_path=path)
    error = got.failure()
    assert isinstance(error, InvalidOpts) and error.option == "mount_path"
    assert env.emu.requests == []


def test_a_bad_mount_dir_or_session_id_is_refused_at_construction() -> None:
    client: Any = object()
    for mount_dir in ("uploads", "/mnt/../etc", ""):
        with pytest.raises(ValueError, match="mount_dir"):
            ClaudeFiles(client, "sesn_1", mount_dir=mount_dir)
    with pytest.raises(ValueError, match="session id"):
        ClaudeFiles(client, "")


# ── odd answers (no emulator: the server would never send these) ──


def _client(handler: Any) -> tuple[CMAClient, httpx.AsyncClient]:
    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    provider = ClaudeManagedAgents(api_key=KEY, base_url="http://files.test", env={}, http_client=http)
    return provider.client().unwrap(), http


async def test_A6_an_upload_answer_without_an_id_is_a_typed_error() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        return httpx.Response(200, json={"type": "file", "filename": "x"})

    client, http = _client(handler)
    async with http:
        got = await ClaudeFiles(client, "sesn_1").put("x.txt", b"x")
    assert isinstance(got.failure(), MalformedResponse)
    assert seen == ["POST /v1/files"]  # nothing attached, nothing to delete


@pytest.mark.parametrize("body", [{"nope": 1}, {"data": [{"filename": "no-id.txt"}], "next_page": None}])
async def test_A4_a_listing_without_data_or_ids_is_a_typed_error(body: JSON) -> None:
    client, http = _client(lambda request: httpx.Response(200, json=body))
    async with http:
        got = await ClaudeFiles(client, "sesn_1").list()
    assert isinstance(got.failure(), MalformedResponse)


class FakeFiles:
    """An in-memory ``FilesClient``: listing order and timestamps under the test's control."""

    def __init__(self, files: list[dict[str, JSON]]) -> None:
        self.files = files
        self.calls: list[tuple[str, object]] = []
        self.on_attach: Any = None

    async def list_files(self, *, scope_id: str | None = None) -> Result[list[JSON], SessionError]:
        return Success(list(self.files))

    async def download_file(self, file_id: str) -> Result[bytes, SessionError]:
        self.calls.append(("download", file_id))
        return Success(file_id.encode())

    async def delete_file(self, file_id: str) -> Result[JSON, SessionError]:
        self.calls.append(("delete", file_id))
        return Success({"id": file_id, "type": "file_deleted"})

    async def upload_file(
        self, filename: str, content: bytes, mime_type: str = "application/octet-stream"
    ) -> Result[JSON, SessionError]:
        self.calls.append(("upload", filename))
        return Success({"id": "file_new", "filename": filename, "size_bytes": len(content)})

    async def add_session_resource(
        self, session_id: str, body: Mapping[str, JSON]
    ) -> Result[JSON, SessionError]:
        self.calls.append(("attach", dict(body)))
        if self.on_attach is not None:
            await self.on_attach()
        return Failure(HttpError(status=500))


def _file(file_id: str, created_at: str | None, name: str = "r.md") -> dict[str, JSON]:
    return {"id": file_id, "filename": name, "size_bytes": 1, "created_at": created_at}


async def test_A5_newest_is_decided_by_the_parsed_time_not_the_text_or_the_listing_order() -> None:
    fake = FakeFiles(
        [
            _file("file_a", "2026-07-03T10:00:00+02:00"),  # 08:00Z — largest as text, oldest in time
            _file("file_b", "2026-07-03T09:30:00.123456789Z"),  # nanoseconds, as the API may send
            _file("file_c", None),  # no timestamp: the oldest
            _file("file_d", "not a time"),
        ]
    )
    store: ArtifactStore = ClaudeFiles(fake, "sesn_1")
    assert (await store.fetch("r.md")).unwrap() == b"file_b"
    assert await store.delete("r.md") == Success(None)
    assert fake.calls == [("download", "file_b"), ("delete", "file_b")]


async def test_A6_a_cancelled_attach_still_deletes_the_upload() -> None:
    fake = FakeFiles([])
    with anyio.CancelScope() as scope:

        async def cancel_then_hang() -> None:
            scope.cancel()
            await anyio.sleep_forever()

        fake.on_attach = cancel_then_hang
        await ClaudeFiles(fake, "sesn_1").put("x.txt", b"x")
    assert scope.cancelled_caught
    assert [c[0] for c in fake.calls] == ["upload", "attach", "delete"]
