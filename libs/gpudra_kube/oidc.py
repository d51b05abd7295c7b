"""The kubeconfig `oidc` auth-provider's token refresh, as client-go's `oidc` plugin does it.

kubernetes-asyncio's refresh turned TLS verification of the issuer *off* unless the kubeconfig
gave `idp-certificate-authority-data` (and then handed aiohttp a file name where it wants an
SSL context), and ignored `idp-certificate-authority`: the refresh token and client secret went
to whoever answered. Here, as in client-go:
- the issuer is verified against the system roots, or against `idp-certificate-authority` (a
  file) and/or `idp-certificate-authority-data` (base64 PEM) when given;
- a refresh reads the issuer's discovery document (`/.well-known/openid-configuration`), then
  posts a `refresh_token` grant to its token endpoint with the client id and secret (HTTP basic
  auth); the answer must hold an `id_token`, and a rotated `refresh_token` replaces the old one;
- every failure is one `ConfigException` naming the issuer (the caller keeps the old token).
Proxies come from the environment (`HTTPS_PROXY`), as for the API client.
"""

from __future__ import annotations

import base64
import binascii
import ssl
from collections.abc import Mapping
from typing import Any

import aiohttp
from kubernetes_asyncio.config.config_exception import ConfigException

TIMEOUT = 30.0  # seconds for the whole refresh (client-go's default HTTP client has none)


def issuer_tls(config: Mapping[str, Any]) -> ssl.SSLContext:
    """The TLS context the issuer is verified with (see the module docstring)."""
    cafile = str(config.get("idp-certificate-authority") or "") or None
    cadata: str | None = None
    if config.get("idp-certificate-authority-data"):
        try:
            cadata = base64.b64decode(str(config["idp-certificate-authority-data"])).decode()
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise ConfigException(f"oidc: idp-certificate-authority-data: {exc}") from exc
    try:
        return ssl.create_default_context(cafile=cafile, cadata=cadata)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigException(f"oidc: the issuer's certificate authority: {exc}") from exc


async def refresh(config: Mapping[str, Any]) -> tuple[str, str | None]:
    """A new id-token, and the rotated refresh-token if the issuer sent one."""
    issuer = str(config.get("idp-issuer-url") or "")
    client_id = str(config.get("client-id") or "")
    refresh_token = str(config.get("refresh-token") or "")
    if not issuer or not client_id:
        raise ConfigException("oidc: idp-issuer-url and client-id must be provided")
    if not refresh_token:
        raise ConfigException("oidc: no valid id-token, and cannot refresh without refresh-token")
    tls = issuer_tls(config)
    secret = str(config.get("client-secret") or "")
    basic = base64.b64encode(f"{client_id}:{secret}".encode()).decode()
    try:
        async with aiohttp.ClientSession(
            trust_env=True, timeout=aiohttp.ClientTimeout(total=TIMEOUT)
        ) as session:
            discovery = f"{issuer.rstrip('/')}/.well-known/openid-configuration"
            async with session.get(discovery, ssl=tls, raise_for_status=True) as response:
                endpoint = (await response.json(content_type=None))["token_endpoint"]
            async with session.post(
                str(endpoint),
                data={"grant_type": "refresh_token", "refresh_token": refresh_token},
                headers={"Authorization": f"Basic {basic}", "Accept": "application/json"},
                ssl=tls,
                raise_for_status=True,
            ) as response:
                answer = await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigException(
            f"oidc: refreshing the token at {issuer} failed: {type(exc).__name__}: {exc}"
        ) from exc
    id_token = answer.get("id_token") if isinstance(answer, Mapping) else None
    if not isinstance(id_token, str) or not id_token:
        raise ConfigException(f"oidc: the token response of {issuer} holds no id_token")
    rotated = answer.get("refresh_token")
    return id_token, rotated if isinstance(rotated, str) and rotated else None
