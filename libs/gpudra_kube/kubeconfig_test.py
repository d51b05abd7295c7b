"""Kubeconfig loading against client-go's rules (`clientcmd`): which file wins, where relative
paths point, and what the client refuses. The server is the HTTP-level fake where a request is
made; elsewhere only the loaded configuration is looked at (nothing is dialled)."""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from kubernetes_asyncio.config import incluster_config

from gpudra_kube.api_backend import ApiStore, load_api_client
from gpudra_kube.errors import InvalidObjectError, UnavailableError
from gpudra_kube.resources import RESOURCE_CLAIMS
from gpudra_testing.claims import claim
from gpudra_testing.kubeapi import FakeKubeApi

# A client certificate and its key, for loading only (no server checks them). Self-signed, made
# with `openssl req -x509 -newkey ec ... -subj /CN=gpudra-test-client`; holds no secret.
CLIENT_CERT = """\
-----BEGIN CERTIFICATE-----
MIIBkTCCATegAwIBAgIUO0wMbUEznQj72QvpuzkMRxNuMCIwCgYIKoZIzj0EAwIw
HTEbMBkGA1UEAwwSZ3B1ZHJhLXRlc3QtY2xpZW50MCAXDTI2MTEyOTIzMzg0MVoY
DzIxMjYxMTA1MjMzODQxWjAdMRswGQYDVQQDDBJncHVkcmEtdGVzdC1jbGllbnQw
WTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAARTVX62PgxdouyFzwaG1n8XWA2trJNC
eaJw0gTE2seSQY2zY+ZflQx7Cf3XJt4exUYJBG/nlAi3bbHGJevBD4qso1MwUTAd
BgNVHQ4EFgQUmC9CFgCmHGguOUVQhfNNCHT5sM8wHwYDVR0jBBgwFoAUmC9CFgCm
HGguOUVQhfNNCHT5sM8wDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNIADBF
AiEAj/qyWArLCy7PuTPiUBl5+s4EUzQNi63LgA7zPKyZCkcCIHIaHLINJqdW8acp
lMydY8/K+RMOtsD5pd7QV17eY0C4
-----END CERTIFICATE-----
"""
CLIENT_KEY = """\
-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg/rBt75ZNaMqVmq+A
yPBQqGStj1Bg2w1Z/6O5tMs+czahRANCAARTVX62PgxdouyFzwaG1n8XWA2trJNC
eaJw0gTE2seSQY2zY+ZflQx7Cf3XJt4exUYJBG/nlAi3bbHGJevBD4qs
-----END PRIVATE KEY-----
"""


# A serving certificate for the name api.example (not 127.0.0.1) and the CA that signed it, for
# the TLS tests below. Made with `openssl req`/`openssl x509 -req` (EC P-256, subjectAltName
# DNS:api.example); hold no secret.
API_CA = """\
-----BEGIN CERTIFICATE-----
MIIBkTCCATegAwIBAgIUbzNAqJexHrSfqq6LljGMVweDknowCgYIKoZIzj0EAwIw
HTEbMBkGA1UEAwwSZ3B1ZHJhLXRlc3QtYXBpLWNhMCAXDTI2MTEyOTIzNDc1MVoY
DzIxMjYxMTA1MjM0NzUxWjAdMRswGQYDVQQDDBJncHVkcmEtdGVzdC1hcGktY2Ew
WTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAAQtkRd+MsZUgHzvToSuD3f+06fvxi5B
zNSUjH4wn5jWJz2KtKrh3iSwNNsurevVi5VWaUGqiZ47IQPytvtYnN3po1MwUTAd
BgNVHQ4EFgQUq9KAYZB8SYwgTlzrZFPKRmMEYOkwHwYDVR0jBBgwFoAUq9KAYZB8
SYwgTlzrZFPKRmMEYOkwDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNIADBF
AiBAksX/o5F+8xwzotedwfOfXwmCYfwq4aXg5pqm0dMPMgIhAJ9M5znwgVkoKPHv
60XEJVfF6xwrPlrB0vYFdy9r85wb
-----END CERTIFICATE-----
"""
API_CERT = """\
-----BEGIN CERTIFICATE-----
MIIBvzCCAWagAwIBAgIUTvguWaQ5opei4mhOGWhqQPycH9gwCgYIKoZIzj0EAwIw
HTEbMBkGA1UEAwwSZ3B1ZHJhLXRlc3QtYXBpLWNhMCAXDTI2MTEyOTIzNDc1MVoY
DzIxMjYxMTA1MjM0NzUxWjAWMRQwEgYDVQQDDAthcGkuZXhhbXBsZTBZMBMGByqG
SM49AgEGCCqGSM49AwEHA0IABDpLby5jsCGiuFRp0D04e+6r1Tho/j/FdI34CHlb
8oijlIXAs/8tRT4lLAW2Iq8p8UdgLx+Vf40BA4fWY8cYm2ijgYgwgYUwFgYDVR0R
BA8wDYILYXBpLmV4YW1wbGUwCQYDVR0TBAIwADALBgNVHQ8EBAMCB4AwEwYDVR0l
BAwwCgYIKwYBBQUHAwEwHQYDVR0OBBYEFBB84qbeSGV6UvBOehea4+YS7QNcMB8G
A1UdIwQYMBaAFKvSgGGQfEmMIE5c62RTykZjBGDpMAoGCCqGSM49BAMCA0cAMEQC
IDFppVoQqUMRfuBxtPtqiDe+k2kuPS7+Wy6XZQ86pTXYAiAEuJHrZoiPYk4oWVm0
cuW/NcfCt9IrRDyUf8iLBZBHTA==
-----END CERTIFICATE-----
"""
API_KEY = """\
-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg5P6N0jIo/9DwH3+h
p9Sl4eOT0ksWAKixWa69DoY8tW2hRANCAAQ6S28uY7AhorhUadA9OHvuq9U4aP4/
xXSN+Ah5W/KIo5SFwLP/LUU+JSwFtiKvKfFHYC8flX+NAQOH1mPHGJto
-----END PRIVATE KEY-----
"""


def kubeconfig(
    path: Path,
    *,
    clusters: dict[str, dict[str, Any]] | None = None,
    users: dict[str, dict[str, Any]] | None = None,
    contexts: dict[str, tuple[str, str]] | None = None,
    current: str | None = None,
) -> Path:
    """A kubeconfig file; `contexts`: name -> (cluster, user)."""
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": n, "cluster": c} for n, c in (clusters or {}).items()],
        "users": [{"name": n, "user": u} for n, u in (users or {}).items()],
        "contexts": [
            {"name": n, "context": {"cluster": c, "user": u}}
            for n, (c, u) in (contexts or {}).items()
        ],
    }
    if current is not None:
        config["current-context"] = current
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


@pytest.fixture
def no_cluster_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """Outside a pod: `load_api_client()` falls back to $KUBECONFIG."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    return monkeypatch


async def test_the_first_kubeconfig_file_that_sets_current_context_wins(
    kube_api: FakeKubeApi, tmp_path: Path, no_cluster_env: pytest.MonkeyPatch
) -> None:
    """client-go: "the first file to set a particular value or map key wins"; kubectl with
    KUBECONFIG=a:b uses a's current-context."""
    first = kubeconfig(
        tmp_path / "a" / "config",
        clusters={"fake": {"server": kube_api.url}},
        users={"me": {"token": "a-token"}},
        contexts={"a": ("fake", "me")},
        current="a",
    )
    second = kubeconfig(
        tmp_path / "b" / "config",
        clusters={"elsewhere": {"server": "http://127.0.0.1:1"}},
        users={"me": {"token": "b-token"}},
        contexts={"b": ("elsewhere", "me")},
        current="b",
    )
    no_cluster_env.setenv("KUBECONFIG", f"{first}:{tmp_path / 'missing'}:{second}")
    kube_api.accept_tokens("a-token")  # user "me" is the first file's, not the second's
    store = ApiStore(await load_api_client())
    try:
        await store.create(RESOURCE_CLAIMS, claim("a"))
    finally:
        await store.close()


async def test_a_user_from_another_file_resolves_its_paths_against_its_own_file(
    tmp_path: Path, no_cluster_env: pytest.MonkeyPatch
) -> None:
    """Relative paths are resolved against the folder of the file that names them (client-go's
    ResolveLocalPaths), also when the context, cluster and user come from different files."""
    kubeconfig(
        tmp_path / "clusters" / "config",
        clusters={"tls": {"server": "https://127.0.0.1:1"}},
        contexts={"c": ("tls", "me")},
        current="c",
    )
    users = tmp_path / "users"
    users.mkdir()
    (users / "me.crt").write_text(CLIENT_CERT, encoding="ascii")
    (users / "me.key").write_text(CLIENT_KEY, encoding="ascii")
    kubeconfig(
        users / "config", users={"me": {"client-certificate": "me.crt", "client-key": "me.key"}}
    )
    no_cluster_env.setenv("KUBECONFIG", f"{tmp_path / 'clusters' / 'config'}:{users / 'config'}")
    client = await load_api_client()
    try:
        assert client.configuration.cert_file == str(users / "me.crt")
        assert client.configuration.key_file == str(users / "me.key")
    finally:
        await client.close()


async def test_a_missing_explicit_kubeconfig_is_named(tmp_path: Path) -> None:
    with pytest.raises(InvalidObjectError, match=r"kubeconfig .*nowhere.* does not exist"):
        await load_api_client(str(tmp_path / "nowhere"))


async def test_proxy_url_sends_requests_through_the_proxy(
    kube_api: FakeKubeApi, tmp_path: Path
) -> None:
    """An HTTP proxy: the fake API stands in for it (it serves a proxied, absolute-form
    request like any other), the cluster's own address is one that does not answer."""
    path = kubeconfig(
        tmp_path / "config",
        clusters={"c": {"server": "http://127.0.0.1:1", "proxy-url": kube_api.url}},
        users={"me": {"token": "t"}},
        contexts={"x": ("c", "me")},
        current="x",
    )
    await list_claims(path)
    assert kube_api.requests[-1][1] == "/apis/resource.k8s.io/v1/resourceclaims"


@pytest.mark.parametrize(
    ("cluster", "error"),
    [
        pytest.param(
            {"proxy-url": "socks5://127.0.0.1:1080"},
            "proxy-url socks5://127.0.0.1:1080 is not supported",
            id="socks5-proxy",
        ),
        pytest.param(
            {"proxy-url": "ftp://127.0.0.1:21"},
            "proxy-url ftp://127.0.0.1:21 is not supported",
            id="unknown-proxy-scheme",
        ),
        pytest.param(
            {"insecure-skip-tls-verify": True, "certificate-authority": "ca.crt"},
            "certificate authority with insecure-skip-tls-verify is not allowed",
            id="insecure-with-a-ca-file",
        ),
        pytest.param(
            {
                "insecure-skip-tls-verify": True,
                "certificate-authority-data": base64.b64encode(API_CA.encode()).decode(),
            },
            "certificate authority with insecure-skip-tls-verify is not allowed",
            id="insecure-with-ca-data",
        ),
    ],
)
async def test_cluster_settings_the_client_cannot_honour_are_refused(
    tmp_path: Path, cluster: dict[str, Any], error: str
) -> None:
    """client-go refuses a CA with insecure-skip-tls-verify and proxies other than http, https
    and socks5; this client cannot speak socks5 either. Silently ignoring any of them would
    connect where the kubeconfig said not to."""
    (tmp_path / "ca.crt").write_text(API_CA, encoding="ascii")
    path = kubeconfig(
        tmp_path / "config",
        clusters={"c": {"server": "https://127.0.0.1:1", **cluster}},
        users={"me": {"token": "t"}},
        contexts={"x": ("c", "me")},
        current="x",
    )
    with pytest.raises(InvalidObjectError, match=error):
        await load_api_client(str(path))


@pytest.mark.parametrize(
    "impersonation",
    [
        pytest.param({"as": "jane"}, id="as"),
        pytest.param({"as": "jane", "as-groups": ["admins"]}, id="as-groups"),
        pytest.param({"as": "jane", "as-uid": "1234"}, id="as-uid"),
        pytest.param({"as": "jane", "as-user-extra": {"scopes": ["view"]}}, id="as-user-extra"),
    ],
)
async def test_impersonation_is_refused_not_ignored(
    tmp_path: Path, impersonation: dict[str, Any]
) -> None:
    """kubectl sends Impersonate-* headers for `as`; kubernetes-asyncio drops them, so requests
    would run as the (often more privileged) user itself."""
    path = kubeconfig(
        tmp_path / "config",
        clusters={"c": {"server": "http://127.0.0.1:1"}},
        users={"me": {"token": "t", **impersonation}},
        contexts={"x": ("c", "me")},
        current="x",
    )
    with pytest.raises(InvalidObjectError, match="impersonation .* is not supported"):
        await load_api_client(str(path))


def server_context(
    folder: Path, name: str, cert: str, key: str, client_ca: str | None = None
) -> ssl.SSLContext:
    """A TLS server context presenting `cert` with `key` (PEM; kept in `folder` as `name`.crt
    and `name`.key); with `client_ca`, it requires a client certificate that CA signed."""
    (folder / f"{name}.crt").write_text(cert, encoding="ascii")
    (folder / f"{name}.key").write_text(key, encoding="ascii")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cadata=client_ca)
    context.load_cert_chain(folder / f"{name}.crt", folder / f"{name}.key")
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
    return context


@pytest_asyncio.fixture
async def tls_api(tmp_path: Path) -> AsyncIterator[FakeKubeApi]:
    """The fake API over TLS, with a certificate for api.example."""
    context = server_context(tmp_path, "server", API_CERT, API_KEY)
    async with FakeKubeApi(ssl_context=context) as api:
        yield api


def tls_kubeconfig(folder: Path, server: str, **cluster: Any) -> Path:
    (folder / "ca.crt").write_text(API_CA, encoding="ascii")
    return kubeconfig(
        folder / "config",
        clusters={"c": {"server": server, **cluster}},
        users={"me": {"token": "t"}},
        contexts={"x": ("c", "me")},
        current="x",
    )


async def list_claims(path: Path) -> None:
    store = ApiStore(await load_api_client(str(path)))
    try:
        await store.list(RESOURCE_CLAIMS)
    finally:
        await store.close()


async def test_tls_server_name_verifies_the_server_under_that_name(
    tls_api: FakeKubeApi, tmp_path: Path
) -> None:
    """The server is dialled at 127.0.0.1 and verified as api.example (a relative CA path)."""
    await list_claims(
        tls_kubeconfig(
            tmp_path,
            tls_api.url,
            **{"certificate-authority": "ca.crt", "tls-server-name": "api.example"},
        )
    )


async def test_without_tls_server_name_the_address_must_match_the_certificate(
    tls_api: FakeKubeApi, tmp_path: Path
) -> None:
    path = tls_kubeconfig(tmp_path, tls_api.url, **{"certificate-authority": "ca.crt"})
    with pytest.raises(UnavailableError, match="(?i)certificate"):
        await list_claims(path)


async def test_insecure_skip_tls_verify_accepts_any_certificate(
    tls_api: FakeKubeApi, tmp_path: Path
) -> None:
    await list_claims(tls_kubeconfig(tmp_path, tls_api.url, **{"insecure-skip-tls-verify": True}))


async def test_in_cluster_an_ipv6_service_host_is_bracketed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a pod of an IPv6 (or dual-stack, IPv6-first) cluster KUBERNETES_SERVICE_HOST is a
    bare IPv6 address; the URL needs it in brackets (client-go: net.JoinHostPort)."""
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("t", encoding="utf-8")
    ca.write_text(API_CA, encoding="ascii")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00:10:96::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    client = await load_api_client()
    try:
        assert client.configuration.host == "https://[fd00:10:96::1]:443"
    finally:
        await client.close()


async def test_a_pod_without_its_token_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """In a pod (KUBERNETES_SERVICE_HOST set) whose service-account token is not mounted, and
    with no kubeconfig to fall back to, the error names the in-cluster cause, not only the
    missing kubeconfig (client-go logs it as it falls back)."""
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(tmp_path / "no-token"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    with pytest.raises(InvalidObjectError, match="in-cluster: Service token file does not exist"):
        await load_api_client()


def without_scheme(url: str) -> str:
    return url.split("://", 1)[1]


async def test_a_server_without_a_scheme_is_http_without_tls_settings(
    kube_api: FakeKubeApi, tmp_path: Path
) -> None:
    """`server: 10.0.0.1:6443` (no scheme): client-go's `DefaultServerURL` puts http:// before
    it when the cluster has no CA, the user no client certificate and TLS checks are not
    skipped, and the client talks to the server there."""
    path = kubeconfig(
        tmp_path / "config",
        clusters={"c": {"server": without_scheme(kube_api.url)}},
        users={"me": {"token": "t"}},
        contexts={"x": ("c", "me")},
        current="x",
    )
    await list_claims(path)
    assert kube_api.requests[-1][1] == "/apis/resource.k8s.io/v1/resourceclaims"


async def test_a_server_without_a_scheme_is_https_with_a_ca(
    tls_api: FakeKubeApi, tmp_path: Path
) -> None:
    """With a CA (or a client certificate, or insecure-skip-tls-verify) client-go defaults the
    scheme to https://, and the CA verifies the server."""
    await list_claims(
        tls_kubeconfig(
            tmp_path,
            without_scheme(tls_api.url),
            **{"certificate-authority": "ca.crt", "tls-server-name": "api.example"},
        )
    )


@pytest.mark.parametrize(
    ("server", "cluster", "user", "host"),
    [
        pytest.param("10.0.0.1:6443", {}, {}, "http://10.0.0.1:6443", id="plain"),
        pytest.param("localhost", {}, {}, "http://localhost", id="bare-name"),
        pytest.param("api.example:6443", {}, {}, "http://api.example:6443", id="name-and-port"),
        pytest.param(
            "10.0.0.1:6443",
            {"certificate-authority": "ca.crt"},
            {},
            "https://10.0.0.1:6443",
            id="ca-file",
        ),
        pytest.param(
            "10.0.0.1:6443",
            {"certificate-authority-data": base64.b64encode(API_CA.encode()).decode()},
            {},
            "https://10.0.0.1:6443",
            id="ca-data",
        ),
        pytest.param(
            "10.0.0.1:6443",
            {"insecure-skip-tls-verify": True},
            {},
            "https://10.0.0.1:6443",
            id="insecure",
        ),
        pytest.param(
            "10.0.0.1:6443",
            {},
            {
                "client-certificate-data": base64.b64encode(CLIENT_CERT.encode()).decode(),
                "client-key-data": base64.b64encode(CLIENT_KEY.encode()).decode(),
            },
            "https://10.0.0.1:6443",
            id="client-certificate",
        ),
        pytest.param("https://10.0.0.1:6443", {}, {}, "https://10.0.0.1:6443", id="scheme-kept"),
        pytest.param("http://10.0.0.1:6443", {}, {}, "http://10.0.0.1:6443", id="http-kept"),
    ],
)
async def test_the_server_scheme_defaults_as_in_client_go(
    tmp_path: Path,
    server: str,
    cluster: dict[str, Any],
    user: dict[str, Any],
    host: str,
) -> None:
    (tmp_path / "ca.crt").write_text(API_CA, encoding="ascii")
    path = kubeconfig(
        tmp_path / "config",
        clusters={"c": {"server": server, **cluster}},
        users={"me": {"token": "t", **user}},
        contexts={"x": ("c", "me")},
        current="x",
    )
    client = await load_api_client(str(path))
    try:
        assert client.configuration.host == host
    finally:
        await client.close()


async def test_a_server_without_a_scheme_but_with_a_path_is_refused(tmp_path: Path) -> None:
    """client-go: "host must be a URL or a host:port pair" (a path needs the scheme written)."""
    path = kubeconfig(
        tmp_path / "config",
        clusters={"c": {"server": "10.0.0.1:6443/prefix"}},
        users={"me": {"token": "t"}},
        contexts={"x": ("c", "me")},
        current="x",
    )
    with pytest.raises(InvalidObjectError, match="host must be a URL or a host:port pair"):
        await load_api_client(str(path))
