"""Kubeconfig credentials that change while a client runs: re-read before they expire.

kubernetes-asyncio reads a kubeconfig's credentials once, when the client is built, so a
long-running service gets 401 Unauthorized for good once they expire:
- a `tokenFile` (a projected service-account token, or one a sidecar renews) is rotated by the
  kubelet; the old bound token expires about an hour after it was issued;
- an `exec` plugin's token (EKS `aws eks get-token`: 15 minutes, GKE's auth plugin: an hour) is
  renewed by the library only in a `refresh_token` loop its caller must run.

`follow_credentials` installs the client configuration's `refresh_api_key_hook` (awaited by
kubernetes-asyncio before every request, watches included) so that:
- a `tokenFile` is read again when the file changed (its inode, size or mtime — the kubelet swaps
  the file atomically) or was last read a minute ago (client-go's period), so a rotation is seen
  on the next request; a read that fails keeps the token there was, logged;
- an exec plugin whose credential carries `expirationTimestamp` runs again once that is within
  the library's 5 minutes of skew, one run at a time; a failed run keeps the old token (logged:
  the server answers 401 once it expires, `ForbiddenError`);
- an exec credential without expiry is kept, as client-go keeps it (client-go runs the plugin
  again after a 401; this client does not, a known limit);
- an inline `token` (which kubectl prefers over `tokenFile`), client certificates named in the
  kubeconfig and basic auth need nothing; client certificates an exec plugin hands out are
  loaded once, when the client is built (a known limit: the TLS context is not rebuilt);
  auth-providers (gcp, oidc) are left to the library.
In-cluster configuration (no kubeconfig) needs none of this: kubernetes-asyncio's in-cluster
loader installs its own hook that re-reads the mounted service-account token every minute, and
the kubelet rotates it at 80% of its life, long before the old one expires.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.config.kube_config import KubeConfigLoader

log = logging.getLogger(__name__)

TOKEN_FILE_PERIOD = 60.0  # seconds: re-read a token file at least this often (client-go: 1 min)

Hook = Callable[[k8s.Configuration], Awaitable[None]]


def _user(loader: KubeConfigLoader) -> Any:
    # The current context's `user` stanza (a ConfigNode with the file it came from in `.path`).
    # kubernetes-asyncio keeps it private; credentials_test pins it across upgrades.
    return getattr(loader, "_user", None)


def follow_credentials(loader: KubeConfigLoader, configuration: k8s.Configuration) -> None:
    """Keep `configuration`'s bearer token current (see the module docstring); a no-op for
    credentials that do not change."""
    user = _user(loader)
    if user is None or loader.provider is not None:
        return  # no user, or an auth-provider (gcp, oidc): left to the library, as before
    if "exec" in user:
        if hasattr(loader, "exec_plugin_expiry"):
            configuration.refresh_api_key_hook = _exec_hook(loader)
        return
    if "token" not in user and user.safe_get("tokenFile"):
        base = os.path.dirname(os.path.abspath(user.path)) if user.path else ""
        path = os.path.normpath(os.path.join(base, str(user["tokenFile"])))
        configuration.refresh_api_key_hook = _token_file_hook(path)


def _exec_hook(loader: KubeConfigLoader) -> Hook:
    lock = asyncio.Lock()

    async def refresh(configuration: k8s.Configuration) -> None:
        async with lock:  # concurrent requests near expiry start the plugin once
            try:
                # A no-op while the credential is not due (the library checks its expiry).
                await loader.load_from_exec_plugin()
            except (
                Exception
            ) as exc:  # any plugin failure (it raises bare Exceptions): keep the token
                log.warning("renewing the Kubernetes exec credential failed: %s", exc)
                return
        configuration.api_key["BearerToken"] = loader.token

    return refresh


def _token_file_hook(path: str) -> Hook:
    seen: tuple[int, int, int] | None = None  # None: read at the first request
    read_at = 0.0

    def current() -> str | None:
        """The file's token when it changed or is due for a re-read, else None."""
        nonlocal seen, read_at
        # Blocking calls on the event loop, deliberately: a stat per request and, when it
        # changed, a read of a few hundred bytes from a local (tmpfs) volume.
        try:
            st = os.stat(path)
            now = time.monotonic()
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
            if stamp == seen and now - read_at < TOKEN_FILE_PERIOD:
                return None
            with open(path, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as exc:
            log.warning("re-reading the Kubernetes token file %s failed: %s", path, exc)
            return None
        seen, read_at = stamp, now
        if not token:
            log.warning("the Kubernetes token file %s is empty; keeping the previous token", path)
            return None
        return token

    async def refresh(configuration: k8s.Configuration) -> None:
        token = current()
        if token is not None:
            configuration.api_key["BearerToken"] = f"Bearer {token}"

    return refresh
