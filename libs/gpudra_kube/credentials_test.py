"""Credentials that rotate while a client runs: the fake API accepts only the current token (as
the API server stops accepting an expired one), and the client must follow the rotation."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.config import incluster_config

from gpudra_kube.api_backend import ApiStore, load_api_client
from gpudra_kube.errors import ForbiddenError, UnavailableError
from gpudra_kube.kubeconfig_test import API_CA, API_CERT, API_KEY, server_context
from gpudra_kube.resources import RESOURCE_CLAIMS
from gpudra_testing.claims import claim
from gpudra_testing.kubeapi import FakeKubeApi

# The CA bundle a pod mounts beside its token; any parseable certificate will do here (the
# client builds its TLS context from it at start, and the fake speaks plain HTTP). Self-signed,
# made with `openssl req -x509 -newkey ec ... -subj /CN=gpudra-test-ca`; holds no secret.
CA_PEM = """\
-----BEGIN CERTIFICATE-----
MIIBiTCCAS+gAwIBAgIUfS6VGKsmkq6dYsNF+xhbZDLaybIwCgYIKoZIzj0EAwIw
GTEXMBUGA1UEAwwOZ3B1ZHJhLXRlc3QtY2EwIBcNMjYxMTI5MjA1NTA1WhgPMjEy
NjExMDUyMDU1MDVaMBkxFzAVBgNVBAMMDmdwdWRyYS10ZXN0LWNhMFkwEwYHKoZI
zj0CAQYIKoZIzj0DAQcDQgAEn/JmtVFOgogP2Hv1tO4SHueIsS0oVY8bmurkYjtp
cMJom5HiWLY6qiqNjDRaPgX8plFYgWsfZlWD96I31Hl+mqNTMFEwHQYDVR0OBBYE
FEgtyCYzguX2ATkzxnrBCHcIpIL3MB8GA1UdIwQYMBaAFEgtyCYzguX2ATkzxnrB
CHcIpIL3MA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSAAwRQIhAN+NZCzZ
AoG5cyH9MW9MIqtKsEc4nxZrARSr8DxrOPg7AiBEwzo+zmrQ960HPpG5bx4UDm/Z
Ns8jG5kFEb2zzRTRFw==
-----END CERTIFICATE-----
"""


def rotate(path: Path, token: str) -> None:
    """Replace the token file as the kubelet does: a new file swapped in, never a partial one."""
    new = path.with_name(path.name + ".new")
    new.write_text(token, encoding="utf-8")
    os.replace(new, path)


async def names(store: ApiStore) -> list[str]:
    return [o["metadata"]["name"] for o in (await store.list(RESOURCE_CLAIMS)).items]


async def test_a_rotated_token_file_is_read_again(kube_api: FakeKubeApi, tmp_path: Path) -> None:
    """A kubeconfig naming a `tokenFile` (a projected service-account token): the kubelet
    rotates the file and the old token expires; the client must send the new one."""
    token = tmp_path / "token"
    token.write_text("first", encoding="utf-8")
    # Relative to the kubeconfig's folder, as kubectl resolves it.
    kubeconfig = kube_api.write_kubeconfig(tmp_path / "kubeconfig", user={"tokenFile": "token"})
    kube_api.accept_tokens("first")
    store = await ApiStore.from_kubeconfig(str(kubeconfig))
    try:
        await store.create(RESOURCE_CLAIMS, claim("a"))
        for rotated in ("second", "third"):
            rotate(token, rotated)
            kube_api.accept_tokens(rotated)
            assert await names(store) == ["a"]
    finally:
        await store.close()


EXEC_PLUGIN = """
import datetime, json, pathlib, sys
folder, mode = pathlib.Path(sys.argv[1]), sys.argv[2]
with open(folder / "runs", "a", encoding="utf-8") as runs:
    runs.write("run\\n")
if (folder / "fail").exists():
    sys.exit("plugin: the identity service is down")
status = {"token": (folder / "exec-token").read_text(encoding="utf-8")}
if mode in ("expiring", "expired"):
    # "expiring": valid a minute more (within kubernetes-asyncio's 5 minutes of skew);
    # "expired": expired already, so due for renewal at once.
    ahead = datetime.timedelta(seconds=60 if mode == "expiring" else -60)
    expiry = datetime.datetime.now(datetime.UTC) + ahead
    status["expirationTimestamp"] = expiry.strftime("%Y-%m-%dT%H:%M:%SZ")
print(json.dumps({
    "apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": status,
}))
"""


def plugin_user(folder: Path, script: str, *args: str) -> dict[str, Any]:
    """A kubeconfig user whose exec plugin is the Python `script` (written to
    `folder / "plugin.py"`), run with `folder` and `args` as its arguments."""
    plugin = folder / "plugin.py"
    plugin.write_text(script, encoding="utf-8")
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(plugin), str(folder), *args],
            "interactiveMode": "Never",
        }
    }


def exec_user(tmp_path: Path, mode: str) -> dict[str, Any]:
    return plugin_user(tmp_path, EXEC_PLUGIN, mode)


def exec_kubeconfig(kube_api: FakeKubeApi, tmp_path: Path, mode: str) -> Path:
    """A kubeconfig whose user runs the test plugin in `mode`; it hands out "one", accepted."""
    (tmp_path / "exec-token").write_text("one", encoding="utf-8")
    kubeconfig = kube_api.write_kubeconfig(tmp_path / "kubeconfig", user=exec_user(tmp_path, mode))
    kube_api.accept_tokens("one")
    return kubeconfig


@contextlib.asynccontextmanager
async def exec_store(kube_api: FakeKubeApi, tmp_path: Path, mode: str) -> AsyncIterator[ApiStore]:
    """A store on `exec_kubeconfig`, closed on the way out."""
    store = await ApiStore.from_kubeconfig(str(exec_kubeconfig(kube_api, tmp_path, mode)))
    try:
        yield store
    finally:
        await store.close()


def hand_out(kube_api: FakeKubeApi, tmp_path: Path, token: str) -> None:
    """The credential rotates: the plugin hands out `token` from now on, and only it is accepted."""
    (tmp_path / "exec-token").write_text(token, encoding="utf-8")
    kube_api.accept_tokens(token)


async def test_an_expiring_exec_credential_is_renewed(
    kube_api: FakeKubeApi, tmp_path: Path
) -> None:
    """An exec plugin (EKS `aws eks get-token`, GKE's auth plugin) hands out tokens that expire
    (EKS: after 15 minutes); the client must run it again when the token is due, not once."""
    async with exec_store(kube_api, tmp_path, "expired") as store:
        await store.create(RESOURCE_CLAIMS, claim("a"))
        hand_out(kube_api, tmp_path, "two")
        assert await names(store) == ["a"]


async def test_an_exec_credential_without_expiry_is_kept(
    kube_api: FakeKubeApi, tmp_path: Path
) -> None:
    """A token without `expirationTimestamp` is kept (as client-go keeps it): the plugin is not
    started again for every request."""
    async with exec_store(kube_api, tmp_path, "lasting") as store:
        await store.create(RESOURCE_CLAIMS, claim("a"))
        for _ in range(3):
            assert await names(store) == ["a"]
    assert (tmp_path / "runs").read_text(encoding="utf-8").splitlines() == ["run"]


async def test_a_token_expiring_within_minutes_is_kept_until_it_expires(
    kube_api: FakeKubeApi, tmp_path: Path
) -> None:
    """A plugin whose tokens expire a minute after it hands them out: client-go keeps a
    credential until its expiry has passed (then, or after a 401, it runs the plugin again), so
    the plugin runs once here; renewing 5 minutes early ran it for every request (a stampede on
    the identity service) until the token expired."""
    async with exec_store(kube_api, tmp_path, "expiring") as store:
        await store.create(RESOURCE_CLAIMS, claim("a"))
        for _ in range(3):
            assert await names(store) == ["a"]
    assert plugin_runs(tmp_path) == 1


async def test_in_cluster_config_follows_the_service_account_token(
    kube_api: FakeKubeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a pod (no kubeconfig) the kubelet rotates the mounted service-account token;
    kubernetes-asyncio's in-cluster loader re-reads it (at most a minute late; the kubelet
    rotates at 80% of the token's life, long before it expires). Pins that our client keeps
    that hook: the refresh period is set to zero here so the test need not wait a minute."""
    token = tmp_path / "token"
    token.write_text("first", encoding="utf-8")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    ca = tmp_path / "ca.crt"
    ca.write_text(CA_PEM, encoding="ascii")
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    monkeypatch.setattr(incluster_config, "TOKEN_REFRESH_PERIOD", datetime.timedelta(0))
    client = await load_api_client()
    # In a pod the host is https://$KUBERNETES_SERVICE_HOST; the fake speaks plain HTTP.
    assert client.configuration.host == "https://127.0.0.1:443"
    client.configuration.host = kube_api.url
    kube_api.accept_tokens("first")
    store = ApiStore(client)
    try:
        await store.create(RESOURCE_CLAIMS, claim("a"))
        rotate(token, "second")
        kube_api.accept_tokens("second")
        assert await names(store) == ["a"]
    finally:
        await store.close()


def test_the_exec_plugin_output_is_json(tmp_path: Path) -> None:
    """The test plugin itself: one run prints an ExecCredential (guards the tests above)."""
    user = exec_user(tmp_path, "expiring")["exec"]
    (tmp_path / "exec-token").write_text("t", encoding="utf-8")
    out = subprocess.run([user["command"], *user["args"]], capture_output=True, check=True)
    status = json.loads(out.stdout)["status"]
    assert status["token"] == "t"
    assert status["expirationTimestamp"].endswith("Z")


def plugin_runs(tmp_path: Path) -> int:
    return len((tmp_path / "runs").read_text(encoding="utf-8").splitlines())


async def test_an_exec_credential_without_expiry_is_renewed_after_401(
    kube_api: FakeKubeApi, tmp_path: Path
) -> None:
    """A token without `expirationTimestamp` is revoked or rotated (an IAM session ended): the
    server answers 401. As client-go does, the plugin runs again; the request that got the 401
    is sent again with the new token, and later ones use it without running the plugin."""
    async with exec_store(kube_api, tmp_path, "lasting") as store:
        await store.create(RESOURCE_CLAIMS, claim("a"))
        hand_out(kube_api, tmp_path, "two")
        assert await names(store) == ["a"]
        assert plugin_runs(tmp_path) == 2
        # A write whose first attempt got 401 is written once (401 comes before admission).
        await store.create(RESOURCE_CLAIMS, claim("b"))
        assert await names(store) == ["a", "b"]
        assert plugin_runs(tmp_path) == 2


async def test_concurrent_401s_share_one_plugin_run(kube_api: FakeKubeApi, tmp_path: Path) -> None:
    async with exec_store(kube_api, tmp_path, "lasting") as store:
        await store.create(RESOURCE_CLAIMS, claim("a"))
        hand_out(kube_api, tmp_path, "two")
        results = await asyncio.gather(*(names(store) for _ in range(6)))
        assert results == [["a"]] * 6
        assert plugin_runs(tmp_path) == 2


async def test_a_watch_answered_401_starts_with_the_renewed_credential(
    kube_api: FakeKubeApi, tmp_path: Path
) -> None:
    async with exec_store(kube_api, tmp_path, "lasting") as store:
        await store.create(RESOURCE_CLAIMS, claim("a"))
        hand_out(kube_api, tmp_path, "two")
        # The fake ends the watch after its one second; the ADDED event comes first.
        seen = [
            ev.object["metadata"].get("name")
            async for ev in store.watch(RESOURCE_CLAIMS, resource_version="0", timeout=1)
        ]
        assert seen[0] == "a"
        assert plugin_runs(tmp_path) == 2


async def test_a_revoked_credential_the_plugin_hands_out_again_is_not_retried(
    kube_api: FakeKubeApi, tmp_path: Path
) -> None:
    """The plugin returns the same (revoked) token: the 401 stands (`ForbiddenError`), the
    request is not sent again, and the plugin runs once per failed credential, not in a loop."""
    async with exec_store(kube_api, tmp_path, "lasting") as store:
        await store.create(RESOURCE_CLAIMS, claim("a"))
        kube_api.accept_tokens("other")
        before = len(kube_api.requests)
        with pytest.raises(ForbiddenError):
            await names(store)
        assert len(kube_api.requests) == before + 1
        assert plugin_runs(tmp_path) == 2


async def test_a_typed_call_answered_401_is_sent_again_with_the_renewed_credential(
    kube_api: FakeKubeApi, tmp_path: Path
) -> None:
    """The client's own (preloaded, typed) calls raise on a 401 instead of returning it."""
    kubeconfig = exec_kubeconfig(kube_api, tmp_path, "lasting")
    client = await load_api_client(str(kubeconfig))
    try:
        api = k8s.ResourceV1Api(client)
        await api.list_device_class()
        hand_out(kube_api, tmp_path, "two")
        classes = await api.list_device_class()
        assert classes.items == []
        assert plugin_runs(tmp_path) == 2
    finally:
        await client.close()


# Client certificates client-a and client-b, signed by kubeconfig_test's API_CA (openssl, EC
# P-256, extendedKeyUsage clientAuth), and their keys; hold no secret.
CLIENT_CERTS = {
    "a": (
        """\
-----BEGIN CERTIFICATE-----
MIIBozCCAUmgAwIBAgIUTvguWaQ5opei4mhOGWhqQPycH9owCgYIKoZIzj0EAwIw
HTEbMBkGA1UEAwwSZ3B1ZHJhLXRlc3QtYXBpLWNhMCAXDTI2MTEyOTIzNTQxNVoY
DzIxMjYxMTA1MjM1NDE1WjATMREwDwYDVQQDDAhjbGllbnQtYTBZMBMGByqGSM49
AgEGCCqGSM49AwEHA0IABFBn0L0VGBH2BrFB/yEAAslkNQ5azdMzNXw7a9AwoXFY
FK6ir8tpXDrCUMFk1jzO8f7S6kbci1u01g7F49n671+jbzBtMAkGA1UdEwQCMAAw
CwYDVR0PBAQDAgeAMBMGA1UdJQQMMAoGCCsGAQUFBwMCMB0GA1UdDgQWBBRxo/Sr
rad/Zp8e6mAah2VxNjsWczAfBgNVHSMEGDAWgBSr0oBhkHxJjCBOXOtkU8pGYwRg
6TAKBggqhkjOPQQDAgNIADBFAiAWkuyX463y1R/dtB2sVA0WB4AFzvDbQpLKDVCk
HgZzwQIhAMIYD/IzZcjs1gmD8ctgq0EFn4CkmM2Tijs7vnD8pSfH
-----END CERTIFICATE-----
""",
        """\
-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgjtS1AI26UoziBepq
4iQv1TIlsQUAaay1EhS7UET0J+KhRANCAARQZ9C9FRgR9gaxQf8hAALJZDUOWs3T
MzV8O2vQMKFxWBSuoq/LaVw6wlDBZNY8zvH+0upG3ItbtNYOxePZ+u9f
-----END PRIVATE KEY-----
""",
    ),
    "b": (
        """\
-----BEGIN CERTIFICATE-----
MIIBozCCAUmgAwIBAgIUTvguWaQ5opei4mhOGWhqQPycH9swCgYIKoZIzj0EAwIw
HTEbMBkGA1UEAwwSZ3B1ZHJhLXRlc3QtYXBpLWNhMCAXDTI2MTEyOTIzNTQxNVoY
DzIxMjYxMTA1MjM1NDE1WjATMREwDwYDVQQDDAhjbGllbnQtYjBZMBMGByqGSM49
AgEGCCqGSM49AwEHA0IABEJ1t1Dm5Us7NEgv5moxEIYCHMn4pX4T9dS4Tb75gQbj
+SKZ8tkuMEHeR6BvkPuZRcmX6cFcyaHdsAmIp00CP1yjbzBtMAkGA1UdEwQCMAAw
CwYDVR0PBAQDAgeAMBMGA1UdJQQMMAoGCCsGAQUFBwMCMB0GA1UdDgQWBBQN7ETa
hIwkF1lBWJX96ZTsRkm+/zAfBgNVHSMEGDAWgBSr0oBhkHxJjCBOXOtkU8pGYwRg
6TAKBggqhkjOPQQDAgNIADBFAiBcsS3Xm46ZUmqJZdHX+D4XDNcGTMQL9Aq4PDhN
uMMhHwIhAKNmIcUCY5bxoXrVKuqgF9P/zIiTyOlln21DCGkGM3iS
-----END CERTIFICATE-----
""",
        """\
-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgwVfj6IiuRlYl7zQK
VUbRf0utl39ywqUfp5RDqtDr/mehRANCAARCdbdQ5uVLOzRIL+ZqMRCGAhzJ+KV+
E/XUuE2++YEG4/kimfLZLjBB3kegb5D7mUXJl+nBXMmh3bAJiKdNAj9c
-----END PRIVATE KEY-----
""",
    ),
}

CERT_PLUGIN = """
import datetime, json, pathlib, sys
folder = pathlib.Path(sys.argv[1])
which = (folder / "which").read_text()
expiry = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=60)  # due at once
print(json.dumps({
    "apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
    "status": {
        "clientCertificateData": (folder / f"{which}.crt").read_text(),
        "clientKeyData": (folder / f"{which}.key").read_text(),
        "expirationTimestamp": expiry.strftime("%Y-%m-%dT%H:%M:%SZ"),
    },
}))
"""


@pytest_asyncio.fixture
async def mtls_api(tmp_path: Path) -> AsyncIterator[FakeKubeApi]:
    """The fake API over TLS (as api.example), requiring a client certificate from API_CA."""
    context = server_context(tmp_path, "server", API_CERT, API_KEY, client_ca=API_CA)
    async with FakeKubeApi(ssl_context=context) as api:
        yield api


def cert_plugin_kubeconfig(mtls_api: FakeKubeApi, tmp_path: Path, plugin: str) -> Path:
    """A kubeconfig whose user is the exec `plugin` handing out the client certificate named in
    `tmp_path / "which"` ("a" at first) of `CLIENT_CERTS`, for `mtls_api`."""
    (tmp_path / "which").write_text("a", encoding="utf-8")
    return tls_kubeconfig(mtls_api, tmp_path, plugin_user(tmp_path, plugin))


def tls_kubeconfig(api: FakeKubeApi, folder: Path, user: dict[str, Any]) -> Path:
    """A kubeconfig in `folder` for `api` over TLS (trusting API_CA, as api.example) with `user`;
    each of `CLIENT_CERTS` is written beside it (`<name>.crt`, `<name>.key`) for a plugin to
    hand out."""
    for name, (cert, key) in CLIENT_CERTS.items():
        (folder / f"{name}.crt").write_text(cert, encoding="ascii")
        (folder / f"{name}.key").write_text(key, encoding="ascii")
    (folder / "ca.crt").write_text(API_CA, encoding="ascii")
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {
                    "server": api.url,
                    "certificate-authority": "ca.crt",
                    "tls-server-name": "api.example",
                },
            }
        ],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    (folder / "kubeconfig").write_text(json.dumps(config), encoding="utf-8")
    return folder / "kubeconfig"


async def test_an_exec_client_certificate_is_rotated_when_it_expires(
    mtls_api: FakeKubeApi, tmp_path: Path
) -> None:
    """An exec plugin that hands out client certificates (with an expiry): when it is renewed,
    the new certificate must be the one presented (client-go rebuilds its TLS connections);
    kubernetes-asyncio built its TLS context once and kept presenting the expired one."""
    kubeconfig = cert_plugin_kubeconfig(mtls_api, tmp_path, CERT_PLUGIN)
    store = await ApiStore.from_kubeconfig(str(kubeconfig))
    try:
        await store.create(RESOURCE_CLAIMS, claim("a"))
        (tmp_path / "which").write_text("b", encoding="utf-8")
        assert await names(store) == ["a"]
    finally:
        await store.close()
    assert mtls_api.client_certificates == ["client-a", "client-b"]


async def test_a_failed_renewal_fails_the_request_and_is_tried_again(
    kube_api: FakeKubeApi, tmp_path: Path
) -> None:
    """A renewal at expiry that fails (the plugin's backend is down a moment) fails the request
    with the plugin's error, sending nothing (client-go's `getCreds`); the credential keeps its
    expiry, so the next request tries again, rather than waiting for a 401."""
    async with exec_store(kube_api, tmp_path, "expired") as store:
        (tmp_path / "fail").touch()
        before = len(kube_api.requests)
        with pytest.raises(UnavailableError, match="the identity service is down"):
            await names(store)
        assert len(kube_api.requests) == before
        (tmp_path / "fail").unlink()
        hand_out(kube_api, tmp_path, "two")
        before = len(kube_api.requests)
        assert await names(store) == []
        assert len(kube_api.requests) == before + 1  # renewed before sending: no 401 first
