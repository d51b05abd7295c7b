"""Pytest fixtures for code that talks to Kubernetes: the HTTP-level fake API and a kubeconfig.

Load with `pytest_plugins = ["gpudra_testing.kube_fixtures"]` (or from the shared plugin).
- `kube_api`: a started `FakeKubeApi` that validates every write against the v1.34 schema.
- `kubeconfig`: the path of a kubeconfig whose current context is `kube_api`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from gpudra_testing.kubeapi import FakeKubeApi


@pytest_asyncio.fixture
async def kube_api() -> AsyncIterator[FakeKubeApi]:
    async with FakeKubeApi(validate_version="1.34", bookmark_interval=0.1) as api:
        yield api


@pytest.fixture
def kubeconfig(kube_api: FakeKubeApi, tmp_path: Path) -> Path:
    return kube_api.write_kubeconfig(tmp_path / "kubeconfig")
