"""InUseDevices: every mutating set operation keeps the set's contents as a plain set would and
bumps the change counters (removals, removal log, per-pool versions) of exactly the pools whose
devices changed, so that the caches built on them never miss a change."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gpudra_alloc import solve
from gpudra_alloc.state import AllocatedState, DeviceID, InUseDevices
from gpudra_api import Quantity

A0 = DeviceID("gpu", "a", "0")
A1 = DeviceID("gpu", "a", "1")
B0 = DeviceID("gpu", "b", "0")
C0 = DeviceID("gpu", "c", "0")
START = {A0, A1, B0}


def _ixor(s: Any) -> None:
    s ^= {A1, C0}


def _iand(s: Any) -> None:
    s &= {A0, C0}


def _pop(s: Any) -> Any:
    return s.pop()


def _ior(s: Any) -> None:
    s |= {C0, A0}


def _isub(s: Any) -> None:
    s -= {B0, C0}


OPS: list[Any] = [
    pytest.param(lambda s: s.add(C0), id="add"),
    pytest.param(lambda s: s.add(A0), id="add-present"),
    pytest.param(lambda s: s.discard(B0), id="discard"),
    pytest.param(lambda s: s.discard(C0), id="discard-absent"),
    pytest.param(lambda s: s.remove(A1), id="remove"),
    pytest.param(_pop, id="pop"),
    pytest.param(lambda s: s.clear(), id="clear"),
    pytest.param(lambda s: s.update([C0], {A0}), id="update"),
    pytest.param(lambda s: s.difference_update([A0], {B0, C0}), id="difference_update"),
    pytest.param(lambda s: s.intersection_update([A0, A1, C0], {A0, B0}), id="intersection_update"),
    pytest.param(lambda s: s.intersection_update(), id="intersection_update-no-args"),
    pytest.param(lambda s: s.symmetric_difference_update([A1, C0, C0]), id="sym_diff_update"),
    pytest.param(_ior, id="ior"),
    pytest.param(_isub, id="isub"),
    pytest.param(_iand, id="iand"),
    pytest.param(_ixor, id="ixor"),
]


@pytest.mark.parametrize("op", OPS)
def test_every_mutation_counts(op: Callable[[Any], Any]) -> None:
    plain = set(START)
    tracked = InUseDevices(START)
    versions = dict(tracked.pool_version)
    popped = op(tracked)
    if op is _pop:
        # Which element `pop` takes depends on each set's hash layout: mirror the one it took.
        plain.discard(popped)
    else:
        op(plain)
    assert isinstance(tracked, InUseDevices)
    assert set(tracked) == plain
    removed = START - plain
    changed = {(d.driver, d.pool) for d in START ^ plain}
    assert tracked.removals == len(removed)
    assert sorted(tracked.removal_log) == sorted((d.driver, d.pool) for d in removed)
    for key in {(d.driver, d.pool) for d in START | plain | {C0}}:
        moved = tracked.pool_version.get(key, 0) != versions.get(key, 0)
        assert moved == (key in changed), key


def test_remove_absent_raises_and_counts_nothing() -> None:
    tracked = InUseDevices(START)
    versions = dict(tracked.pool_version)
    with pytest.raises(KeyError):
        tracked.remove(C0)
    assert tracked.pool_version == versions
    assert tracked.removals == 0


def test_pop_empty_raises() -> None:
    with pytest.raises(KeyError):
        InUseDevices().pop()


@pytest.mark.parametrize("op", OPS)
def test_state_pool_version_follows_in_place_changes(op: Callable[[Any], Any]) -> None:
    state = AllocatedState(devices=set(START))
    before = {pool: state.pool_version("gpu", pool) for pool in "abc"}
    releases = state.releases
    plain = set(START)
    popped = op(state.devices)
    if op is _pop:
        plain.discard(popped)  # which element `pop` takes depends on the set's hash layout
    else:
        op(plain)
    for pool in "abc":
        changed = any(d.pool == pool for d in START ^ plain)
        assert (state.pool_version("gpu", pool) != before[pool]) == changed, pool
    assert state.releases - releases == len(START - plain)


def _shared_step_problem(
    device: dict[str, Any], first: dict[str, Any], counter_sets: Any = ()
) -> Any:
    """Two pods one after the other, both asking for the one multi-allocatable device (whose
    pool has a second slice with `counter_sets`, when given)."""
    pool = {"name": "p", "generation": 1, "resourceSliceCount": 2 if counter_sets else 1}
    spec = {"driver": "d", "nodeName": "n", "pool": pool}
    slices = [{"metadata": {"name": "s"}, "spec": {**spec, "devices": [device]}}]
    if counter_sets:
        counters = {**spec, "sharedCounters": counter_sets}
        slices.append({"metadata": {"name": "s-counters"}, "spec": counters})

    def claim(name: str, request: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"devices": {"requests": [request]}}}

    second = {"name": "r", "exactly": {"deviceClassName": "c"}}
    return {
        "node": "n",
        "classes": [{"metadata": {"name": "c"}, "spec": {}}],
        "slices": slices,
        "steps": [{"allocate": [claim("first", first)]}, {"allocate": [claim("second", second)]}],
    }


def test_an_admin_access_share_is_not_in_use_afterwards() -> None:
    # Kubernetes' scheduler skips admin-access results when it gathers what is allocated, shared
    # ones too: the admin's share takes no capacity from the next pod.
    device = {"name": "x", "allowMultipleAllocations": True, "capacity": {"mem": {"value": "4"}}}
    admin = {"name": "r", "exactly": {"deviceClassName": "c", "adminAccess": True}}
    steps = solve(_shared_step_problem(device, admin), "first-fit")["steps"]
    assert [s["outcome"] for s in steps] == ["allocated", "allocated"]
    assert steps[0]["results"][0]["devices"]["results"][0]["consumedCapacity"] == {"mem": "4"}


def test_a_share_without_consumed_capacity_does_not_skip_the_counters_afterwards() -> None:
    # A share that consumed no capacity leaves no entry in Kubernetes' aggregated capacity, so
    # the next share of the device checks the counters again, and the device's own earlier
    # consumption (it is allocated) leaves none: the second pod does not fit.
    device = {
        "name": "x",
        "allowMultipleAllocations": True,
        "consumesCounters": [{"counterSet": "set", "counters": {"slots": {"value": "1"}}}],
    }
    counters = [{"name": "set", "counters": {"slots": {"value": "1"}}}]
    first = {"name": "r", "exactly": {"deviceClassName": "c"}}
    steps = solve(_shared_step_problem(device, first, counters), "first-fit")["steps"]
    assert [s["outcome"] for s in steps] == ["allocated", "unschedulable"]


def _share_steps(*steps: tuple[str, str | None]) -> list[str]:
    """Outcomes of `steps`, each (claim, memory it asks for) to allocate or (claim, None) to release,
    on one multi-allocatable device with 4 of memory whose one counter slot the device takes
    (every share after the first skips the counters only while the device's aggregated capacity
    has an entry)."""
    device = {
        "name": "x",
        "allowMultipleAllocations": True,
        "capacity": {"mem": {"value": "4"}},
        "consumesCounters": [{"counterSet": "set", "counters": {"slots": {"value": "1"}}}],
    }
    problem = _shared_step_problem(
        device, {}, [{"name": "set", "counters": {"slots": {"value": "1"}}}]
    )
    problem["steps"] = []
    for name, mem in steps:
        if mem is None:
            problem["steps"].append({"release": [f"default/{name}"]})
            continue
        request = {"deviceClassName": "c", "capacity": {"requests": {"mem": mem}}}
        claim = {
            "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": request}]}},
        }
        problem["steps"].append({"allocate": [claim]})
    return [s["outcome"] for s in solve(problem, "first-fit")["steps"]]


def test_a_zero_consumption_share_left_alone_keeps_no_entry_as_kube_schedulers_tracker() -> None:
    # Releasing "a" brings the device's aggregated capacity to zero: the entry goes, as
    # kube-scheduler's incremental tracker drops it (allocatedDevices.removeDevices ->
    # ConsumedCapacityCollection.Remove deletes an entry whose quantities are all zero), although
    # "b" (which consumed 0) still holds a share. "c" then checks the counters again, and the
    # device's own consumption (it is still allocated) leaves none: unschedulable.
    outcomes = _share_steps(("a", "2"), ("b", "0"), ("a", None), ("c", "1"))
    assert outcomes == ["allocated", "allocated", "released", "unschedulable"]
    # Rebuilt from the remaining allocation ("b" alone: its zero consumption makes an entry, as
    # a restarted kube-scheduler's Insert does), the same "c" skips the counters and fits.
    # Kubernetes' verdict depends on that history too; gpudra follows the running scheduler.
    assert _share_steps(("b", "0"), ("c", "1")) == ["allocated", "allocated"]


def test_release_drops_the_capacity_entry_only_when_it_sums_to_zero() -> None:
    device = DeviceID("d", "p", "x")
    state = AllocatedState()
    state.add_share(device, "a")
    state.add_capacity(device, {"mem": Quantity.parse("2")})
    state.add_share(device, "b")
    state.add_capacity(device, {"mem": Quantity.parse("0")})
    state.remove_share(device, "b")
    state.remove_capacity(device, {"mem": Quantity.parse("0")})
    assert state.capacity == {device: {"mem": Quantity.parse("2")}}
    state.remove_share(device, "a")
    state.remove_capacity(device, {"mem": Quantity.parse("2")})
    assert state.capacity == {}
    assert not state.is_allocated(device)
