"""Re-read of the exec-credential renewal after 401 (`CredentialRenewingClient`): the cases the
first tests left out."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from gpudra_kube.api_backend import ApiStore
from gpudra_kube.credentials_test import cert_plugin_kubeconfig, mtls_api, names, plugin_user
from gpudra_kube.resources import RESOURCE_CLAIMS
from gpudra_testing.claims import claim
from gpudra_testing.kubeapi import FakeKubeApi
from gpudra_testing.waiting import until

__all__ = ["mtls_api"]

# A plugin handing out a client certificate without an expiry: only a 401 renews it.
LASTING_CERT_PLUGIN = """
import json, pathlib, sys
folder = pathlib.Path(sys.argv[1])
which = (folder / "which").read_text()
with open(folder / "runs", "a", encoding="utf-8") as runs:
    runs.write("run\\n")
print(json.dumps({
    "apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
    "status": {
        "clientCertificateData": (folder / f"{which}.crt").read_text(),
        "clientKeyData": (folder / f"{which}.key").read_text(),
    },
}))
"""


async def test_a_client_certificate_answered_401_is_renewed_and_the_request_sent_again(
    mtls_api: FakeKubeApi, tmp_path: Path
) -> None:
    """A client certificate (no bearer token at all) revoked: the server answers 401, the plugin
    hands out another one, and the refused request is sent once more, presenting the new one,
    and without an `Authorization` header (there is no token to put in it)."""
    kubeconfig = cert_plugin_kubeconfig(mtls_api, tmp_path, LASTING_CERT_PLUGIN)
    store = await ApiStore.from_kubeconfig(str(kubeconfig))
    try:
        await store.create(RESOURCE_CLAIMS, claim("a"))
        (tmp_path / "which").write_text("b", encoding="utf-8")
        mtls_api.inject_error(401, reason="Unauthorized", method="GET")
        before = len(mtls_api.requests)
        assert await names(store) == ["a"]
        assert len(mtls_api.requests) == before + 2  # the 401, then the request sent again
    finally:
        await store.close()
    runs = (tmp_path / "runs").read_text(encoding="utf-8").splitlines()
    assert len(runs) == 2
    assert mtls_api.client_certificates[0] == "client-a"
    assert mtls_api.client_certificates[-1] == "client-b"


# The token plugin of credentials_test, slow while a file "slow" exists (an identity service
# taking its time), its token expired already: due for renewal at once.
SLOW_PLUGIN = """
import datetime, json, pathlib, sys, time
folder = pathlib.Path(sys.argv[1])
with open(folder / "runs", "a", encoding="utf-8") as runs:
    runs.write("run\\n")
while (folder / "slow").exists():
    time.sleep(0.05)
expiry = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=60)
print(json.dumps({
    "apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
    "status": {
        "token": (folder / "exec-token").read_text(encoding="utf-8"),
        "expirationTimestamp": expiry.strftime("%Y-%m-%dT%H:%M:%SZ"),
    },
}))
"""


async def test_a_renewal_cancelled_midway_keeps_the_expiry(
    kube_api: FakeKubeApi, tmp_path: Path
) -> None:
    """A request cancelled while the plugin renews its expiring token (a caller's deadline):
    the credential keeps its expiry, as after a failed run, so the next request renews it
    before it is sent; it was forgotten, and the token was used until the server refused it."""
    user = plugin_user(tmp_path, SLOW_PLUGIN)
    (tmp_path / "exec-token").write_text("one", encoding="utf-8")
    kubeconfig = kube_api.write_kubeconfig(tmp_path / "kubeconfig", user=user)
    kube_api.accept_tokens("one")
    store = await ApiStore.from_kubeconfig(str(kubeconfig))
    try:
        (tmp_path / "slow").touch()
        listing = asyncio.create_task(names(store))
        await until(
            lambda: len(runs(tmp_path)) == 2, "the renewal's start", timeout=10
        )  # the renewal has started
        listing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listing
        (tmp_path / "slow").unlink()
        (tmp_path / "exec-token").write_text("two", encoding="utf-8")
        kube_api.accept_tokens("two")
        before = len(kube_api.requests)
        assert await names(store) == []
        assert len(kube_api.requests) == before + 1  # renewed before sending: no 401 first
    finally:
        with contextlib.suppress(FileNotFoundError):
            (tmp_path / "slow").unlink()
        await store.close()


def runs(folder: Path) -> list[str]:
    path = folder / "runs"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []
