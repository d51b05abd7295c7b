from __future__ import annotations

from pathlib import Path

import yaml

from gpudra_alloc.builtin import builtin_class_documents
from gpudra_api import parse_device_class

DEPLOYED = Path(__file__).resolve().parents[2] / "deploy/kustomize/base/device-classes"


def test_builtin_classes_parse() -> None:
    names = [parse_device_class(doc).name for doc in builtin_class_documents()]
    assert names == ["gpu.nvidia.com", "mig.nvidia.com", "nvlink.gpu.nvidia.com"]


def test_builtin_classes_match_what_the_cluster_gets() -> None:
    # The Kustomize base adds extendedResourceName (coexistence with nvidia.com/gpu requests) and
    # a topology-aware class; the selectors of the shared classes must be the same.
    deployed = {
        doc["metadata"]["name"]: doc
        for doc in yaml.safe_load_all((DEPLOYED / "deviceclasses.yaml").read_text())
        if doc
    }
    for doc in builtin_class_documents():
        other = deployed[doc["metadata"]["name"]]
        assert other["spec"]["selectors"] == doc["spec"]["selectors"]
