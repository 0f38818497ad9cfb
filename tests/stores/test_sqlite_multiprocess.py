"""Several processes racing ensure + tag against one SQLite file: nothing lost, no duplicate creates.

Each worker is a separate interpreter (``multiprocessing`` spawn context) that opens its own
``SqliteStore`` on the shared file once all workers are ready, then runs ``ensure_record`` for
digests every worker wants plus two of its own, and tags each result. A ``build`` appends one
line per remote "create" to a shared file with ``O_APPEND`` — the count of creates the
provider would have seen.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
from collections import Counter
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from rma_shell.stores import Acquired, Entry, SqliteStore, StoreKey

D = [hashlib.sha256(f"digest-{i}".encode()).hexdigest() for i in range(64)]
KEY = StoreKey(provider="bedrock_agent_core", kind="harness", base="billing")
WORKERS = 6
SHARED = D[:4]
CTX = multiprocessing.get_context("spawn")


def _own(w: int) -> list[str]:
    return [D[10 + 2 * w], D[11 + 2 * w]]


def _worker(db: str, creates: str, w: int, start: Barrier, out: Any) -> None:
    import anyio
    from returns.result import Result, Success

    from rma_shell.stores import ensure_record

    start.wait()  # every worker is imported and ready: what follows runs at the same moment
    store = SqliteStore(db)  # schema and WAL setup race too

    async def main() -> dict[str, str]:
        got: dict[str, str] = {}
        wanted = SHARED[w % len(SHARED) :] + SHARED[: w % len(SHARED)] + _own(w)
        for digest in wanted:

            async def build(digest: str = digest) -> Result[Entry, str]:
                fd = os.open(creates, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, f"{digest} {w}\n".encode())
                finally:
                    os.close(fd)
                await anyio.sleep(0.05)  # a slow remote create widens the race window
                return Success(Entry(remote_id=f"h-{digest[:8]}-w{w}", name=f"billing_{digest[:8]}"))

            ensured = await ensure_record(store, KEY, digest, build, owner=f"worker-{w}", poll_interval=0.01)
            got[digest] = ensured.unwrap().record.remote_id
            store.set_tag(KEY, f"w{w}-{digest[:8]}", digest).unwrap()
            store.set_tag(KEY, "latest", digest).unwrap()
        return got

    try:
        out.put((w, anyio.run(main, backend="trio")))
    finally:
        store.close()


def test_processes_racing_ensure_and_tag_create_each_record_once_and_lose_no_tag(tmp_path: Path) -> None:
    db, creates = str(tmp_path / "rma.sqlite3"), str(tmp_path / "creates.log")
    start = CTX.Barrier(WORKERS)
    out = CTX.Queue()
    procs = [CTX.Process(target=_worker, args=(db, creates, w, start, out)) for w in range(WORKERS)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=90) for _ in procs)
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0

    expected = set(SHARED) | {d for w in range(WORKERS) for d in _own(w)}
    lines = Path(creates).read_text().splitlines()
    per_digest = Counter(line.split()[0] for line in lines)
    assert set(per_digest) == expected
    assert set(per_digest.values()) == {1}, "a digest was created twice"

    with SqliteStore(db) as store:
        records = {r.digest: r for r in store.records(KEY)}
        assert set(records) == expected
        for w, got in results.items():
            assert set(got) == set(SHARED) | set(_own(w))
            for digest, remote_id in got.items():
                assert remote_id == records[digest].remote_id  # every worker saw the one record
        tags = store.tags(KEY)
        for w in range(WORKERS):
            for digest in SHARED + _own(w):
                assert tags[f"w{w}-{digest[:8]}"] == digest
        assert tags["latest"] in expected
        assert len(tags) == WORKERS * (len(SHARED) + 2) + 1


def _claim_and_crash(db: str, lease_s: float, out: Any) -> None:
    store = SqliteStore(db)
    acquired = store.claim(KEY, D[40], "doomed", lease=lease_s)
    assert isinstance(acquired, Acquired)
    out.put(acquired.claim.expires_at)
    out.close()
    out.join_thread()  # flush the queue: os._exit skips the feeder thread
    os._exit(3)  # no release, no close: a crashed creator


async def test_a_creator_that_crashed_holding_a_claim_blocks_others_for_one_lease_only(
    tmp_path: Path,
) -> None:
    import anyio
    from returns.result import Result, Success

    from rma_shell.stores import ensure_record

    db = str(tmp_path / "rma.sqlite3")
    out = CTX.Queue()
    proc = CTX.Process(target=_claim_and_crash, args=(db, 0.5, out))
    proc.start()
    expires_at = await anyio.to_thread.run_sync(out.get, True, 60)
    await anyio.to_thread.run_sync(proc.join, 30)
    assert proc.exitcode == 3

    builds: list[str] = []

    async def build() -> Result[Entry, str]:
        builds.append("built")
        return Success(Entry(remote_id="h-adopted", name="billing_x"))

    with SqliteStore(db) as store:
        ensured = (
            await ensure_record(store, KEY, D[40], build, owner="survivor", poll_interval=0.02)
        ).unwrap()
    assert ensured.built is True
    assert builds == ["built"]
    assert ensured.record.created_at >= expires_at  # built only once the dead creator's lease ran out
