"""An exec plugin that switches between a bearer token and a client certificate: the credential
a request presents must be exactly the plugin's last answer (client-go replaces its cached
credential whole: a token answer drops the certificate, a certificate answer the token)."""

from __future__ import annotations

import contextlib
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from gpudra_kube.api_backend import ApiStore
from gpudra_kube.credentials_test import names, plugin_user, tls_kubeconfig
from gpudra_kube.kubeconfig_test import API_CA, API_CERT, API_KEY
from gpudra_testing.kubeapi import FakeKubeApi

# Answers what `answer` (JSON) says: {"token": ...} and/or {"cert": "a" | "b"}; with "expired"
# as its mode the credential has expired already (renewed before every request), else it has
# no expiry (renewed after a 401 only).
SWITCH_PLUGIN = """
import datetime, json, pathlib, sys
folder, mode = pathlib.Path(sys.argv[1]), sys.argv[2]
answer = json.loads((folder / "answer").read_text())
status = {}
if "token" in answer:
    status["token"] = answer["token"]
if "cert" in answer:
    status["clientCertificateData"] = (folder / f"{answer['cert']}.crt").read_text()
    status["clientKeyData"] = (folder / f"{answer['cert']}.key").read_text()
if mode == "expired":
    expiry = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=60)
    status["expirationTimestamp"] = expiry.strftime("%Y-%m-%dT%H:%M:%SZ")
print(json.dumps({
    "apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": status,
}))
"""


@pytest_asyncio.fixture
async def tls_api(tmp_path: Path) -> AsyncIterator[FakeKubeApi]:
    """The fake API over TLS (as api.example), taking a client certificate from API_CA when one
    is presented, and a bearer token otherwise (as the API server does)."""
    (tmp_path / "server.crt").write_text(API_CERT, encoding="ascii")
    (tmp_path / "server.key").write_text(API_KEY, encoding="ascii")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cadata=API_CA)
    context.load_cert_chain(tmp_path / "server.crt", tmp_path / "server.key")
    context.verify_mode = ssl.CERT_OPTIONAL
    async with FakeKubeApi(ssl_context=context) as api:
        yield api


def answer(folder: Path, **credential: str) -> tuple[str | None, str | None]:
    """The plugin answers `credential` from now on; what a request must present with it."""
    (folder / "answer").write_text(json.dumps(credential), encoding="utf-8")
    cert = credential.get("cert")
    return credential.get("token"), f"client-{cert}" if cert else None


def switch_kubeconfig(api: FakeKubeApi, folder: Path, mode: str) -> Path:
    return tls_kubeconfig(api, folder, plugin_user(folder, SWITCH_PLUGIN, mode))


@contextlib.asynccontextmanager
async def answering(
    api: FakeKubeApi, folder: Path, first: dict[str, Any], mode: str
) -> AsyncIterator[ApiStore]:
    """A store on `api` whose plugin (in `mode`) answers `first`, once a request has presented
    exactly that answer."""
    before = answer(folder, **first)
    store = await ApiStore.from_kubeconfig(str(switch_kubeconfig(api, folder, mode)))
    try:
        assert await names(store) == []
        assert api.presented[-1] == before
        yield store
    finally:
        await store.close()


SWITCHES = [
    pytest.param({"token": "one"}, {"cert": "b"}, (None, "client-b"), id="token-to-certificate"),
    pytest.param({"cert": "a"}, {"token": "two"}, ("two", None), id="certificate-to-token"),
    pytest.param(
        {"token": "one"}, {"token": "two", "cert": "b"}, ("two", "client-b"), id="token-to-both"
    ),
    pytest.param(
        {"token": "one", "cert": "a"}, {"cert": "b"}, (None, "client-b"), id="both-to-certificate"
    ),
    pytest.param(
        {"token": "one", "cert": "a"}, {"token": "two"}, ("two", None), id="both-to-token"
    ),
]


@pytest.mark.parametrize(("first", "then", "presented"), SWITCHES)
async def test_a_renewal_at_expiry_presents_exactly_the_new_answer(
    tls_api: FakeKubeApi,
    tmp_path: Path,
    first: dict[str, Any],
    then: dict[str, Any],
    presented: tuple[str | None, str | None],
) -> None:
    async with answering(tls_api, tmp_path, first, "expired") as store:
        answer(tmp_path, **then)
        assert await names(store) == []
        assert tls_api.presented[-1] == presented


@pytest.mark.parametrize(("first", "then", "presented"), SWITCHES)
async def test_a_renewal_after_401_sends_the_request_again_with_exactly_the_new_answer(
    tls_api: FakeKubeApi,
    tmp_path: Path,
    first: dict[str, Any],
    then: dict[str, Any],
    presented: tuple[str | None, str | None],
) -> None:
    async with answering(tls_api, tmp_path, first, "lasting") as store:
        answer(tmp_path, **then)
        tls_api.inject_error(401, reason="Unauthorized", method="GET")
        sent = len(tls_api.presented)
        assert await names(store) == []
        assert len(tls_api.presented) == sent + 2  # the 401, then the request sent again
        assert tls_api.presented[-1] == presented
