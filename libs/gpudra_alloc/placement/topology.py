"""What placement knows about a node's GPUs: NVLink domains, cliques, memory, MIG partitions.

`NodeView` is built once per node from the pools the allocator sees from it; `NodeView.free`
summarises what is free under an in-use state: free whole GPUs per NVLink domain, and for each
partitionable GPU (a counter set, KEP-4815) which counters are still unused. A GPU is *whole*
when none of its counters is taken and its full-GPU device is free, *partitioned* when some
but not all are taken. Attribute names are gpudra's (`docs/DEVICES.md`), looked up in the
device's driver domain. The view never decides what is allocatable; the search does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gpudra_alloc.pools import Pool
from gpudra_alloc.state import AllocatedState, DeviceID
from gpudra_api import AllocationResult, Device, DeviceAttribute, Node

GIB = 1024**3
PCIE = ""  # the domain key of GPUs without an NVLink domain


def _attr(device: Device, driver: str, name: str) -> DeviceAttribute | None:
    return device.attributes.get(name) or device.attributes.get(f"{driver}/{name}")


def _text(device: Device, driver: str, name: str) -> str:
    attr = _attr(device, driver, name)
    return str(attr.scalar) if attr is not None and not attr.is_list else ""


def _memory_gib(device: Device, driver: str) -> float:
    cap = device.capacity.get("memory") or device.capacity.get(f"{driver}/memory")
    return float(cap.value.value) / GIB if cap is not None else 0.0


def _compute(device: Device, driver: str) -> tuple[int, ...]:
    text = _text(device, driver, "cudaComputeCapability")
    try:
        return tuple(int(p) for p in text.split(".")[:2])
    except ValueError:
        return ()


CounterKey = tuple[str, str]  # (pool, counter set)


@dataclass(frozen=True)
class Gpu:
    """A whole GPU: the device that takes all of its counter set (or that has no counters)."""

    id: DeviceID
    domain: str
    clique: str
    memory_gib: float
    compute: tuple[int, ...]
    counter_set: CounterKey | None


@dataclass(frozen=True)
class Partition:
    """A MIG-style device: takes a strict subset of one GPU's counters."""

    id: DeviceID
    counter_set: CounterKey
    counters: frozenset[str]


@dataclass
class FreeState:
    """What is free on one node."""

    domains: dict[str, int] = field(default_factory=dict)  # free whole GPUs per domain
    gpus: list[Gpu] = field(default_factory=list)  # the free whole GPUs
    # partitioned GPUs: counters still free, and whether a half-GPU partition still fits
    partitioned: dict[CounterKey, tuple[int, bool]] = field(default_factory=dict)

    @property
    def free_gpus(self) -> int:
        return sum(self.domains.values())


class NodeView:
    def __init__(self, node: Node, pools: Iterable[Pool]) -> None:
        self.node = node
        self.gpus: list[Gpu] = []
        self.partitions: list[Partition] = []
        self.counter_names: dict[CounterKey, frozenset[str]] = {}
        self.consumes: dict[DeviceID, list[tuple[CounterKey, frozenset[str]]]] = {}
        for pool in pools:
            if pool.incomplete or pool.invalid:
                continue
            for name, counter_set in pool.counter_sets.items():
                self.counter_names[(pool.name, name)] = frozenset(counter_set.counters)
            for entries in pool.device_entries():
                for entry in entries:
                    self._add(entry.id, entry.device)
        self.domains = sorted({g.domain for g in self.gpus})
        self.domain_sizes = {d: sum(1 for g in self.gpus if g.domain == d) for d in self.domains}
        self.cliques = sorted({g.clique for g in self.gpus if g.clique})

    def _add(self, device_id: DeviceID, device: Device) -> None:
        driver = device_id.driver
        kind = _text(device, driver, "type")
        sets = [
            ((device_id.pool, c.counter_set), frozenset(c.counters))
            for c in device.consumes_counters
        ]
        if sets:
            self.consumes[device_id] = sets
        whole = all(names == self.counter_names.get(key) for key, names in sets)
        if kind == "gpu" and whole:
            self.gpus.append(
                Gpu(
                    device_id,
                    _text(device, driver, "nvlinkDomain"),
                    _text(device, driver, "cliqueID"),
                    _memory_gib(device, driver),
                    _compute(device, driver),
                    sets[0][0] if sets else None,
                )
            )
        elif len(sets) == 1 and not whole:
            self.partitions.append(Partition(device_id, sets[0][0], sets[0][1]))

    def used_counters(
        self, in_use: AllocatedState, extra: set[DeviceID]
    ) -> dict[CounterKey, set[str]]:
        used: dict[CounterKey, set[str]] = {}
        for device_id, sets in self.consumes.items():
            if device_id in extra or in_use.is_allocated(device_id):
                for key, names in sets:
                    used.setdefault(key, set()).update(names)
        return used

    def free(self, in_use: AllocatedState, extra: Iterable[DeviceID] = ()) -> FreeState:
        """The free state under `in_use` plus the devices in `extra` (a candidate allocation)."""
        taken = set(extra)
        used = self.used_counters(in_use, taken)
        out = FreeState()
        for gpu in self.gpus:
            busy = gpu.id in taken or in_use.is_allocated(gpu.id)
            if not busy and gpu.counter_set is not None and used.get(gpu.counter_set):
                busy = True
            if not busy:
                out.domains[gpu.domain] = out.domains.get(gpu.domain, 0) + 1
                out.gpus.append(gpu)
        for key, names in self.counter_names.items():
            taken_names = used.get(key)
            if not taken_names or taken_names >= names:
                continue
            half = len(names) // 2
            big = any(
                p.counter_set == key
                and len(p.counters) >= half
                and not (p.counters & taken_names)
                and p.id not in taken
                for p in self.partitions
            )
            out.partitioned[key] = (len(names - taken_names), big)
        return out


def result_devices(results: Iterable[AllocationResult]) -> set[DeviceID]:
    """The devices an allocation takes exclusively (admin access and shares take none)."""
    out: set[DeviceID] = set()
    for result in results:
        for r in result.results:
            if r.share_id is None and not r.admin_access:
                out.add(DeviceID(r.driver, r.pool, r.device))
    return out
