"""SqliteStore specifics (WAL, busy timeout, schema version) and where the default store lives."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from pathlib import Path

import pytest

from rma_shell.stores import (
    Entry,
    JsonFileStore,
    MemoryStore,
    SqliteStore,
    StoreError,
    StoreKey,
    default_store_path,
    open_store,
)

D = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(200)]
KEY = StoreKey(provider="bedrock_agent_core", kind="harness", base="billing")


def test_the_database_runs_in_wal_mode_with_a_busy_timeout_and_full_sync(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "rma.sqlite3"
    with SqliteStore(path, busy_timeout=7) as store:
        conn = store._conn
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 7000
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    probe = sqlite3.connect(path)
    try:
        assert probe.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # persistent in the file
    finally:
        probe.close()


def test_a_database_from_a_newer_rma_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "rma.sqlite3"
    SqliteStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 9")
    conn.close()
    with pytest.raises(StoreError, match="newer"):
        SqliteStore(path)


def test_a_file_that_is_not_a_database_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "rma.sqlite3"
    path.write_bytes(b"this is not a database, just text long enough to have a header" * 10)
    with pytest.raises(StoreError):
        SqliteStore(path)


def test_threads_sharing_one_store_object_lose_nothing(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "rma.sqlite3")
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            barrier.wait()
            for i in range(10):
                n = w * 10 + i
                store.put(KEY, D[n], Entry(remote_id=f"h{n}", name=f"billing_{n:08x}"))
                store.set_tag(KEY, f"w{w}-{i}", D[n]).unwrap()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(store.digests(KEY)) == sorted(D[:80])
    assert len(store.tags(KEY)) == 80
    store.close()


# --- default location -------------------------------------------------------------------------


def test_RMA_STORE_wins_and_expands_the_home_directory(tmp_path: Path) -> None:
    env = {"RMA_STORE": "~/custom/provisions.sqlite3", "XDG_STATE_HOME": "/xdg"}
    assert default_store_path(env, home=tmp_path) == Path("~/custom/provisions.sqlite3").expanduser()
    assert default_store_path({"RMA_STORE": ":memory:"}) == Path(":memory:")


def test_XDG_STATE_HOME_is_used_when_absolute(tmp_path: Path) -> None:
    assert default_store_path({"XDG_STATE_HOME": "/var/state"}, home=tmp_path) == Path(
        "/var/state/rma/rma.sqlite3"
    )
    relative = default_store_path({"XDG_STATE_HOME": "relative/state"}, home=tmp_path)
    assert relative == tmp_path / ".local" / "state" / "rma" / "rma.sqlite3"


def test_the_fallback_is_under_the_home_directory(tmp_path: Path) -> None:
    assert default_store_path({}, home=tmp_path) == tmp_path / ".local/state/rma/rma.sqlite3"
    assert default_store_path({"RMA_STORE": ""}, home=tmp_path) == tmp_path / ".local/state/rma/rma.sqlite3"


def test_open_store_picks_the_kind_from_the_location(tmp_path: Path) -> None:
    assert isinstance(open_store(":memory:"), MemoryStore)
    assert isinstance(open_store(tmp_path / "s.json"), JsonFileStore)
    sqlite_store = open_store(tmp_path / "s.db")
    assert isinstance(sqlite_store, SqliteStore)
    sqlite_store.close()
    from_env = open_store(env={"RMA_STORE": str(tmp_path / "env.sqlite3")})
    assert isinstance(from_env, SqliteStore)
    assert from_env.path == tmp_path / "env.sqlite3"
    from_env.close()
    assert isinstance(open_store(env={"RMA_STORE": ":memory:"}), MemoryStore)
