"""CounterLedger: exact integer (nano-unit) arithmetic gives the answers exact quantity arithmetic
gives — fixed cases, amounts that are not whole nano units, and a differential check against a
plain Quantity ledger over seeded random pools, states and take/give-back sequences."""

from __future__ import annotations

import dataclasses
import gc
import random
import weakref
from fractions import Fraction
from typing import Any

import pytest

from gpudra_alloc.counters import CounterLedger, consumption_of, nanos
from gpudra_alloc.pools import DeviceEntry, Pool, entries_of
from gpudra_alloc.state import AllocatedState
from gpudra_api import (
    CounterSet,
    DeviceCounterConsumption,
    Quantity,
    ResourceSlice,
    parse_resource_slice,
)

_TOTALS: dict[int, dict[str, CounterSet]] = {}


def _spec(name: str, extra: dict[str, Any]) -> dict[str, Any]:
    pool = {"name": "p", "generation": 1, "resourceSliceCount": 2}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"driver": "d", "nodeName": "n", "pool": pool, **extra},
    }


def _slice(total: dict[str, str], devices: list[dict[str, str]]) -> ResourceSlice:
    """The devices' slice; the pool's other slice publishes the counter set `set` = `total`."""
    counters = parse_resource_slice(
        _spec(
            "c",
            {
                "sharedCounters": [
                    {"name": "set", "counters": {k: {"value": v} for k, v in total.items()}}
                ]
            },
        )
    )
    consumes = [
        [{"counterSet": "set", "counters": {k: {"value": v} for k, v in c.items()}}]
        for c in devices
    ]
    slice_ = parse_resource_slice(
        _spec(
            "s",
            {
                "devices": [
                    {"name": f"dev-{i}", "consumesCounters": c} for i, c in enumerate(consumes)
                ]
            },
        )
    )
    _TOTALS[id(slice_)] = {cs.name: cs for cs in counters.shared_counters}
    return slice_


def _pool(slice_: ResourceSlice) -> Pool:
    return Pool("d", "p", slices=[slice_], counter_sets=_TOTALS[id(slice_)])


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param("1", 10**9, id="one"),
        pytest.param("500m", 5 * 10**8, id="milli"),
        pytest.param("1n", 1, id="nano"),
        pytest.param("80Gi", 80 * 2**30 * 10**9, id="binary"),
        pytest.param("-2k", -2 * 10**12, id="negative"),
    ],
)
def test_nanos_of_parsed_quantities_are_ints(text: str, want: int) -> None:
    got = nanos(Quantity.parse(text))
    assert isinstance(got, int)
    assert got == want


def test_nanos_keeps_a_fraction_exact() -> None:
    assert nanos(Quantity.of(Fraction(1, 3))) == Fraction(10**9, 3)


@pytest.mark.parametrize(
    ("total", "devices", "allocated", "takes", "want"),
    [
        pytest.param({"m": "8Gi"}, [{"m": "4Gi"}] * 3, [], [0, 1, 2], [True, True, False], id="fill"),
        pytest.param({"m": "8Gi"}, [{"m": "4Gi"}] * 3, [0], [1, 2], [True, False], id="allocated"),
        pytest.param({"m": "1"}, [{"m": "999999999n"}, {"m": "1n"}, {"m": "1n"}], [], [0, 1, 2],
                     [True, True, False], id="nano-exact"),
        pytest.param({"m": "1"}, [{"m": "2"}, {"m": "1n"}], [0], [1], [False], id="overdrawn"),
        pytest.param({"m": "4", "c": "2"}, [{"m": "1", "c": "1"}] * 3, [], [0, 1, 2],
                     [True, True, False], id="second-counter"),
        pytest.param({"m": "1"}, [{"x": "5"}], [], [0], [True], id="unknown-counter-ignored"),
    ],
)  # fmt: skip
def test_takes(
    total: dict[str, str],
    devices: list[dict[str, str]],
    allocated: list[int],
    takes: list[int],
    want: list[bool],
) -> None:
    slice_ = _slice(total, devices)
    entries = entries_of(slice_)
    state = AllocatedState(devices={entries[i].id for i in allocated})
    ledger = CounterLedger(state)
    assert [ledger.take(entries[i], _pool(slice_)) for i in takes] == want


def test_thirds_fit_exactly() -> None:
    """Three devices taking a third each fit in one (no rounding), a fourth does not."""
    base = _slice({"m": "1"}, [{"m": "1"}] * 4)
    third = DeviceCounterConsumption("set", {"m": Quantity.of(Fraction(1, 3))})
    devices = tuple(dataclasses.replace(d, consumes_counters=(third,)) for d in base.devices)
    slice_ = dataclasses.replace(base, devices=devices)
    _TOTALS[id(slice_)] = _TOTALS[id(base)]
    entries = [DeviceEntry(d, slice_) for d in devices]
    ledger = CounterLedger(AllocatedState())
    assert [ledger.take(e, _pool(slice_)) for e in entries] == [True, True, True, False]
    ledger.give_back(entries[0])
    assert ledger.take(entries[3], _pool(slice_))


def test_consumption_is_remembered_per_device() -> None:
    device = _slice({"m": "1"}, [{"m": "1"}]).devices[0]
    assert consumption_of(device) is consumption_of(device)
    assert consumption_of(device) == (("set", (("m", 10**9),)),)


def test_what_is_remembered_goes_with_the_slice() -> None:
    """The remembered consumers of a slice and consumption of its devices keep neither alive:
    a slice the index replaced is freed with its devices."""
    slice_ = _slice({"m": "2"}, [{"m": "1"}] * 2)
    entries = entries_of(slice_)
    ledger = CounterLedger(AllocatedState(devices={entries[0].id}))
    assert ledger.take(entries[1], _pool(slice_))  # consumers_of and consumption_of both read
    assert not ledger.take(entries[1], _pool(slice_))
    refs: list[weakref.ref[Any]] = [weakref.ref(slice_), *(weakref.ref(d) for d in slice_.devices)]
    del ledger, entries, slice_
    gc.collect()
    assert [ref() for ref in refs] == [None] * 3


class _QuantityLedger:
    """The former ledger: Quantity arithmetic throughout (the reference)."""

    def __init__(self, state: AllocatedState, pool: Pool) -> None:
        self.left = {n: dict(cs.counters) for n, cs in pool.counter_sets.items()}
        for entry in pool.device_entries()[0]:
            if state.is_allocated(entry.id):
                for c in entry.device.consumes_counters:
                    for name, value in c.counters.items():
                        if name in self.left.get(c.counter_set, {}):
                            self.left[c.counter_set][name] = self.left[c.counter_set][name] - value
        self.taken: dict[str, dict[str, Quantity]] = {}

    def take(self, entry: DeviceEntry) -> bool:
        self._add(entry, 1)
        for set_name, counters in self.left.items():
            taken = self.taken.get(set_name, {})
            for name, value in counters.items():
                used = taken.get(name)
                if (used is not None and value < used) or (used is None and value.sign < 0):
                    self._add(entry, -1)
                    return False
        return True

    def _add(self, entry: DeviceEntry, sign: int) -> None:
        for c in entry.device.consumes_counters:
            taken = self.taken.setdefault(c.counter_set, {})
            for name, value in c.counters.items():
                if sign > 0:
                    taken[name] = taken[name] + value if name in taken else value
                elif name in taken:
                    taken[name] = taken[name] - value


AMOUNTS = ["1", "2", "500m", "250m", "1Gi", "512Mi", "3n", "0"]


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"seed-{s}") for s in range(40)])
def test_same_answers_as_quantity_arithmetic(seed: int) -> None:
    rng = random.Random(seed)
    names = ["a", "b", "c"][: rng.randint(1, 3)]
    total = {n: rng.choice(["2", "1", "3Gi", "1500m"]) for n in names}
    devices: list[dict[str, Any]] = [
        {n: rng.choice(AMOUNTS) for n in rng.sample([*names, "z"], rng.randint(1, 2))}
        for _ in range(rng.randint(2, 8))
    ]
    slice_ = _slice(total, devices)
    entries = entries_of(slice_)
    state = AllocatedState(devices={e.id for e in entries if rng.random() < 0.2})
    pool = _pool(slice_)
    ledger, reference = CounterLedger(state), _QuantityLedger(state, pool)
    for _ in range(20):
        entry = rng.choice(entries)
        if rng.random() < 0.3:
            ledger.give_back(entry)
            reference._add(entry, -1)
        else:
            assert ledger.take(entry, pool) == reference.take(entry), (seed, devices)
