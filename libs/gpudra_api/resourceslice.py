"""ResourceSlice (resource.k8s.io/v1): one slice of a driver's pool of devices.

A slice names its node scope with exactly one of nodeName / nodeSelector / allNodes /
perDeviceNodeSelection, and carries either devices or shared counter sets, never both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpudra_api import limits
from gpudra_api._fields import Field
from gpudra_api._meta import check_kind, object_name
from gpudra_api.device import CounterSet, Device, parse_counters, parse_device
from gpudra_api.nodeselector import NodeSelector, parse_node_selector


@dataclass(frozen=True)
class ResourcePool:
    name: str
    generation: int
    resource_slice_count: int


@dataclass(frozen=True)
class ResourceSlice:
    name: str
    driver: str
    pool: ResourcePool
    devices: tuple[Device, ...]
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool | None = None
    per_device_node_selection: bool | None = None
    shared_counters: tuple[CounterSet, ...] = ()
    raw: Any = None

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other


def parse_resource_slice(data: Any) -> ResourceSlice:
    """Parse and validate one ResourceSlice JSON object; raises `ValidationError`."""
    name = object_name(data)
    obj = f"ResourceSlice {name}"
    top = Field(obj, "", data)
    check_kind(top, "ResourceSlice")
    spec = top.child("spec")
    spec.check(spec.present(), "required")
    driver = spec.child("driver").dns_subdomain(limits.DRIVER_NAME_MAX_LENGTH)
    pf = spec.child("pool")
    pf.check(pf.present(), "required")
    pool_name = pf.child("name").req_str(max_len=limits.POOL_NAME_MAX_LENGTH)
    for part in pool_name.split("/"):
        Field(obj, "spec.pool.name", part).dns_subdomain()
    generation = pf.child("generation").integer(required=True)
    count = pf.child("resourceSliceCount").integer(required=True)
    assert generation is not None
    assert count is not None
    pf.child("generation").check(generation >= 0, "must not be negative")
    pf.child("resourceSliceCount").check(count > 0, "must be greater than zero")

    node_name = spec.child("nodeName").string()
    if node_name is not None:
        spec.child("nodeName").dns_subdomain()
    node_selector = (
        parse_node_selector(spec.child("nodeSelector"))
        if spec.child("nodeSelector").present()
        else None
    )
    if node_selector is not None:
        spec.child("nodeSelector").check(
            len(node_selector.terms) == 1, "must have exactly one term"
        )
    all_nodes = spec.child("allNodes").boolean()
    per_device = spec.child("perDeviceNodeSelection").boolean()
    chosen = [x for x in (node_name, node_selector, all_nodes or None, per_device or None) if x]
    spec.check(
        len(chosen) == 1,
        "exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection is required",
    )

    devices_field = spec.child("devices")
    counters_field = spec.child("sharedCounters")
    spec.check(
        not (devices_field.value and counters_field.value),
        "only one of sharedCounters or devices is allowed",
    )
    raw_devices = devices_field.elements()
    heavy = any(
        isinstance(d.value, dict) and (d.value.get("taints") or d.value.get("consumesCounters"))
        for d in raw_devices
    )
    max_devices = (
        limits.RESOURCE_SLICE_MAX_DEVICES_WITH_TAINTS_OR_CONSUMES_COUNTERS
        if heavy
        else limits.RESOURCE_SLICE_MAX_DEVICES
    )
    devices_field.check(
        len(raw_devices) <= max_devices,
        f"must have at most {max_devices} items, has {len(raw_devices)}",
    )
    devices = tuple(parse_device(d, bool(per_device)) for d in raw_devices)
    names = [d.name for d in devices]
    devices_field.check(len(set(names)) == len(names), "device names must be unique")

    counter_sets = []
    for cf in counters_field.elements(limits.RESOURCE_SLICE_MAX_COUNTER_SETS):
        set_name = cf.child("name").dns_label()
        counters = parse_counters(
            cf.child("counters"), limits.RESOURCE_SLICE_MAX_COUNTERS_PER_COUNTER_SET
        )
        cf.child("counters").check(bool(counters), "must not be empty")
        counter_sets.append(CounterSet(set_name, counters))
    set_names = [c.name for c in counter_sets]
    counters_field.check(len(set(set_names)) == len(set_names), "counter set names must be unique")

    return ResourceSlice(
        name=name,
        driver=driver,
        pool=ResourcePool(pool_name, generation, count),
        devices=devices,
        node_name=node_name,
        node_selector=node_selector,
        all_nodes=all_nodes,
        per_device_node_selection=per_device,
        shared_counters=tuple(counter_sets),
        raw=data,
    )
