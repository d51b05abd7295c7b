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
- an exec plugin's credential is kept until its `expirationTimestamp` has passed, as client-go
  keeps it (kubernetes-asyncio renewed it 5 minutes early, so a plugin whose tokens live less
  than that ran for every request); then the plugin runs again before the next request, one
  run at a time. A run that fails (or outlasts `exec_plugin.RUN_TIMEOUT`: the plugin is killed)
  fails the request with `UnavailableError` naming the plugin, nothing is sent (as client-go's
  `getCreds` fails it), and the requests that waited for that run fail with it rather than
  each running the plugin again in turn; the credential stays due, so the next request runs
  the plugin again;
- an exec credential is renewed when the server answers 401 Unauthorized (it was revoked or
  rotated, with or without `expirationTimestamp`), as client-go's exec authenticator does: the
  plugin runs again at most once per credential — concurrent 401s for one credential share one
  run, and a 401 for a credential already replaced runs nothing — and the request that got the
  401 is sent once more with the new credential, whatever its verb. That is safe for writes too:
  the API server authenticates before admission and storage, so a 401 means nothing was written
  (a request body is a JSON document serialised again, never a consumed stream). When the run
  hands out the token that was refused, the 401 stands (`ForbiddenError`) and nothing is sent
  again; when it fails (or outlasts its bound), the request fails with `UnavailableError`
  naming the plugin, as at expiry; the next 401 runs the plugin again. Only
  `CredentialRenewingClient` (which `load_api_client` builds for an exec user) does this;
- a client certificate an exec plugin hands out is renewed the same ways (expiry, 401); a new
  one gets the client a new TLS context, and the connections made with the old one are closed,
  as client-go closes them;
- the credential a request presents is exactly the plugin's last answer, as in client-go: a
  token, a client certificate, or both; a plugin that switches from a token to a certificate
  stops sending the token, and one that switches back stops presenting the certificate;
- an oidc auth-provider's id-token is refreshed before a request once it is within the
  library's 5 minutes of its expiry (client-go refreshes it once expired), one refresh at a
  time, through `gpudra_kube.oidc`; a failed refresh keeps the token there was (logged). The
  gcp auth-provider (removed from client-go) is left to the library;
- an inline `token` (which kubectl prefers over `tokenFile`), client certificates named in the
  kubeconfig and basic auth need nothing.
In-cluster configuration (no kubeconfig) needs none of this: kubernetes-asyncio's in-cluster
loader installs its own hook that re-reads the mounted service-account token every minute, and
the kubelet rotates it at 80% of its life, long before the old one expires.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client import rest
from kubernetes_asyncio.config.kube_config import KubeConfigLoader

from gpudra_kube.errors import UnavailableError
from gpudra_kube.exec_plugin import uses_exec

log = logging.getLogger(__name__)

TOKEN_FILE_PERIOD = 60.0  # seconds: re-read a token file at least this often (client-go: 1 min)

Hook = Callable[[k8s.Configuration], Awaitable[None]]


def _user(loader: KubeConfigLoader) -> Any:
    # The current context's `user` stanza (a ConfigNode with the file it came from in `.path`).
    # kubernetes-asyncio keeps it private; credentials_test pins it across upgrades.
    return getattr(loader, "_user", None)


def follow_credentials(
    loader: KubeConfigLoader, configuration: k8s.Configuration
) -> ExecCredential | None:
    """Keep `configuration`'s bearer token current (see the module docstring); a no-op for
    credentials that do not change. For an exec plugin, returns its `ExecCredential`, to be
    renewed after a 401 (give it to `CredentialRenewingClient`)."""
    user = _user(loader)
    provider: Any = loader.provider  # the library declares it None; the loader sets a name
    if user is None:
        return None
    if provider == "oidc":
        configuration.refresh_api_key_hook = _oidc_hook(loader)
        return None
    if provider is not None:
        return None  # gcp: left to the library, as before
    if uses_exec(user.value):
        credential = ExecCredential(loader, configuration)
        configuration.refresh_api_key_hook = credential.refresh_if_due
        return credential
    if "token" not in user and user.safe_get("tokenFile"):
        base = os.path.dirname(os.path.abspath(user.path)) if user.path else ""
        path = os.path.normpath(os.path.join(base, str(user["tokenFile"])))
        configuration.refresh_api_key_hook = _token_file_hook(path)
    return None


class ExecCredential:
    """The token or client certificate an exec plugin handed out, renewed before it expires and
    after a 401.

    `generation` counts the credentials the plugin handed out; a request notes it when it is
    sent, so that a 401 renews only the credential that was refused (client-go compares its
    cached credential the same way). A new client certificate is announced to the listeners
    (`on_new_certificate`): the client builds a new TLS context for it. `_runs` counts the runs
    that ended, `_failure` says why the last one failed (None: it did not): a request that
    waited for a run fails with it instead of running the plugin again."""

    def __init__(self, loader: KubeConfigLoader, configuration: k8s.Configuration) -> None:
        self._loader = loader
        self._configuration = configuration
        self._lock = asyncio.Lock()  # one plugin run at a time
        self._certificate_listeners: list[Callable[[], Awaitable[None]]] = []
        self.generation = 0
        self._runs = 0
        self._failure: str | None = None

    def on_new_certificate(self, listener: Callable[[], Awaitable[None]]) -> None:
        self._certificate_listeners.append(listener)

    def _current(self) -> tuple[Any, Any, Any]:
        c = self._configuration
        return c.api_key.get("BearerToken"), c.cert_file, c.key_file

    def _due(self) -> bool:
        expiry = getattr(self._loader, "exec_plugin_expiry", None)
        if not isinstance(expiry, datetime.datetime):
            return False  # no expiry: kept until a 401 says otherwise
        # client-go's `credsExpired`: renewed once the expiry has passed, not before (the
        # plugin knows how long its credential lasts; EKS's says 14 minutes of its 15).
        return datetime.datetime.now(datetime.UTC) > expiry

    async def refresh_if_due(self, configuration: k8s.Configuration) -> None:
        """The `refresh_api_key_hook`: run the plugin when the credential has expired."""
        if not self._due():
            return
        runs = self._runs
        async with self._lock:  # concurrent requests past expiry start the plugin once
            self._raise_if_failed_since(runs)
            if self._due():
                await self._run()

    async def renew_after_unauthorized(self, sent: int) -> bool:
        """After a 401 for the credential of generation `sent`: True when a different credential
        is now current (renewed here or by another request), so the request is worth sending
        again; False when the plugin handed out the refused token again. Raises
        `UnavailableError` when the plugin failed (this run or the one this request waited for)."""
        runs = self._runs
        async with self._lock:
            if sent != self.generation:
                return True  # another request's 401 renewed it already
            self._raise_if_failed_since(runs)
            refused = self._current()
            await self._run()
            return self._current() != refused

    def _raise_if_failed_since(self, runs: int) -> None:
        # A run ended while this request waited for the lock, and failed: share its failure (a
        # plugin that hangs would otherwise hold each waiting request for a bound of its own).
        if self._runs != runs and self._failure is not None:
            raise UnavailableError(self._failure)

    async def _run(self) -> None:
        """Run the plugin and take its answer; `UnavailableError` naming it when it fails (the
        credential and its expiry stay as they were: the loader changes them only on success).
        A run cancelled midway (the caller gave up) counts for nothing: waiters run their own."""
        try:
            await self._loader.load_from_exec_plugin()
        except Exception as exc:  # any plugin failure (the library raises bare Exceptions)
            self._failed(str(exc))
            raise UnavailableError(str(self._failure)) from exc
        # The plugin's answer, whole (the loader drops what the answer lacks).
        token = getattr(self._loader, "token", None)
        pair = getattr(self._loader, "cert_file", None), getattr(self._loader, "key_file", None)
        if not isinstance(token, str) and not all(pair):
            self._failed("it handed out no credential")
            raise UnavailableError(str(self._failure))
        self._runs += 1
        self._failure = None
        configuration = self._configuration
        if isinstance(token, str):
            configuration.api_key["BearerToken"] = token
        else:
            configuration.api_key.pop("BearerToken", None)
        pair = pair if all(pair) else (None, None)
        if pair != (configuration.cert_file, configuration.key_file):
            configuration.cert_file, configuration.key_file = pair
            for listener in self._certificate_listeners:
                await listener()  # a new TLS context: the new certificate, or none
        self.generation += 1

    def _failed(self, why: str) -> None:
        user = _user(self._loader)
        stanza = user.value.get("exec") if user is not None else None
        command = stanza.get("command") if isinstance(stanza, dict) else None
        self._failure = f"renewing the Kubernetes exec credential ({command}) failed: {why}"
        self._runs += 1
        log.warning("%s", self._failure)

    def authorization(self) -> str | None:
        """The `Authorization` header of the current credential; None for a certificate."""
        c = self._configuration
        token = c.api_key.get("BearerToken")
        prefix = c.api_key_prefix.get("BearerToken")
        return f"{prefix} {token}" if token and prefix else token


class CredentialRenewingClient(k8s.ApiClient):
    """An ApiClient that renews an exec credential after a 401 and sends the refused request
    once more with the new one (the rules are in the module docstring)."""

    def __init__(self, configuration: k8s.Configuration, credential: ExecCredential) -> None:
        super().__init__(configuration)
        self._credential = credential
        credential.on_new_certificate(self._new_tls_context)

    async def _new_tls_context(self) -> None:
        # The exec plugin handed out a new client certificate: new connections present it, the
        # old ones are closed (client-go closes every connection when its certificate rotates;
        # a watch on one ends and is started again by its informer).
        old = self.rest_client
        self.rest_client = rest.RESTClientObject(self.configuration)
        await old.close()

    async def request(
        self,
        method: str,
        url: str,
        query_params: Any = None,
        headers: dict[str, Any] | None = None,
        post_params: Any = None,
        body: Any = None,
        _preload_content: bool = True,
        _request_timeout: Any = None,
    ) -> Any:
        # The library renewed a token due for it while computing the headers; a certificate
        # (no token) it does not, and a renewal may have switched one for the other.
        await self._credential.refresh_if_due(self.configuration)
        # No await from here to the send: the header set here, the TLS context picked there and
        # the generation read here are those of the current credential.
        sent = self._credential.generation
        headers = self._with_credential(headers)

        def send(with_headers: dict[str, Any] | None) -> Any:
            return super(CredentialRenewingClient, self).request(
                method,
                url,
                query_params=query_params,
                headers=with_headers,
                post_params=post_params,
                body=body,
                _preload_content=_preload_content,
                _request_timeout=_request_timeout,
            )

        try:
            response = await send(headers)
        except k8s.ApiException as exc:  # a preloaded response (raises for any non-2xx)
            if exc.status != 401 or not await self._credential.renew_after_unauthorized(sent):
                raise
        else:  # a streamed response (`_preload_content=False`): the caller reads the status
            if response.status != 401:
                return response
            try:
                renewed = await self._credential.renew_after_unauthorized(sent)
            except BaseException:  # the plugin failed: its error, not the 401, is the answer
                response.release()
                raise
            if not renewed:
                return response
            response.release()
        return await send(self._with_credential(headers))

    def _with_credential(self, headers: dict[str, Any] | None) -> dict[str, Any]:
        """`headers` with the current credential's `Authorization` (none for a certificate:
        the TLS context carries it), whatever the library put there before a renewal."""
        headers = {k: v for k, v in (headers or {}).items() if k.lower() != "authorization"}
        token = self._credential.authorization()
        if token:
            headers["authorization"] = token
        return headers


def _oidc_hook(loader: KubeConfigLoader) -> Hook:
    lock = asyncio.Lock()

    async def refresh(configuration: k8s.Configuration) -> None:
        async with lock:  # concurrent requests near expiry refresh once
            try:
                # The library's check (the JWT's `exp`, 5 minutes of margin), refreshing through
                # gpudra_kube.kubeconfig's loader when due; a no-op otherwise.
                token = await loader._load_oid_token()
            except Exception as exc:  # any refresh failure (the library raises bare ones)
                log.warning("refreshing the Kubernetes oidc token failed: %s", exc)
                return
        configuration.api_key["BearerToken"] = token

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
