"""`Store` on the Kubernetes API server, through kubernetes-asyncio.

Objects stay raw JSON: every call uses `_preload_content=False` and parses the response body
itself, so no typed model can drop a field the client library does not know yet (DRA's v1 API
still grows). HTTP failures become `gpudra_kube` errors by status code (see `translate_status`):
409 Conflict → `ConflictError` (retryable), 409 AlreadyExists → `AlreadyExistsError`, 410 and
504 "Too large resource version" → `GoneError`, 5xx/429/I-O → `UnavailableError` (with the
server's `Retry-After`, if any).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.exceptions import ApiTypeError, ApiValueError

from gpudra_kube.credentials import CredentialRenewingClient, follow_credentials
from gpudra_kube.errors import (
    AlreadyExistsError,
    ConflictError,
    ForbiddenError,
    GoneError,
    InvalidObjectError,
    KubeError,
    NotFoundError,
    UnavailableError,
)
from gpudra_kube.kubeconfig import load_kubeconfig
from gpudra_kube.resources import (
    KubeObject,
    Resource,
    check_name,
    check_scope,
    name_of,
    namespace_of,
)
from gpudra_kube.store import EventType, ObjectList, Transform, WatchEvent

log = logging.getLogger(__name__)


def retry_after_of(headers: Mapping[str, str] | None, body: Any) -> float | None:
    """The seconds a throttling answer asks to wait: its `Retry-After` header (seconds; the API
    server never sends the HTTP-date form), else the Status's `details.retryAfterSeconds`."""
    text = (headers or {}).get("Retry-After", "")
    try:
        seconds = float(text)
    except ValueError:
        details = body.get("details") if isinstance(body, dict) else None
        seconds = details.get("retryAfterSeconds", 0) if isinstance(details, dict) else 0
        seconds = float(seconds) if isinstance(seconds, int | float) else 0.0
    return seconds if 0 < seconds < float("inf") else None


def _too_large_version(status: int, body: Any) -> bool:
    """The API server's "Too large resource version" (504, cause ResourceVersionTooLarge)."""
    details = body.get("details") if isinstance(body, dict) else None
    causes = details.get("causes") if isinstance(details, dict) else None
    return status == 504 and any(
        isinstance(c, dict) and c.get("reason") == "ResourceVersionTooLarge" for c in causes or ()
    )


def translate_status(
    status: int, body: Any, what: str, headers: Mapping[str, str] | None = None
) -> KubeError:
    """The error for an HTTP error response (`body`: the parsed `Status` object, if any;
    `headers`: the response's, for `Retry-After`)."""
    reason = body.get("reason", "") if isinstance(body, dict) else ""
    message = body.get("message", "") if isinstance(body, dict) else str(body)[:200]
    detail = f"{what}: HTTP {status} {reason}: {message}".rstrip(": ")
    if status == 404:
        return NotFoundError(detail, status=status)
    if status == 409:
        if reason == "AlreadyExists":
            return AlreadyExistsError(detail, status=status)
        return ConflictError(detail, status=status)
    if status == 410 or _too_large_version(status, body):
        # A watch from a version the server has not reached (after an etcd restore) never
        # succeeds as asked: relist, as client-go's reflector does.
        return GoneError(detail, status=status)
    if status in (400, 422):
        return InvalidObjectError(detail, status=status)
    if status in (401, 403):
        return ForbiddenError(detail, status=status)
    return UnavailableError(detail, status=status, retry_after=retry_after_of(headers, body))


async def load_api_client(
    kubeconfig: str | None = None, *, context: str | None = None
) -> k8s.ApiClient:
    """An ApiClient from `kubeconfig` (a path), else in-cluster config, else $KUBECONFIG or
    ~/.kube/config, read as client-go reads them (see `gpudra_kube.kubeconfig`). Tokens that
    rotate are followed, and an exec plugin's credential is renewed after a 401 (see
    `gpudra_kube.credentials`)."""
    try:
        if kubeconfig:
            return await _client_from_kubeconfig(kubeconfig, context)
        try:
            configuration = k8s.Configuration()
            # The library installs a hook that re-reads the rotated token (see credentials.py).
            k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
            return k8s.ApiClient(configuration)
        except k8s_config.ConfigException as exc:
            if not os.environ.get("KUBERNETES_SERVICE_HOST"):
                return await _client_from_kubeconfig(None, context)  # not in a pod
            # In a pod whose in-cluster configuration is broken (no token mounted): fall back
            # to a kubeconfig as client-go does, saying why, and name both causes if that fails.
            log.warning("in-cluster Kubernetes configuration failed, trying a kubeconfig: %s", exc)
            try:
                return await _client_from_kubeconfig(None, context)
            except (k8s_config.ConfigException, OSError, ValueError, KeyError) as fallback:
                raise k8s_config.ConfigException(f"in-cluster: {exc}; {fallback}") from fallback
    except (k8s_config.ConfigException, OSError, ValueError, KeyError) as exc:
        raise InvalidObjectError(f"cannot load Kubernetes configuration: {exc}") from exc


async def _client_from_kubeconfig(path: str | None, context: str | None) -> k8s.ApiClient:
    # What `new_client_from_config` does, with client-go's loading rules, keeping the loader to
    # follow its credentials.
    configuration = k8s.Configuration()
    loader = await load_kubeconfig(path, context, configuration)
    credential = follow_credentials(loader, configuration)
    if credential is not None:
        return CredentialRenewingClient(configuration, credential)
    return k8s.ApiClient(configuration)


class ApiStore:
    """`Store` backed by a kube-apiserver (see the module docstring)."""

    def __init__(
        self, api_client: k8s.ApiClient, *, request_timeout: float = 30.0, page_size: int = 500
    ) -> None:
        self._client = api_client
        self._timeout = request_timeout
        self._page_size = max(1, page_size)
        self._apis: dict[str, Any] = {}

    @classmethod
    async def from_kubeconfig(cls, kubeconfig: str | None = None, **options: Any) -> ApiStore:
        return cls(await load_api_client(kubeconfig), **options)

    async def close(self) -> None:
        await self._client.close()

    def _method(self, resource: Resource, op: str, namespace: str | None, suffix: str = "") -> Any:
        api = self._apis.get(resource.api_class)
        if api is None:
            api = self._apis[resource.api_class] = getattr(k8s, resource.api_class)(self._client)
        if op == "list" and resource.namespaced and namespace is None:
            return getattr(api, f"list_{resource.snake}_for_all_namespaces")
        scope = "namespaced_" if resource.namespaced else ""
        return getattr(api, f"{op}_{scope}{resource.snake}{suffix}")

    @staticmethod
    def _scope_args(resource: Resource, namespace: str | None) -> dict[str, Any]:
        if not resource.namespaced:
            return {}
        if namespace is None:
            raise InvalidObjectError(f"{resource.kind} is namespaced: give a namespace")
        return {"namespace": namespace}

    async def _call(self, what: str, method: Any, *args: Any, **kwargs: Any) -> KubeObject:
        try:
            resp = await method(
                *args, _preload_content=False, _request_timeout=self._timeout, **kwargs
            )
            try:
                raw = await resp.read()
                status, headers = resp.status, resp.headers
            finally:
                resp.release()
        except k8s.ApiException as exc:
            raise translate_status(exc.status or 0, exc.body, what, exc.headers) from exc
        except (ApiValueError, ApiTypeError) as exc:  # the client refused the arguments
            raise InvalidObjectError(f"{what}: {exc}") from exc
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise UnavailableError(f"{what}: {type(exc).__name__}: {exc}") from exc
        try:
            body = json.loads(raw) if raw else {}
        except ValueError as exc:
            if 200 <= status <= 299:
                raise UnavailableError(f"{what}: response is not JSON") from exc
            body = raw.decode(errors="replace")
        if not 200 <= status <= 299:
            raise translate_status(status, body, what, headers)
        if not isinstance(body, dict):
            raise UnavailableError(f"{what}: response is not a JSON object")
        return body

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        transform: Transform | None = None,
    ) -> ObjectList:
        """All objects, fetched in pages of `page_size`, each page's objects transformed before
        the next page is fetched (at most one page of whole objects is alive); an expired continue
        token (the list took too long) is a `GoneError`: list again. The version is the first
        page's: the API server serves every page of a list at that version."""
        method = self._method(resource, "list", namespace)
        kwargs: dict[str, Any] = (
            {"namespace": namespace} if resource.namespaced and namespace else {}
        )
        items: list[KubeObject] = []
        version = ""
        token = ""
        while True:
            # Handed on as it is, not kept in a local: the page is let go when `_take_page` returns.
            page_version, token = _take_page(
                await self._call(
                    f"list {resource.plural}",
                    method,
                    limit=self._page_size,
                    **({"_continue": token} if token else {}),
                    **kwargs,
                ),
                resource,
                transform,
                items,
            )
            version = version or page_version
            if not token:
                return ObjectList(items, version)

    async def watch(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        resource_version: str,
        timeout: float = 300.0,
    ) -> AsyncIterator[WatchEvent]:
        what = f"watch {resource.plural}"
        method = self._method(resource, "list", namespace)
        kwargs: dict[str, Any] = (
            {"namespace": namespace} if resource.namespaced and namespace else {}
        )
        try:
            resp = await method(
                watch=True,
                allow_watch_bookmarks=True,
                resource_version=resource_version,
                timeout_seconds=max(1, int(timeout)),
                _preload_content=False,
                # The server ends the watch after timeout_seconds; allow slack before giving up.
                _request_timeout=aiohttp.ClientTimeout(total=None, sock_read=timeout + 30),
                **kwargs,
            )
        except k8s.ApiException as exc:
            raise translate_status(exc.status or 0, exc.body, what, exc.headers) from exc
        except (ApiValueError, ApiTypeError) as exc:
            raise InvalidObjectError(f"{what}: {exc}") from exc
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise UnavailableError(f"{what}: {type(exc).__name__}: {exc}") from exc
        try:
            if not 200 <= resp.status <= 299:
                raw = await resp.read()
                try:
                    body: Any = json.loads(raw)
                except ValueError:
                    body = raw.decode(errors="replace")
                raise translate_status(resp.status, body, what, resp.headers)
            while True:
                try:
                    line = await resp.content.readline()
                except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                    raise UnavailableError(f"{what}: stream broke: {exc}") from exc
                if not line:
                    return
                if not line.strip():
                    continue
                yield _parse_event(line, resource, what)
        finally:
            resp.release()

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> KubeObject:
        check_name(resource, name, namespace)
        method = self._method(resource, "read", namespace)
        return await self._call(
            f"get {resource.kind} {name}", method, name, **self._scope_args(resource, namespace)
        )

    async def create(self, resource: Resource, obj: KubeObject) -> KubeObject:
        check_scope(resource, obj)
        method = self._method(resource, "create", namespace_of(obj))
        body = {"kind": resource.kind, "apiVersion": resource.api_version, **obj}
        return await self._call(
            f"create {resource.kind} {name_of(obj)}",
            method,
            **self._scope_args(resource, namespace_of(obj)),
            body=body,
        )

    async def _replace(self, resource: Resource, obj: KubeObject, suffix: str) -> KubeObject:
        check_scope(resource, obj)
        name, ns = name_of(obj), namespace_of(obj)
        method = self._method(resource, "replace", ns, suffix)
        body = {"kind": resource.kind, "apiVersion": resource.api_version, **obj}
        return await self._call(
            f"replace{suffix} {resource.kind} {name}",
            method,
            name,
            **self._scope_args(resource, ns),
            body=body,
        )

    async def replace(self, resource: Resource, obj: KubeObject) -> KubeObject:
        return await self._replace(resource, obj, "")

    async def replace_status(self, resource: Resource, obj: KubeObject) -> KubeObject:
        if not resource.has_status:
            raise InvalidObjectError(f"{resource.kind} has no status subresource")
        return await self._replace(resource, obj, "_status")

    async def delete(self, resource: Resource, name: str, namespace: str | None = None) -> None:
        check_name(resource, name, namespace)
        method = self._method(resource, "delete", namespace)
        await self._call(
            f"delete {resource.kind} {name}", method, name, **self._scope_args(resource, namespace)
        )


def _take_page(
    page: KubeObject, resource: Resource, transform: Transform | None, items: list[KubeObject]
) -> tuple[str, str]:
    """Append a list page's objects (transformed) to `items`; (its version, continue token)."""
    meta = page.get("metadata") or {}
    for item in page.get("items") or []:
        # List items omit kind/apiVersion; make each object self-describing.
        item.setdefault("kind", resource.kind)
        item.setdefault("apiVersion", resource.api_version)
        items.append(transform(item) if transform is not None else item)
    return str(meta.get("resourceVersion", "")), str(meta.get("continue") or "")


def _parse_event(line: bytes, resource: Resource, what: str) -> WatchEvent:
    try:
        raw = json.loads(line)
        kind = raw["type"]
        obj = raw["object"]
    except (ValueError, KeyError, TypeError) as exc:
        raise UnavailableError(f"{what}: malformed watch event {line[:200]!r}") from exc
    if kind == "ERROR":
        status = obj.get("code", 0) if isinstance(obj, dict) else 0
        raise translate_status(int(status or 500), obj, what)
    try:
        event_type = EventType(kind)
    except ValueError as exc:
        raise UnavailableError(f"{what}: unknown watch event type {kind!r}") from exc
    if not isinstance(obj, dict):
        raise UnavailableError(f"{what}: watch event without an object")
    if event_type is not EventType.BOOKMARK:
        obj.setdefault("kind", resource.kind)
        obj.setdefault("apiVersion", resource.api_version)
    rv = obj.get("metadata", {}).get("resourceVersion", "")
    return WatchEvent(event_type, obj, str(rv))
