"""The DeviceClasses gpudra knows without being told: `gpu.nvidia.com` (full GPUs) and
`mig.nvidia.com` (MIG devices) and `nvlink.gpu.nvidia.com` (full GPUs in an NVLink domain), as
resource.k8s.io/v1 documents.

One copy for every consumer that runs without a cluster's classes (the allocator service's default,
`gpudra explain`); the Kustomize base ships the same classes (plus `extendedResourceName`), and
`builtin_test.py` keeps the two in step.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml

from gpudra_alloc.errors import AllocationError


def builtin_class_documents() -> list[dict[str, Any]]:
    """The built-in DeviceClasses as v1 JSON-like documents."""
    text = resources.files("gpudra_alloc").joinpath("deviceclasses.yaml").read_text("utf-8")
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:  # a packaging defect, not user input
        raise AllocationError(f"built-in DeviceClasses: {exc}") from exc
    return docs
