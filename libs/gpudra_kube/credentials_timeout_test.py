"""An exec plugin that hangs while its credential is renewed (at expiry, or after a 401): the
run is bounded (`exec_plugin.RUN_TIMEOUT`), the request fails with an error naming the plugin,
requests that waited for that run share its failure instead of running the plugin again one
after another, and the next request tries again."""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gpudra_kube import exec_plugin
from gpudra_kube.api_backend import ApiStore
from gpudra_kube.credentials_reread_test import runs
from gpudra_kube.credentials_test import hand_out, names, plugin_user
from gpudra_kube.errors import UnavailableError
from gpudra_testing.kubeapi import FakeKubeApi

# Hands out the token in `exec-token`, hanging first while a file `hang` exists; with "expired"
# as its mode the token has expired already (renewed before every request), else it has no
# expiry (renewed after a 401 only).
HANGING_PLUGIN = """
import datetime, json, pathlib, sys, time
folder, mode = pathlib.Path(sys.argv[1]), sys.argv[2]
with open(folder / "runs", "a", encoding="utf-8") as runs:
    runs.write("run\\n")
while (folder / "hang").exists():
    time.sleep(0.05)
status = {"token": (folder / "exec-token").read_text(encoding="utf-8")}
if mode == "expired":
    expiry = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=60)
    status["expirationTimestamp"] = expiry.strftime("%Y-%m-%dT%H:%M:%SZ")
print(json.dumps({
    "apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": status,
}))
"""
# The bound while the plugin hangs: long enough for it to start and note its run on a loaded
# machine (it never answers, so the bound is what ends it).
BOUND = 5.0
ERROR = rf"exec: executable {sys.executable} did not answer within 5 s"


@contextlib.asynccontextmanager
async def hanging_store(
    kube_api: FakeKubeApi, tmp_path: Path, mode: str
) -> AsyncIterator[ApiStore]:
    user = plugin_user(tmp_path, HANGING_PLUGIN, mode)
    (tmp_path / "exec-token").write_text("one", encoding="utf-8")
    kube_api.accept_tokens("one")
    store = await ApiStore.from_kubeconfig(
        str(kube_api.write_kubeconfig(tmp_path / "kubeconfig", user=user))
    )
    try:
        yield store
    finally:
        with contextlib.suppress(FileNotFoundError):
            (tmp_path / "hang").unlink()
        await store.close()


async def test_a_renewal_at_expiry_that_hangs_fails_the_requests_once(
    kube_api: FakeKubeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with hanging_store(kube_api, tmp_path, "expired") as store:
        (tmp_path / "hang").touch()
        monkeypatch.setattr(exec_plugin, "RUN_TIMEOUT", BOUND)
        before = len(kube_api.requests)
        failures = await asyncio.gather(*(names(store) for _ in range(3)), return_exceptions=True)
        assert all(isinstance(f, UnavailableError) for f in failures), failures
        assert all(re.search(ERROR, str(f)) for f in failures), failures
        assert len(runs(tmp_path)) == 2  # the load, then one renewal the three requests shared
        assert len(kube_api.requests) == before  # nothing was sent with the expired token
        monkeypatch.undo()
        (tmp_path / "hang").unlink()
        hand_out(kube_api, tmp_path, "two")
        assert await names(store) == []  # the next request tries again
        assert len(kube_api.requests) == before + 1


async def test_a_renewal_after_401_that_hangs_fails_the_request(
    kube_api: FakeKubeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with hanging_store(kube_api, tmp_path, "lasting") as store:
        assert await names(store) == []
        (tmp_path / "hang").touch()
        monkeypatch.setattr(exec_plugin, "RUN_TIMEOUT", BOUND)
        kube_api.accept_tokens("two")  # "one" is revoked: 401
        with pytest.raises(UnavailableError, match=ERROR):
            await names(store)
        monkeypatch.undo()
        (tmp_path / "hang").unlink()
        hand_out(kube_api, tmp_path, "two")
        assert await names(store) == []  # the next 401 runs the plugin again
        assert len(runs(tmp_path)) == 3
