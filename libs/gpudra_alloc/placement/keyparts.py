"""The parts of a node's key (`groups.NodeKeys`): what the search and the score read of a node.

`node_part`: the node's pools as the search and `NodeView` walk them, names taken out (device
names stay: twins share them), node-unique attribute values (`NODE_UNIQUE_ATTRIBUTES`) left out.
`shape_reads`/`shape_part`: what a claim shape makes the search read besides, per device (the
outcome of selectors that may read a node-unique attribute, the node-unique attributes its
constraints name). `state_part`: the in-use state of the pools by device name. Equal parts,
equal search and score; `groups_test.py` checks that field by field.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from gpudra_alloc.allocator import Allocator
from gpudra_alloc.constraints import lookup_attribute
from gpudra_alloc.errors import AllocationError
from gpudra_alloc.pools import DeviceEntry, Pool, entries_of, node_matches
from gpudra_alloc.state import AllocatedState
from gpudra_api import ApiError, Device, DeviceSelector, Node, Quantity, ResourceClaim

# Attributes whose values name one physical device (they differ between otherwise identical
# nodes). Left out of the node part of the key; a selector reading them is still honoured
# through its outcome, and a constraint naming them through its values.
# Names in the driver's domain may be written with or without it; others are qualified.
NODE_UNIQUE_ATTRIBUTES = frozenset(
    {"uuid", "parentUUID", "serial", "resource.kubernetes.io/pciBusID"}
)

# The (class selectors, request selectors) of one request or subrequest.
Selection = tuple[tuple[DeviceSelector, ...], tuple[DeviceSelector, ...]]


# Unique names without their domain, as they appear in selector text.
_UNIQUE_WORDS = tuple(sorted({name.rsplit("/", 1)[-1] for name in NODE_UNIQUE_ATTRIBUTES}))
# `device.attributes["domain"].name` / `["name"]` with plain literal keys (no escapes), the
# name not being a call (`.exists(...)`, `.size()` read the whole map).
_LITERAL_ACCESS = re.compile(
    r'device\.attributes\["[^"\\]*"\](?:\.[A-Za-z_][A-Za-z0-9_]*\b(?!\s*\()|\["[^"\\]*"\])'
)


def reads_only_shared_attributes(expression: str | None) -> bool:
    """True when `expression` can be seen to read no node-unique attribute: it names none of
    them, and it reaches attributes only as `device.attributes["d"].name` or
    `device.attributes["d"]["name"]` with plain literal keys (no map iteration, computed keys,
    escapes, aliases or other spellings, which are all taken as "may read anything"). Its
    outcome on a device then depends only on what the node part of the key holds."""
    if expression is None:
        return False
    if any(word in expression for word in _UNIQUE_WORDS):
        return False
    return "attributes" not in _LITERAL_ACCESS.sub("", expression)


@dataclass(frozen=True)
class ShapeReads:
    """What a claim shape makes the search read of a device besides the node part: the
    selections that may read node-unique attributes, and the node-unique attributes its
    constraints name (equal node parts decide everything else alike)."""

    selections: tuple[Selection, ...]
    constraint_attributes: tuple[str, ...]


def shape_reads(allocator: Allocator, claims: Sequence[ResourceClaim]) -> ShapeReads | None:
    """The selections and constraint attributes of `claims`; None when a request names a class
    the allocator does not know (the search reports that; no key is needed)."""
    selections: dict[Selection, None] = {}
    attributes: dict[str, None] = {}
    for claim in claims:
        for request in claim.requests:
            subs = (request.exactly,) if request.exactly is not None else request.first_available
            for sub in subs:
                device_class = allocator.classes.get(sub.device_class_name or "")
                if device_class is None:
                    return None
                selection = (tuple(device_class.selectors), tuple(sub.selectors))
                if not all(
                    reads_only_shared_attributes(s.expression) for part in selection for s in part
                ):
                    selections[selection] = None
        for constraint in claim.constraints:
            name = constraint.match_attribute or constraint.distinct_attribute
            if name and name.rsplit("/", 1)[-1] in _UNIQUE_WORDS:
                attributes[name] = None
    return ShapeReads(tuple(selections), tuple(attributes))


def _quantity(q: Quantity) -> tuple[object, object]:
    return (q.value, q.format)


_EXCLUDED: dict[str, frozenset[str]] = {}


def _excluded(driver: str) -> frozenset[str]:
    """The node-unique attribute names as a device of `driver` may spell them."""
    found = _EXCLUDED.get(driver)
    if found is None:
        found = NODE_UNIQUE_ATTRIBUTES | {f"{driver}/{name}" for name in NODE_UNIQUE_ATTRIBUTES}
        _EXCLUDED[driver] = found
    return found


def _device_part(node: Node, entry: DeviceEntry) -> Hashable:
    device: Device = entry.device
    excluded = _excluded(entry.id.driver)
    # plain tuples: they hash and compare at C speed (a Quantity compares by identity)
    attributes = tuple(
        sorted(
            (name, a.kind, a.values, a.is_list)
            for name, a in device.attributes.items()
            if name not in excluded
        )
    )
    capacity = tuple(
        sorted(
            (name, _quantity(cap.value), None if cap.request_policy is None else repr(cap))
            for name, cap in device.capacity.items()
        )
    )
    reachable = True
    if entry.slice.per_device_node_selection:
        reachable = node_matches(node, device.node_name, device.all_nodes, device.node_selector)
    return (
        device.name,
        attributes,
        capacity,
        _consumption(device) if device.consumes_counters else (),
        tuple((t.key, t.effect, t.value) for t in device.taints),
        device.binding_conditions,
        device.binding_failure_conditions,
        device.binds_to_node,
        device.allow_multiple_allocations,
        bool(entry.slice.per_device_node_selection),
        reachable,
    )


def _consumption(device: Device) -> Hashable:
    return tuple(
        (c.counter_set, tuple(sorted((n, _quantity(q)) for n, q in c.counters.items())))
        for c in device.consumes_counters
    )


def node_part(node: Node, pools: Sequence[Pool]) -> Hashable:
    """The node part of the key: the pools as the search and `NodeView` read them."""
    names = [p.name for p in pools]
    parts = []
    for pool in pools:
        counter_sets = tuple(
            sorted(
                (name, tuple(sorted((n, _quantity(q)) for n, q in cs.counters.items())))
                for name, cs in pool.counter_sets.items()
            )
        )
        slices = tuple(
            tuple(_device_part(node, entry) for entry in entries)
            for entries in pool.device_entries()
        )
        others = tuple(
            (d.name, _consumption(d)) for s in pool.slices_not_targeting_node for d in s.devices
        )
        parts.append(
            (
                pool.driver,
                names.index(pool.name),
                pool.incomplete,
                pool.invalid,
                pool.invalid_reason,
                counter_sets,
                slices,
                others,
            )
        )
    return tuple(parts)


def shape_part(allocator: Allocator, pools: Sequence[Pool], reads: ShapeReads) -> Hashable | None:
    """Per device, each selection's outcome and the constraint attributes' values; None when a
    selector fails on a device (its error names the device: no other node can share it)."""
    if not reads.selections and not reads.constraint_attributes:
        return ()
    out = []
    for pool in pools:
        for entries in pool.device_entries():
            for entry in entries:
                outcomes = []
                for selection in reads.selections:
                    outcome = _selected(allocator, entry, selection)
                    if outcome is None:
                        return None
                    outcomes.append(outcome)
                values = []
                for name in reads.constraint_attributes:
                    attr = lookup_attribute(entry.device, entry.id, name)
                    values.append(None if attr is None else (attr.kind, attr.values, attr.is_list))
                out.append((tuple(outcomes), tuple(values)))
    return tuple(out)


def _selected(allocator: Allocator, entry: DeviceEntry, selection: Selection) -> bool | None:
    """The selection's outcome as the search computes it (class first, then the request,
    stopping at the first false), or None when evaluating it fails."""
    for selectors in selection:
        try:
            if not allocator.selectors.all_match(selectors, entry, "group"):
                return False
        except (AllocationError, ApiError):
            return None
    return True


def state_part(pools: Sequence[Pool], state: AllocatedState) -> Hashable:
    """The in-use state of `pools` by device name: what the search and `NodeView` read."""
    devices = state.devices
    capacity = state.capacity
    plain = not capacity and not state.shared
    parts: list[Hashable] = []
    for pool in pools:
        if pool.incomplete or pool.invalid:
            parts.append(())
            continue
        used: list[Hashable] = []
        for group in (pool.slices, pool.slices_not_targeting_node):
            for s in group:
                for entry in entries_of(s):
                    device_id = entry.id
                    if plain:
                        if device_id in devices:
                            used.append(entry.device.name)
                        continue
                    if not state.is_allocated(device_id):
                        continue
                    amounts = capacity.get(device_id)
                    used.append(
                        (
                            entry.device.name,
                            device_id in devices,
                            (
                                None
                                if amounts is None
                                else tuple(sorted((n, _quantity(q)) for n, q in amounts.items()))
                            ),
                        )
                    )
        parts.append(tuple(used))
    return tuple(parts)
