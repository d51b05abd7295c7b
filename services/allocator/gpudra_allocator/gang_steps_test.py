from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
import pytest_asyncio
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.kv import KeyValue

from gpudra_alloc import AllocatedState, DeviceID
from gpudra_allocator.engine import Engine, load_classes
from gpudra_allocator.gang_steps import (
    EMPTY_CLAIM,
    MAX_POD_CLAIMS,
    GangSteps,
    Waiting,
    place_unit,
)
from gpudra_allocator.gangs import GangBook, Members, pods_of, unit_of, unit_size
from gpudra_allocator.holdings import ClaimRecord
from gpudra_allocator.reservations import Reservations
from gpudra_api import parse_resource_claim, parse_resource_slice
from gpudra_bus import BucketSpec, connect, ensure_bucket
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


def test_members_needed_is_every_claim_the_pods_name() -> None:
    members = Members("pod:p1", 3, {"uid-a": event("a", "p1", ("a", "b", "c"))})
    assert members.needed() == {"uid-a", "uid-b", "uid-c"}


def node_slice(node: str, gpus: int = 4) -> Any:
    return parse_resource_slice(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-slice"},
            "spec": {
                "driver": "gpu.nvidia.com",
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}}}
                    for i in range(gpus)
                ],
            },
        }
    )


def claim(name: str, count: int) -> Any:
    return parse_resource_claim(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
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
    )


def taken(node: str, count: int) -> set[DeviceID]:
    return {DeviceID("gpu.nvidia.com", node, f"gpu-{i}") for i in range(count)}


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
    slices = [node_slice("node-a"), node_slice("node-b")]
    state = AllocatedState(devices={d for n, c in used.items() for d in taken(n, c)})
    claim_pods = [
        [claim(f"p{i}c{j}", count) for j, count in enumerate(pod)] for i, pod in enumerate(pods)
    ]
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


@pytest_asyncio.fixture
async def kv(nats_url: str) -> AsyncIterator[KeyValue]:
    client: Client = await connect(nats_url, name="gang-steps-test", deadline=5)
    yield await ensure_bucket(client.jetstream(), BucketSpec(f"units-{uuid.uuid4().hex[:10]}"))
    await client.drain()


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
    for name, node in records.items():
        if node == "released":
            await planner._res.release(f"uid-{name}", f"default/{name}")
        else:
            await planner._res.commit(
                f"uid-{name}",
                ClaimRecord("allocated", claim=f"default/{name}", node=node, allocation={}),
            )
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
    assert plan.pinned == pinned
    assert [e.claim.name for e in plan.events] == arrived
