"""What `gpudra apply` and the demo apply: ResourceClaims, read from YAML files or folders.

Kubernetes turns a workload's pod template into pods, and each pod's `resourceClaimTemplateName`
into a ResourceClaim of its own; standalone mode has no controllers, so `claims_of` does that
expansion itself: one claim per pod, named `<template>-<i>`, with the template's metadata
(annotations such as a gang's) and spec. Pods per workload: `replicas` (Deployment, ReplicaSet,
StatefulSet; default 1), `parallelism` (Job; default 1), one for a Pod; at most `MAX_PODS`. Claims named by
`resourceClaimName` must be in the manifests themselves. Every claim is validated with gpudra's
resource.k8s.io/v1 model before anything is written; a problem is a `ManifestError` naming the file
and object. Other kinds (Pods, Jobs, ...) are reported as skipped, never silently dropped.

Pods are not run, but recorded (`Plan.pods`) for every workload pod that uses claims: its
`spec` as written, named as the workload's pod (a Pod's own name, else `<workload>-<i>`), with
`status.resourceClaimStatuses` naming the claims generated for it, and each generated claim owned
by it (`Plan.owners`). That is what tells the claim-writer which claims belong to one pod, so
they are allocated together (on one node, all or none), as in a cluster.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from gpudra_api import ApiError, parse_resource_claim, parse_resource_claim_template
from gpudra_cli.standalone.errors import ManifestError

DEFAULT_NAMESPACE = "default"
WORKLOAD_KINDS = ("Pod", "Deployment", "ReplicaSet", "StatefulSet", "Job")

MAX_PODS = 10_000  # per workload: every claim is built and written at once


@dataclass
class Plan:
    """The claims to create, in file order, and the objects that were not claims."""

    claims: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)  # claim key -> file stem
    pods: list[dict[str, Any]] = field(default_factory=list)  # with status.resourceClaimStatuses
    owners: dict[str, str] = field(default_factory=dict)  # generated claim key -> pod key


def files_of(path: Path) -> list[Path]:
    """`path` itself, or the YAML files of a folder in name order."""
    if path.is_dir():
        found = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml"))
        if not found:
            raise ManifestError(f"{path}: no .yaml files in the folder")
        return found
    if not path.is_file():
        raise ManifestError(f"{path}: no such file or folder")
    return [path]


def documents(path: Path) -> Iterator[dict[str, Any]]:
    try:
        loaded = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path}: cannot read: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ManifestError(f"{path}: not YAML: {str(exc).splitlines()[0]}") from exc
    for i, doc in enumerate(loaded):
        if doc is None:
            continue
        if not isinstance(doc, dict) or not isinstance(doc.get("kind"), str):
            raise ManifestError(f"{path}: document {i + 1} is not a Kubernetes object")
        if not isinstance(doc.get("metadata") or {}, dict):
            raise ManifestError(f"{path}: {doc['kind']}: metadata is not a mapping")
        yield doc


def _mapping(value: Any, where: str, doc: dict[str, Any], path: Path) -> dict[str, Any]:
    """`value` (absent is empty) as a mapping, else a `ManifestError` naming the object and
    field: a manifest of the wrong shape is the author's error to fix, not a traceback."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ManifestError(f"{path}: {doc['kind']} {_name(doc, path)!r}: {where} is not a mapping")
    return value


def _name(doc: dict[str, Any], path: Path) -> str:
    name = (doc.get("metadata") or {}).get("name")
    if not isinstance(name, str) or not name:
        raise ManifestError(f"{path}: a {doc['kind']} without metadata.name")
    return name


def _pod_spec(doc: dict[str, Any], path: Path) -> dict[str, Any]:
    spec = _mapping(doc.get("spec"), "spec", doc, path)
    if doc["kind"] == "Pod":
        return dict(spec)
    template = _mapping(spec.get("template"), "spec.template", doc, path)
    return dict(_mapping(template.get("spec"), "spec.template.spec", doc, path))


def _claim_refs(doc: dict[str, Any], path: Path) -> list[dict[str, Any]]:
    """The pod spec's `resourceClaims`, each a mapping."""
    refs = _pod_spec(doc, path).get("resourceClaims") or []
    if not isinstance(refs, list):
        raise ManifestError(
            f"{path}: {doc['kind']} {_name(doc, path)!r}: spec.resourceClaims is not a list"
        )
    for i, ref in enumerate(refs):
        _mapping(ref, f"spec.resourceClaims[{i}]", doc, path)
        template = ref.get("resourceClaimTemplateName")
        if template is not None and not isinstance(template, str):
            raise ManifestError(
                f"{path}: {doc['kind']} {_name(doc, path)!r}: "
                f"spec.resourceClaims[{i}].resourceClaimTemplateName is not a string"
            )
    return refs


def _pods(doc: dict[str, Any], path: Path) -> int:
    if doc["kind"] == "Pod":
        return 1
    field = "parallelism" if doc["kind"] == "Job" else "replicas"
    count: object = _mapping(doc.get("spec"), "spec", doc, path).get(field)
    if count is None:  # unset or null: Kubernetes defaults it to 1
        return 1
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ManifestError(
            f"{path}: {doc['kind']} {_name(doc, path)!r}: "
            f"spec.{field} is not a non-negative integer: {count!r}"
        )
    if count > MAX_PODS:
        # Kubernetes' controllers create pods a batch at a time; here every claim is built and
        # written at once, so a typo (`replicas: 1000000`) would hold the CLI and the store.
        raise ManifestError(
            f"{path}: {doc['kind']} {_name(doc, path)!r}: spec.{field} is {count}; standalone "
            f"mode expands at most {MAX_PODS} pods per workload"
        )
    return count


def _claim(doc: dict[str, Any], path: Path) -> dict[str, Any]:
    claim = copy.deepcopy(doc)
    if claim.get("metadata") is None:
        claim["metadata"] = {}
    meta = claim["metadata"]
    meta.setdefault("namespace", DEFAULT_NAMESPACE)
    if not claim.get("apiVersion"):  # as kubectl, which refuses to send such an object
        raise ManifestError(f"{path}: ResourceClaim {meta.get('name')!r}: apiVersion is not set")
    try:
        parse_resource_claim(claim)
    except ApiError as exc:
        raise ManifestError(f"{path}: ResourceClaim {meta.get('name')!r}: {exc}") from exc
    return claim


def _from_template(template: dict[str, Any], name: str, namespace: str) -> dict[str, Any]:
    spec = template.get("spec") or {}
    meta = copy.deepcopy(spec.get("metadata") or {})
    meta.update(name=name, namespace=namespace)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": copy.deepcopy(spec.get("spec") or {}),
    }


def plan_files(paths: list[Path]) -> Plan:
    plan = Plan()
    for path in paths:
        for file in files_of(path):
            _plan_file(file, plan)
    if not plan.claims:
        raise ManifestError(f"no ResourceClaims in {', '.join(str(p) for p in paths)}")
    return plan


def _plan_file(path: Path, plan: Plan) -> None:
    docs = list(documents(path))
    templates: dict[tuple[str, str], dict[str, Any]] = {}
    for doc in docs:
        if doc["kind"] == "ResourceClaimTemplate":
            try:
                parse_resource_claim_template(doc)
            except ApiError as exc:
                raise ManifestError(
                    f"{path}: ResourceClaimTemplate {_name(doc, path)!r}: {exc}"
                ) from exc
            ns = (doc.get("metadata") or {}).get("namespace") or DEFAULT_NAMESPACE
            templates[(ns, _name(doc, path))] = doc
    for doc in docs:
        kind = doc["kind"]
        if kind == "ResourceClaim":
            _add(plan, _claim(doc, path), path)
        elif kind in WORKLOAD_KINDS:
            ns = (doc.get("metadata") or {}).get("namespace") or DEFAULT_NAMESPACE
            for ref in _claim_refs(doc, path):
                template_name = ref.get("resourceClaimTemplateName")
                if not template_name:
                    continue
                template = templates.get((ns, template_name))
                if template is None:
                    raise ManifestError(
                        f"{path}: {kind} {_name(doc, path)!r} names ResourceClaimTemplate "
                        f"{template_name!r}, which is not in the file"
                    )
                for i in range(_pods(doc, path)):
                    claim = _from_template(template, f"{template_name}-{i}", ns)
                    _add(plan, _claim(claim, path), path)
            _record_pods(plan, doc, ns, path)
            plan.skipped.append(f"{kind}/{_name(doc, path)}")
        elif kind != "ResourceClaimTemplate":
            plan.skipped.append(f"{kind}/{_name(doc, path)}")


def _record_pods(plan: Plan, doc: dict[str, Any], namespace: str, path: Path) -> None:
    """The workload's pods that use claims, each with the claims generated for it."""
    spec = _pod_spec(doc, path)
    refs = _claim_refs(doc, path)
    if not refs:
        return
    name = _name(doc, path)
    for i in range(_pods(doc, path)):
        pod_name = name if doc["kind"] == "Pod" else f"{name}-{i}"
        generated = [
            {
                "name": str(r.get("name")),
                "resourceClaimName": f"{r['resourceClaimTemplateName']}-{i}",
            }
            for r in refs
            if r.get("resourceClaimTemplateName")
        ]
        for status in generated:
            plan.owners[f"{namespace}/{status['resourceClaimName']}"] = f"{namespace}/{pod_name}"
        pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod_name, "namespace": namespace},
            "spec": copy.deepcopy(spec),
        }
        if generated:
            pod["status"] = {"resourceClaimStatuses": generated}
        plan.pods.append(pod)


def _add(plan: Plan, claim: dict[str, Any], path: Path) -> None:
    key = f"{claim['metadata']['namespace']}/{claim['metadata']['name']}"
    if key in plan.sources:
        raise ManifestError(f"{path}: claim {key} is defined twice")
    plan.sources[key] = path.stem
    plan.claims.append(claim)


def demo_scenarios() -> Path:
    """The demo's own scenarios (beside the examples): a claim that cannot be placed."""
    return Path(str(resources.files("gpudra_cli.standalone") / "scenarios"))
