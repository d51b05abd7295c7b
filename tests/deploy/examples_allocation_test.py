"""Every example's claims, allocated by gpudra's own allocator (`gpudra_alloc`, the allocation-
problem contract) against the ResourceSlices gpudra publishes for its simulator profiles, one
node per profile, with the cluster's DeviceClasses. Simulated hardware only: this checks that
each scenario selects exactly the machines it describes, not anything about real GPUs.

A ResourceClaimTemplate is instantiated the way Kubernetes does for one pod (its metadata and
spec become a ResourceClaim's). Gang semantics across nodes are the allocator's placement
layer and are not exercised here: each gang member is allocated on its own.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from deploy import manifests
from gpudra_alloc import FEATURE_NAMES, solve
from gpudra_nvml import open_simulator, profile_names, snapshot
from gpudra_slices import SliceOptions, build_slices

ALL = frozenset(
    {"a100-mig", "dgx-h100", "gb200-nvl72-tray", "h100-pcie-pairs", "hgx-b200", "l4-pcie"}
)
FOUR_ON_ONE_DOMAIN = frozenset({"a100-mig", "dgx-h100", "gb200-nvl72-tray", "hgx-b200"})

# (example file, claim, nodes where it can be allocated, {node: request chosen} where it matters)
EXPECTED = [
    ("h100-or-better-40gb", "h100-or-better", ALL - {"a100-mig", "l4-pcie"}, {}),
    (
        "mig-small-medium-full",
        "mig-small-medium-full",
        ALL,
        {"a100-mig": "gpu/small", "dgx-h100": "gpu/full", "l4-pcie": "gpu/full"},
    ),
    ("nvlink-4-gpus", "nvlink-4-gpus", FOUR_ON_ONE_DOMAIN, {}),
    ("nvswitch-8-gpus", "nvswitch-8-gpus", frozenset({"dgx-h100", "hgx-b200"}), {}),
    ("b200-150gb-training", "b200-150gb-0", frozenset({"hgx-b200"}), {}),
    ("deployment-gpu-per-replica", "one-gpu-0", ALL, {}),
    ("shared-claim-two-pods", "shared-gpu", ALL, {}),
    ("gang-of-pods", "llm-pretrain-worker-0", FOUR_ON_ONE_DOMAIN, {}),
]


def _claims(path: Path) -> dict[str, dict[str, Any]]:
    """The example's ResourceClaims, plus one claim per ResourceClaimTemplate (`<name>-0`)."""
    claims = {}
    for doc in manifests.load_documents(path):
        if doc["kind"] == "ResourceClaim":
            claim = copy.deepcopy(doc)
        elif doc["kind"] == "ResourceClaimTemplate":
            claim = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": copy.deepcopy(doc["spec"].get("metadata", {})),
                "spec": copy.deepcopy(doc["spec"]["spec"]),
            }
            claim["metadata"]["name"] = f"{doc['metadata']['name']}-0"
        else:
            continue
        claim["metadata"].update(namespace="default", uid=f"uid-{claim['metadata']['name']}")
        claims[claim["metadata"]["name"]] = claim
    return claims


@pytest.fixture(scope="module")
def cluster() -> dict[str, Any]:
    """DeviceClasses and, by node, the slices of one simulated node per profile (node name =
    profile)."""
    slices = {}
    for profile in profile_names():
        opened = open_simulator(profile)
        inventory = snapshot(opened.adapter.discover(), profile, opened.source)
        inventory.generation = 1
        slices[profile] = build_slices(inventory, SliceOptions())
    classes = manifests.load_documents(
        manifests.KUSTOMIZE / "base" / "device-classes" / "deviceclasses.yaml"
    )
    return {"classes": classes, "slices": slices}


def test_every_profile_is_a_node(cluster: dict[str, Any]) -> None:
    for node, slices in cluster["slices"].items():
        assert {s["spec"]["nodeName"] for s in slices} == {node}
    assert set(cluster["slices"]) == ALL


def test_every_example_claim_is_covered() -> None:
    covered = {(f, c) for f, c, _, _ in EXPECTED}
    found = {
        (path.stem, name) for path in manifests.EXAMPLES.glob("*.yaml") for name in _claims(path)
    }
    assert found == covered


@pytest.mark.parametrize(
    ("example", "claim_name", "nodes", "chosen"),
    [pytest.param(*case, id=case[1]) for case in EXPECTED],
)
def test_example_allocates_exactly_where_it_should(
    cluster: dict[str, Any],
    example: str,
    claim_name: str,
    nodes: frozenset[str],
    chosen: dict[str, str],
) -> None:
    claim = _claims(manifests.EXAMPLES / f"{example}.yaml")[claim_name]
    allocated = {}
    for node in sorted(ALL):
        # Only the node's own pool: the node is fixed, and other pools would only cost time.
        problem = {
            "classes": cluster["classes"],
            "slices": cluster["slices"][node],
            "claims": [claim],
            "node": node,
            "features": sorted(FEATURE_NAMES),
        }
        answer = solve(problem)
        assert answer["outcome"] in ("allocated", "unschedulable"), answer
        if answer["outcome"] == "allocated":
            (result,) = answer["results"]
            allocated[node] = {r["request"] for r in result["devices"]["results"]}
    assert set(allocated) == nodes
    for node, request in chosen.items():
        assert allocated[node] == {request}, node
