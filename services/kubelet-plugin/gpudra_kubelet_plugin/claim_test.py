from __future__ import annotations

from typing import Any

import pytest

from gpudra_kubelet_plugin.claim import OpaqueConfig, Result, parse_allocation
from gpudra_kubelet_plugin.conftest import DRIVER, NODE, make_claim, sharing_config
from gpudra_kubelet_plugin.errors import InvalidClaimError


def result(
    device: str, request: str = "r", driver: str = DRIVER, pool: str = NODE, **extra: Any
) -> dict[str, Any]:
    return {"request": request, "driver": driver, "pool": pool, "device": device, **extra}


@pytest.mark.parametrize(
    ("results", "expected"),
    [
        pytest.param([result("gpu-0")], [Result("r", NODE, "gpu-0")], id="one"),
        pytest.param(
            [
                result("gpu-0"),
                result("gpu-1", driver="other.example.com"),
                result("gpu-2", pool="node-b"),
            ],
            [Result("r", NODE, "gpu-0")],
            id="other-driver-and-node-skipped",
        ),
        pytest.param(
            [result("gpu-0", shareID="abc", adminAccess=True)],
            [Result("r", NODE, "gpu-0", share_id="abc", admin_access=True)],
            id="share-and-admin",
        ),
    ],
)
def test_results_for_this_driver_and_node(
    results: list[dict[str, Any]], expected: list[Result]
) -> None:
    allocation = parse_allocation(make_claim("c", "u", results), DRIVER, NODE)
    assert list(allocation.results) == expected
    assert (allocation.uid, allocation.namespace, allocation.name) == ("u", "default", "c")


def test_configs_class_first_then_claim_and_request_scoping() -> None:
    params = {"apiVersion": "x", "kind": "y"}
    configs = [
        sharing_config({"strategy": "MPS"}, requests=["b"]),
        {"source": "FromClass", "opaque": {"driver": DRIVER, "parameters": params}},
        {"source": "FromClaim", "opaque": {"driver": "other.example.com", "parameters": {}}},
    ]
    allocation = parse_allocation(
        make_claim(
            "c", "u", [result("gpu-0", request="a"), result("gpu-1", request="b/sub")], configs
        ),
        DRIVER,
        NODE,
    )
    assert [c.source for c in allocation.configs] == ["FromClass", "FromClaim"]
    assert [c.source for c in allocation.configs_for(allocation.results[0])] == ["FromClass"]
    assert [c.source for c in allocation.configs_for(allocation.results[1])] == [
        "FromClass",
        "FromClaim",
    ]
    assert OpaqueConfig("FromClaim", ("b/sub",), None).applies_to("b/sub")
    assert not OpaqueConfig("FromClaim", ("a",), None).applies_to("b/sub")


def _without_allocation() -> dict[str, Any]:
    claim = make_claim("c", "u", [])
    del claim["status"]
    return claim


def _patched(path: list[str], value: Any) -> dict[str, Any]:
    claim = make_claim("c", "u", [result("gpu-0")])
    target = claim
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return claim


@pytest.mark.parametrize(
    ("claim", "message"),
    [
        pytest.param({"metadata": {}}, "no metadata.uid", id="no-uid"),
        pytest.param(_without_allocation(), "is not allocated", id="not-allocated"),
        pytest.param(
            _patched(["status", "allocation", "devices", "results"], {"x": 1}),
            "results must be a list",
            id="results-not-list",
        ),
        pytest.param(
            _patched(["status", "allocation", "devices", "results"], [result("")]),
            r"results\[0\]\.device must be",
            id="empty-device",
        ),
        pytest.param(
            _patched(["status", "allocation", "devices", "results"], ["x"]),
            "is not an object",
            id="result-not-object",
        ),
        pytest.param(
            _patched(
                ["status", "allocation", "devices", "config"],
                [{"source": "Elsewhere", "opaque": {"driver": DRIVER}}],
            ),
            "source must be FromClass or FromClaim",
            id="bad-source",
        ),
        pytest.param(
            _patched(
                ["status", "allocation", "devices", "config"],
                [{"source": "FromClaim", "requests": "a", "opaque": {"driver": DRIVER}}],
            ),
            "requests must be a list of strings",
            id="bad-requests",
        ),
    ],
)
def test_malformed_claims_are_clear_errors(claim: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidClaimError, match=message):
        parse_allocation(claim, DRIVER, NODE)
