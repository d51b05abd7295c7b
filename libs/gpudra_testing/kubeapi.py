"""An HTTP-level fake of the Kubernetes API server, for tests of code that talks to it.

It serves, on 127.0.0.1 and a kernel-chosen port (plain HTTP, or TLS with `ssl_context`), the
REST paths of `resource.k8s.io/v1` resourceclaims (namespaced, status subresource), resourceclaimtemplates, resourceslices and
deviceclasses (cluster-scoped), core `v1` pods and nodes (cluster-scoped) and `events.k8s.io/v1` events — with the API server's rules that client code
depends on:
- list returns a collection `resourceVersion` and pages with `limit`/`continue` (a token expires
  with 410 as soon as anything changed: the fake keeps no snapshots); watch streams ADDED/MODIFIED/DELETED after a given
  version, BOOKMARK events when asked (`allowWatchBookmarks`), ends after `timeoutSeconds`, and
  answers an ERROR event with a 410 `Expired` Status for a version older than the last
  `compact()` — exactly what an informer must handle by relisting — and with the watch cache's
  504 "Too large resource version" for a version beyond the current one;
- create assigns uid, resourceVersion, generation and creationTimestamp, and clears status where a
  status subresource exists; `generateName` is honoured; a taken name is 409 AlreadyExists;
- update (PUT) with a stale `metadata.resourceVersion` is 409 Conflict; the main resource ignores
  `status` and the `/status` subresource changes only `status`; generation grows when spec changes;
- delete of an object with finalizers only sets `deletionTimestamp`; removing the last finalizer
  then deletes it;
- with `validate_version` set, every object written is checked against the real OpenAPI schema of
  that Kubernetes version (kubernetes-validate, strict: unknown fields fail) and rejected with 422.
- with `accept_tokens` called, only requests bearing one of those tokens are served; any other
  (an expired or rotated-away service-account token) is 401 Unauthorized, as authentication
  answers before anything else. An open watch is not cut: the server authenticates a request
  once, when it starts.
Test hooks: `inject_error`, `clear_faults`, `compact`, `close_watches`, `put` (a write by "someone else", e.g.
kube-scheduler), `accept_tokens`, `requests` (what was called), `client_certificates` (the
client certificates presented, where `ssl_context` asks for them) and `presented` (each
request's bearer token and client certificate).

It is not an API server: no selectors, patches, admission, RBAC or defaulting beyond the above.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import json
import secrets
import ssl
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes_validate
from aiohttp import web

from gpudra_kube.resources import ALL_RESOURCES, KubeObject, Resource

Key = tuple[str, str]


@dataclass
class _Event:
    rv: int
    resource: Resource
    type: str
    object: KubeObject


@dataclass
class _Fault:
    status: int
    reason: str
    method: str | None
    path_contains: str | None
    times: int
    retry_after: int | None = None


class FakeKubeApi:
    """See the module docstring. Use as `async with FakeKubeApi() as api:`."""

    def __init__(
        self,
        *,
        validate_version: str | None = "1.34",
        bookmark_interval: float = 0.2,
        resources: tuple[Resource, ...] = ALL_RESOURCES,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.validate_version = validate_version
        self._ssl_context = ssl_context  # None: plain HTTP
        self.bookmark_interval = bookmark_interval
        self._resources = resources
        self._objects: dict[Resource, dict[Key, KubeObject]] = {r: {} for r in resources}
        self._events: list[_Event] = []
        self._rv = 100
        self._compacted = 0
        self._changed = asyncio.Condition()
        self._faults: list[_Fault] = []
        self._closing = 0
        self.requests: list[tuple[str, str]] = []
        # Per request over TLS with a verified client certificate: its subject's common name.
        self.client_certificates: list[str] = []
        # Per request: the bearer token it carried and its client certificate's common name
        # (None where it had none), for tests of which credential a client presents.
        self.presented: list[tuple[str | None, str | None]] = []
        self._tokens: frozenset[str] | None = None  # None: every request is authenticated
        self._runner: web.AppRunner | None = None
        self.url = ""

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> FakeKubeApi:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self._ssl_context)
        await site.start()
        server = getattr(site, "_server", None)
        port = server.sockets[0].getsockname()[1] if server and server.sockets else 0
        scheme = "http" if self._ssl_context is None else "https"
        self.url = f"{scheme}://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        await self.close_watches()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeKubeApi:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def write_kubeconfig(self, path: Path, *, user: Mapping[str, Any] | None = None) -> Path:
        """A kubeconfig (JSON is valid YAML) whose current context points at this server;
        `user`: the user's credentials (default: a fixed `token`), e.g. `{"tokenFile": ...}`."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": dict(user or {"token": "fake-token"})}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
            "current-context": "fake",
        }
        path.write_text(json.dumps(config), encoding="utf-8")
        return path

    # -- test hooks ------------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self._rv

    def objects(self, resource: Resource) -> list[KubeObject]:
        return [copy.deepcopy(o) for o in self._objects[resource].values()]

    def inject_error(
        self,
        status: int,
        *,
        reason: str = "",
        method: str | None = None,
        path_contains: str | None = None,
        times: int = 1,
        retry_after: int | None = None,
    ) -> None:
        """Answer the next `times` matching requests with `status` (a Status body); with
        `retry_after`, as the API server throttles (429: priority and fairness, or a server
        shutting down): a `Retry-After` header and `details.retryAfterSeconds`."""
        self._faults.append(_Fault(status, reason, method, path_contains, times, retry_after))

    def accept_tokens(self, *tokens: str) -> None:
        """From now on serve only requests with `Authorization: Bearer <one of tokens>`; others
        get 401 Unauthorized (the API server's answer to an expired or unknown token)."""
        self._tokens = frozenset(tokens)

    def clear_faults(self) -> None:
        """Forget every injected fault that has not fired yet."""
        self._faults.clear()

    def compact(self) -> None:
        """Forget history: watches from any version before now get 410 Gone."""
        self._compacted = self._rv

    async def close_watches(self) -> None:
        """End every open watch (as an API server restart or a load balancer would)."""
        self._closing += 1
        async with self._changed:
            self._changed.notify_all()

    async def put(self, resource: Resource, obj: KubeObject) -> KubeObject:
        """Store `obj` as another client would (create or unconditional update, status kept)."""
        key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        stored = copy.deepcopy(obj)
        stored.setdefault("kind", resource.kind)
        stored.setdefault("apiVersion", resource.api_version)
        meta = stored["metadata"]
        old = self._objects[resource].get(key)
        meta.setdefault("uid", old["metadata"]["uid"] if old else str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _now())
        meta.setdefault("generation", 1)
        await self._commit(resource, key, stored, "MODIFIED" if old else "ADDED")
        return copy.deepcopy(stored)

    # -- HTTP ------------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.method, request.path))
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        names = [v for rdn in (peer or {}).get("subject", ()) for k, v in rdn if k == "commonName"]
        self.client_certificates.extend(names[:1])
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        bearer = token if scheme.lower() == "bearer" else None
        self.presented.append((bearer, names[0] if names else None))
        if self._tokens is not None and bearer not in self._tokens:
            return _status(401, "Unauthorized", "Unauthorized")
        fault = self._take_fault(request)
        if fault is not None:
            body = _status_body(fault.status, fault.reason or "InternalError", "injected fault")
            if fault.retry_after is None:
                return _json(fault.status, body)
            body["details"] = {"retryAfterSeconds": fault.retry_after}
            return web.Response(
                status=fault.status,
                text=json.dumps(body),
                content_type="application/json",
                headers={"Retry-After": str(fault.retry_after)},
            )
        try:
            resource, namespace, name, sub = self._route(request.path)
        except LookupError as exc:
            return _status(404, "NotFound", str(exc))
        try:
            if request.method == "GET" and name is None:
                if request.query.get("watch", "").lower() in ("1", "true"):
                    return await self._watch(request, resource, namespace)
                return self._list(resource, namespace, request.query)
            if request.method == "GET" and name is not None:
                return _json(200, self._get(resource, namespace, name))
            if request.method == "POST" and name is None and sub is None:
                return _json(201, await self._create(resource, namespace, await _body(request)))
            if request.method == "PUT" and name is not None:
                body = await _body(request)
                return _json(200, await self._update(resource, namespace, name, body, sub))
            if request.method == "DELETE" and name is not None and sub is None:
                return _json(200, await self._delete(resource, namespace, name))
        except _HttpError as err:
            return _status(err.code, err.reason, err.message)
        return _status(405, "MethodNotAllowed", f"{request.method} {request.path}")

    def _take_fault(self, request: web.Request) -> _Fault | None:
        for fault in self._faults:
            if fault.method not in (None, request.method):
                continue
            if fault.path_contains is not None and fault.path_contains not in request.path_qs:
                continue
            fault.times -= 1
            if fault.times <= 0:
                self._faults.remove(fault)
            return fault
        return None

    def _route(self, path: str) -> tuple[Resource, str | None, str | None, str | None]:
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            api_version, rest = "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            api_version, rest = f"{parts[1]}/{parts[2]}", parts[3:]
        else:
            raise LookupError(f"no such path {path}")
        namespace = None
        if len(rest) >= 2 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise LookupError(f"no such path {path}")
        for r in self._resources:
            if r.api_version == api_version and r.plural == rest[0]:
                break
        else:
            raise LookupError(f"no resource {rest[0]} in {api_version}")
        if r.namespaced is False and namespace is not None:
            raise LookupError(f"{r.plural} is cluster-scoped")
        name = rest[1] if len(rest) >= 2 else None
        sub = rest[2] if len(rest) == 3 else None
        if sub is not None and (sub != "status" or not r.has_status):
            raise LookupError(f"no subresource {sub} of {r.plural}")
        if r.namespaced and name is not None and namespace is None:
            raise LookupError(f"{r.plural} is namespaced")
        return r, namespace, name, sub

    # -- verbs -----------------------------------------------------------------------------------

    def _list(
        self, resource: Resource, namespace: str | None, query: Mapping[str, str]
    ) -> web.Response:
        items = []
        for (ns, _), obj in sorted(self._objects[resource].items()):
            if namespace is None or ns == namespace:
                item = copy.deepcopy(obj)
                # Like the real server: items of a typed list carry no kind/apiVersion.
                item.pop("kind", None)
                item.pop("apiVersion", None)
                items.append(item)
        rv, offset = self._rv, 0
        token = query.get("continue", "")
        if token:
            try:
                rv_text, _, offset_text = base64.urlsafe_b64decode(token).decode().partition(":")
                rv, offset = int(rv_text), int(offset_text)
            except ValueError as exc:
                raise _HttpError(400, "BadRequest", f"invalid continue token {token!r}") from exc
            if rv != self._rv:
                # This fake keeps no snapshots: any change since the first page expires the token.
                raise _HttpError(410, "Expired", "the continue token has expired; list again")
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        limit_text = query.get("limit", "")
        if limit_text:
            try:
                limit = int(limit_text)
            except ValueError as exc:
                raise _HttpError(400, "BadRequest", f"invalid limit {limit_text!r}") from exc
            if limit > 0 and offset + limit < len(items):
                meta["continue"] = base64.urlsafe_b64encode(
                    f"{rv}:{offset + limit}".encode()
                ).decode()
                meta["remainingItemCount"] = len(items) - offset - limit
            items = items[offset : offset + limit] if limit > 0 else items[offset:]
        else:
            items = items[offset:]
        return _json(
            200,
            {
                "kind": f"{resource.kind}List",
                "apiVersion": resource.api_version,
                "metadata": meta,
                "items": items,
            },
        )

    def _get(self, resource: Resource, namespace: str | None, name: str) -> KubeObject:
        obj = self._objects[resource].get((namespace or "", name))
        if obj is None:
            raise _HttpError(404, "NotFound", f'{resource.plural} "{name}" not found')
        return copy.deepcopy(obj)

    async def _create(self, resource: Resource, namespace: str | None, body: Any) -> KubeObject:
        obj = self._check_body(resource, body, namespace)
        meta = obj["metadata"]
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not isinstance(prefix, str) or not prefix:
                raise _HttpError(422, "Invalid", "metadata.name or generateName is required")
            meta["name"] = prefix + secrets.token_hex(3)[:5]
        for field in ("resourceVersion", "deletionTimestamp"):
            meta.pop(field, None)
        meta["uid"] = str(uuid.uuid4())
        meta["generation"] = 1
        meta["creationTimestamp"] = _now()
        if resource.has_status:
            obj.pop("status", None)
        # Like the API server: validation first, then the name check.
        self._validate(resource, obj)
        key = (namespace or "", meta["name"])
        if key in self._objects[resource]:
            raise _HttpError(
                409, "AlreadyExists", f'{resource.plural} "{meta["name"]}" already exists'
            )
        await self._commit(resource, key, obj, "ADDED")
        return copy.deepcopy(obj)

    async def _update(
        self, resource: Resource, namespace: str | None, name: str, body: Any, sub: str | None
    ) -> KubeObject:
        obj = self._check_body(resource, body, namespace)
        if obj["metadata"].get("name") != name:
            raise _HttpError(400, "BadRequest", "metadata.name does not match the URL")
        key = (namespace or "", name)
        old = self._objects[resource].get(key)
        if old is None:
            raise _HttpError(404, "NotFound", f'{resource.plural} "{name}" not found')
        rv = obj["metadata"].get("resourceVersion")
        if rv not in (None, "") and rv != old["metadata"]["resourceVersion"]:
            raise _HttpError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {resource.plural} "{name}": the object has been '
                "modified; please apply your changes to the latest version and try again",
            )
        if sub == "status":
            new = copy.deepcopy(old)
            if "status" in obj:
                new["status"] = obj["status"]
            else:
                new.pop("status", None)
        else:
            new = obj
            meta = new["metadata"]
            for field in ("uid", "creationTimestamp", "deletionTimestamp", "generation"):
                if field in old["metadata"]:
                    meta[field] = old["metadata"][field]
                else:
                    meta.pop(field, None)
            if resource.has_status:
                if "status" in old:
                    new["status"] = old["status"]
                else:
                    new.pop("status", None)
            if new.get("spec") != old.get("spec"):
                meta["generation"] = int(old["metadata"].get("generation", 1)) + 1
        self._validate(resource, new)
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            await self._commit(resource, key, new, "DELETED")
        else:
            await self._commit(resource, key, new, "MODIFIED")
        return copy.deepcopy(new)

    async def _delete(self, resource: Resource, namespace: str | None, name: str) -> KubeObject:
        key = (namespace or "", name)
        old = self._objects[resource].get(key)
        if old is None:
            raise _HttpError(404, "NotFound", f'{resource.plural} "{name}" not found')
        obj = copy.deepcopy(old)
        if obj["metadata"].get("finalizers"):
            if not obj["metadata"].get("deletionTimestamp"):
                obj["metadata"]["deletionTimestamp"] = _now()
                await self._commit(resource, key, obj, "MODIFIED")
            return copy.deepcopy(obj)
        await self._commit(resource, key, obj, "DELETED")
        return copy.deepcopy(obj)

    async def _watch(
        self, request: web.Request, resource: Resource, namespace: str | None
    ) -> web.StreamResponse:
        try:
            timeout = float(request.query.get("timeoutSeconds", "1800"))
        except ValueError:
            return _status(400, "BadRequest", "timeoutSeconds must be a number")
        bookmarks = request.query.get("allowWatchBookmarks", "").lower() in ("1", "true")
        since = request.query.get("resourceVersion", "")
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        closing = self._closing

        async def send(kind: str, obj: KubeObject) -> None:
            await resp.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")

        def matches(ev: _Event) -> bool:
            return ev.resource is resource and (
                namespace is None or ev.object["metadata"].get("namespace") == namespace
            )

        if since in ("", "0"):
            start = self._rv
            for (ns, _), obj in sorted(self._objects[resource].items()):
                if namespace is None or ns == namespace:
                    await send("ADDED", copy.deepcopy(obj))
        else:
            try:
                start = int(since)
            except ValueError:
                return _status(400, "BadRequest", f"invalid resourceVersion {since!r}")
            if start < self._compacted:
                await send(
                    "ERROR", _status_body(410, "Expired", f"too old resource version: {start}")
                )
                return resp
            if start > self._rv:
                # The watch cache's answer (after its short wait) to a version it has not
                # reached, e.g. after an etcd restore: a 504 whose cause names the version.
                body = _status_body(
                    504,
                    "Timeout",
                    f"Too large resource version: {start}, current: {self._rv}",
                )
                body["details"] = {
                    "causes": [
                        {
                            "reason": "ResourceVersionTooLarge",
                            "message": "Too large resource version",
                        }
                    ],
                    "retryAfterSeconds": 1,
                }
                await send("ERROR", body)
                return resp
        with contextlib.suppress(ConnectionResetError):
            while loop.time() < deadline and closing == self._closing:
                pending = [e for e in self._events if e.rv > start]
                for ev in pending:
                    if matches(ev):
                        await send(ev.type, copy.deepcopy(ev.object))
                    start = ev.rv
                async with self._changed:
                    if self._rv == start and closing == self._closing:
                        wait = min(self.bookmark_interval, max(0.0, deadline - loop.time()))
                        try:
                            await asyncio.wait_for(self._changed.wait(), wait)
                        except TimeoutError:
                            if bookmarks and loop.time() < deadline:
                                await send("BOOKMARK", _bookmark(resource, self._rv))
        return resp

    # -- helpers ---------------------------------------------------------------------------------

    def _check_body(self, resource: Resource, body: Any, namespace: str | None) -> KubeObject:
        if not isinstance(body, dict) or not isinstance(body.get("metadata"), dict):
            raise _HttpError(400, "BadRequest", "body must be an object with metadata")
        obj = copy.deepcopy(body)
        if obj.setdefault("kind", resource.kind) != resource.kind:
            raise _HttpError(400, "BadRequest", f"kind must be {resource.kind}")
        if obj.setdefault("apiVersion", resource.api_version) != resource.api_version:
            raise _HttpError(400, "BadRequest", f"apiVersion must be {resource.api_version}")
        meta = obj["metadata"]
        if resource.namespaced:
            if meta.get("namespace") not in (None, "", namespace):
                raise _HttpError(400, "BadRequest", "metadata.namespace does not match the URL")
            meta["namespace"] = namespace
        elif meta.get("namespace"):
            raise _HttpError(400, "BadRequest", f"{resource.kind} is cluster-scoped")
        return obj

    def _validate(self, resource: Resource, obj: KubeObject) -> None:
        if self.validate_version is None:
            return
        try:
            kubernetes_validate.validate(obj, self.validate_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = "/".join(str(p) for p in exc.path)
            raise _HttpError(
                422, "Invalid", f"{resource.kind} is invalid at {path}: {exc.message}"
            ) from exc

    async def _commit(self, resource: Resource, key: Key, obj: KubeObject, kind: str) -> None:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        if kind == "DELETED":
            self._objects[resource].pop(key, None)
        else:
            self._objects[resource][key] = obj
        self._events.append(_Event(self._rv, resource, kind, copy.deepcopy(obj)))
        async with self._changed:
            self._changed.notify_all()


class _HttpError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _bookmark(resource: Resource, rv: int) -> KubeObject:
    return {
        "kind": resource.kind,
        "apiVersion": resource.api_version,
        "metadata": {"resourceVersion": str(rv)},
    }


def _status_body(code: int, reason: str, message: str) -> KubeObject:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _status(code: int, reason: str, message: str) -> web.Response:
    return _json(code, _status_body(code, reason, message))


def _json(code: int, body: Any) -> web.Response:
    return web.Response(status=code, text=json.dumps(body), content_type="application/json")


async def _body(request: web.Request) -> Any:
    try:
        return await request.json()
    except ValueError as exc:
        raise _HttpError(400, "BadRequest", f"body is not JSON: {exc}") from exc
