"""Kubernetes' own search as a cross-check: it accepts and rejects what the rule-by-rule
validator accepts and rejects."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from gpudra_alloc import AllocatedState, DeviceID
from gpudra_alloc.placement import kubernetes_accepts, validate_allocation
from gpudra_alloc.placement.choose_test import DRIVER, HALF_DOMAINS, claim, cluster
from gpudra_api import AllocationResult

Forge = Callable[[list[AllocationResult]], list[AllocationResult]]


def _devices(result: AllocationResult, names: list[str]) -> AllocationResult:
    return replace(
        result,
        results=tuple(replace(r, device=n) for r, n in zip(result.results, names, strict=False)),
    )


@pytest.mark.parametrize(
    ("forge", "busy", "message"),
    [
        pytest.param(lambda rs: rs, (), None, id="the-search-answer-is-valid"),
        pytest.param(lambda rs: rs + rs, (), "2 allocation results for 1 claims", id="count"),
        pytest.param(
            lambda rs: [_devices(rs[0], ["gpu-0", "gpu-1", "gpu-3", "gpu-2"])],
            (),
            None,
            id="same-devices-in-another-order",
        ),
        pytest.param(
            lambda rs: [replace(rs[0], results=(replace(rs[0].results[0], request="nope"),))],
            (),
            "no request named nope",
            id="unknown-request",
        ),
        pytest.param(
            lambda rs: [_devices(rs[0], ["gpu-0", "gpu-1", "gpu-2", "gpu-99"])],
            (),
            "is not in a usable pool on node dgx-00",
            id="device-not-on-node",
        ),
        pytest.param(
            lambda rs: [_devices(rs[0], ["gpu-0", "gpu-1", "gpu-2", "gpu-2"])],
            (),
            "is listed twice",
            id="device-twice",
        ),
        pytest.param(lambda rs: rs, ("gpu-1",), "fails the allocated stage", id="device-in-use"),
        pytest.param(
            lambda rs: [_devices(rs[0], ["gpu-0", "gpu-2", "gpu-4", "gpu-6"])],
            (),
            "breaks matchAttribute gpu.nvidia.com/nvlinkDomain",
            id="match-attribute-broken",
        ),
    ],
)
def test_validate_allocation(forge: Forge, busy: tuple[str, ...], message: str | None) -> None:
    allocator, nodes = cluster({"dgx-h100": 1}, domains=HALF_DOMAINS)
    claims = [claim("gpu-4-nvl")]
    found = allocator.allocate(nodes[0], claims)
    assert found.results is not None
    state = AllocatedState(devices={DeviceID(DRIVER, "dgx-00", d) for d in busy})
    forged = forge(found.results)
    problems = validate_allocation(allocator, nodes[0], claims, forged, state)
    if message is None:
        assert problems == []
    else:
        assert any(message in p for p in problems), problems
    accepted = kubernetes_accepts(allocator, nodes[0], claims, forged, state)
    # the search only produces devices in its own order: stricter on a reordered result
    assert accepted == (message is None and forged == found.results)
