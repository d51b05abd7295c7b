from __future__ import annotations

import pytest

from gpudra_alloc import AllocatedState, Allocator, DeviceID
from gpudra_alloc.placement import Chooser
from gpudra_alloc.placement.topology import NodeView
from gpudra_alloc.placement.value import node_value
from gpudra_alloc.validate import validate_allocation
from gpudra_alloc.workload import Fleet, build_fleet, device_classes, resource_claim
from gpudra_api import Node, parse_device_class, parse_resource_claim, parse_resource_slice

DRIVER = "gpu.nvidia.com"


def cluster(
    counts: dict[str, int], busy: tuple[tuple[str, str], ...] = ()
) -> tuple[Allocator, list[Node]]:
    objects = build_fleet(Fleet(counts=counts))
    allocator = Allocator(
        [parse_device_class(c) for c in device_classes()],
        [parse_resource_slice(s) for s in objects.slices],
        state=AllocatedState(devices={DeviceID(DRIVER, n, d) for n, d in busy}),
    )
    return allocator, [Node(n["name"], n["labels"]) for n in objects.nodes]


def gpus(node: str, count: int) -> tuple[tuple[str, str], ...]:
    return tuple((node, f"gpu-{i}") for i in range(count))


@pytest.mark.parametrize(
    ("machine", "node", "busy", "value"),
    [
        # 14 (8-block) + 8 x 1.0 (large domain) + 8 x 0.2 (H100 >= 40 GiB)
        pytest.param("dgx-h100", "dgx-00", 0, 23.6, id="dgx-whole"),
        # 5 (4-block) + 4 x 1.0 + 4 x 0.2
        pytest.param("dgx-h100", "dgx-00", 4, 9.8, id="dgx-half"),
        # 14 + 8 x 1.0 + 8 x (0.3 + 0.2): B200 GPUs take mem-150 and h100-plus claims
        pytest.param("hgx-b200", "b200-00", 0, 26.0, id="b200-whole"),
        # 5 (4-block, not large) + 4 x (0.3 + 0.2) + 1.0 (whole clique on the node)
        pytest.param("gb200-tray", "gb200-00", 0, 8.0, id="gb200-tray-whole"),
        # two PCIe pairs, no large domain
        pytest.param("l4-pcie", "l4-00", 0, 4.4, id="l4-pcie"),
    ],
)
def test_node_value(machine: str, node: str, busy: int, value: float) -> None:
    allocator, nodes = cluster({machine: 1}, gpus(node, busy))
    view = NodeView(nodes[0], allocator.pools_for(nodes[0]))
    assert node_value(view, view.free(allocator.state)) == pytest.approx(value)


@pytest.mark.parametrize(
    ("busy", "shape", "node"),
    [
        pytest.param(gpus("dgx-00", 4), "gpu-4-nvl", "gb200-00", id="4-gpu-tray-not-half-a-dgx"),
        pytest.param(
            gpus("dgx-00", 3) + gpus("gb200-00", 1),
            "gpu-1",
            "gb200-00",
            id="1-gpu-on-a-used-tray-not-a-used-dgx",
        ),
        pytest.param(
            gpus("dgx-00", 4) + gpus("gb200-00", 1),
            "gpu-4-nvl",
            "dgx-00",
            id="4-gpu-fills-the-dgx-when-no-tray-is-whole",
        ),
        pytest.param((), "gpu-8-nvl", "dgx-00", id="8-gpu-on-the-dgx"),
    ],
)
def test_small_work_keeps_off_large_domains(
    busy: tuple[tuple[str, str], ...], shape: str, node: str
) -> None:
    allocator, nodes = cluster({"dgx-h100": 1, "gb200-tray": 1}, busy)
    claims = [parse_resource_claim(resource_claim(shape, "c"))]
    choice = Chooser(allocator).choose(nodes, claims)
    assert choice is not None
    assert choice.node.name == node
    assert validate_allocation(allocator, choice.node, claims, choice.results) == []


@pytest.mark.parametrize(
    ("machine", "node", "busy", "value"),
    [
        # 8.0 (above) + 1.5 for the whole tray
        pytest.param("gb200-tray", "gb200-00", 0, 9.5, id="tray-whole"),
        # 2.2 + 1.0 (3 GPUs) + 3 x 0.5: no longer whole, no tray or clique bonus
        pytest.param("gb200-tray", "gb200-00", 1, 4.7, id="tray-used"),
        # large domains are not trays
        pytest.param("dgx-h100", "dgx-00", 0, 23.6, id="dgx-not-a-tray"),
        # PCIe GPUs are not an NVLink domain
        pytest.param("l4-pcie", "l4-00", 0, 4.4, id="pcie-not-a-tray"),
    ],
)
def test_whole_tray_value(machine: str, node: str, busy: int, value: float) -> None:
    allocator, nodes = cluster({machine: 1}, gpus(node, busy))
    view = NodeView(nodes[0], allocator.pools_for(nodes[0]))
    assert node_value(view, view.free(allocator.state), 1.5) == pytest.approx(value)


@pytest.mark.parametrize(
    ("busy", "shape", "node"),
    [
        pytest.param(
            gpus("dgx-00", 2) + gpus("l4-00", 4),
            "gpu-2",
            "dgx-00",
            id="2-gpu-on-a-used-dgx-not-a-tray",
        ),
        pytest.param(gpus("dgx-00", 2), "gpu-4-nvl", "gb200-00", id="4-gpu-still-takes-the-tray"),
        pytest.param((), "gpu-1", "l4-00", id="1-gpu-on-pcie"),
    ],
)
def test_whole_tray_keeps_trays_for_4_gpu_work(
    busy: tuple[tuple[str, str], ...], shape: str, node: str
) -> None:
    allocator, nodes = cluster({"dgx-h100": 1, "gb200-tray": 1, "l4-pcie": 1}, busy)
    claims = [parse_resource_claim(resource_claim(shape, "c"))]
    choice = Chooser(allocator, whole_tray=1.0).choose(nodes, claims)
    assert choice is not None
    assert choice.node.name == node
    assert validate_allocation(allocator, choice.node, claims, choice.results) == []


def mig(node: str, gpu: int, profile: str, *starts: int) -> tuple[tuple[str, str], ...]:
    return tuple((node, f"gpu-{gpu}-mig-{profile}-{s}") for s in starts)


@pytest.mark.parametrize(
    ("busy", "free"),
    [
        pytest.param(mig("a100-00", 0, "1g-10gb", 0), 7, id="one-slice-7-free"),
        pytest.param(mig("a100-00", 0, "1g-10gb", 0, 1, 2), 5, id="three-slices-5-free"),
        pytest.param(mig("a100-00", 0, "3g-40gb", 0), 4, id="half-4-free"),
        pytest.param(mig("a100-00", 0, "1g-10gb", *range(7)), 1, id="seven-slices-1-free"),
    ],
)
def test_slice_packing_value(busy: tuple[tuple[str, str], ...], free: int) -> None:
    # + P x (free / 8)^2 per partitioned GPU, on top of the default rules
    allocator, nodes = cluster({"a100-mig": 1}, busy)
    view = NodeView(nodes[0], allocator.pools_for(nodes[0]))
    state = view.free(allocator.state)
    assert [c for c, _ in state.partitioned.values()] == [free]
    plain = node_value(view, state)
    assert node_value(view, state, slice_packing=0.4) == pytest.approx(plain + 0.4 * free**2 / 64)


def test_slice_packing_costs_least_on_the_fullest_gpu() -> None:
    # one more slice on a GPU with f free counters costs P x (f^2 - (f-1)^2) / 64 more than
    # without the term: increasing in f, so a slice costs least on the fullest partitioned GPU
    costs = []
    for used in (5, 3, 1):  # 1g.10gb slices in use before: 3, 5, 7 counters free
        values = []
        for count in (used, used + 1):
            busy = mig("a100-00", 0, "1g-10gb", *range(count))
            allocator, nodes = cluster({"a100-mig": 1}, busy)
            view = NodeView(nodes[0], allocator.pools_for(nodes[0]))
            free = view.free(allocator.state)
            values.append(node_value(view, free, slice_packing=0.4) - node_value(view, free))
        costs.append(values[0] - values[1])
    assert costs == pytest.approx([0.4 * (f**2 - (f - 1) ** 2) / 64 for f in (3, 5, 7)])
    assert costs == sorted(costs)
