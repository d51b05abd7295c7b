"""Session fixtures for the deployment tests: one kubectl, each overlay rendered once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from deploy import kubectl, manifests


@pytest.fixture(scope="session")
def kubectl_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        return kubectl.find_kubectl(tmp_path_factory.mktemp("kubectl"))
    except kubectl.KubectlError as exc:
        pytest.fail(f"no usable kubectl for rendering the overlays: {exc}")


@pytest.fixture(scope="session")
def rendered(kubectl_binary: Path) -> dict[str, list[dict[str, Any]]]:
    """Objects of each overlay, by overlay name."""
    return {
        name: kubectl.kustomize(kubectl_binary, manifests.KUSTOMIZE / "overlays" / name)
        for name in manifests.OVERLAYS
    }
