"""Devices as ResourceSlices publish them: attributes, capacity, counters, taints, node scope.

Attribute values keep their JSON kind (`int`, `bool`, `string`, `version`) and may be lists
(`ints`, `bools`, `strings`, `versions`, the ListTypeAttributes extension). Versions are checked
to be semver 2.0.0 and kept as their (already minimal) text, which is what constraints compare.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Any, Literal

from gpudra_api import limits
from gpudra_api._fields import Field, check_label_name, check_label_value, check_qualified_name
from gpudra_api.nodeselector import NodeSelector, parse_node_selector
from gpudra_api.quantity import Quantity
from gpudra_api.semver import Semver

AttributeKind = Literal["int", "bool", "string", "version"]
AttributeScalar = int | bool | str
_LIST_KEYS: dict[str, AttributeKind] = {
    "ints": "int",
    "bools": "bool",
    "strings": "string",
    "versions": "version",
}
_SCALAR_KEYS: tuple[AttributeKind, ...] = ("int", "bool", "string", "version")
TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute", "None"})


@dataclass(frozen=True)
class DeviceAttribute:
    """One attribute value: a scalar (`is_list` false, one entry in `values`) or a list."""

    kind: AttributeKind
    values: tuple[AttributeScalar, ...]
    is_list: bool = False

    @property
    def scalar(self) -> AttributeScalar:
        return self.values[0]

    def to_json(self) -> dict[str, Any]:
        if self.is_list:
            key = next(k for k, v in _LIST_KEYS.items() if v == self.kind)
            return {key: list(self.values)}
        return {self.kind: self.values[0]}


@dataclass(frozen=True)
class CapacityRequestPolicyRange:
    min: Quantity
    max: Quantity | None = None
    step: Quantity | None = None


@dataclass(frozen=True)
class CapacityRequestPolicy:
    default: Quantity | None = None
    valid_values: tuple[Quantity, ...] = ()
    valid_range: CapacityRequestPolicyRange | None = None


@dataclass(frozen=True)
class DeviceCapacity:
    value: Quantity
    request_policy: CapacityRequestPolicy | None = None


@dataclass(frozen=True)
class DeviceCounterConsumption:
    counter_set: str
    counters: dict[str, Quantity]


@dataclass(frozen=True)
class CounterSet:
    name: str
    counters: dict[str, Quantity]


@dataclass(frozen=True)
class DeviceTaint:
    key: str
    effect: str
    value: str = ""


@dataclass(frozen=True)
class Device:
    """One device of a slice. Maps are keyed by the names as written (qualified or not)."""

    name: str
    attributes: dict[str, DeviceAttribute]
    capacity: dict[str, DeviceCapacity]
    consumes_counters: tuple[DeviceCounterConsumption, ...] = ()
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool | None = None
    taints: tuple[DeviceTaint, ...] = ()
    binds_to_node: bool | None = None
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    allow_multiple_allocations: bool | None = None


@functools.lru_cache(maxsize=4096)
def _quantity(text: str) -> Quantity:
    # Quantities are immutable and repeat across a fleet (80Gi on every GPU): parse each once.
    return Quantity.parse(text)


@functools.lru_cache(maxsize=4096)
def _semver(text: str) -> Semver:
    return Semver.parse(text)


def parse_quantity(f: Field) -> Quantity:
    value = f.value
    if isinstance(value, int | float) and not isinstance(value, bool):
        f = Field(f.obj, f.path, str(value))
    return f.parsed(_quantity)


def parse_attribute(f: Field) -> DeviceAttribute:
    data = f.mapping()
    set_keys = [k for k in data if data[k] is not None]
    f.check(
        len(set_keys) == 1, "exactly one of int, bool, string, version (or a list form) must be set"
    )
    key = set_keys[0]
    sub = f.child(key)
    if key in _LIST_KEYS:
        kind = _LIST_KEYS[key]
        items = sub.elements(limits.DEVICE_ATTRIBUTE_MAX_LIST_LENGTH)
        sub.check(bool(items), "must not be empty")
        values = tuple(_scalar(kind, item) for item in items)
        sub.check(len(set(values)) == len(values), "must not contain duplicates")
        return DeviceAttribute(kind, values, is_list=True)
    for scalar_kind in _SCALAR_KEYS:
        if key == scalar_kind:
            return DeviceAttribute(scalar_kind, (_scalar(scalar_kind, sub),))
    raise sub.fail("unknown attribute type")


def _scalar(kind: AttributeKind, f: Field) -> AttributeScalar:
    if kind == "int":
        value = f.integer(required=True)
        assert value is not None
        return value
    if kind == "bool":
        flag = f.boolean()
        f.check(flag is not None, "required")
        assert flag is not None
        return flag
    text = f.string(required=False, max_len=limits.DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH)
    f.check(text is not None, "required")
    assert text is not None
    if kind == "version":
        f.parsed(_semver)
    return text


def parse_capacity(f: Field) -> DeviceCapacity:
    value = parse_quantity(f.child("value"))
    pf = f.child("requestPolicy")
    if not pf.present():
        return DeviceCapacity(value)
    default = parse_quantity(pf.child("default")) if pf.child("default").present() else None
    valid_values = tuple(
        parse_quantity(v)
        for v in pf.child("validValues").elements(limits.CAPACITY_POLICY_MAX_VALID_VALUES)
    )
    rf = pf.child("validRange")
    valid_range = None
    if rf.present():
        valid_range = CapacityRequestPolicyRange(
            min=parse_quantity(rf.child("min")),
            max=parse_quantity(rf.child("max")) if rf.child("max").present() else None,
            step=parse_quantity(rf.child("step")) if rf.child("step").present() else None,
        )
    pf.check(
        not (valid_values and valid_range), "only one of validValues and validRange may be set"
    )
    if valid_values or valid_range:
        pf.check(default is not None, "default must be set when validValues or validRange is")
    if valid_values:
        ordered = all(a < b for a, b in itertools.pairwise(valid_values))
        pf.child("validValues").check(
            ordered, "must be sorted in ascending order without duplicates"
        )
        pf.child("validValues").check(default in valid_values, "must include the default")
    return DeviceCapacity(value, CapacityRequestPolicy(default, valid_values, valid_range))


def parse_counters(f: Field, max_items: int) -> dict[str, Quantity]:
    entries = list(f.items())
    f.check(len(entries) <= max_items, f"must have at most {max_items} counters")
    out: dict[str, Quantity] = {}
    for name, cf in entries:
        out[name] = parse_quantity(cf.child("value"))
    return out


def parse_taint(f: Field) -> DeviceTaint:
    key_field = f.child("key")
    key = key_field.req_str()
    check_label_name(key_field, key)
    value = f.child("value").string() or ""
    check_label_value(f.child("value"), value)
    effect_field = f.child("effect")
    effect = effect_field.req_str()
    effect_field.check(effect in TAINT_EFFECTS, f"unknown effect {effect!r}")
    return DeviceTaint(key=key, effect=effect, value=value)


def parse_device(f: Field, per_device_node_selection: bool) -> Device:
    name = f.child("name").dns_label()
    attributes: dict[str, DeviceAttribute] = {}
    for key, af in f.child("attributes").items():
        check_qualified_name(af, key)
        attributes[key] = parse_attribute(af)
    capacity: dict[str, DeviceCapacity] = {}
    for key, cf in f.child("capacity").items():
        check_qualified_name(cf, key)
        capacity[key] = parse_capacity(cf)
    total = len(attributes) + len(capacity)
    f.check(
        total <= limits.RESOURCE_SLICE_MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE,
        f"has {total} attributes and capacities, at most "
        f"{limits.RESOURCE_SLICE_MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE} are allowed",
    )
    consumes = []
    seen_sets: set[str] = set()
    ccf = f.child("consumesCounters")
    for cf in ccf.elements(limits.RESOURCE_SLICE_MAX_DEVICE_COUNTER_CONSUMPTIONS_PER_DEVICE):
        set_name = cf.child("counterSet").dns_label()
        cf.check(set_name not in seen_sets, f"counter set {set_name!r} is listed twice")
        seen_sets.add(set_name)
        counters = parse_counters(
            cf.child("counters"), limits.RESOURCE_SLICE_MAX_COUNTERS_PER_DEVICE_COUNTER_CONSUMPTION
        )
        consumes.append(DeviceCounterConsumption(set_name, counters))
    node_name = f.child("nodeName").string()
    node_selector = (
        parse_node_selector(f.child("nodeSelector")) if f.child("nodeSelector").present() else None
    )
    all_nodes = f.child("allNodes").boolean()
    chosen = [x for x in (node_name, node_selector, all_nodes or None) if x is not None]
    if per_device_node_selection:
        f.check(len(chosen) == 1, "exactly one of nodeName, nodeSelector, allNodes is required")
    else:
        f.check(not chosen, "nodeName, nodeSelector and allNodes need spec.perDeviceNodeSelection")
    if node_selector is not None:
        f.child("nodeSelector").check(len(node_selector.terms) == 1, "must have exactly one term")
    taints = tuple(
        parse_taint(tf) for tf in f.child("taints").elements(limits.DEVICE_TAINTS_MAX_LENGTH)
    )
    binding = f.child("bindingConditions").str_list(limits.BINDING_CONDITIONS_MAX_SIZE)
    failure = f.child("bindingFailureConditions").str_list(
        limits.BINDING_FAILURE_CONDITIONS_MAX_SIZE
    )
    allow_multiple = f.child("allowMultipleAllocations").boolean()
    if not allow_multiple:
        for key, cap in capacity.items():
            f.child("capacity").check(
                cap.request_policy is None,
                f"{key}: requestPolicy needs allowMultipleAllocations",
            )
    return Device(
        name=name,
        attributes=attributes,
        capacity=capacity,
        consumes_counters=tuple(consumes),
        node_name=node_name,
        node_selector=node_selector,
        all_nodes=all_nodes,
        taints=taints,
        binds_to_node=f.child("bindsToNode").boolean(),
        binding_conditions=binding,
        binding_failure_conditions=failure,
        allow_multiple_allocations=allow_multiple,
    )
