from __future__ import annotations

from typing import Any

import pytest

from gpudra_api import (
    Quantity,
    ValidationError,
    parse_device_class,
    parse_resource_claim,
    parse_resource_claim_template,
)


def _claim(devices: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"devices": devices},
    }


def test_parses_exact_and_first_available_requests() -> None:
    claim = parse_resource_claim(
        _claim(
            {
                "requests": [
                    {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 8}},
                    {
                        "name": "nic",
                        "firstAvailable": [
                            {
                                "name": "fast",
                                "deviceClassName": "nic",
                                "capacity": {"requests": {"bw": "10G"}},
                            },
                            {"name": "any", "deviceClassName": "nic", "allocationMode": "All"},
                        ],
                    },
                ],
                "constraints": [
                    {"requests": ["gpus"], "matchAttribute": "gpu.nvidia.com/nvlinkDomain"}
                ],
                "config": [
                    {"requests": ["nic/fast"], "opaque": {"driver": "nic", "parameters": {"a": 1}}}
                ],
            }
        )
    )
    assert claim.key == "ml/train"
    exact = claim.requests[0].exactly
    assert exact is not None
    assert exact.count == 8
    fast, any_ = claim.requests[1].first_available
    assert fast.capacity == {"bw": Quantity.parse("10G")}
    assert (any_.allocation_mode, any_.count) == ("All", 0)
    assert claim.constraints[0].match_attribute == "gpu.nvidia.com/nvlinkDomain"
    assert claim.config[0].requests == ("nic/fast",)


REQ = {"name": "r", "exactly": {"deviceClassName": "c"}}


@pytest.mark.parametrize(
    ("devices", "field"),
    [
        pytest.param({"requests": [REQ] * 33}, "spec.devices.requests", id="too-many-requests"),
        pytest.param({"requests": [REQ, REQ]}, "spec.devices.requests", id="duplicate-request"),
        pytest.param(
            {
                "requests": [
                    {
                        "name": "r",
                        "firstAvailable": [
                            {"name": f"s{i}", "deviceClassName": "c"} for i in range(9)
                        ],
                    }
                ]
            },
            "spec.devices.requests[0].firstAvailable",
            id="too-many-subrequests",
        ),
        pytest.param(
            {
                "requests": [
                    {
                        "name": "r",
                        "exactly": {
                            "deviceClassName": "c",
                            "selectors": [{"cel": {"expression": "true"}}] * 33,
                        },
                    }
                ]
            },
            "spec.devices.requests[0].exactly.selectors",
            id="too-many-selectors",
        ),
        pytest.param(
            {"requests": [{"name": "r", "exactly": {"deviceClassName": "c", "count": 0}}]},
            "spec.devices.requests[0].exactly.count",
            id="zero-count",
        ),
        pytest.param(
            {
                "requests": [
                    {
                        "name": "r",
                        "exactly": {"deviceClassName": "c", "allocationMode": "All", "count": 2},
                    }
                ]
            },
            "spec.devices.requests[0].exactly.count",
            id="count-with-all",
        ),
        pytest.param(
            {
                "requests": [
                    {
                        "name": "r",
                        "firstAvailable": [
                            {"name": "s", "deviceClassName": "c", "adminAccess": True}
                        ],
                    }
                ]
            },
            "spec.devices.requests[0].firstAvailable[0].adminAccess",
            id="admin-in-subrequest",
        ),
        pytest.param({"requests": [{"name": "r"}]}, "spec.devices.requests[0]", id="neither-kind"),
        pytest.param(
            {"requests": [REQ], "constraints": [{"requests": ["x"], "matchAttribute": "d/a"}]},
            "spec.devices.constraints[0].requests",
            id="constraint-unknown-request",
        ),
        pytest.param(
            {"requests": [REQ], "constraints": [{"matchAttribute": "plain"}]},
            "spec.devices.constraints[0].matchAttribute",
            id="constraint-not-fully-qualified",
        ),
        pytest.param(
            {
                "requests": [
                    {
                        "name": "r",
                        "exactly": {
                            "deviceClassName": "c",
                            "tolerations": [{"operator": "Exists", "value": "v"}],
                        },
                    }
                ]
            },
            "spec.devices.requests[0].exactly.tolerations[0].value",
            id="exists-with-value",
        ),
        pytest.param(
            {"requests": [{"name": "r", "exactly": {"deviceClassName": "c", "count": "8"}}]},
            "spec.devices.requests[0].exactly.count",
            id="count-not-integer",
        ),
    ],
)
def test_rejects_invalid_claims(devices: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_resource_claim(_claim(devices))
    assert info.value.obj == "ResourceClaim ml/train"
    assert info.value.field == field


def test_template_yields_a_claim_spec() -> None:
    template = parse_resource_claim_template(
        {
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "t", "namespace": "ml"},
            "spec": {"spec": {"devices": {"requests": [REQ]}}},
        }
    )
    assert template.spec.requests[0].name == "r"


@pytest.mark.parametrize(
    ("data", "field"),
    [
        pytest.param(
            {"metadata": {"name": "Bad_Name"}, "spec": {}}, "metadata.name", id="bad-name"
        ),
        pytest.param(
            {
                "metadata": {"name": "c"},
                "spec": {"config": [{"opaque": {"driver": "d", "parameters": [1]}}]},
            },
            "spec.config[0].opaque.parameters",
            id="parameters-not-object",
        ),
        pytest.param({"kind": "Pod", "metadata": {"name": "c"}}, "kind", id="wrong-kind"),
    ],
)
def test_rejects_invalid_classes(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_device_class(data)
    assert info.value.field == field
