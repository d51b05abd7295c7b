"""Review tests: inventories that cannot be published leave no trace in the book."""

from __future__ import annotations

import pytest

from gpudra_inventory.pools import PoolBook
from gpudra_inventory.pools_test import inventory
from gpudra_slices import SliceError, SliceOptions


@pytest.mark.parametrize(
    "node",
    [
        pytest.param("Node_A", id="not-a-dns-subdomain"),
        pytest.param("a" * 254, id="too-long"),
        pytest.param("node-", id="ends-with-a-dash"),
    ],
)
def test_an_unpublishable_first_inventory_leaves_no_pool(node: str) -> None:
    book = PoolBook(SliceOptions())
    with pytest.raises(SliceError):
        book.observe(inventory(node=node), seen_at=1.0)
    assert node not in book.pools, "a pool that was never published is not one (statusz, memory)"


def test_an_unpublishable_inventory_of_a_known_node_keeps_its_pool() -> None:
    book = PoolBook(SliceOptions())
    good = inventory()
    assert book.observe(good, seen_at=1.0) is not None
    bad = inventory()
    bad.devices[0].name = "GPU 0"
    with pytest.raises(SliceError):
        book.observe(bad, seen_at=2.0)
    state = book.pools["node-a"]
    assert state.inventory == good
    assert state.generation == 1
