"""Object identity shared by every kind: names for error messages, apiVersion/kind checks."""

from __future__ import annotations

from typing import Any

from gpudra_api._fields import Field


def object_name(data: Any) -> str:
    if isinstance(data, dict):
        meta = data.get("metadata")
        if isinstance(meta, dict):
            name = meta.get("name")
            if isinstance(name, str) and name:
                namespace = meta.get("namespace")
                if isinstance(namespace, str) and namespace:
                    return f"{namespace}/{name}"
                return name
    return "<unnamed>"


def check_kind(top: Field, kind: str) -> None:
    top.check(isinstance(top.value, dict), "must be a JSON object")
    name = top.child("metadata").child("name")
    name.req_str()
    api_version = top.child("apiVersion").string()
    if api_version is not None:
        top.child("apiVersion").check(
            api_version == "resource.k8s.io/v1", f"{api_version!r} is not resource.k8s.io/v1"
        )
    found = top.child("kind").string()
    if found is not None:
        top.child("kind").check(found == kind, f"is {found!r}, expected {kind!r}")
