from __future__ import annotations

import pytest

from gpudra_inventory.pools import PoolBook
from gpudra_nvml.inventory import snapshot
from gpudra_nvml.loader import open_simulator
from gpudra_slices import SliceError, SliceOptions
from gpudrapb.v1 import inventory_pb2 as pb


def inventory(node: str = "node-a", profile: str = "dgx-h100") -> pb.NodeInventory:
    opened = open_simulator(profile)
    try:
        return snapshot(opened.adapter.discover(), node, opened.source)
    finally:
        opened.adapter.stop()


def taint_keys(book: PoolBook, node: str) -> set[str]:
    return {
        t["key"]
        for s in book.pools[node].slices.values()
        for d in s["spec"].get("devices", [])
        for t in d.get("taints", [])
    }


def generations(book: PoolBook, node: str) -> set[int]:
    return {s["spec"]["pool"]["generation"] for s in book.pools[node].slices.values()}


def test_generation_grows_once_per_change_and_heartbeats_change_nothing() -> None:
    book = PoolBook(SliceOptions())
    inv = inventory()
    first = book.observe(inv, seen_at=100.0)
    assert first is not None
    assert first.generation == 1
    beat = pb.NodeInventory()
    beat.CopyFrom(inv)
    beat.observed_at.FromSeconds(12345)
    assert book.observe(beat, seen_at=110.0) is None
    changed = pb.NodeInventory()
    changed.CopyFrom(inv)
    del changed.devices[-1]
    second = book.observe(changed, seen_at=120.0)
    assert second is not None
    assert second.generation == 2
    assert generations(book, "node-a") == {2}
    assert sum(len(s["spec"].get("devices", [])) for s in second.write) == 7


@pytest.mark.parametrize(
    ("silence", "tainted"),
    [
        pytest.param(5.0, False, id="within-timeout"),
        pytest.param(31.0, True, id="missed-heartbeats"),
    ],
)
def test_silent_nodes_are_tainted_not_dropped(silence: float, tainted: bool) -> None:
    book = PoolBook(SliceOptions())
    book.observe(inventory(), seen_at=100.0)
    changes = book.expire(now=100.0 + silence, timeout=30.0)
    assert bool(changes) == tainted
    assert ("gpu.nvidia.com/unhealthy" in taint_keys(book, "node-a")) == tainted
    devices = sum(len(s["spec"].get("devices", [])) for s in book.pools["node-a"].slices.values())
    assert devices == 8


def test_heartbeat_after_silence_lifts_the_taint() -> None:
    book = PoolBook(SliceOptions())
    inv = inventory()
    book.observe(inv, seen_at=100.0)
    book.expire(now=200.0, timeout=30.0)
    back = book.observe(inv, seen_at=201.0)
    assert back is not None
    assert back.generation == 3
    assert taint_keys(book, "node-a") == set()


def test_load_continues_generations_and_restart_changes_nothing() -> None:
    book = PoolBook(SliceOptions())
    inv = inventory()
    change = book.observe(inv, seen_at=1.0)
    assert change is not None
    restarted = PoolBook(SliceOptions())
    restarted.load(change.write)
    assert restarted.observe(inv, seen_at=2.0) is None
    changed = pb.NodeInventory()
    changed.CopyFrom(inv)
    changed.versions.driver = "560.1.1"
    later = restarted.observe(changed, seen_at=3.0)
    assert later is not None
    assert later.generation == 2


def test_fewer_slices_delete_the_stale_ones() -> None:
    book = PoolBook(SliceOptions(max_devices=2))
    inv = inventory()
    first = book.observe(inv, seen_at=1.0)
    assert first is not None
    assert len(first.write) == 4
    smaller = pb.NodeInventory()
    smaller.CopyFrom(inv)
    del smaller.devices[2:]
    second = book.observe(smaller, seen_at=2.0)
    assert second is not None
    assert len(second.write) == 1
    assert len(second.delete) == 3
    assert all(s["spec"]["pool"]["resourceSliceCount"] == 1 for s in second.write)


@pytest.mark.parametrize(
    ("ours", "theirs", "expected"),
    [
        pytest.param(1, 5, 6, id="bucket-ahead"),
        pytest.param(7, 5, 6, id="standby-counted-more-unwritten-changes"),
        pytest.param(3, 3, 4, id="equal-generations"),
    ],
)
def test_adopt_republishes_above_the_buckets_generation(
    ours: int, theirs: int, expected: int
) -> None:
    old_leader = PoolBook(SliceOptions(max_devices=2))
    old_leader.observe(inventory(), seen_at=1.0)
    old_leader.pools["node-a"].generation = theirs - 1
    old_leader.expire(now=100.0, timeout=30.0)  # a real change: generation `theirs`
    written = list(old_leader.pools["node-a"].slices.values())
    assert {s["spec"]["pool"]["generation"] for s in written} == {theirs}
    standby = PoolBook(SliceOptions(max_devices=2))
    smaller = inventory()
    del smaller.devices[4:]
    standby.observe(smaller, seen_at=1.0)
    standby.pools["node-a"].generation = ours
    (change,) = standby.adopt(written)
    assert change.generation == expected
    assert generations(standby, "node-a") == {expected}
    # The bucket's slices the standby's smaller pool no longer has are deleted.
    assert len(change.write) == 2
    assert sorted(change.delete) == sorted(
        {s["metadata"]["name"] for s in written} - {s["metadata"]["name"] for s in change.write}
    )


def test_adopt_keeps_pools_known_only_from_the_bucket() -> None:
    other = PoolBook(SliceOptions())
    change = other.observe(inventory("node-b"), seen_at=1.0)
    assert change is not None
    book = PoolBook(SliceOptions())
    book.observe(inventory("node-a"), seen_at=1.0)
    changes = book.adopt(change.write)
    assert [c.node for c in changes] == ["node-a"]
    assert book.pools["node-b"].slices == {s["metadata"]["name"]: s for s in change.write}
    assert book.pools["node-b"].generation == 1


def test_an_unsliceable_inventory_leaves_the_pool_as_it_was() -> None:
    book = PoolBook(SliceOptions())
    good = inventory()
    book.observe(good, seen_at=1.0)
    bad = pb.NodeInventory()
    bad.CopyFrom(good)
    bad.devices[1].name = bad.devices[0].name  # two devices with one name cannot be sliced
    with pytest.raises(SliceError):
        book.observe(bad, seen_at=2.0)
    assert book.pools["node-a"].inventory == good
    assert generations(book, "node-a") == {1}
    assert book.expire(now=20.0, timeout=30.0) == []  # rebuilding does not trip over it later
    assert book.is_heartbeat(good)


def test_adopt_starts_a_pool_the_bucket_lacks_at_generation_one() -> None:
    book = PoolBook(SliceOptions())
    book.observe(inventory(), seen_at=1.0)
    book.observe(inventory("node-a", "hgx-b200"), seen_at=2.0)  # a standby's unwritten change
    (change,) = book.adopt([])
    assert change.generation == 1
    assert change.delete == []


@pytest.mark.parametrize(
    ("now", "tainted"),
    [
        pytest.param(225.0, False, id="within-timeout-of-the-bus-coming-back"),
        pytest.param(231.0, True, id="silent-a-timeout-after-the-bus-came-back"),
    ],
)
def test_silence_is_counted_from_the_bus_coming_back(now: float, tainted: bool) -> None:
    book = PoolBook(SliceOptions())
    book.observe(inventory(), seen_at=100.0)
    assert bool(book.expire(now=now, timeout=30.0, not_before=200.0)) == tainted
