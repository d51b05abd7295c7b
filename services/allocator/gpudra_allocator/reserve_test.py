"""The topology reserve in the allocator's loop: the queue it is told (`_large_waiting`) comes
from the claims the worker holds for retry, and a unit it holds back is told so."""

from __future__ import annotations

import random
from typing import Any, cast

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.kv import KeyValue

from gpudra_alloc import AllocatedState, validate_allocation
from gpudra_alloc.workload import Fleet, build_fleet, device_classes
from gpudra_allocator.engine import Engine
from gpudra_allocator.events import parse_claim
from gpudra_allocator.gang_steps import EMPTY_CLAIM, GangSteps, place_unit
from gpudra_allocator.gang_steps_test import Decider, Slices, event, pod_event
from gpudra_allocator.reservations import Reservations
from gpudra_allocator.settings import Settings
from gpudra_allocator.steps import Waiting
from gpudra_allocator.worker import Worker
from gpudra_api import Node, parse_device_class, parse_resource_slice

CLASSES = [parse_device_class(c) for c in device_classes()]


def dgx_slices(nodes: int) -> dict[str, Any]:
    slices = [
        parse_resource_slice(s) for s in build_fleet(Fleet(counts={"dgx-h100": nodes})).slices
    ]
    return {s.name: s for s in slices}


def held(ev: Any, lone: bool = False) -> Waiting:
    """A claim held for retry, as the worker keeps it: a lone claim parsed, a unit member not."""
    return Waiting(cast(Msg, None), ev, parse_claim(ev) if lone else EMPTY_CLAIM)


def gang_member(name: str, count: int, pod: str, gang: str = "ns/g", size: int = 2) -> Any:
    ev = pod_event(name, count, pod, (name,))
    ev.gang_id, ev.gang_size = gang, size
    return ev


class Queue(GangSteps):
    """The worker's waiting set and engine, nothing else: what `_large_waiting` reads."""

    def __init__(self, engine: Engine, waiting: list[Waiting]) -> None:
        self._engine = engine
        self._waiting = {w.event.claim.uid: w for w in waiting}


QUEUE = [
    held(pod_event("big", 8, "p-big", ("big",)), lone=True),  # an 8-GPU pod
    held(pod_event("small", 1, "p-small", ("small",)), lone=True),
    held(gang_member("g0", 8, "p-g0")),  # a gang of 2 x 8 GPUs: two pods that count
    held(gang_member("g1", 8, "p-g1")),
    held(gang_member("h0", 4, "p-h0", "ns/h")),  # a gang of 2 x 4 GPUs: none counts
    held(gang_member("h1", 4, "p-h1", "ns/h")),
    held(pod_event("two-a", 4, "p-two", ("two-a", "two-b"))),  # one pod, 2 x 4 GPUs: counts
    held(pod_event("two-b", 4, "p-two", ("two-a", "two-b"))),
]


@pytest.mark.parametrize(
    ("deciding", "large"),
    [
        pytest.param(held(pod_event("new", 1, "p-new", ("new",))), 4, id="a-new-claim-sees-all"),
        pytest.param(QUEUE[1], 4, id="a-small-claim-held"),
        pytest.param(QUEUE[0], 3, id="the-8-gpu-pod-is-not-waiting-for-itself"),
        pytest.param(QUEUE[2], 2, id="a-gang-member-leaves-its-whole-gang-out"),
        pytest.param(QUEUE[6], 3, id="a-pod-unit-member-leaves-its-pod-out"),
    ],
)
def test_large_waiting_counts_the_pods_held_but_the_one_decided(
    deciding: Waiting, large: int
) -> None:
    queue = Queue(Engine(CLASSES, "topology", reserve=2), QUEUE)
    assert queue._large_waiting(deciding) == large


@pytest.mark.parametrize(
    "engine",
    [
        pytest.param(Engine(CLASSES, "topology"), id="no-reserve"),
        pytest.param(Engine(CLASSES, "first-fit", reserve=2), id="first-fit"),
    ],
)
def test_large_waiting_is_not_counted_without_a_reserve(engine: Engine) -> None:
    broken = held(event("broken"))  # no claim JSON: parsing it would fail
    assert Queue(engine, [*QUEUE, broken])._large_waiting(QUEUE[1]) is None


def test_an_unparsable_held_claim_is_left_out() -> None:
    broken = held(event("broken", "p-x", ("broken", "y")))
    queue = Queue(Engine(CLASSES, "topology", reserve=2), [QUEUE[0], broken])
    assert queue._large_waiting(QUEUE[1]) == 1


class ReserveDecider(Decider):
    """`Decider` (a unit attempt as the worker runs it) on one DGX, the reserve on, and the
    worker's waiting set."""

    def __init__(self, kv: KeyValue, waiting: list[Waiting]) -> None:
        super().__init__(kv)
        self._engine = Engine(CLASSES, "topology", reserve=1)
        self._index = cast(Any, Slices(dgx_slices(1)))
        self._waiting = {w.event.claim.uid: w for w in waiting}
        self.reasons: list[str] = []

    async def _unschedulable(self, waiting: Waiting, reason: str) -> None:
        self.reasons.append(reason)


@pytest.mark.parametrize(
    ("waiting", "placed"),
    [
        pytest.param([], True, id="no-8-gpu-pod-waits-the-pod-is-placed"),
        pytest.param([QUEUE[0]], False, id="an-8-gpu-pod-waits-the-domain-is-held"),
        pytest.param([QUEUE[4], QUEUE[5]], True, id="only-4-gpu-pods-wait"),
    ],
)
async def test_the_worker_tells_the_reserve_its_queue(
    kv: KeyValue, waiting: list[Waiting], placed: bool
) -> None:
    """A pod of two 1-GPU claims on the fleet's one whole DGX domain: placed unless a pod
    the worker holds needs that domain whole."""
    unit = ReserveDecider(kv, waiting)
    await unit._res.start()
    try:
        names = ("a", "b")
        events = [pod_event(name, 1, "p", names) for name in names]
        slices = list(unit._index.slices.values())
        # what the attempt will decide, checked as the placement tests check it
        unit._engine.waiting_large = unit._large_waiting(held(events[0]))
        claims = [parse_claim(ev) for ev in events]
        expected = place_unit(unit._engine, "pod:p", [claims], None, slices, 1, AllocatedState())
        allocator, _ = unit._engine.placement(slices, 1, AllocatedState())
        scratch = AllocatedState()
        for claim, (node, result) in zip(claims, expected.placed, strict=placed):
            assert validate_allocation(allocator, Node(node), [claim], [result], scratch) == []
            scratch.apply([result])
        for ev in events:
            await unit.attempt(ev)
        assert unit._engine.waiting_large == sum(1 for w in waiting if w is QUEUE[0])
        assert expected.allocated == placed
        if placed:
            assert unit.announced == {"a": "dgx-00", "b": "dgx-00"}
            for claim, (_, result) in zip(claims, expected.placed, strict=True):
                devices = {h.device for _, h in unit._res.holdings_of(claim.uid)}
                assert devices == {r.device for r in result.results}
        else:
            assert unit.announced == {}
            assert unit.reasons, "every member is told why"
            assert unit.reasons[-1].startswith(
                "pod default/p: its 2 claims do not fit together on one node; held back: the "
                "topology reserve keeps 1 whole NVLink domain(s) for 8-GPU claims "
                "(dgx-00/nvswitch-0; 1 waiting, floor 0)"
            ), unit.reasons[-1]
    finally:
        await unit._res.stop()


class Acked:
    """The part of a NATS message `Worker._finish` uses."""

    def __init__(self) -> None:
        self.acks = 0

    async def ack(self) -> None:
        self.acks += 1


@pytest.mark.parametrize(
    ("engine", "retried"),
    [
        pytest.param(Engine(CLASSES, "topology", reserve=1), True, id="reserve-on"),
        pytest.param(Engine(CLASSES, "topology"), False, id="reserve-off"),
    ],
)
async def test_a_claim_leaving_the_queue_retries_the_others_while_the_reserve_runs(
    nc: Client, kv: KeyValue, engine: Engine, retried: bool
) -> None:
    """An 8-GPU pod deleted while pending frees no device (no reservation change), yet the
    reserve may now hold fewer domains: the claims it held back must be retried on that."""
    worker = Worker(nc, Settings(), engine, cast(Any, Slices({})), Reservations(kv))
    msg = Acked()
    big = Waiting(cast(Msg, msg), pod_event("big", 8, "p-big", ("big",)), EMPTY_CLAIM)
    worker._waiting["uid-big"] = big
    before = worker._versions()
    await worker._finish("uid-big", cast(Msg, msg))
    assert "uid-big" not in worker.waiting
    assert msg.acks == 1
    assert (worker._versions() != before) == retried


async def test_the_kept_queue_count_follows_every_hold_and_finish(nc: Client, kv: KeyValue) -> None:
    """The count is kept between decisions and must change exactly when the queue does: after
    each step of a seeded walk of holds and finishes it equals a count made anew."""
    rng = random.Random(7)
    engine = Engine(CLASSES, "topology", reserve=2)
    worker = Worker(nc, Settings(), engine, cast(Any, Slices({})), Reservations(kv))
    pool = [
        *QUEUE,
        *(held(pod_event(f"x{i}", 8 >> (i % 4), f"p-x{i}", (f"x{i}",))) for i in range(6)),
    ]
    deciders = [*pool, held(pod_event("new", 8, "p-new", ("new",)))]
    for _ in range(200):
        waiting = rng.choice(pool)
        uid = waiting.event.claim.uid
        if uid in worker.waiting and rng.random() < 0.5:
            msg = Acked()
            waiting.msg = cast(Msg, msg)
            await worker._finish(uid, cast(Msg, msg))
        else:
            worker._hold(waiting)
        fresh = Queue(engine, list(worker.waiting.values()))
        for deciding in deciders:
            assert worker._large_waiting(deciding) == fresh._large_waiting(deciding)
