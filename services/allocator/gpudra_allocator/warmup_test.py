from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from nats.js.kv import KeyValue

from gpudra_alloc import AllocatedState, DeviceID
from gpudra_allocator.conftest import gpu_claim, gpu_slice, gpu_slice_doc
from gpudra_allocator.engine import Engine, load_classes
from gpudra_allocator.index import slice_index
from gpudra_allocator.warmup import Warmer
from gpudra_api import ResourceSlice
from gpudra_testing.waiting import until

POLICIES = [pytest.param(p, id=p) for p in ("first-fit", "topology")]


class Fleet:
    """Slices by node and a version that grows on every change, as the slice index keeps them."""

    def __init__(self, nodes: dict[str, int]) -> None:
        self.slices = {n: gpu_slice(n, g) for n, g in nodes.items()}
        self.version = 1
        self.state = AllocatedState()
        self.on_change: Callable[[], None] = lambda: None

    def set(self, node: str, gpus: int) -> None:
        self.slices[node] = gpu_slice(node, gpus)
        self.version += 1
        self.on_change()

    def inputs(self) -> tuple[Iterable[ResourceSlice], int, AllocatedState]:
        return self.slices.values(), self.version, self.state


def warmer_for(fleet: Fleet, engine: Engine, delay: float, **kwargs: Any) -> Warmer:
    warmer = Warmer(engine, fleet.inputs, delay, **kwargs)
    fleet.on_change = warmer.notify
    warmer.start()
    return warmer


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize(
    "changes", [pytest.param(1, id="one-change"), pytest.param(6, id="burst-of-six")]
)
async def test_a_burst_of_changes_is_warmed_up_once(policy: str, changes: int) -> None:
    fleet = Fleet({"node-a": 2, "node-b": 4})
    engine = Engine(load_classes(), policy)
    warmer = warmer_for(fleet, engine, delay=0.2)
    try:
        for i in range(changes):  # no await between changes: well within the delay
            fleet.set(f"node-{i}", 1)
        assert engine.builds == 0, "nothing is built on the claim path's behalf yet"
        await until(lambda: warmer.runs == 1, "the warm-up")
        assert engine.builds == 1
        assert engine.current(fleet.version, fleet.state)
        decision = engine.decide([gpu_claim("c", 1)], *fleet.inputs())
        assert decision.allocated
        assert engine.builds == 1, "a decision after the warm-up rebuilds nothing"
    finally:
        await warmer.stop()


@pytest.mark.parametrize("policy", POLICIES)
async def test_a_decision_during_a_burst_sees_the_newest_slices(policy: str) -> None:
    fleet = Fleet({"node-a": 2})
    engine = Engine(load_classes(), policy)
    engine.decide([gpu_claim("first", 1)], *fleet.inputs())
    warmer = warmer_for(fleet, engine, delay=0.2)
    try:
        fleet.set("node-b", 4)
        fleet.set("node-a", 1)  # still in the burst: no warm-up yet
        assert warmer.pending
        assert warmer.runs == 0
        decision = engine.decide([gpu_claim("big", 3)], *fleet.inputs())
        assert (decision.allocated, decision.node) == (True, "node-b")
        assert engine.builds == 2
        await until(lambda: warmer.runs == 1, "the warm-up")
        assert engine.builds == 2, "the warm-up keeps what the decision built for the same version"
    finally:
        await warmer.stop()


@pytest.mark.parametrize(
    "pause",
    [
        pytest.param(0.0, id="stopped-while-waiting"),
        pytest.param(0.05, id="stopped-later-in-the-wait"),
    ],
)
async def test_stopping_cancels_a_pending_warm_up(pause: float) -> None:
    fleet = Fleet({"node-a": 2})
    engine = Engine(load_classes(), "topology")
    warmer = warmer_for(fleet, engine, delay=0.5)
    fleet.set("node-b", 1)
    await asyncio.sleep(pause)
    await warmer.stop()
    assert warmer.pending, "the change was never warmed up for"
    assert (warmer.runs, engine.builds) == (0, 0)
    await warmer.stop()  # a second stop is harmless


async def test_the_slice_index_tells_the_warmer(kv: KeyValue) -> None:
    await kv.put("node-a", json.dumps(gpu_slice_doc("node-a", 2)).encode())
    index = slice_index(kv)
    await index.start()
    state = AllocatedState()
    engine = Engine(load_classes(), "topology")
    warmer = Warmer(engine, lambda: (index.slices.values(), index.version, state), 0.02)
    index.listeners.append(warmer.notify)
    warmer.start()
    try:
        await kv.put("node-b", json.dumps(gpu_slice_doc("node-b", 4)).encode())
        await until(lambda: "node-b" in index.slices and warmer.runs >= 1, "the warm-up")
        await until(lambda: not warmer.pending, "the last warm-up")
        builds = engine.builds
        state.devices.add(DeviceID("gpu.nvidia.com", "node-a", "gpu-0"))
        decision = engine.decide([gpu_claim("c", 4)], index.slices.values(), index.version, state)
        assert (decision.node, engine.builds) == ("node-b", builds)
    finally:
        await warmer.stop()
        await index.stop()
