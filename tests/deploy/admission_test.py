"""The CEL in gpudra's admission policies and DeviceClasses, evaluated on concrete requests and
devices: who may write gpudra's ResourceSlices, which pods get the scheduling gate, which devices
each DeviceClass selects.
"""

from __future__ import annotations

from typing import Any

import pytest

from deploy import manifests
from deploy.cel_eval import evaluate, parse
from gpudra_kube import SCHEDULING_GATE

BASE = manifests.KUSTOMIZE / "base"
GATE = manifests.KUSTOMIZE / "components" / "scheduling-gate"
INVENTORY = "system:serviceaccount:gpudra:gpudra-inventory"


def _policy_spec(path: Any, kind: str) -> dict[str, Any]:
    doc = next(d for d in manifests.load_documents(path) if d["kind"] == kind)
    spec: dict[str, Any] = doc["spec"]
    return spec


SLICE_POLICY = _policy_spec(
    BASE / "admission" / "resourceslice-writers.yaml", "ValidatingAdmissionPolicy"
)


def _slice(driver: str, node: str | None = "node-1") -> dict[str, Any]:
    spec: dict[str, Any] = {"driver": driver, "pool": {"name": "p"}}
    if node is not None:
        spec["nodeName"] = node
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "spec": spec}


def _slice_request(op: str, user: str, obj: dict[str, Any]) -> dict[str, Any]:
    activation: dict[str, Any] = {
        "request": {"operation": op, "userInfo": {"username": user}},
        "object": None if op == "DELETE" else obj,
        "oldObject": None if op == "CREATE" else obj,
    }
    variables = {
        v["name"]: evaluate(v["expression"], activation) for v in SLICE_POLICY["variables"]
    }
    activation["variables"] = variables
    return activation


@pytest.mark.parametrize(
    ("op", "user", "driver", "node", "matched", "allowed"),
    [
        pytest.param("CREATE", INVENTORY, "gpu.nvidia.com", "node-1", True, True, id="inventory"),
        pytest.param("UPDATE", INVENTORY, "gpu.nvidia.com", "node-1", True, True, id="inv-update"),
        pytest.param("DELETE", INVENTORY, "gpu.nvidia.com", None, True, True, id="inv-delete"),
        pytest.param(
            "CREATE",
            "system:serviceaccount:gpudra:gpudra-claim-writer",
            "gpu.nvidia.com",
            "node-1",
            True,
            False,
            id="other-gpudra-service",
        ),
        pytest.param(
            "CREATE", "system:node:node-1", "gpu.nvidia.com", "node-1", True, False, id="kubelet"
        ),
        pytest.param(
            "DELETE", "system:node:node-1", "gpu.nvidia.com", "node-1", True, True, id="own-kubelet"
        ),
        pytest.param(
            "DELETE", "system:node:node-2", "gpu.nvidia.com", "node-1", True, False, id="other-node"
        ),
        pytest.param(
            "DELETE", "system:node:node-1", "gpu.nvidia.com", None, True, False, id="no-node-slice"
        ),
        pytest.param(
            "DELETE",
            "system:serviceaccount:kube-system:generic-garbage-collector",
            "gpu.nvidia.com",
            "node-1",
            True,
            True,
            id="garbage-collector",
        ),
        pytest.param(
            "UPDATE",
            "system:serviceaccount:kube-system:generic-garbage-collector",
            "gpu.nvidia.com",
            "node-1",
            True,
            False,
            id="gc-update",
        ),
        pytest.param(
            "CREATE", "alice", "gpu.example.com", "node-1", False, None, id="other-driver"
        ),
    ],
)
def test_only_inventory_writes_gpudra_slices(
    op: str, user: str, driver: str, node: str | None, matched: bool, allowed: bool | None
) -> None:
    activation = _slice_request(op, user, _slice(driver, node))
    conditions = [evaluate(c["expression"], activation) for c in SLICE_POLICY["matchConditions"]]
    assert all(conditions) is matched
    if allowed is not None:
        assert bool(evaluate(SLICE_POLICY["validations"][0]["expression"], activation)) is allowed


GATE_POLICY = _policy_spec(GATE / "mutatingadmissionpolicy.yaml", "MutatingAdmissionPolicy")


@pytest.mark.parametrize(
    ("pod_spec", "gated"),
    [
        pytest.param({"resourceClaims": [{"name": "gpu"}]}, True, id="with-claims"),
        pytest.param({"containers": [{"name": "c"}]}, False, id="no-claims"),
        pytest.param({"resourceClaims": []}, False, id="empty-claims"),
        pytest.param(
            {"resourceClaims": [{"name": "g"}], "schedulingGates": [{"name": "other.io/x"}]},
            True,
            id="other-gate",
        ),
        pytest.param(
            {
                "resourceClaims": [{"name": "g"}],
                "schedulingGates": [{"name": "gpudra.io/allocation"}],
            },
            False,
            id="already-gated",
        ),
    ],
)
def test_scheduling_gate_applies_to_pods_with_claims(pod_spec: dict[str, Any], gated: bool) -> None:
    activation = {"object": {"apiVersion": "v1", "kind": "Pod", "spec": pod_spec}}
    results = [evaluate(c["expression"], activation) for c in GATE_POLICY["matchConditions"]]
    assert all(results) is gated


def test_scheduling_gate_is_the_one_the_claim_writer_lifts() -> None:
    (mutation,) = GATE_POLICY["mutations"]
    expression = mutation["applyConfiguration"]["expression"]
    parse(expression)
    assert f'name: "{SCHEDULING_GATE}"' in expression
    for condition in GATE_POLICY["matchConditions"]:
        assert (
            "gpudra.io/" not in condition["expression"]
            or SCHEDULING_GATE in condition["expression"]
        )


def _device(**attributes: Any) -> dict[str, Any]:
    return {
        "driver": "gpu.nvidia.com",
        "attributes": {"gpu.nvidia.com": attributes},
        "capacity": {"gpu.nvidia.com": {}},
        "allowMultipleAllocations": False,
    }


DEVICES = {
    "dgx-h100-gpu": _device(
        type="gpu", productName="NVIDIA H100 80GB HBM3", nvlinkDomain="nvswitch-0"
    ),
    "pcie-l4-gpu": _device(type="gpu", productName="NVIDIA L4"),
    "a100-mig": _device(type="mig", profile="1g.10gb", parentUUID="GPU-1"),
    "other-driver": {**_device(type="gpu", nvlinkDomain="x"), "driver": "gpu.example.com"},
}


@pytest.mark.parametrize(
    ("device_class", "selected"),
    [
        pytest.param("gpu.nvidia.com", {"dgx-h100-gpu", "pcie-l4-gpu"}, id="gpu"),
        pytest.param("mig.nvidia.com", {"a100-mig"}, id="mig"),
        pytest.param("nvlink.gpu.nvidia.com", {"dgx-h100-gpu"}, id="nvlink"),
    ],
)
def test_device_class_selects(device_class: str, selected: set[str]) -> None:
    classes = {
        d["metadata"]["name"]: d
        for path in (BASE / "device-classes").glob("*.yaml")
        if path.name != "kustomization.yaml"
        for d in manifests.load_documents(path)
    }
    expressions = [s["cel"]["expression"] for s in classes[device_class]["spec"]["selectors"]]
    chosen = {
        name
        for name, device in DEVICES.items()
        if all(evaluate(e, {"device": device}) for e in expressions)
    }
    assert chosen == selected
