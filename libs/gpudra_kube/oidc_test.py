"""The oidc auth-provider against a fake issuer: its token refresh, where the rotated tokens
are saved, and how the issuer is verified (TLS, as client-go verifies it)."""

from __future__ import annotations

import base64
import json
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from aiohttp import web
from kubernetes_asyncio.config import kube_config

from gpudra_kube.api_backend import ApiStore, load_api_client
from gpudra_kube.errors import InvalidObjectError
from gpudra_kube.kubeconfig_test import API_CA, kubeconfig, list_claims, server_context
from gpudra_kube.resources import RESOURCE_CLAIMS
from gpudra_testing.kubeapi import FakeKubeApi

# A serving certificate for IP 127.0.0.1, signed by kubeconfig_test's API_CA (openssl, EC
# P-256, subjectAltName IP:127.0.0.1); holds no secret.
ISSUER_CERT = """\
-----BEGIN CERTIFICATE-----
MIIBtjCCAVygAwIBAgIUTvguWaQ5opei4mhOGWhqQPycH9kwCgYIKoZIzj0EAwIw
HTEbMBkGA1UEAwwSZ3B1ZHJhLXRlc3QtYXBpLWNhMCAXDTI2MTEyOTIzNTEwNloY
DzIxMjYxMTA1MjM1MTA2WjAUMRIwEAYDVQQDDAkxMjcuMC4wLjEwWTATBgcqhkjO
PQIBBggqhkjOPQMBBwNCAAS8I5f8cIoySwehbV+rsr2JK8IfclDVmSPvSQaNZD5o
kmjX+1d/aQZnnQNxtroezRnukT8PgEZlc8C1eeIsgGG5o4GAMH4wDwYDVR0RBAgw
BocEfwAAATAJBgNVHRMEAjAAMAsGA1UdDwQEAwIHgDATBgNVHSUEDDAKBggrBgEF
BQcDATAdBgNVHQ4EFgQU/I3fq+1/cbA0wGq+XU2XmTlk844wHwYDVR0jBBgwFoAU
q9KAYZB8SYwgTlzrZFPKRmMEYOkwCgYIKoZIzj0EAwIDSAAwRQIhAJw7rbtW04+h
ktWJH/aVPFCYmkff4bUFYL44H2tSPohsAiA1wxjSdUbZcw0eZWNEVca0g+0l7izN
uqtiKChAd/QDnA==
-----END CERTIFICATE-----
"""
ISSUER_KEY = """\
-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgJF+iLPbtWRWg+wxV
szKJq1yvKozex1qj5pfal1pHqnOhRANCAAS8I5f8cIoySwehbV+rsr2JK8IfclDV
mSPvSQaNZD5okmjX+1d/aQZnnQNxtroezRnukT8PgEZlc8C1eeIsgGG5
-----END PRIVATE KEY-----
"""
FAR_FUTURE = 4102444800  # 2100-01-01, as a JWT `exp`


def jwt(claims: dict[str, Any]) -> str:
    """An unsigned JWT (the client only reads its expiry; the fake API compares strings)."""

    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none'})}.{part(claims)}.sig"


@dataclass
class Issuer:
    url: str = ""
    refreshed: list[str] = field(default_factory=list)  # the refresh tokens it was sent
    issued: list[str] = field(default_factory=list)  # the id-tokens it handed out


async def serve_issuer(tls: ssl.SSLContext | None) -> tuple[Issuer, web.AppRunner]:
    issuer = Issuer()
    app = web.Application()

    async def discovery(request: web.Request) -> web.Response:
        return web.json_response({"token_endpoint": f"{issuer.url}/token"})

    async def token(request: web.Request) -> web.Response:
        form = await request.post()
        issuer.refreshed.append(str(form["refresh_token"]))
        issuer.issued.append(jwt({"exp": FAR_FUTURE, "n": len(issuer.issued)}))
        rotated = f"refresh-{len(issuer.refreshed)}"
        return web.json_response({"id_token": issuer.issued[-1], "refresh_token": rotated})

    app.router.add_get("/.well-known/openid-configuration", discovery)
    app.router.add_post("/token", token)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    server = getattr(site, "_server", None)
    port = server.sockets[0].getsockname()[1] if server and server.sockets else 0
    issuer.url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    return issuer, runner


@pytest_asyncio.fixture
async def issuer() -> AsyncIterator[Issuer]:
    served, runner = await serve_issuer(None)
    try:
        yield served
    finally:
        await runner.cleanup()


@pytest_asyncio.fixture
async def tls_issuer(tmp_path: Path) -> AsyncIterator[Issuer]:
    served, runner = await serve_issuer(server_context(tmp_path, "issuer", ISSUER_CERT, ISSUER_KEY))
    try:
        yield served
    finally:
        await runner.cleanup()


def oidc_kubeconfig(path: Path, server: str, issuer: str, **config: Any) -> Path:
    oidc = {
        "name": "oidc",
        "config": {
            "client-id": "gpudra",
            "client-secret": "s",
            "idp-issuer-url": issuer,
            "refresh-token": "refresh-0",
            **config,
        },
    }
    return kubeconfig(
        path,
        clusters={"c": {"server": server}},
        users={"me": {"auth-provider": oidc}},
        contexts={"x": ("c", "me")},
        current="x",
    )


async def test_a_refreshed_oidc_token_is_written_back_to_its_kubeconfig(
    kube_api: FakeKubeApi, tmp_path: Path, issuer: Issuer
) -> None:
    """An oidc auth-provider's refresh rotates its refresh token; the new one must be saved in
    the file the user came from, or the next start presents a spent refresh token."""
    path = oidc_kubeconfig(tmp_path / "config", kube_api.url, issuer.url)
    kube_api.accept_tokens(jwt({"exp": FAR_FUTURE, "n": 0}))
    await list_claims(path)
    assert issuer.refreshed == ["refresh-0"]
    saved = yaml.safe_load(path.read_text(encoding="utf-8"))
    config = saved["users"][0]["user"]["auth-provider"]["config"]
    assert config["refresh-token"] == "refresh-1"
    assert config["id-token"] == issuer.issued[0]
    assert saved["clusters"][0]["cluster"]["server"] == kube_api.url  # the rest kept


async def test_an_issuer_the_client_cannot_verify_gets_no_refresh_token(
    kube_api: FakeKubeApi, tmp_path: Path, tls_issuer: Issuer
) -> None:
    """No idp-certificate-authority: the issuer is checked against the system roots, which do
    not know this one. kubernetes-asyncio skipped verification and sent the refresh token."""
    path = oidc_kubeconfig(tmp_path / "config", kube_api.url, tls_issuer.url)
    with pytest.raises(InvalidObjectError, match="oidc: refreshing the token at .* failed"):
        await list_claims(path)
    assert tls_issuer.refreshed == []


@pytest.mark.parametrize(
    "ca",
    [
        pytest.param(
            {"idp-certificate-authority-data": base64.b64encode(API_CA.encode()).decode()},
            id="ca-data",
        ),
        pytest.param({"idp-certificate-authority": "issuer-ca.crt"}, id="ca-file"),
    ],
)
async def test_an_issuer_verified_by_its_certificate_authority_refreshes(
    kube_api: FakeKubeApi, tmp_path: Path, tls_issuer: Issuer, ca: dict[str, str]
) -> None:
    (tmp_path / "issuer-ca.crt").write_text(API_CA, encoding="ascii")
    if "idp-certificate-authority" in ca:  # client-go reads the file as given: make it absolute
        ca = {"idp-certificate-authority": str(tmp_path / ca["idp-certificate-authority"])}
    path = oidc_kubeconfig(tmp_path / "config", kube_api.url, tls_issuer.url, **ca)
    kube_api.accept_tokens(jwt({"exp": FAR_FUTURE, "n": 0}))
    await list_claims(path)
    assert tls_issuer.refreshed == ["refresh-0"]


async def test_an_expiring_oidc_token_is_refreshed_while_the_client_runs(
    kube_api: FakeKubeApi, tmp_path: Path, issuer: Issuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An id-token lives about an hour; client-go refreshes it when it expires, on the request
    that finds it expired. kubernetes-asyncio refreshed only when the client was built, then
    sent the expired token (401) for good. The 5 minutes of margin are stretched to an hour
    here so that the token, fresh at start, is due for the second request."""
    first = jwt({"exp": int(time.time()) + 1800})
    path = oidc_kubeconfig(tmp_path / "config", kube_api.url, issuer.url, **{"id-token": first})
    kube_api.accept_tokens(first)
    store = ApiStore(await load_api_client(str(path)))
    try:
        await store.list(RESOURCE_CLAIMS)
        assert issuer.refreshed == []
        monkeypatch.setattr(kube_config, "EXPIRY_SKEW_PREVENTION_DELAY", timedelta(hours=1))
        kube_api.accept_tokens(jwt({"exp": FAR_FUTURE, "n": 0}))
        await store.list(RESOURCE_CLAIMS)
        assert issuer.refreshed == ["refresh-0"]
        await store.list(RESOURCE_CLAIMS)  # the new token lasts: no second refresh
        assert issuer.refreshed == ["refresh-0"]
    finally:
        await store.close()
