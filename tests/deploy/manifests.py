"""Where gpudra's manifests live, how to read them, and how to check them against Kubernetes.

Promises: paths are derived from this file, never from the current directory; `validate_strict`
checks an object against the strict (no unknown fields) OpenAPI schemas that `kubernetes-validate`
ships for each Kubernetes version in `SCHEMA_VERSIONS`, and returns readable problems instead of
raising; `pod_spec` / `containers` give the pod template of any workload kind.

`validate_strict` answers what `kubernetes_validate.validate(obj, version, strict=True)` answers
(a test holds them to it) but builds each schema's validator once: the library re-reads its
1.5 MB definitions file on every call, which made schema checks most of this suite's run time.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import referencing
import yaml
from kubernetes_validate import utils as kv_utils

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


def _minor(version: str) -> tuple[int, int]:
    """(1, 34) for "1.34", "v1.34.0", "1.34.0-local"."""
    match = re.match(r"v?(\d+)\.(\d+)", version)
    if match is None:
        raise ValueError(f"not a Kubernetes version: {version!r}")
    return int(match.group(1)), int(match.group(2))


def _schema_dir(version: str) -> str:
    """kubernetes-validate's strict schema folder for `version`: the newest not newer than it."""
    wanted = _minor(version)
    candidates = [v for v in kv_utils.all_versions() if _minor(v) <= wanted]
    if not candidates:
        raise ValueError(f"kubernetes-validate has no schemas for Kubernetes {version}")
    return f"v{candidates[-1]}-local-strict"


@functools.cache
def _definitions(schema_dir: str) -> referencing.Resource[Any]:
    contents = kv_utils.schema_contents(
        f"kubernetes-json-schema/{schema_dir}/_definitions.json", ""
    )
    return referencing.Resource.from_contents(contents)


@functools.cache
def _validator(schema_dir: str, kind: str, api_version: str) -> jsonschema.Draft202012Validator:
    """The validator of one kind, built as kubernetes-validate builds it; KeyError if no schema."""
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    name = f"kubernetes-json-schema/{schema_dir}/{kind.lower()}-{group_version}.json"
    try:
        schema = kv_utils.schema_contents(name, "")
    except FileNotFoundError as exc:
        raise KeyError(name) from exc
    registry: referencing.Registry[Any] = referencing.Resource.from_contents(schema) @ (
        referencing.Registry()
    )
    registry = _definitions(schema_dir) @ registry
    return jsonschema.Draft202012Validator(schema, registry=registry)


def validate_strict(obj: dict[str, Any], version: str) -> str | None:
    """None when `obj` is valid for Kubernetes `version` (strict schema), else the problem."""
    try:
        validator = _validator(_schema_dir(version), str(obj["kind"]), str(obj["apiVersion"]))
    except KeyError:
        return f"{ref(obj)} @ {version}: no schema for {obj['apiVersion']} {obj['kind']}"
    error = next(iter(validator.iter_errors(obj)), None)
    if error is None:
        return None
    path = ".".join(str(p) for p in error.path)
    return f"{ref(obj)} @ {version}: {path}: {error.message}"


def validate_with_library(obj: dict[str, Any], version: str) -> str | None:
    """The same question asked of `kubernetes_validate.validate` itself (slow; for cross-checks)."""
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path)
        return f"{ref(obj)} @ {version}: {path}: {exc.message}"
    except kubernetes_validate.SchemaNotFoundError:
        return f"{ref(obj)} @ {version}: no schema for {obj['apiVersion']} {obj['kind']}"
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
