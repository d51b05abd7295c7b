"""`SliceWatch` on its own: one window per node's wipe, due after the delay, longer for a node
wiped again soon after a repair. Against the HTTP-level fake API, with a hand-moved clock (the
windows are judged by it; the watch itself is real)."""

from __future__ import annotations

import functools

from gpudra_inventory.conftest import Api
from gpudra_inventory.wipes import SliceWatch
from gpudra_kube.resources import RESOURCE_SLICES, KubeObject
from gpudra_testing.waiting import until

DRIVER = "gpu.nvidia.com"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def a_slice(node: str, index: int, driver: str = DRIVER) -> KubeObject:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}-{index}"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 2},
            "devices": [{"name": f"gpu-{index}"}],
        },
    }


def name(obj: KubeObject) -> str:
    return str(obj["metadata"]["name"])


async def test_a_nodes_deletions_open_one_window_due_after_the_delay(api: Api) -> None:
    """Another driver's slice of the node going counts for nothing; the node is due once, when
    the delay has passed since its first slice went."""
    fake, store = api
    ours = [a_slice("node-a", 0), a_slice("node-a", 1)]
    theirs = a_slice("node-a", 0, driver="nic.example.com")
    other_node = a_slice("node-b", 0)
    for obj in (*ours, theirs, other_node):
        await fake.put(RESOURCE_SLICES, obj)
    clock = Clock()
    watch = SliceWatch(store, DRIVER, delay=0.3, clock=clock)
    watch.follow(True)
    try:
        names = [name(o) for o in ours]
        await until(lambda: watch.missing("node-a", names) == [], "the watch's first list")
        assert watch.missing("node-b", [name(theirs)]) == [name(theirs)]  # not ours: not seen
        await store.delete(RESOURCE_SLICES, name(theirs))
        for obj in ours:
            await store.delete(RESOURCE_SLICES, name(obj))
        await until(lambda: watch.deletions >= 2, "both deletions seen")
        assert watch.deletions == 2
        assert watch.missing("node-a", names) == names
        assert watch.missing("node-b", [name(other_node)]) == []
        clock.now += 0.29
        assert watch.due() == []
        clock.now += 0.01
        assert watch.due() == ["node-a"]
        assert watch.due() == []  # the window is closed
    finally:
        await watch.close()
    assert not watch.following


async def test_a_node_wiped_again_soon_after_a_repair_waits_twice_as_long(api: Api) -> None:
    """0.3 s, then 0.6 s, then the cap (1 s); a wipe long after the last repair (past `quiet`)
    waits the plain delay again."""
    fake, store = api
    obj = a_slice("node-a", 0)
    await fake.put(RESOURCE_SLICES, obj)
    clock = Clock()
    watch = SliceWatch(store, DRIVER, delay=0.3, quiet=60.0, max_delay=1.0, clock=clock)
    watch.follow(True)
    try:
        await until(lambda: watch.missing("node-a", [name(obj)]) == [], "the watch's first list")
        for seen, wait in enumerate((0.3, 0.6, 1.0, 1.0), start=1):
            await store.delete(RESOURCE_SLICES, name(obj))
            await until(functools.partial(deletions_at_least, watch, seen), f"deletion {seen}")
            clock.now += wait - 0.01
            assert watch.due() == [], seen
            clock.now += 0.01
            assert watch.due() == ["node-a"], seen
            watch.repaired("node-a")
            await fake.put(RESOURCE_SLICES, obj)  # written again
            clock.now += 5.0  # deleted again 5 s after the repair: soon
        await until(lambda: watch.missing("node-a", [name(obj)]) == [], "the slice back")
        clock.now += 60.0  # quiet since the last repair
        await store.delete(RESOURCE_SLICES, name(obj))
        await until(lambda: watch.deletions >= 5, "deletion 5 seen")
        clock.now += 0.3
        assert watch.due() == ["node-a"]
    finally:
        await watch.close()


def deletions_at_least(watch: SliceWatch, count: int) -> bool:
    return watch.deletions >= count
