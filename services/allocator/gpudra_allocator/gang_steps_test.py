from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any, cast

import pytest
import pytest_asyncio
from nats.aio.msg import Msg
from nats.js.kv import KeyValue

from gpudra_alloc import AllocatedState, DeviceID
from gpudra_alloc.placement import validate_allocation
from gpudra_allocator.conftest import gpu_claim, gpu_slice, tray
from gpudra_allocator.engine import Engine, load_classes
from gpudra_allocator.gang_steps import (
    EMPTY_CLAIM,
    MAX_POD_CLAIMS,
    GangSteps,
    place_unit,
)
from gpudra_allocator.gangs import (
    GangBook,
    Members,
    decision_key,
    pods_of,
    unit_of,
    unit_size,
)
from gpudra_allocator.holdings import ClaimRecord, holdings_for
from gpudra_allocator.reservations import Reservations
from gpudra_allocator.settings import Settings
from gpudra_allocator.steps import Waiting
from gpudra_api import Node
from gpudra_testing.waiting import until
from gpudrapb.v1 import claims_pb2


def event(
    name: str, pod: str = "", pod_claims: tuple[str, ...] = (), gang: str = "", size: int = 0
) -> Any:
    return claims_pb2.ClaimEvent(
        kind=claims_pb2.ClaimEvent.KIND_PENDING,
        claim=claims_pb2.ClaimRef(namespace="default", name=name, uid=f"uid-{name}"),
        gang_id=gang,
        gang_size=size,
        pod_uid=pod,
        pod_name=f"default/{pod}" if pod else "",
        pod_claims=[f"uid-{c}" for c in pod_claims],
    )


@pytest.mark.parametrize(
    ("ev", "unit", "size"),
    [
        pytest.param(event("a"), "", 1, id="no-pod-alone"),
        pytest.param(event("a", "p1", ("a",)), "", 1, id="pod-with-one-claim-alone"),
        pytest.param(event("a", "p1", ("a", "b")), "pod:p1", 2, id="pod-with-two-claims"),
        pytest.param(event("a", "p1", ("b",)), "pod:p1", 2, id="own-uid-counted-when-unlisted"),
        pytest.param(event("a", "p1", ("a", "b"), "ns/g", 4), "ns/g", 4, id="gang-wins"),
        pytest.param(event("a", gang="ns/g", size=3), "ns/g", 3, id="gang-without-pods"),
    ],
)
def test_unit_of(ev: Any, unit: str, size: int) -> None:
    assert unit_of(ev) == unit
    assert unit_size(ev) == size


def test_pods_of_groups_by_pod_and_keeps_podless_claims_apart() -> None:
    events = [
        event("a", "p1", ("a", "b")),
        event("x"),
        event("b", "p1", ("a", "b")),
        event("c", "p2", ("c",)),
        event("y"),
    ]
    assert [[e.claim.name for e in pod] for pod in pods_of(events)] == [
        ["a", "b"],
        ["x"],
        ["c"],
        ["y"],
    ]


def seen_at(ev: Any, seconds: int) -> Any:
    ev.observed_at.seconds = seconds
    return ev


@pytest.mark.parametrize(
    ("events", "needed"),
    [
        pytest.param([event("a", "p1", ("a", "b", "c"))], {"a", "b", "c"}, id="one-member"),
        pytest.param(
            [event("a", "p1", ("a", "b")), event("b", "p1", ("a", "b"))],
            {"a", "b"},
            id="same-snapshot",
        ),
        pytest.param(
            [
                seen_at(event("a", "p1", ("a", "old")), 1),
                seen_at(event("new", "p1", ("a", "new")), 2),
            ],
            {"a", "new"},
            id="re-created-claim-named-by-its-new-uid",
        ),
        pytest.param(
            [event("a", "p1", ("a", "old")), event("new", "p1", ("a", "new"))],
            {"a", "old", "new"},
            id="equally-recent-all-count",
        ),
        pytest.param(
            [seen_at(event("a", "p1", ("a", "b")), 5), seen_at(event("c", "p2", ("c", "d")), 1)],
            {"a", "b", "c", "d"},
            id="per-pod",
        ),
    ],
)
def test_members_needed_is_every_claim_the_pods_name(events: list[Any], needed: set[str]) -> None:
    members = Members("pod:p1", 3, {e.claim.uid: e for e in events})
    assert members.needed() == {f"uid-{n}" for n in needed}


def taken(node: str, count: int) -> set[DeviceID]:
    return {DeviceID("gpu.nvidia.com", node, f"gpu-{i}") for i in range(count)}


def two_nodes(
    used: dict[str, int], pods: list[list[int]]
) -> tuple[list[Any], AllocatedState, list[list[Any]]]:
    """node-a and node-b with 4 GPUs each, `used[node]` of them taken, and one claim per count
    of each pod (claim j of pod i: `p<i>c<j>`)."""
    slices = [gpu_slice("node-a"), gpu_slice("node-b")]
    state = AllocatedState(devices={d for n, c in used.items() for d in taken(n, c)})
    claim_pods = [
        [gpu_claim(f"p{i}c{j}", count) for j, count in enumerate(pod)] for i, pod in enumerate(pods)
    ]
    return slices, state, claim_pods


@pytest.mark.parametrize("policy", ["first-fit", "topology"])
@pytest.mark.parametrize(
    ("unit", "pods", "pinned", "used", "nodes", "reason"),
    [
        pytest.param("pod:p", [[2, 2]], "", {}, [["a", "a"]], "", id="pod-two-claims-one-node"),
        pytest.param(
            "pod:p",
            [[2, 2]],
            "",
            {"node-a": 1},
            [["b", "b"]],
            "",
            id="pod-skips-node-where-only-one-claim-fits",
        ),
        pytest.param(
            "pod:p",
            [[3, 3]],
            "",
            {},
            None,
            "pod p: its 2 claims do not fit together on one node",
            id="pod-fits-claim-by-claim-only",
        ),
        pytest.param("pod:p", [[2]], "node-b", {}, [["b"]], "", id="pinned-goes-to-its-node"),
        pytest.param(
            "pod:p",
            [[2]],
            "node-b",
            {"node-b": 3},
            None,
            "do not fit together on node-b, where its claims already allocated are",
            id="pinned-node-full-waits-though-a-is-free",
        ),
        pytest.param(
            "ns/g",
            [[2, 2], [2, 2]],
            "",
            {},
            [["a", "a"], ["b", "b"]],
            "",
            id="gang-each-pod-on-one-node",
        ),
        pytest.param(
            "ns/g",
            [[3, 2], [1]],
            "",
            {},
            None,
            "gang ns/g: its 3 claims in 2 pod(s) do not fit together",
            id="gang-pod-too-big-for-any-node",
        ),
    ],
)
def test_place_unit(
    policy: str,
    unit: str,
    pods: list[list[int]],
    pinned: str,
    used: dict[str, int],
    nodes: list[list[str]] | None,
    reason: str,
) -> None:
    slices, state, claim_pods = two_nodes(used, pods)
    engine = Engine(load_classes(), policy)
    decision = place_unit(engine, unit, claim_pods, None, slices, 1, state, pinned)
    if nodes is None:
        assert not decision.allocated
        assert reason in decision.reason
        return
    assert decision.allocated, decision.reason
    placed = iter(decision.placed)
    got = [[next(placed)[0] for _ in pod] for pod in pods]
    assert all(len(set(pod)) == 1 for pod in got), f"a pod split over nodes: {got}"
    if pinned or used:
        assert got == [[f"node-{n}" for n in pod] for pod in nodes]
    else:
        # Which node takes which pod is the policy's choice; one node per pod is the promise.
        assert sorted(set(p[0] for p in got)) == sorted({f"node-{p[0]}" for p in nodes})
    devices = [d["device"] for _, r in decision.placed for d in r.to_json()["devices"]["results"]]
    pools = [d["pool"] for _, r in decision.placed for d in r.to_json()["devices"]["results"]]
    assert len(set(zip(pools, devices, strict=True))) == len(devices), "no device twice"


class Planner(GangSteps):
    """Only what `_plan` and the first checks of `_attempt_gang` use: the claim records, the unit
    book, and what the worker would publish (kept here)."""

    def __init__(self, kv: KeyValue) -> None:
        self._res = Reservations(kv)
        self._gangs = GangBook(kv)
        self.reasons: list[str] = []
        self.finished: list[str] = []

    def _versions(self) -> tuple[int, int, int]:
        return (0, 0, 0)

    async def _unschedulable(self, waiting: Waiting, reason: str) -> None:
        self.reasons.append(reason)

    async def _finish(self, uid: str, msg: Msg) -> None:
        self.finished.append(uid)

    async def record(self, records: dict[str, str]) -> None:
        """Claim records as an allocator would have left them: claim name -> its node, "" for
        one allocated without a node (network-attached), "released" for one released."""
        for name, node in records.items():
            if node == "released":
                await self._res.release(f"uid-{name}", f"default/{name}")
            else:
                await self._res.commit(
                    f"uid-{name}",
                    ClaimRecord("allocated", claim=f"default/{name}", node=node, allocation={}),
                )


async def test_a_pod_naming_too_many_claims_is_refused_not_stalled(kv: KeyValue) -> None:
    planner = Planner(kv)
    many = event("a", "p", tuple(f"c{i}" for i in range(MAX_POD_CLAIMS + 1)))
    await planner._attempt_gang(Waiting(cast(Msg, None), many, EMPTY_CLAIM))
    assert planner.finished == ["uid-a"]
    assert planner.reasons == [
        f"invalid claim: pod default/p names {MAX_POD_CLAIMS + 2} claims "
        f"(gpudra places at most {MAX_POD_CLAIMS} per pod)"
    ]
    assert await planner._gangs.members("pod:p") is None, "it joined nothing"


@pytest.mark.parametrize(
    ("arrived", "records", "pinned", "why"),
    [
        pytest.param(["a"], {}, None, "pod default/p: 1 of 3 claims present", id="waits-for-rest"),
        pytest.param(["a", "b", "c"], {}, "", "", id="complete-unpinned"),
        pytest.param(["a", "b"], {"c": "node-2"}, "node-2", "", id="allocated-claim-pins"),
        pytest.param(
            ["a"],
            {"b": "node-1", "c": "node-2"},
            None,
            "already allocated are on different nodes (node-1, node-2)",
            id="allocated-on-two-nodes-waits",
        ),
        pytest.param(["a", "b"], {"c": ""}, "", "", id="network-attached-pins-nothing"),
        pytest.param(
            ["a", "b"], {"c": "released"}, None, "2 of 3 claims present", id="deleted-claim-missing"
        ),
    ],
)
async def test_plan_of_a_pod(
    kv: KeyValue, arrived: list[str], records: dict[str, str], pinned: str | None, why: str
) -> None:
    planner = Planner(kv)
    await planner.record(records)
    members = None
    for name in arrived:
        members = await planner._gangs.join(event(name, "p", ("a", "b", "c")))
    assert members is not None
    plan, reason = await planner._plan(members)
    if pinned is None:
        assert plan is None
        assert why in reason
        return
    assert plan is not None, reason
    assert plan.pins == (pinned,)
    assert [e.claim.name for e in plan.events] == arrived


@pytest.mark.parametrize("policy", ["first-fit", "topology"])
@pytest.mark.parametrize(
    ("pods", "pins", "used", "nodes", "reason"),
    [
        pytest.param([[2], [2]], ["node-b", ""], {}, [["b"], ["*"]], "", id="one-pod-pinned"),
        pytest.param(
            [[2], [2]], ["node-b", "node-b"], {}, [["b"], ["b"]], "", id="both-pods-pinned-together"
        ),
        pytest.param(
            [[2, 2], [1]],
            ["", "node-a"],
            {"node-a": 1},
            [["b", "b"], ["a"]],
            "",
            id="pinned-pod-first-the-free-pod-elsewhere",
        ),
        pytest.param(
            [[2], [2]],
            ["node-b", ""],
            {"node-b": 3},
            None,
            "beside their claims already allocated (on node-b)",
            id="pinned-node-full-gang-waits",
        ),
    ],
)
def test_place_unit_pins_gang_pods(
    policy: str,
    pods: list[list[int]],
    pins: list[str],
    used: dict[str, int],
    nodes: list[list[str]] | None,
    reason: str,
) -> None:
    slices, state, claim_pods = two_nodes(used, pods)
    engine = Engine(load_classes(), policy)
    decision = place_unit(engine, "ns/g", claim_pods, None, slices, 1, state, pins=pins)
    if nodes is None:
        assert not decision.allocated
        assert reason in decision.reason, decision.reason
        return
    assert decision.allocated, decision.reason
    placed = iter(decision.placed)
    got = [[next(placed)[0] for _ in pod] for pod in pods]
    assert [[n for n in pod if n != "*"] for pod in nodes] == [
        [
            node.removeprefix("node-")
            for node, want in zip(pod, want_pod, strict=True)
            if want != "*"
        ]
        for pod, want_pod in zip(got, nodes, strict=True)
    ]


@pytest.mark.parametrize(
    ("policy", "chooser"),
    [pytest.param("first-fit", False, id="first-fit"), pytest.param("topology", True, id="topo")],
)
def test_engine_placement_is_decides_allocator(policy: str, chooser: bool) -> None:
    engine = Engine(load_classes(), policy)
    slices = [gpu_slice("node-a")]
    state = AllocatedState()
    allocator, got = engine.placement(slices, 1, state)
    assert allocator.node_names() == ["node-a"]
    assert (got is not None) == chooser
    assert engine.placement(slices, 1, state)[0] is allocator, "kept per version"


@pytest.mark.parametrize(
    ("records", "pins", "why"),
    [
        pytest.param({}, ("", ""), "", id="nothing-allocated-nothing-pinned"),
        pytest.param({"p0-named": "node-b"}, ("node-b", ""), "", id="pods-allocated-claim-pins"),
        pytest.param({"p1-named": "node-a"}, ("", "node-a"), "", id="second-pod-pinned"),
        pytest.param({"p0-named": ""}, ("", ""), "", id="network-attached-pins-nothing"),
        pytest.param({"p0-named": "released"}, ("", ""), "", id="deleted-non-member-ignored"),
    ],
)
async def test_plan_of_a_gang_pins_each_pod(
    kv: KeyValue, records: dict[str, str], pins: tuple[str, ...], why: str
) -> None:
    planner = Planner(kv)
    await planner.record(records)
    members = None
    for p in range(2):
        # Each pod: two gang members and a named claim of its own outside the gang.
        named = (f"p{p}a", f"p{p}b", f"p{p}-named")
        for c in ("a", "b"):
            members = await planner._gangs.join(event(f"p{p}{c}", f"pod{p}", named, "ns/g", 4))
    assert members is not None
    plan, reason = await planner._plan(members)
    assert plan is not None, reason
    assert [[e.claim.name for e in pod] for pod in plan.pods] == [["p0a", "p0b"], ["p1a", "p1b"]]
    assert plan.pins == pins


def pod_event(name: str, count: int, pod: str, names: tuple[str, ...], owned: bool = True) -> Any:
    """A pending claim of `count` GPUs sent with its pod (claim JSON included); `owned`: a
    template's claim (owned by the pod), else a named claim (it may have gone alone)."""
    metadata: dict[str, Any] = {"name": name, "namespace": "default", "uid": f"uid-{name}"}
    doc = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count},
                    }
                ]
            }
        },
    }
    if owned:
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": pod, "controller": True}
        ]
    ev = event(name, pod, names)
    ev.claim_json = json.dumps(doc).encode()
    return ev


@dataclass
class Slices:
    """The two fields of the slice index a decision reads."""

    slices: dict[str, Any]
    version: int = 1


class Decider(Planner):
    """A whole unit attempt, as `Worker` runs it, minus the bus: announcements are kept here."""

    def __init__(self, kv: KeyValue, replica: str = "r1") -> None:
        super().__init__(kv)
        self.replica = replica
        self._settings = Settings()
        self._engine = Engine(load_classes(), "first-fit")
        self._index = cast(Any, Slices({n: gpu_slice(n) for n in ("node-a", "node-b")}))
        self._gang_reasons = {}
        self._decide_lock = asyncio.Lock()
        self.announced: dict[str, str] = {}  # claim name -> node
        self.held: list[str] = []

    def _refresh_classes(self) -> None:
        pass

    def _hold(self, waiting: Waiting) -> None:
        self.held.append(waiting.event.claim.uid)

    async def _announce(self, event: claims_pb2.ClaimEvent, record: ClaimRecord) -> None:
        self.announced[event.claim.name] = record.node

    async def attempt(self, ev: Any) -> None:
        await self._attempt_gang(Waiting(cast(Msg, None), ev, EMPTY_CLAIM))

    async def deallocated(self, ev: Any) -> None:
        """What `Worker._deleted` does for a cleared allocation."""
        record = await self._res.record(ev.claim.uid)
        if record is not None and record.gang:
            await self._gangs.leave(record.gang, ev.claim.uid)
        await self._res.forget(ev.claim.uid)
        self.announced.pop(ev.claim.name, None)

    async def take(self, name: str, node: str, count: int, token: str = "lone") -> None:
        """A lone decision of claim `name` on `node`, reserved and recorded (as `Worker._commit`)."""
        decision = self._engine.decide(
            [gpu_claim(name, count)], [gpu_slice(node)], 99, self._res.state
        )
        assert decision.allocated, decision.reason
        uid, key = f"uid-{name}", f"default/{name}"
        await self._res.reserve(holdings_for(decision.results, uid, key, token, time.time()))
        await self._res.commit(
            uid,
            ClaimRecord(
                "allocated",
                claim=key,
                token=token,
                node=node,
                allocation=decision.results[0].to_json(),
            ),
        )
        await until(lambda: bool(self._res.holdings_of(uid)))


@pytest_asyncio.fixture
async def decider(kv: KeyValue) -> AsyncIterator[Decider]:
    unit = Decider(kv)
    await unit._res.start()
    yield unit
    await unit._res.stop()


def holders(unit: Decider) -> dict[str, set[str]]:
    """Claim UID -> nodes (pools) its devices are held on, from the mirror."""
    out: dict[str, set[str]] = {}
    for pool in unit._res._pools.values():
        for holding in pool[1].holdings:
            out.setdefault(holding.uid, set()).add(pool[1].pool)
    return out


POD = ("a", "b")


async def test_a_late_member_is_pinned_to_its_pods_node(decider: Decider) -> None:
    """b is deallocated after the pod's decision and comes back: it joins a on a's node, though
    the first node (first-fit's pick for a lone claim) is free by then."""
    await decider.take("x", "node-a", 1)
    for name in POD:
        await decider.attempt(pod_event(name, 2, "p", POD))
    assert decider.announced == {"a": "node-b", "b": "node-b"}
    await decider._res.drop("uid-x")
    await decider.deallocated(pod_event("b", 2, "p", POD))
    await until(lambda: "uid-b" not in holders(decider) and "uid-x" not in holders(decider))
    await decider.attempt(pod_event("b", 2, "p", POD))
    assert decider.announced == {"a": "node-b", "b": "node-b"}, decider.reasons
    assert decider.finished[-1] == "uid-b"
    await until(lambda: holders(decider).get("uid-b") == {"node-b"})
    assert (await decider._res.record("uid-b")) is not None


async def test_a_unit_whose_placed_members_all_left_is_decided_anew(decider: Decider) -> None:
    for name in POD:
        await decider.attempt(pod_event(name, 2, "p", POD))
    assert set(decider.announced.values()) == {"node-a"}
    # a comes back (pending again) before b is deallocated too: the decision places nobody now.
    await decider.deallocated(pod_event("a", 2, "p", POD))
    await decider._gangs.join(pod_event("a", 2, "p", POD))
    await decider.deallocated(pod_event("b", 2, "p", POD))
    await decider.attempt(pod_event("a", 2, "p", POD))
    assert decider.reasons[-1].startswith("pod default/p: 1 of 2 claims present"), decider.reasons
    await decider.attempt(pod_event("b", 2, "p", POD))
    assert set(decider.announced) == {"a", "b"}, decider.reasons
    assert len(set(decider.announced.values())) == 1
    await until(lambda: len(holders(decider)) == 2)


async def test_a_lone_decision_racing_the_units_never_splits_the_pod(decider: Decider) -> None:
    """`zz` (named: it may have gone alone) is decided alone on node-b after the unit planned
    both claims on node-a; the unit's first commit finds it, voids its decision, pins to node-b."""
    names = ("aa", "zz")
    aa, zz = pod_event("aa", 2, "p", names), pod_event("zz", 2, "p", names, owned=False)
    members = await decider._gangs.join(aa)
    members = await decider._gangs.join(zz)
    plan, why = await decider._plan(members)
    assert plan is not None, why
    record = await decider._decide_gang(Waiting(cast(Msg, None), aa, EMPTY_CLAIM), members, plan)
    assert record is not None
    assert {node for node, _ in record.placed.values()} == {"node-a"}
    await decider.take("zz", "node-b", 2)  # the lone attempt commits first
    assert not await decider._settle_gang(record, members)
    assert await decider._res.record("uid-aa") is None, "no member of the void decision committed"
    assert await decider._gangs.decision("pod:p") is None
    await until(lambda: holders(decider) == {"uid-zz": {"node-b"}})
    await decider.attempt(aa)
    assert decider.announced == {"aa": "node-b", "zz": "node-b"}, decider.reasons
    await until(lambda: holders(decider) == {"uid-zz": {"node-b"}, "uid-aa": {"node-b"}})


async def test_a_lone_decision_seen_after_reserving_pins_the_next_attempt(
    decider: Decider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lone attempt commits while the unit's holdings are being written: the unit sees its
    record before creating its decision, drops what it held, and its next attempt is pinned."""
    names = ("aa", "zz")
    aa, zz = pod_event("aa", 2, "p", names), pod_event("zz", 2, "p", names, owned=False)
    await decider._gangs.join(aa)
    members = await decider._gangs.join(zz)
    plan, why = await decider._plan(members)
    assert plan is not None, why
    reserve = decider._res.reserve
    raced: list[bool] = []

    async def reserve_then_race(by_pool: Any) -> None:
        await reserve(by_pool)
        if not raced:
            raced.append(True)
            await decider.take("zz", "node-b", 2)

    monkeypatch.setattr(decider._res, "reserve", reserve_then_race)
    waiting = Waiting(cast(Msg, None), aa, EMPTY_CLAIM)
    assert await decider._decide_gang(waiting, members, plan) is None
    assert raced
    assert await decider._gangs.decision("pod:p") is None
    await until(lambda: holders(decider) == {"uid-zz": {"node-b"}})
    await decider.attempt(aa)
    assert decider.announced == {"aa": "node-b"}, decider.reasons


async def test_a_settler_that_read_the_members_early_still_commits_in_order(
    decider: Decider,
) -> None:
    """A replica holding `aa` read the members before `zz` joined; the decision it settles has
    both: it must still find `zz` first (taken alone on node-b) and commit nothing."""
    names = ("aa", "zz")
    aa, zz = pod_event("aa", 2, "p", names), pod_event("zz", 2, "p", names, owned=False)
    early = await decider._gangs.join(aa)
    members = await decider._gangs.join(zz)
    plan, why = await decider._plan(members)
    assert plan is not None, why
    record = await decider._decide_gang(Waiting(cast(Msg, None), aa, EMPTY_CLAIM), members, plan)
    assert record is not None
    await decider.take("zz", "node-b", 2)
    assert not await decider._settle_gang(record, early)
    assert await decider._res.record("uid-aa") is None


def gang_event(name: str, count: int, pod: str, names: tuple[str, ...], size: int = 2) -> Any:
    ev = pod_event(name, count, pod, names)
    ev.gang_id, ev.gang_size = "default/g", size
    return ev


async def test_a_gang_pod_is_pinned_beside_its_claim_already_allocated(decider: Decider) -> None:
    """pod0 of the gang also uses `n0`, allocated on node-b before the gang came: pod0's member
    joins it there; the gang is placed whole; a member beyond the gang's size is told so."""
    await decider.take("n0", "node-b", 1)
    g0 = gang_event("g0", 2, "pod0", ("g0", "n0"))
    g1 = gang_event("g1", 2, "pod1", ("g1",))
    await decider.attempt(g0)
    assert "1 of 2 claims present" in decider.reasons[-1]
    await decider.attempt(g1)
    assert decider.announced["g0"] == "node-b", decider.reasons
    assert set(decider.announced) == {"g0", "g1"}
    extra = gang_event("g2", 1, "pod2", ("g2",))
    await decider.attempt(extra)
    assert decider.reasons[-1] == "gang default/g was allocated without this claim (it has 2)"
    assert "g2" not in decider.announced
    # g1 deallocated and pending again: a late member, decided within the gang's size.
    await decider.deallocated(g1)
    await decider.attempt(g1)
    assert "g1" in decider.announced, decider.reasons
    assert "g2" not in decider.announced


CLIQUE = "gpu.nvidia.com/cliqueID"


# clique "a": tray a-0; clique "b": trays b-0, b-1 (first-fit alone takes a-0 first)
TRAYS = {"a-0": "a", "b-0": "b", "b-1": "b"}


@pytest.mark.parametrize("policy", ["first-fit", "topology"])
@pytest.mark.parametrize(
    ("group", "pods", "pin", "used", "nodes", "reason"),
    [
        pytest.param("b", [2], "", {}, ["b-0"], "", id="late-pod-placed-in-the-recorded-group"),
        pytest.param(
            "b", [2], "", {"b-0": 3}, ["b-1"], "", id="late-pod-takes-the-groups-free-node"
        ),
        pytest.param("b", [2], "b-1", {}, ["b-1"], "", id="late-pod-pinned-inside-the-group"),
        pytest.param("b", [2, 2], "", {"b-0": 3}, ["b-1", "b-1"], "", id="two-late-pods"),
        pytest.param(
            "b",
            [2],
            "",
            {"b-0": 3, "b-1": 3},
            None,
            f"gang ns/g is in {CLIQUE} b: no node in b has room for pod default/p0; ",
            id="group-full-waits-though-another-clique-is-free",
        ),
        pytest.param(
            "b",
            [2],
            "b-1",
            {"b-1": 3},
            None,
            f"gang ns/g is in {CLIQUE} b: no node in b has room for pod default/p0 beside its "
            "claims already allocated (on b-1); ",
            id="pinned-node-of-the-group-full",
        ),
        pytest.param(
            "b",
            [2, 2],
            "",
            {"b-0": 3, "b-1": 2},
            None,
            f"gang ns/g is in {CLIQUE} b: no node in b has room for its 2 pods together; ",
            id="two-late-pods-without-room",
        ),
        pytest.param(
            "gone",
            [2],
            "",
            {},
            None,
            f"gang ns/g is in {CLIQUE} gone: no node in gone has room for pod default/p0; ",
            id="the-group-left-the-fleet",
        ),
        pytest.param(None, [2], "", {}, ["a-0"], "", id="no-group-as-before"),
    ],
)
def test_place_unit_keeps_a_late_pod_in_the_gangs_group(
    policy: str,
    group: str | None,
    pods: list[int],
    pin: str,
    used: dict[str, int],
    nodes: list[str] | None,
    reason: str,
) -> None:
    slices = [tray(node, clique) for node, clique in TRAYS.items()]
    state = AllocatedState(devices={d for n, c in used.items() for d in taken(n, c)})
    claims = [[gpu_claim(f"p{i}", count)] for i, count in enumerate(pods)]
    engine = Engine(load_classes(), policy)
    decision = place_unit(
        engine,
        "ns/g",
        claims,
        CLIQUE,
        slices,
        1,
        state,
        pins=[pin] * len(pods),
        group=group,
        pod_labels=[f"pod default/p{i}" for i in range(len(pods))],
    )
    if nodes is None:
        assert not decision.allocated
        assert decision.reason.startswith(reason), decision.reason
        assert "node(s) tried" in decision.reason, "the explanation follows"
        return
    assert decision.allocated, decision.reason
    assert [node for node, _ in decision.placed] == nodes
    if group is not None:
        assert decision.group == group
        assert {TRAYS[node] for node in nodes} == {group}
    allocator, _ = engine.placement(slices, 1, state)
    scratch = AllocatedState(devices=set(state.devices))
    for claim_pod, (node, result) in zip(claims, decision.placed, strict=True):
        assert validate_allocation(allocator, Node(node), claim_pod, [result], scratch) == []
        scratch.apply([result])


def clique_event(name: str, pod: str) -> Any:
    """A member (4 GPUs, its pod's only claim) of a 2-pod gang kept in one fabric clique."""
    ev = gang_event(name, 4, pod, (name,))
    doc = json.loads(ev.claim_json)
    doc["metadata"]["annotations"] = {"gpudra.io/gang-match-attribute": CLIQUE}
    ev.claim_json = json.dumps(doc).encode()
    return ev


@pytest.mark.parametrize(
    "older_record",
    [
        pytest.param(False, id="record-names-its-attribute"),
        pytest.param(True, id="older-record-the-annotation-names-it"),
    ],
)
async def test_a_late_pod_with_no_member_placed_keeps_the_gangs_clique(
    decider: Decider, older_record: bool
) -> None:
    """The gang lands in clique b (a has one tray); g1 is deallocated and its node taken: it
    waits, with the reason, rather than take the free tray of clique a; when b has room again,
    it is placed there. A decision recorded before records kept the attribute (group only) is
    kept to through the members' annotation."""
    decider._index = cast(Any, Slices({n: tray(n, c) for n, c in TRAYS.items()}))
    g0, g1 = clique_event("g0", "pod0"), clique_event("g1", "pod1")
    await decider.attempt(g0)
    await decider.attempt(g1)
    assert decider.announced == {"g0": "b-0", "g1": "b-1"}, decider.reasons
    record = await decider._gangs.decision("default/g")
    assert record is not None
    assert (record.group, record.attribute) == ("b", CLIQUE)
    if older_record:
        older = replace(record, attribute=None)
        await decider._gangs._kv.put(decision_key("default/g"), older.encode())
        assert await decider._gangs.decision("default/g") == older

    await decider.deallocated(g1)
    await until(lambda: "uid-g1" not in holders(decider))
    await decider.take("x", "b-1", 4)
    await decider.attempt(g1)
    assert "g1" not in decider.announced
    assert decider.reasons[-1].startswith(
        f"gang default/g is in {CLIQUE} b: no node in b has room for pod default/pod1; "
    ), decider.reasons
    assert "uid-g1" not in holders(decider), "nothing held while it waits"
    assert decider.held[-1] == "uid-g1", "kept for a retry"

    await decider._res.drop("uid-x")
    await decider._res.forget("uid-x")
    await until(lambda: "uid-x" not in holders(decider))
    await decider.attempt(g1)
    assert decider.announced == {"g0": "b-0", "g1": "b-1"}, decider.reasons
    await until(lambda: holders(decider).get("uid-g1") == {"b-1"})
    late = await decider._res.record("uid-g1")
    assert late is not None
    assert late.node == "b-1"
