"""The example manifests (examples/*.yaml): one scenario per file, each with a comment header,
valid resource.k8s.io/v1 (strict schemas, Kubernetes 1.34+), self-contained (every claim, template
and DeviceClass a pod or claim names exists), using only the attribute names docs/DEVICES.md
documents, with CEL that parses. The standalone demo applies these same files.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from deploy import manifests
from deploy.cel_eval import parse
from deploy.manifests import pod_spec, ref

FILES = sorted(manifests.EXAMPLES.glob("*.yaml"))
FILE_PARAMS = [pytest.param(path, id=path.stem) for path in FILES]

SCENARIOS = {
    "h100-or-better-40gb",
    "mig-small-medium-full",
    "nvlink-4-gpus",
    "nvswitch-8-gpus",
    "b200-150gb-training",
    "deployment-gpu-per-replica",
    "shared-claim-two-pods",
    "gang-of-pods",
}
_ATTRIBUTE_USE = re.compile(
    r'device\.(attributes|capacity)\["gpu\.nvidia\.com"\]\.(\w+)'
    r'|"(\w+)" in device\.attributes\["gpu\.nvidia\.com"\]'
)


def _documented_names() -> set[str]:
    text = (manifests.REPO / "docs" / "DEVICES.md").read_text(encoding="utf-8")
    return set(re.findall(r"`([A-Za-z][\w./-]*)`", text))


def _device_classes() -> set[str]:
    directory = manifests.KUSTOMIZE / "base" / "device-classes"
    return {
        doc["metadata"]["name"]
        for path in directory.glob("*.yaml")
        if path.name != "kustomization.yaml"
        for doc in manifests.load_documents(path)
    }


def _requests(claim_spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Every exact request and every prioritized alternative of a claim spec."""
    found = []
    for request in claim_spec.get("devices", {}).get("requests", []):
        if "exactly" in request:
            found.append(request["exactly"])
        found.extend(request.get("firstAvailable", []))
    return found


def _claim_specs(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    specs = []
    for doc in docs:
        if doc["kind"] == "ResourceClaim":
            specs.append(doc["spec"])
        elif doc["kind"] == "ResourceClaimTemplate":
            specs.append(doc["spec"]["spec"])
    return specs


def test_every_scenario_has_its_file() -> None:
    assert {path.stem for path in FILES} == SCENARIOS


@pytest.mark.parametrize("path", FILE_PARAMS)
def test_header_says_what_it_shows(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("# Scenario: "), "first line must name the scenario"
    assert lines[1].startswith("# "), "the header explains the scenario in prose"


@pytest.mark.parametrize("path", FILE_PARAMS)
@pytest.mark.parametrize("version", manifests.SCHEMA_VERSIONS)
def test_valid_kubernetes(path: Path, version: str) -> None:
    docs = manifests.load_documents(path)
    assert docs
    problems = [p for doc in docs if (p := manifests.validate_strict(doc, version)) is not None]
    assert problems == []
    for doc in docs:
        assert "namespace" not in doc["metadata"], f"{ref(doc)}: examples apply to any namespace"
        if manifests.api_group(doc) == "resource.k8s.io":
            assert doc["apiVersion"] == "resource.k8s.io/v1", ref(doc)


@pytest.mark.parametrize("path", FILE_PARAMS)
def test_self_contained(path: Path) -> None:
    docs = manifests.load_documents(path)
    claims = {d["metadata"]["name"] for d in docs if d["kind"] == "ResourceClaim"}
    templates = {d["metadata"]["name"] for d in docs if d["kind"] == "ResourceClaimTemplate"}
    classes = _device_classes()
    for spec in _claim_specs(docs):
        for request in _requests(spec):
            assert request["deviceClassName"] in classes, f"{path.name}: unknown DeviceClass"
    consumers = [d for d in docs if d["kind"] in manifests.WORKLOAD_KINDS | {"Pod"}]
    assert consumers, f"{path.name} shows no workload using its claims"
    for doc in consumers:
        spec = pod_spec(doc)
        pod_claims = {c["name"] for c in spec["resourceClaims"]}
        for pod_claim in spec["resourceClaims"]:
            if "resourceClaimName" in pod_claim:
                assert pod_claim["resourceClaimName"] in claims, ref(doc)
            else:
                assert pod_claim["resourceClaimTemplateName"] in templates, ref(doc)
        for container in spec["containers"]:
            used = {c["name"] for c in container.get("resources", {}).get("claims", [])}
            assert used, f"{ref(doc)}/{container['name']} uses none of the pod's claims"
            assert used <= pod_claims, ref(doc)


@pytest.mark.parametrize("path", FILE_PARAMS)
def test_selectors_parse_and_use_documented_attributes(path: Path) -> None:
    documented = _documented_names()
    for spec in _claim_specs(manifests.load_documents(path)):
        for request in _requests(spec):
            for selector in request.get("selectors", []):
                expression = selector["cel"]["expression"]
                parse(expression)
                for match in _ATTRIBUTE_USE.finditer(expression):
                    name = match.group(2) or match.group(3)
                    assert name in documented, f"{path.name}: {name} is not in DEVICES.md"
        for constraint in spec["devices"].get("constraints", []):
            domain, _, name = constraint["matchAttribute"].partition("/")
            assert domain == manifests.DRIVER
            assert name in documented, f"{path.name}: {name} is not in DEVICES.md"


def test_attribute_check_can_fail() -> None:
    """The attribute scan finds names in both forms the examples use."""
    found = [
        m.group(2) or m.group(3)
        for m in _ATTRIBUTE_USE.finditer(
            'device.attributes["gpu.nvidia.com"].gpuFlavour == "x" && '
            '"nvlinkDomain" in device.attributes["gpu.nvidia.com"]'
        )
    ]
    assert found == ["gpuFlavour", "nvlinkDomain"]
    assert "gpuFlavour" not in _documented_names()


def test_names_are_unique_across_examples() -> None:
    """The demo may apply every example into one namespace."""
    keys = [ref(doc) for path in FILES for doc in manifests.load_documents(path)]
    assert sorted(keys) == sorted(set(keys))


def test_gang_example_declares_its_gang() -> None:
    docs = manifests.load_documents(manifests.EXAMPLES / "gang-of-pods.yaml")
    template = next(d for d in docs if d["kind"] == "ResourceClaimTemplate")
    job = next(d for d in docs if d["kind"] == "Job")
    annotations = template["spec"]["metadata"]["annotations"]
    assert int(annotations["gpudra.io/gang-size"]) == job["spec"]["parallelism"]
    assert job["spec"]["parallelism"] == job["spec"]["completions"]
    assert annotations["gpudra.io/gang"]
