"""One contract, three stores: records, tags, resolve, claims and ensure_record (V-32…V-46).

Every test runs against MemoryStore, JsonFileStore and SqliteStore with a fake clock, so
"newest first" and lease expiry are decided by the test, not by wall time.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest
from returns.result import Failure, Result, Success

from rma.provisioning import InvalidRef, UnknownTag, UntrackedDigest
from rma_shell.seams import Seams
from rma_shell.stores import (
    Acquired,
    BaseStore,
    Claim,
    Entry,
    Existing,
    Held,
    JsonFileStore,
    MemoryStore,
    SqliteStore,
    StoreKey,
    ensure_record,
)

D = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(8)]
KEY = StoreKey(provider="claude_managed_agents", kind="agent", base="support_bot")
OTHER_BASE = StoreKey(provider="claude_managed_agents", kind="agent", base="support")
OTHER_KIND = StoreKey(provider="claude_managed_agents", kind="environment", base="support_bot")
OTHER_PROVIDER = StoreKey(provider="bedrock_agent_core", kind="agent", base="support_bot")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


Factory = Callable[[Callable[[], float]], BaseStore]


def _memory(tmp: Path) -> Factory:
    return lambda clock: MemoryStore(
        _seams=Seams(clock=clock),
    )


def _json(tmp: Path) -> Factory:
    return lambda clock: JsonFileStore(
        tmp / "nested" / "dir" / "store.json",
        _seams=Seams(clock=clock),
    )


def _sqlite(tmp: Path) -> Factory:
    return lambda clock: SqliteStore(
        tmp / "nested" / "rma.sqlite3",
        _seams=Seams(clock=clock),
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=[_memory, _json, _sqlite], ids=["memory", "json_file", "sqlite"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Factory:
    factory: Callable[[Path], Factory] = request.param
    return factory(tmp_path)


@pytest.fixture
def store(make: Factory, clock: FakeClock) -> Iterator[BaseStore]:
    with make(clock) as opened:
        yield opened


def entry(n: int = 1, **data: object) -> Entry:
    return Entry(remote_id=f"agent_{n:03d}", name=f"support_bot_{n:08x}", version=n, data=data)


# --- records --------------------------------------------------------------------------------


def test_a_missing_digest_is_none(store: BaseStore) -> None:
    assert store.get(KEY, D[0]) is None
    assert store.records(KEY) == []
    assert store.digests(KEY) == []


def test_put_stores_and_get_returns_the_same_record(store: BaseStore, clock: FakeClock) -> None:
    put = store.put(KEY, D[0], entry(1, arn="arn:aws:x", nested={"a": [1, 2.5, None]}))
    got = store.get(KEY, D[0])
    assert got == put
    assert got is not None
    assert (got.key, got.digest, got.remote_id, got.name, got.version) == (
        KEY,
        D[0],
        "agent_001",
        "support_bot_00000001",
        1,
    )
    assert got.data == {"arn": "arn:aws:x", "nested": {"a": [1, 2.5, None]}}
    assert got.created_at == got.updated_at == clock.now
    assert got.short_digest == D[0][:8]
    assert got.entry == entry(1, arn="arn:aws:x", nested={"a": [1, 2.5, None]})


def test_put_is_create_if_absent_so_racers_converge_on_the_first_record(
    store: BaseStore, clock: FakeClock
) -> None:
    first = store.put(KEY, D[0], entry(1))
    clock.advance(5)
    second = store.put(KEY, D[0], entry(2))
    assert second == first
    assert store.get(KEY, D[0]) == first


def test_replace_overwrites_the_entry_and_keeps_created_at(store: BaseStore, clock: FakeClock) -> None:
    first = store.put(KEY, D[0], entry(1))
    clock.advance(5)
    replaced = store.replace(KEY, D[0], entry(2))
    assert (replaced.remote_id, replaced.version) == ("agent_002", 2)
    assert replaced.created_at == first.created_at
    assert replaced.updated_at == first.created_at + 5
    assert store.get(KEY, D[0]) == replaced
    assert store.replace(KEY, D[1], entry(3)).remote_id == "agent_003"


def test_V14_better_data_is_json_normalized_and_never_aliased(store: BaseStore) -> None:
    store.put(KEY, D[0], Entry(remote_id="a", name="n", data={"t": (1, 2), "d": {"k": "v"}}))
    got = store.get(KEY, D[0])
    assert got is not None
    assert got.data == {"t": [1, 2], "d": {"k": "v"}}
    got.data["d"]["k"] = "mutated"
    again = store.get(KEY, D[0])
    assert again is not None
    assert again.data["d"]["k"] == "v"


def test_V45_non_json_data_bad_digests_and_bad_entries_are_refused(store: BaseStore) -> None:
    with pytest.raises(ValueError, match="not a JSON number"):
        store.put(KEY, D[0], Entry(remote_id="a", name="n", data={"x": float("nan")}))
    with pytest.raises(ValueError, match="64 lowercase hex"):
        store.put(KEY, D[0][:8], entry())
    with pytest.raises(ValueError, match="64 lowercase hex"):
        store.get(KEY, D[0].upper())
    with pytest.raises(ValueError):
        Entry(remote_id="", name="n")
    with pytest.raises(ValueError):
        StoreKey(provider="cma", kind="agent", base="a:b")
    with pytest.raises(ValueError):
        StoreKey(provider="CMA", kind="agent", base="a")
    assert store.get(KEY, D[0]) is None


def test_records_and_digests_are_newest_first(store: BaseStore, clock: FakeClock) -> None:
    store.put(KEY, D[0], entry(0))
    clock.advance(10)
    store.put(KEY, D[1], entry(1))
    clock.advance(10)
    store.put(KEY, D[2], entry(2))
    store.put(KEY, D[3], entry(3))  # same instant: insertion order breaks the tie
    assert store.digests(KEY) == [D[3], D[2], D[1], D[0]]
    assert [r.remote_id for r in store.records(KEY)] == ["agent_003", "agent_002", "agent_001", "agent_000"]


def test_provider_kind_and_base_are_separate_namespaces(store: BaseStore) -> None:
    for n, key in enumerate((KEY, OTHER_BASE, OTHER_KIND, OTHER_PROVIDER)):
        store.put(key, D[0], entry(n))
    for n, key in enumerate((KEY, OTHER_BASE, OTHER_KIND, OTHER_PROVIDER)):
        record = store.get(key, D[0])
        assert record is not None
        assert record.remote_id == f"agent_{n:03d}"
        assert store.digests(key) == [D[0]]


def test_delete_removes_records_and_ignores_absent_ones(store: BaseStore) -> None:
    for n in range(3):
        store.put(KEY, D[n], entry(n))
    store.put(OTHER_BASE, D[0], entry(9))
    assert store.delete(KEY, [D[0], D[1], D[5]]) == 2
    assert store.delete(KEY, D[2]) == 1
    assert store.delete(KEY, []) == 0
    assert store.digests(KEY) == []
    assert store.get(OTHER_BASE, D[0]) is not None


def test_V15_delete_remote_evicts_every_record_holding_that_remote_id(store: BaseStore) -> None:
    shared = Entry(remote_id="harness-1", name="h")
    store.put(KEY, D[0], shared)
    store.put(OTHER_BASE, D[1], shared)
    store.put(OTHER_PROVIDER, D[2], shared)
    store.put(KEY, D[3], entry(3))
    assert store.delete_remote("claude_managed_agents", "harness-1") == 2
    assert store.digests(KEY) == [D[3]]
    assert store.digests(OTHER_BASE) == []
    assert store.digests(OTHER_PROVIDER) == [D[2]]


# --- tags and resolve -------------------------------------------------------------------------


def test_V32_a_tag_points_at_a_digest_and_moves_when_retagged(store: BaseStore) -> None:
    store.put(KEY, D[0], entry(0))
    store.put(KEY, D[1], entry(1))
    assert store.set_tag(KEY, "prod", D[0]) == Success(None)
    assert store.get_tag(KEY, "prod") == D[0]
    assert store.set_tag(KEY, "prod", D[1]) == Success(None)
    assert store.set_tag(KEY, "canary", D[1]) == Success(None)
    assert store.tags(KEY) == {"canary": D[1], "prod": D[1]}
    assert store.tags(OTHER_BASE) == {}
    assert store.remove_tag(KEY, "canary") is True
    assert store.remove_tag(KEY, "canary") is False
    assert store.get_tag(KEY, "canary") is None


def test_only_a_stored_digest_can_be_tagged_and_tags_are_validated(store: BaseStore) -> None:
    assert store.set_tag(KEY, "prod", D[0]) == Failure(
        UntrackedDigest(base="support_bot", digest=D[0], tag="prod")
    )
    store.put(KEY, D[0], entry(0))
    result = store.set_tag(KEY, "has space", D[0])
    assert isinstance(result, Failure)
    assert isinstance(result.failure(), InvalidRef)
    assert store.tags(KEY) == {}


def test_V34_resolve_returns_the_tagged_record(store: BaseStore) -> None:
    record = store.put(KEY, D[0], entry(0))
    store.set_tag(KEY, "release:2026-05", D[0])
    assert store.resolve("support_bot:release:2026-05", provider=KEY.provider, kind=KEY.kind) == Success(
        record
    )


def test_V34_resolve_never_falls_back(store: BaseStore) -> None:
    store.put(KEY, D[0], entry(0))
    store.set_tag(KEY, "prod", D[0])
    resolve = store.resolve
    assert resolve("support_bot:staging", provider=KEY.provider, kind=KEY.kind) == Failure(
        UnknownTag(base="support_bot", tag="staging")
    )
    assert resolve("nobody:prod", provider=KEY.provider, kind=KEY.kind) == Failure(
        UnknownTag(base="nobody", tag="prod")
    )
    assert resolve("support_bot:prod", provider=KEY.provider, kind="environment") == Failure(
        UnknownTag(base="support_bot", tag="prod")
    )
    store.delete(KEY, [D[0]])
    assert resolve("support_bot:prod", provider=KEY.provider, kind=KEY.kind) == Failure(
        UntrackedDigest(base="support_bot", digest=D[0], tag="prod")
    )
    bad = resolve("support_bot", provider=KEY.provider, kind=KEY.kind)
    assert isinstance(bad, Failure)
    assert isinstance(bad.failure(), InvalidRef)


# --- claims ---------------------------------------------------------------------------------


def test_a_claim_is_acquired_once_and_others_see_it_held(store: BaseStore, clock: FakeClock) -> None:
    first = store.claim(KEY, D[0], "host:1", lease=30)
    assert isinstance(first, Acquired)
    assert first.claim.expires_at == clock.now + 30
    assert store.claim(KEY, D[0], "host:2", lease=30) == Held(owner="host:1", expires_at=clock.now + 30)
    assert isinstance(store.claim(KEY, D[1], "host:2"), Acquired)  # other digests are free


def test_put_with_the_claim_drops_it_and_later_claims_see_the_record(store: BaseStore) -> None:
    acquired = store.claim(KEY, D[0], "host:1")
    assert isinstance(acquired, Acquired)
    record = store.put(KEY, D[0], entry(1), claim=acquired.claim)
    assert store.claim(KEY, D[0], "host:2") == Existing(record)
    assert store.release(acquired.claim) is False  # already dropped by put


def test_a_released_claim_can_be_taken_by_the_next_creator(store: BaseStore) -> None:
    acquired = store.claim(KEY, D[0], "host:1")
    assert isinstance(acquired, Acquired)
    assert store.release(acquired.claim) is True
    assert isinstance(store.claim(KEY, D[0], "host:2"), Acquired)


def test_an_expired_lease_is_taken_over_and_the_old_holder_can_no_longer_touch_it(
    store: BaseStore, clock: FakeClock
) -> None:
    crashed = store.claim(KEY, D[0], "host:1", lease=10)
    assert isinstance(crashed, Acquired)
    clock.advance(9.5)
    assert isinstance(store.claim(KEY, D[0], "host:2", lease=10), Held)
    clock.advance(1)
    taken = store.claim(KEY, D[0], "host:2", lease=10)
    assert isinstance(taken, Acquired)
    assert store.renew(crashed.claim) is None
    assert store.release(crashed.claim) is False
    assert isinstance(store.claim(KEY, D[0], "host:3"), Held)  # the new holder kept it
    # A late creator with a lost claim still records what it made (create-if-absent) without
    # dropping the new holder's claim.
    late = store.put(KEY, D[0], entry(1), claim=crashed.claim)
    assert store.claim(KEY, D[0], "host:3") == Existing(late)


def test_renew_extends_a_held_claim(store: BaseStore, clock: FakeClock) -> None:
    acquired = store.claim(KEY, D[0], "host:1", lease=10)
    assert isinstance(acquired, Acquired)
    clock.advance(8)
    renewed = store.renew(acquired.claim, lease=10)
    assert renewed is not None
    assert renewed.expires_at == clock.now + 10
    clock.advance(8)
    assert isinstance(store.claim(KEY, D[0], "host:2"), Held)


def test_claim_arguments_are_validated(store: BaseStore) -> None:
    with pytest.raises(ValueError):
        store.claim(KEY, D[0], "", lease=10)
    for lease in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            store.claim(KEY, D[0], "me", lease=lease)
    acquired = store.claim(KEY, D[0], "me")
    assert isinstance(acquired, Acquired)
    with pytest.raises(ValueError, match="another key"):
        store.put(KEY, D[1], entry(), claim=acquired.claim)


# --- persistence ----------------------------------------------------------------------------


def test_a_persistent_store_is_seen_by_a_new_object_on_the_same_path(
    make: Factory, clock: FakeClock, request: pytest.FixtureRequest
) -> None:
    if "memory" in request.node.name:
        pytest.skip("the memory store is per object by design (V-41)")
    with make(clock) as first:
        record = first.put(KEY, D[0], entry(0, arn="x"))
        first.set_tag(KEY, "prod", D[0])
        first.claim(KEY, D[1], "host:1")
    with make(clock) as second:
        assert second.get(KEY, D[0]) == record
        assert second.resolve("support_bot:prod", provider=KEY.provider, kind=KEY.kind) == Success(record)
        assert isinstance(second.claim(KEY, D[1], "host:2"), Held)


# --- ensure_record --------------------------------------------------------------------------


async def test_ensure_record_builds_once_and_then_reuses(store: BaseStore) -> None:
    builds: list[int] = []

    async def build() -> Result[Entry, str]:
        builds.append(1)
        return Success(entry(7))

    first = (await ensure_record(store, KEY, D[0], build)).unwrap()
    second = (await ensure_record(store, KEY, D[0], build)).unwrap()
    assert (first.built, second.built) == (True, False)
    assert first.record == second.record
    assert first.record.remote_id == "agent_007"
    assert builds == [1]


async def test_concurrent_ensures_build_once(store: BaseStore) -> None:
    builds: list[int] = []
    results: list[str] = []

    async def build() -> Result[Entry, str]:
        builds.append(1)
        await anyio.sleep(0.05)
        return Success(entry(len(builds)))

    async def one() -> None:
        ensured = (await ensure_record(store, KEY, D[0], build, poll_interval=0.01)).unwrap()
        results.append(ensured.record.remote_id)

    async with anyio.create_task_group() as nursery:
        for _ in range(6):
            nursery.start_soon(one)
    assert builds == [1]
    assert results == ["agent_001"] * 6


async def test_a_failed_build_releases_the_claim_and_the_next_call_builds(store: BaseStore) -> None:
    async def failing() -> Result[Entry, str]:
        return Failure("409 and nothing to adopt")

    async def working() -> Result[Entry, str]:
        return Success(entry(2))

    assert await ensure_record(store, KEY, D[0], failing) == Failure("409 and nothing to adopt")
    assert store.get(KEY, D[0]) is None
    assert (await ensure_record(store, KEY, D[0], working)).unwrap().built is True


async def test_a_raising_or_cancelled_build_releases_the_claim(store: BaseStore) -> None:
    async def raising() -> Result[Entry, str]:
        raise RuntimeError("network down")

    with pytest.raises(RuntimeError):
        await ensure_record(store, KEY, D[0], raising)
    assert isinstance(store.claim(KEY, D[0], "next"), Acquired)

    async def hanging() -> Result[Entry, str]:
        await anyio.sleep_forever()
        raise AssertionError

    with anyio.move_on_after(0.05):
        await ensure_record(store, KEY, D[1], hanging)
    assert isinstance(store.claim(KEY, D[1], "next"), Acquired)


async def test_a_waiter_takes_over_when_the_holder_crashed(store: BaseStore, clock: FakeClock) -> None:
    assert isinstance(store.claim(KEY, D[0], "crashed", lease=5), Acquired)

    async def build() -> Result[Entry, str]:
        return Success(entry(3))

    async def expire_soon() -> None:
        await anyio.sleep(0.05)
        clock.advance(6)

    async with anyio.create_task_group() as nursery:
        nursery.start_soon(expire_soon)
        ensured = (await ensure_record(store, KEY, D[0], build, poll_interval=0.01)).unwrap()
    assert ensured.built is True
    assert ensured.record.remote_id == "agent_003"


async def test_a_long_build_keeps_its_claim_alive_by_renewing_it(
    store: BaseStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What each renewal wrote: its expiry, computed from the store clock *as the renewal read
    # it*. Not the clock after the renewal returns: a renewal that read the clock just before
    # the competitor moved it would look fresh and still leave a lease that runs out too soon.
    expiries: list[float | None] = []  # None: the renewal found the claim lost
    renew = store.renew

    def counting(claim: Claim, lease: float = 60.0) -> Claim | None:
        renewed = renew(claim, lease)
        expiries.append(None if renewed is None else renewed.expires_at)
        return renewed

    monkeypatch.setattr(store, "renew", counting)
    finish = anyio.Event()
    observed: list[str] = []

    def renewed_since_the_clock_last_moved() -> bool:
        # Renewals run one at a time, so the newest expiry is the largest; one at least a lease
        # past the store clock now was computed after the clock's last move.
        assert None not in expiries, "the build lost its claim"
        newest = expiries[-1] if expiries else None
        return newest is not None and newest >= clock.now + 30

    async def wait_for_a_renewal() -> None:
        with anyio.fail_after(30):  # no renewal at all would hang here; 3 ms apart when alive
            while not renewed_since_the_clock_last_moved():  # noqa: ASYNC110 - set from a worker thread
                await anyio.sleep(0.001)

    async def competitor() -> None:
        # Each round moves the store clock 40 s (past a 30 s lease) in two 20 s steps, each
        # only after a renewal has landed since the previous step: the lease always has 10 s
        # left when the competitor asks, and would have run out without the renewals.
        for _ in range(3):
            for _ in range(2):
                await wait_for_a_renewal()
                clock.advance(20)
            outcome = await anyio.to_thread.run_sync(store.claim, KEY, D[0], "competitor", 30)
            observed.append(type(outcome).__name__)
        finish.set()

    async def slow_build() -> Result[Entry, str]:
        await finish.wait()
        return Success(entry(1))

    async with anyio.create_task_group() as nursery:
        nursery.start_soon(competitor)
        # The lease is on the store's (fake) clock; renewals run on the event loop's: every
        # 3 ms here. How far apart they land under load does not matter: the competitor waits.
        ensured = await ensure_record(store, KEY, D[0], slow_build, lease=30, renew_every=0.003)
    assert ensured.unwrap().built is True
    assert observed == ["Held", "Held", "Held"]  # 120 s on the store clock, on a 30 s lease
