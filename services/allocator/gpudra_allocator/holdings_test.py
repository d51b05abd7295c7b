"""What an allocation holds in the reservations bucket matches what kube-scheduler counts as in
use (`AllocatedState.apply`, the core's mirror of its allocated-state gathering)."""

from __future__ import annotations

from gpudra_alloc.state import AllocatedState, DeviceID
from gpudra_allocator.holdings import PoolHoldings, apply_holdings, holdings_for
from gpudra_api import AllocationResult, DeviceRequestAllocationResult, Quantity


def _result(*results: DeviceRequestAllocationResult) -> AllocationResult:
    return AllocationResult(results=results)


def _share(
    device: str,
    share: str,
    admin_access: bool | None = None,
    consumed_capacity: dict[str, Quantity] | None = None,
) -> DeviceRequestAllocationResult:
    return DeviceRequestAllocationResult(
        request="r",
        driver="gpu.nvidia.com",
        pool="n1",
        device=device,
        admin_access=admin_access,
        share_id=share,
        consumed_capacity=consumed_capacity,
    )


def _held(results: AllocationResult) -> AllocatedState:
    state = AllocatedState()
    for (driver, pool), held in holdings_for([results], "uid-1", "ns/c", "t", 1.0).items():
        apply_holdings(state, PoolHoldings(driver, pool, tuple(held)), 1)
    return state


def test_an_admin_access_share_holds_nothing() -> None:
    results = _result(
        _share(
            "gpu-0", "s1", admin_access=True, consumed_capacity={"memory": Quantity.parse("1Gi")}
        )
    )
    assert holdings_for([results], "uid-1", "ns/c", "t", 1.0) == {}
    expected = AllocatedState()
    expected.apply([results])
    assert _held(results).shared == expected.shared == set()


def test_a_share_without_consumption_leaves_no_capacity_entry() -> None:
    results = _result(
        _share("gpu-0", "s1"),
        _share("gpu-1", "s2", consumed_capacity={"memory": Quantity.parse("2Gi")}),
    )
    state, expected = _held(results), AllocatedState()
    expected.apply([results])
    assert state.capacity == expected.capacity
    assert DeviceID("gpu.nvidia.com", "n1", "gpu-0") not in state.capacity
    assert state.shared == expected.shared
    for (driver, pool), held in holdings_for([results], "uid-1", "ns/c", "t", 1.0).items():
        apply_holdings(state, PoolHoldings(driver, pool, tuple(held)), -1)
    assert not state.shared
    assert not state.capacity
