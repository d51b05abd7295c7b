from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
import pytest_asyncio
from nats.aio.client import Client
from nats.js.kv import KeyValue

from gpudra_alloc.state import DeviceID
from gpudra_allocator import reservations as reservations_module
from gpudra_allocator.errors import ReservationConflict
from gpudra_allocator.holdings import ClaimRecord, Holding, PoolHoldings, pool_key
from gpudra_allocator.reservations import Reservations
from gpudra_testing.kvkeys import BucketReads
from gpudra_testing.waiting import until

DRIVER = "gpu.nvidia.com"


@pytest_asyncio.fixture
async def replicas(kv: KeyValue) -> AsyncIterator[list[Reservations]]:
    out = [Reservations(kv) for _ in range(3)]
    for r in out:
        await r.start()
    yield out
    for r in out:
        await r.stop()


async def reserve_fresh(r: Reservations, by_pool: dict[tuple[str, str], list[Holding]]) -> None:
    """What the worker does: a stale view is a conflict once, then the fresh view decides."""
    for _ in range(3):
        try:
            await r.reserve(by_pool)
            return
        except ReservationConflict:
            if any(r.pool(*key).conflicts(h) for key, h in by_pool.items()):
                raise
    raise AssertionError("kept conflicting on stale state")


def hold(
    device: str, uid: str, token: str = "t", share: str | None = None, at: float = 0.0
) -> Holding:
    return Holding(device, uid, f"default/{uid}", token, at, share)


async def test_racing_replicas_never_hold_one_device_twice(replicas: list[Reservations]) -> None:
    # Every replica tries to reserve every device of one pool for its own claim, all at once.
    devices = [f"gpu-{i}" for i in range(4)]
    winners: dict[str, str] = {}

    async def grab(r: Reservations, uid: str) -> None:
        for d in devices:
            for _ in range(5):
                try:
                    await r.reserve({(DRIVER, "node-a"): [hold(d, uid)]})
                    winners.setdefault(d, uid)
                    assert winners[d] == uid, f"{d} reserved by {winners[d]} and {uid}"
                    break
                except ReservationConflict:
                    if r.pool(DRIVER, "node-a").conflicts([hold(d, uid)]):
                        break

    await asyncio.gather(*(grab(r, f"claim-{i}") for i, r in enumerate(replicas)))
    assert sorted(winners) == devices
    wanted = {DeviceID(DRIVER, "node-a", d) for d in devices}
    await until(lambda: all(r.state.devices == wanted for r in replicas), "every replica's mirror")
    for r in replicas:
        held = [h.device for h in r.pool(DRIVER, "node-a").holdings]
        assert sorted(held) == devices, "each device held exactly once, seen by every replica"


@pytest.mark.parametrize(
    ("first", "second", "conflict"),
    [
        pytest.param(hold("gpu-0", "a"), hold("gpu-0", "b"), True, id="exclusive-vs-exclusive"),
        pytest.param(hold("gpu-0", "a"), hold("gpu-1", "b"), False, id="different-devices"),
        pytest.param(
            hold("gpu-0", "a", share="s1"), hold("gpu-0", "b", share="s2"), False, id="two-shares"
        ),
        pytest.param(
            hold("gpu-0", "a", share="s1"), hold("gpu-0", "b"), True, id="exclusive-over-share"
        ),
        pytest.param(
            hold("gpu-0", "a"), hold("gpu-0", "b", share="s2"), True, id="share-over-exclusive"
        ),
    ],
)
async def test_conflicts(
    replicas: list[Reservations], first: Holding, second: Holding, conflict: bool
) -> None:
    await replicas[0].reserve({(DRIVER, "n"): [first]})
    if conflict:
        with pytest.raises(ReservationConflict):
            await reserve_fresh(replicas[1], {(DRIVER, "n"): [second]})
    else:
        await reserve_fresh(replicas[1], {(DRIVER, "n"): [second]})


async def test_multi_pool_reservation_is_all_or_nothing(replicas: list[Reservations]) -> None:
    a, b = replicas[0], replicas[1]
    await b.reserve({(DRIVER, "node-b"): [hold("gpu-0", "other")]})
    await a._refresh("p.gpu_nvidia_com.node-b")
    with pytest.raises(ReservationConflict):
        await a.reserve(
            {
                (DRIVER, "node-a"): [hold("gpu-0", "mine")],
                (DRIVER, "node-b"): [hold("gpu-0", "mine")],
            }
        )
    assert a.holdings_of("mine") == []
    assert a.pool(DRIVER, "node-a").holdings == ()


async def test_stale_revision_is_a_conflict_then_fresh_state_wins(kv: KeyValue) -> None:
    a, b = Reservations(kv), Reservations(kv)
    await a.start()
    await b.start()
    try:
        await a.reserve({(DRIVER, "n"): [hold("gpu-0", "x")]})
        # b has not necessarily seen a's write; its add must fail or see it, never overwrite it.
        try:
            await b.reserve({(DRIVER, "n"): [hold("gpu-1", "y")]})
        except ReservationConflict:
            await b.reserve({(DRIVER, "n"): [hold("gpu-1", "y")]})
        await asyncio.sleep(0.1)
        assert sorted(h.device for h in a.pool(DRIVER, "n").holdings) == ["gpu-0", "gpu-1"]
    finally:
        await a.stop()
        await b.stop()


async def test_commit_is_once_and_release_tombstones(replicas: list[Reservations]) -> None:
    a, b = replicas[0], replicas[1]
    mine = ClaimRecord("allocated", "default/c", 1, "tok-a", "node-a", {"devices": {}}, "a")
    theirs = ClaimRecord("allocated", "default/c", 1, "tok-b", "node-b", {"devices": {}}, "b")
    assert await a.commit("uid-1", mine) == mine
    assert await b.commit("uid-1", theirs) == mine
    await a.reserve({(DRIVER, "n"): [hold("gpu-0", "uid-1", token="tok-a")]})
    await a.release("uid-1", "default/c")
    record = await b.record("uid-1")
    assert record is not None
    assert record.released
    assert a.holdings_of("uid-1") == []
    # A late attempt for the released claim cannot become final.
    late = ClaimRecord("allocated", "default/c", 1, "tok-c", "n", {"devices": {}}, "c")
    assert (await b.commit("uid-1", late)).released


async def test_drop_stale_keeps_young_attempts(kv: KeyValue) -> None:
    now = [1000.0]
    r = Reservations(kv, clock=lambda: now[0])
    await r.start()
    try:
        await r.reserve({(DRIVER, "n"): [hold("gpu-0", "u", token="old", at=900.0)]})
        await r.reserve({(DRIVER, "n"): [hold("gpu-1", "u", token="new", at=995.0)]})
        assert not await r.drop_stale("u", stale_after=30.0)
        assert [h.token for _, h in r.holdings_of("u")] == ["new"]
        now[0] = 1100.0
        assert await r.drop_stale("u", stale_after=30.0)
    finally:
        await r.stop()


async def test_record_of_unknown_claim_is_none(replicas: list[Reservations]) -> None:
    assert await replicas[0].record("nobody") is None


async def test_one_replica_writing_one_pool_at_once_never_collides_with_itself(
    replicas: list[Reservations],
) -> None:
    # Concurrent claims of one replica landing on one node: the writes take turns, none is
    # refused for a revision its sibling moved.
    r = replicas[0]
    devices = [f"gpu-{i}" for i in range(8)]
    await asyncio.gather(*(r.reserve({(DRIVER, "n"): [hold(d, f"u{d}")]}) for d in devices))
    assert sorted(h.device for h in r.pool(DRIVER, "n").holdings) == devices


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        pytest.param(True, {"gpu-0"}, id="written-stays-in-use"),
        pytest.param(False, set(), id="not-written-is-free-again"),
    ],
)
async def test_hold_marks_until_written_or_unheld(
    replicas: list[Reservations], written: bool, expected: set[str]
) -> None:
    r = replicas[0]
    by_pool = {(DRIVER, "n"): [hold("gpu-0", "u")]}
    marked = r.hold(by_pool)
    assert marked == [DeviceID(DRIVER, "n", "gpu-0")]
    assert DeviceID(DRIVER, "n", "gpu-0") in r.state.devices, "the next decision must see it"
    if written:
        await r.reserve(by_pool)
    r.unhold(marked)
    assert {d.device for d in r.state.devices} == expected


async def test_hold_leaves_shares_to_the_write(replicas: list[Reservations]) -> None:
    r = replicas[0]
    assert r.hold({(DRIVER, "n"): [hold("gpu-0", "u", share="s1")]}) is None
    assert r.state.devices == set()


async def test_holdings_of_follows_every_change(replicas: list[Reservations]) -> None:
    a, b = replicas[0], replicas[1]
    await a.reserve({(DRIVER, "n1"): [hold("gpu-0", "u1"), hold("gpu-1", "u2")]})
    await a.reserve({(DRIVER, "n2"): [hold("gpu-0", "u1")]})
    await a.drop("u2")
    # b learns it all from the watch.
    await until(lambda: len(b.holdings_of("u1")) == 2 and not b.holdings_of("u2"), "b's mirror")
    for r in (a, b):
        assert sorted((p.pool, h.device) for p, h in r.holdings_of("u1")) == [
            ("n1", "gpu-0"),
            ("n2", "gpu-0"),
        ]
        assert r.holdings_of("u2") == []
    await b.release("u1", "default/u1")
    await until(lambda: not a.state.devices, "a's mirror to see the release")
    assert a.holdings_of("u1") == []


@pytest.mark.parametrize(
    ("other_writes_first", "reads_wanted"),
    [
        pytest.param(False, 0, id="mirror-current-no-read"),
        pytest.param(True, 1, id="mirror-behind-refused-read-retried"),
    ],
)
async def test_release_writes_from_the_mirror_and_reads_only_when_refused(
    nc: Client, kv: KeyValue, other_writes_first: bool, reads_wanted: int
) -> None:
    # `b` mirrors nothing but its own writes (not started): a stand-in for a watch that lags.
    a, b = Reservations(kv), Reservations(kv)
    await a.start()
    try:
        await b.reserve({(DRIVER, "n"): [hold("gpu-0", "x")]})
        if other_writes_first:
            await reserve_fresh(a, {(DRIVER, "n"): [hold("gpu-1", "y")]})
        reads = await BucketReads.of(nc, kv._name)  # nats-py keeps the bucket name private
        try:
            assert await b.drop("x") == 1
            assert len(await reads.so_far()) == reads_wanted
        finally:
            await reads.close()
        entry = await kv.get(pool_key(DRIVER, "n"))
        stored = PoolHoldings.decode(entry.value or b"")
        wanted = ["gpu-1"] if other_writes_first else []
        assert [h.device for h in stored.holdings] == wanted
        assert b.holdings_of("x") == []
    finally:
        await a.stop()


@pytest.mark.parametrize(
    ("record", "claim_id"),
    [
        pytest.param(
            ClaimRecord("allocated", "default/c", 1, "r1-tok", "n", {"devices": {}}, "r1"),
            "r1-tok",
            id="gpudras-decision-is-known-by-its-token",
        ),
        pytest.param(
            ClaimRecord(
                "allocated",
                "default/c",
                1,
                "adopted-r1-tok",
                "n",
                {"devices": {}},
                "external",
                allocation_id="adopted-0123456789abcdef",
            ),
            "adopted-0123456789abcdef",
            id="adopted-is-known-by-the-claims-id",
        ),
        pytest.param(
            ClaimRecord("cleared", "default/c", seq=42), "", id="cleared-mark-keeps-its-sequence"
        ),
    ],
)
def test_a_record_round_trips_with_the_id_the_claim_carries(
    record: ClaimRecord, claim_id: str
) -> None:
    again = ClaimRecord.decode(record.encode())
    assert again == record
    assert again.claim_id == claim_id


async def test_a_cleared_mark_is_no_decision_and_the_next_one_replaces_it(kv: KeyValue) -> None:
    res = Reservations(kv)
    await res.forget("uid-c", "default/c", seq=11)
    assert await res.record("uid-c") is None
    mark = await res.stored("uid-c")
    assert mark is not None
    assert mark.cleared
    assert mark.seq == 11
    decision = ClaimRecord("allocated", "default/c", 1, "tok", "n", {"devices": {}}, "a", seq=12)
    assert await res.commit("uid-c", decision) == decision
    assert await res.record("uid-c") == decision
    later = ClaimRecord("allocated", "default/c", 1, "tok-2", "n", {"devices": {}}, "b", seq=13)
    assert await res.commit("uid-c", later) == decision, "a decision is never replaced"


@pytest.mark.parametrize(
    ("seq", "replaced"),
    [
        pytest.param(10, False, id="older-than-the-mark-stays-out"),
        pytest.param(11, True, id="the-marks-own-event"),
        pytest.param(12, True, id="newer-replaces"),
        pytest.param(0, True, id="unknown-sequence-replaces"),
    ],
)
async def test_a_record_replaces_a_cleared_mark_only_when_not_older(
    kv: KeyValue, seq: int, replaced: bool
) -> None:
    """An adoption that read the claim's key before a later deallocation marked it, and commits
    after: the mark stands, so nothing stays held for an allocation that was cleared."""
    res = Reservations(kv)
    await res.forget("uid-c", "default/c", seq=11)
    record = ClaimRecord("allocated", "default/c", 1, "tok", "n", {"devices": {}}, "a", seq=seq)
    winner = await res.commit("uid-c", record)
    assert (winner == record) == replaced
    assert winner.cleared != replaced
    assert await res.stored("uid-c") == winner


class Watches:
    """The bucket, with every watch the mirror opens kept, so a test can end one under it."""

    def __init__(self, kv: KeyValue) -> None:
        self.kv = kv
        self.opened: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kv, name)

    async def watch(self, keys: str) -> Any:
        watcher = await self.kv.watch(keys)
        self.opened.append(watcher)
        return watcher


async def test_a_mirror_whose_watch_ended_watches_again_and_catches_up(
    kv: KeyValue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mirror's watch ends under it (a lost connection): it watches again, learns what
    another replica wrote meanwhile, and a release then frees those holdings too (a stale
    mirror would leave a deleted claim's devices held for good)."""
    monkeypatch.setattr(reservations_module, "RETRY_FIRST", 0.01)
    watches = Watches(kv)
    mine, other = Reservations(cast(KeyValue, watches)), Reservations(kv)
    await mine.start()
    await other.start()
    try:
        await watches.opened[0].stop()
        await other.reserve({(DRIVER, "node-a"): [hold("gpu-0", "x")]})
        for _ in range(1000):
            if mine.holdings_of("x"):
                break
            await asyncio.sleep(0.01)
        assert [h.device for _, h in mine.holdings_of("x")] == ["gpu-0"]
        assert len(watches.opened) == 2
        await mine.release("x", "default/x")
        for _ in range(1000):
            if not other.holdings_of("x"):
                break
            await asyncio.sleep(0.01)
        assert not other.holdings_of("x")
    finally:
        await mine.stop()
        await other.stop()
