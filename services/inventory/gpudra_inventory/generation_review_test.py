"""Review tests: inventories that arrive out of order (an older node-agent generation after a newer
one), as two node-agents of one node publish them during a DaemonSet rolling update."""

from __future__ import annotations

from gpudra_inventory.pools import PoolBook
from gpudra_inventory.pools_test import inventory
from gpudra_slices import SliceOptions
from gpudrapb.v1 import inventory_pb2 as pb


def _numbered(generation: int, devices: int) -> pb.NodeInventory:
    inv = inventory()
    inv.generation = generation
    del inv.devices[devices:]
    return inv


def _devices(book: PoolBook, node: str = "node-a") -> int:
    return sum(len(s["spec"].get("devices", [])) for s in book.pools[node].slices.values())


def test_an_older_generation_after_a_newer_one_changes_nothing() -> None:
    book = PoolBook(SliceOptions())
    assert book.observe(_numbered(4, devices=8), seen_at=100.0) is not None
    newer = book.observe(_numbered(5, devices=7), seen_at=101.0)
    assert newer is not None
    # The old agent, still running beside the new one, sends its (older) view again.
    assert book.observe(_numbered(4, devices=8), seen_at=102.0) is None
    assert _devices(book) == 7
    assert book.pools["node-a"].generation == newer.generation
    # ... and its heartbeats do not keep the node alive for the new one.
    assert book.pools["node-a"].last_seen == 101.0


def test_a_lower_generation_is_taken_once_the_newer_publisher_went_silent() -> None:
    """A node-agent that lost its stored generation starts again at 1: it must not be ignored
    for ever, only while the publisher of the newer generation is still heard."""
    book = PoolBook(SliceOptions())
    book.observe(_numbered(9, devices=8), seen_at=100.0)
    assert book.observe(_numbered(1, devices=6), seen_at=110.0) is None
    assert book.expire(now=131.0, timeout=30.0), "the generation-9 publisher is silent"
    back = book.observe(_numbered(1, devices=6), seen_at=132.0)
    assert back is not None
    assert _devices(book) == 6
    assert "gpu.nvidia.com/unhealthy" not in {
        t["key"]
        for s in back.write
        for d in s["spec"].get("devices", [])
        for t in d.get("taints", [])
    }


def test_unnumbered_inventories_are_taken_in_arrival_order() -> None:
    book = PoolBook(SliceOptions())
    book.observe(_numbered(3, devices=8), seen_at=100.0)
    assert book.observe(_numbered(0, devices=5), seen_at=101.0) is not None
    assert _devices(book) == 5
