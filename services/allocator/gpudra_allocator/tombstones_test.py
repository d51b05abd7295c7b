from __future__ import annotations

import time

import pytest
from nats.aio.client import Client
from nats.js.kv import KeyValue

from gpudra_allocator.holdings import ClaimRecord, claim_key
from gpudra_allocator.reservations import Reservations
from gpudra_allocator.tombstones import TombstoneCollector, grace_for

GRACE = 600.0
ALLOCATED = ClaimRecord("allocated", "default/c", 1, "tok", "node-a", {"devices": {}}, "a")


def collector(nc: Client, kv: KeyValue, later: float) -> TombstoneCollector:
    """A collector whose clock runs `later` seconds ahead of the server's."""
    return TombstoneCollector(nc.jetstream(), kv, GRACE, clock=lambda: time.time() + later)


@pytest.mark.parametrize(
    ("state", "age", "removed"),
    [
        pytest.param("released", GRACE + 60, True, id="old-tombstone-goes"),
        pytest.param("released", GRACE - 60, False, id="young-tombstone-stays"),
        pytest.param("cleared", GRACE + 60, True, id="old-cleared-mark-goes"),
        pytest.param("cleared", GRACE - 60, False, id="young-cleared-mark-stays"),
        pytest.param("allocated", GRACE + 60, False, id="decision-stays-however-old"),
    ],
)
async def test_only_tombstones_older_than_grace_go(
    nc: Client, kv: KeyValue, state: str, age: float, removed: bool
) -> None:
    res = Reservations(kv)
    if state == "released":
        await res.release("uid-1", "default/c")
    elif state == "cleared":
        await res.forget("uid-1", "default/c", seq=7)
    else:
        await res.commit("uid-1", ALLOCATED)
    await res.commit("uid-2", ALLOCATED)  # a neighbour that must never be touched
    gc = collector(nc, kv, later=age)
    assert await gc.collect() == (1 if removed else 0)
    assert (await res.stored("uid-1") is None) == removed
    assert await res.record("uid-2") == ALLOCATED
    if removed:
        # Gone for good: no delete marker is left behind either.
        status = await kv.status()
        info = await nc.jetstream().stream_info(f"KV_{status.bucket}")
        assert info.state.messages == 1
        assert await gc.collect() == 0


async def test_a_record_written_after_the_pass_read_it_survives(nc: Client, kv: KeyValue) -> None:
    res = Reservations(kv)
    await res.release("uid-1", "default/c")
    gc = collector(nc, kv, later=GRACE + 60)
    expired = await gc.expired()
    assert [key for key, _ in expired] == [claim_key("uid-1")]
    # The key is written again between the pass's read and its purge.
    await kv.put(claim_key("uid-1"), ClaimRecord("released", claim="default/c").encode())
    assert await gc.remove(expired) == 1
    record = await res.record("uid-1")
    assert record is not None
    assert record.released


async def test_empty_bucket_is_a_quiet_pass(nc: Client, kv: KeyValue) -> None:
    assert await collector(nc, kv, later=GRACE * 10).collect() == 0


@pytest.mark.parametrize(
    ("ack_wait", "retry_interval", "grace"),
    [
        pytest.param(10.0, 5.0, 600.0, id="defaults-ten-minutes"),
        pytest.param(60.0, 30.0, 900.0, id="long-redelivery-ten-times"),
    ],
)
def test_grace_outlasts_redelivery(ack_wait: float, retry_interval: float, grace: float) -> None:
    assert grace_for(ack_wait, retry_interval) == grace
    assert grace_for(ack_wait, retry_interval) >= 10 * (ack_wait + retry_interval)
