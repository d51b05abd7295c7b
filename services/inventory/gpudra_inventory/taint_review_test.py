"""Review tests: the inventory's own `unhealthy` taint (a silent node-agent) keeps its timeAdded
wherever and whenever it is computed, so a re-published slice does not move it."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra_inventory.pools import PoolBook
from gpudra_inventory.pools_test import inventory
from gpudra_slices import SliceOptions

KEY = "gpu.nvidia.com/unhealthy"


def _added(book: PoolBook, node: str = "node-a") -> set[Any]:
    return {
        t.get("timeAdded")
        for s in book.pools[node].slices.values()
        for d in s["spec"].get("devices", [])
        for t in d.get("taints", [])
        if t["key"] == KEY
    }


@pytest.mark.parametrize(
    "late",
    [
        pytest.param(1.0, id="a-standby-one-turn-later"),
        pytest.param(3600.0, id="a-replica-restarted-an-hour-later"),
    ],
)
def test_every_replica_dates_the_taint_alike(late: float) -> None:
    """Leader and standby (or a restarted replica) see the node's last inventory with the same
    JetStream timestamp, but run `expire` at different moments."""
    leader, other = PoolBook(SliceOptions()), PoolBook(SliceOptions())
    for book in (leader, other):
        book.observe(inventory(), seen_at=1_700_000_000.0)
    leader.expire(now=1_700_000_031.0, timeout=30.0)
    other.expire(now=1_700_000_031.0 + late, timeout=30.0)
    (when,) = _added(leader)
    assert when is not None
    assert _added(other) == {when}, "a takeover republishes the same taint, not a newer one"


def test_the_taint_is_dated_from_when_the_node_went_silent() -> None:
    book = PoolBook(SliceOptions())
    book.observe(inventory(), seen_at=1_700_000_000.0)
    book.expire(now=1_700_009_999.0, timeout=30.0)
    # 1_700_000_000 + 30 s: the moment its heartbeats were overdue, whenever that was noticed.
    assert _added(book) == {"2023-11-14T22:13:50Z"}
