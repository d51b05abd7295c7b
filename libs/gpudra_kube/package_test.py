"""The package's promise about imports: nothing under `gpudra_kube` but the API backend loads
kubernetes-asyncio; `ApiStore` and `load_api_client` still resolve from the package (on first use).
Each case runs in a fresh interpreter, since this one has imported everything already."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import gpudra_kube
from gpudra_kube import api_backend

_PROBE = """
import json, sys
exec(sys.argv[1])
print(json.dumps("kubernetes_asyncio" in sys.modules))
"""
_EVERY_MODULE_BUT_THE_API = (
    "import gpudra_kube, gpudra_kube.claims, gpudra_kube.consumers, gpudra_kube.errors, "
    "gpudra_kube.informer, gpudra_kube.kv_backend, gpudra_kube.recorder, "
    "gpudra_kube.resources, gpudra_kube.semantics, gpudra_kube.store"
)


def loads_the_client(code: str) -> bool:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    loaded: bool = json.loads(out.stdout.strip().splitlines()[-1])
    return loaded


@pytest.mark.parametrize(
    ("code", "loaded"),
    [
        pytest.param(
            _EVERY_MODULE_BUT_THE_API
            + "; from gpudra_kube import ClaimStore, KvStore, NotFoundError, informer",
            False,
            id="every-module-and-name-but-the-api",
        ),
        pytest.param("from gpudra_kube import ApiStore", True, id="api-store-loads-it"),
        pytest.param("from gpudra_kube import *", True, id="star-import"),
        pytest.param("import gpudra_kube.api_backend", True, id="the-backend-itself"),
    ],
)
def test_only_the_api_backend_loads_kubernetes_asyncio(code: str, loaded: bool) -> None:
    assert loads_the_client(code) is loaded


@pytest.mark.parametrize(
    "name",
    [pytest.param("ApiStore", id="ApiStore"), pytest.param("load_api_client", id="loader")],
)
def test_lazy_names_are_the_backends_own(name: str) -> None:
    assert getattr(gpudra_kube, name) is getattr(api_backend, name)
    assert name in dir(gpudra_kube)


def test_every_exported_name_resolves_and_unknown_ones_fail() -> None:
    assert len(set(gpudra_kube.__all__)) == len(gpudra_kube.__all__)
    for name in gpudra_kube.__all__:
        assert getattr(gpudra_kube, name) is not None
    with pytest.raises(AttributeError, match="module 'gpudra_kube' has no attribute 'ApiStores'"):
        _ = gpudra_kube.ApiStores  # type: ignore[attr-defined]
