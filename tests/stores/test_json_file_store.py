"""JsonFileStore specifics: atomic fsync'd replace, directory creation, corrupt files, locking (V-42…V-44)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from pathlib import Path

import pytest

from rma_shell.stores import Entry, JsonFileStore, StoreError, StoreKey

D = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(100)]
KEY = StoreKey(provider="claude_managed_agents", kind="environment", base="data_analysis")


def entry(n: int) -> Entry:
    return Entry(remote_id=f"env_{n}", name=f"data_analysis_{n:08x}")


def test_V44_better_the_parent_directory_is_created_and_no_temp_file_is_left(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "store.json"
    store = JsonFileStore(path)
    assert store.get(KEY, D[0]) is None
    assert not (tmp_path / "a").exists()  # reading creates nothing
    store.put(KEY, D[0], entry(0))
    doc = json.loads(path.read_text())
    assert doc["format"] == "rma.store"
    assert doc["version"] == 1
    assert [r["remote_id"] for r in doc["records"]] == ["env_0"]
    assert sorted(p.name for p in path.parent.iterdir()) == ["store.json", "store.json.lock"]


def test_V44_better_writes_fsync_the_file_and_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}") if Path("/proc/self/fd").exists() else str(fd))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    JsonFileStore(tmp_path / "s.json").put(KEY, D[0], entry(0))
    assert len(synced) == 2
    if Path("/proc/self/fd").exists():
        assert synced[0].startswith(str(tmp_path / ".s.json."))  # the temp file, before the rename
        assert synced[1] == str(tmp_path)  # then the directory entry


def test_V44_a_failed_replace_leaves_the_old_file_whole_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.json"
    store = JsonFileStore(path)
    store.put(KEY, D[0], entry(0))
    before = path.read_bytes()

    def broken(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(StoreError, match="No space left"):
        store.put(KEY, D[1], entry(1))
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json", "s.json.lock"]


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"\xff\xfe garbage", b"[1, 2, 3]", b'{"format": "something else"}', b""],
    ids=["bad_json", "bad_utf8", "a_list", "foreign_document", "empty"],
)
def test_V43_a_corrupt_file_is_reported_read_as_empty_and_rewritten_keeping_the_old_bytes(
    tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "s.json"
    path.write_bytes(content)
    store = JsonFileStore(path)
    with caplog.at_level(logging.WARNING, logger="rma.stores"):
        assert store.get(KEY, D[0]) is None
    assert "corrupt" in caplog.text
    assert store.corruption is not None
    assert store.corruption.path == str(path)
    assert path.read_bytes() == content  # a read never rewrites

    record = store.put(KEY, D[0], entry(0))
    assert store.get(KEY, D[0]) == record
    assert json.loads(path.read_text())["format"] == "rma.store"
    assert (tmp_path / "s.json.corrupt").read_bytes() == content
    assert store.corruption.backup == str(tmp_path / "s.json.corrupt")


def test_V43_malformed_entries_are_skipped_and_the_good_ones_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "s.json"
    good = JsonFileStore(path)
    good.put(KEY, D[0], entry(0))
    good.put(KEY, D[1], entry(1))
    good.set_tag(KEY, "prod", D[1])
    doc = json.loads(path.read_text())
    doc["records"][0]["remote_id"] = 42
    doc["tags"].append({"provider": "x", "kind": "y"})
    path.write_text(json.dumps(doc))
    store = JsonFileStore(path)
    with caplog.at_level(logging.WARNING, logger="rma.stores"):
        assert store.digests(KEY) == [D[1]]
    assert "unexpected shape" in caplog.text
    assert store.get_tag(KEY, "prod") == D[1]
    store.put(KEY, D[2], entry(2))
    assert store.digests(KEY) == [D[2], D[1]]


def test_a_file_from_a_newer_rma_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    newer = json.dumps({"format": "rma.store", "version": 99, "records": [{"anything": True}]})
    path.write_text(newer)
    store = JsonFileStore(path)
    with pytest.raises(StoreError, match="newer rma"):
        store.get(KEY, D[0])
    with pytest.raises(StoreError):
        store.put(KEY, D[0], entry(0))
    assert path.read_text() == newer


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="needs file permissions that bind")
def test_an_unreadable_file_is_a_store_error_not_an_empty_store(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    JsonFileStore(path).put(KEY, D[0], entry(0))
    path.chmod(0)
    try:
        with pytest.raises(StoreError):
            JsonFileStore(path).get(KEY, D[0])
    finally:
        path.chmod(0o644)


def test_V44_better_concurrent_writers_through_separate_objects_lose_nothing(tmp_path: Path) -> None:
    # Separate objects share no thread lock, so only the lock file serializes them — the
    # situation of separate processes.
    path = tmp_path / "s.json"
    per_writer = 8
    barrier = threading.Barrier(6)
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            store = JsonFileStore(path)
            barrier.wait()
            for i in range(per_writer):
                n = w * per_writer + i
                store.put(KEY, D[n], entry(n))
                assert store.set_tag(KEY, f"w{w}-{i}", D[n]).unwrap() is None
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    store = JsonFileStore(path)
    assert sorted(store.digests(KEY)) == sorted(D[: 6 * per_writer])
    assert len(store.tags(KEY)) == 6 * per_writer


# --- orphaned temporary files (issue #12 item 23) --------------------------------------------


def _orphans(directory: Path) -> list[Path]:
    made = [
        directory / ".store.json.ab12cd34.tmp",  # a killed writer's new content
        directory / ".store.json.corrupt.x_9y8z7w.tmp",  # a killed writer's backup
    ]
    for path in made:
        path.write_text('{"half": ')
    return made


def _bystanders(directory: Path) -> list[Path]:
    kept = [
        directory / ".store.json.short.tmp",  # not mkstemp's 8 characters
        directory / ".other.json.ab12cd34.tmp",  # another store's
        directory / "store.json.ab12cd34.tmp",  # not hidden: not ours
        directory / "notes.tmp",
    ]
    for path in kept:
        path.write_text("keep me")
    return kept


@pytest.mark.skipif(os.name != "posix", reason="the rule relies on the cross-process lock")
def test_orphaned_temp_files_are_removed_on_the_first_operation_and_nothing_else_is(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    JsonFileStore(tmp_path / "store.json").put(KEY, D[0], entry(0))
    orphans, kept = _orphans(tmp_path), _bystanders(tmp_path)
    (tmp_path / ".store.json.dir12345.tmp").mkdir()  # the right shape but a directory
    with caplog.at_level(logging.INFO, logger="rma.stores"):
        store = JsonFileStore(tmp_path / "store.json")  # a new process opening the store
        assert store.get(KEY, D[0]) is not None  # a read is enough
    assert not any(p.exists() for p in orphans)
    assert all(p.read_text() == "keep me" for p in kept)
    assert (tmp_path / ".store.json.dir12345.tmp").is_dir()
    assert any("removed 2 orphaned temporary file(s)" in r.getMessage() for r in caplog.records)


@pytest.mark.skipif(os.name != "posix", reason="the rule relies on the cross-process lock")
def test_every_write_sweeps_orphans_left_meanwhile(tmp_path: Path) -> None:
    store = JsonFileStore(tmp_path / "store.json")
    store.put(KEY, D[0], entry(0))
    orphans = _orphans(tmp_path)  # another process's writer was killed since
    assert store.get(KEY, D[0]) is not None
    assert all(p.exists() for p in orphans)  # later reads do not scan the directory
    store.put(KEY, D[1], entry(1))
    assert not any(p.exists() for p in orphans)


@pytest.mark.skipif(os.name != "posix", reason="flock")
def test_a_live_writers_temp_file_is_never_removed(tmp_path: Path) -> None:
    import fcntl

    JsonFileStore(tmp_path / "store.json").put(KEY, D[0], entry(0))
    live = tmp_path / ".store.json.liv3wr1t.tmp"
    fd = os.open(tmp_path / "store.json.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a writer in the middle of its write
    live.write_text("being written")
    done = threading.Event()

    def other_process() -> None:
        JsonFileStore(tmp_path / "store.json").put(KEY, D[1], entry(1))
        done.set()

    worker = threading.Thread(target=other_process)
    worker.start()
    try:
        assert not done.wait(0.3)  # it waits for the lock before looking
        assert live.read_text() == "being written"
    finally:
        live.replace(tmp_path / "store.json.bak")  # the writer finishes (renames its file)…
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        worker.join(timeout=5)
    assert done.is_set() and (tmp_path / "store.json.bak").read_text() == "being written"
