"""Where gpudra's manifests live, how to read them, and how to check them against Kubernetes.

Promises: paths are derived from this file, never from the current directory; `validate_strict`
checks an object against the strict (no unknown fields) OpenAPI schemas that `kubernetes-validate`
ships for each Kubernetes version in `SCHEMA_VERSIONS`, and returns readable problems instead of
raising; `pod_spec` / `containers` give the pod template of any workload kind.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

REPO = Path(__file__).resolve().parents[2]
KUSTOMIZE = REPO / "deploy" / "kustomize"
OVERLAYS = ("dev", "production")
EXAMPLES = REPO / "examples"
NAMESPACE = "gpudra"
DRIVER = "gpu.nvidia.com"

# The oldest Kubernetes gpudra supports and the newest schemas kubernetes-validate has.
SCHEMA_VERSIONS = ("1.34", kubernetes_validate.latest_version())

# API groups whose kinds kubernetes-validate has no schema for (CRDs); checked structurally.
CRD_GROUPS = frozenset({"cert-manager.io"})

CLUSTER_SCOPED = frozenset(
    {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "PriorityClass",
        "DeviceClass",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    }
)
NAMESPACED = frozenset(
    {
        "ServiceAccount",
        "ConfigMap",
        "Service",
        "Deployment",
        "DaemonSet",
        "StatefulSet",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "Role",
        "RoleBinding",
        "Certificate",
        "Issuer",
        "Pod",
        "Job",
        "ResourceClaim",
        "ResourceClaimTemplate",
    }
)
WORKLOAD_KINDS = frozenset({"Deployment", "DaemonSet", "StatefulSet", "Job"})


def load_documents(path: Path) -> list[dict[str, Any]]:
    """The non-empty YAML documents of `path`; anything but a mapping is an error."""
    docs = [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc is not None]
    for doc in docs:
        if not isinstance(doc, dict):
            raise ValueError(f"{path}: a document is not a mapping: {doc!r}")
    return docs


def api_group(obj: dict[str, Any]) -> str:
    """`rbac.authorization.k8s.io` for `rbac.authorization.k8s.io/v1`, `""` for `v1`."""
    api_version = str(obj.get("apiVersion", ""))
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


def ref(obj: dict[str, Any]) -> str:
    """`Kind/namespace/name` (namespace omitted when absent), for messages and test ids."""
    meta = obj.get("metadata", {})
    parts = [str(obj.get("kind")), meta.get("namespace"), str(meta.get("name"))]
    return "/".join(p for p in parts if p)


def validate_strict(obj: dict[str, Any], version: str) -> str | None:
    """None when `obj` is valid for Kubernetes `version` (strict schema), else the problem."""
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path)
        return f"{ref(obj)} @ {version}: {path}: {exc.message}"
    except kubernetes_validate.SchemaNotFoundError as exc:
        return f"{ref(obj)} @ {version}: {exc.message}"
    return None


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod spec of a Pod or of a workload's pod template."""
    if obj["kind"] == "Pod":
        spec: dict[str, Any] = obj["spec"]
        return spec
    template: dict[str, Any] = obj["spec"]["template"]["spec"]
    return template


def containers(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Init and regular containers of a Pod or workload."""
    spec = pod_spec(obj)
    yield from spec.get("initContainers", [])
    yield from spec.get("containers", [])


def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The objects of one kind, in render order."""
    return [o for o in objs if o["kind"] == kind]


def named(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """The one object of `kind` called `name`; KeyError naming it when absent."""
    for obj in objs:
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            return obj
    raise KeyError(f"no {kind}/{name} rendered")
