"""`Store` on NATS JetStream KV: standalone mode's "API server".

Layout: one bucket per resource (`gpudra-claims`, `gpudra-slices`, ...; see `BUCKETS`), key
`<namespace>.<name>` for namespaced objects (namespaces have no dots, so the first dot splits) and
`<name>` for cluster-scoped ones, value the object's v1 JSON without `resourceVersion`.

Promises (the `Store` contract, mapped onto KV):
- `resourceVersion` is the KV revision (the bucket stream's sequence number); every write is a
  compare-and-set on the key's last revision (`Nats-Expected-Last-Subject-Sequence`), so a stale
  `resourceVersion` gives `ConflictError` and two writers can never both win.
- A delete writes a tombstone that carries the deleted object, so watchers get DELETED with it.
- `watch` resumes from any revision: it replays the latest entry of every key changed after it
  (intermediate values of a key are compacted away, as an API server's watch cache may). The KV
  keeps tombstones, so no deletion is missed and `GoneError` is never raised.
- The API server's write rules (status subresource, generation, finalizers) are those of
  `semantics`.
- An update that names the resourceVersion it read costs one round trip, not two: what a key held
  at a revision never changes, so the content of the revisions this store read or wrote lately is
  kept (`_RECENT` keys) and used as the old object; the revision-checked write itself then proves
  the key is still at that revision. A write refused on that path is decided again the slow way
  (read, compare), so the answer (NotFound, Conflict) is the same as without the memo. Revisions a
  watch of this store delivers are remembered too (`seen_at` answers from them without a read).
- A create costs one round trip when the name was never used: it is written expecting no entry
  under the key; only a refusal (the object exists, or a tombstone of it does) reads the key to
  tell AlreadyExists from a re-creation over the tombstone. While the connection is down, the
  read goes first, as before (a failed create must not land after the reconnect).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy, Header

from gpudra_bus.connection import wrong_revision
from gpudra_bus.errors import InvalidSubjectError
from gpudra_bus.streams import (
    CLAIM_TEMPLATES_BUCKET,
    CLAIMS_BUCKET,
    DEVICE_CLASSES_BUCKET,
    PODS_BUCKET,
    SLICES_BUCKET,
)
from gpudra_bus.subjects import validate_namespace
from gpudra_kube import semantics
from gpudra_kube.errors import (
    AlreadyExistsError,
    ConflictError,
    InvalidObjectError,
    NotFoundError,
    UnavailableError,
)
from gpudra_kube.resources import (
    DEVICE_CLASSES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    KubeObject,
    Resource,
    check_name,
    check_scope,
    name_of,
    namespace_of,
)
from gpudra_kube.store import EventType, ObjectList, WatchEvent

BUCKETS: Mapping[Resource, str] = {
    RESOURCE_CLAIMS: CLAIMS_BUCKET,
    RESOURCE_CLAIM_TEMPLATES: CLAIM_TEMPLATES_BUCKET,
    RESOURCE_SLICES: SLICES_BUCKET,
    DEVICE_CLASSES: DEVICE_CLASSES_BUCKET,
    PODS: PODS_BUCKET,
}

_KV_OP = "KV-Operation"
_EVENT_HEADER = "Gpudra-Event"
_TOMBSTONES = ("DEL", "PURGE")
# Keys whose last read or written content is remembered (see the module docstring).
_RECENT = 4096


def object_key(resource: Resource, name: str, namespace: str | None) -> str:
    """The KV key of an object. Names are validated first (`check_name`), which also keeps NATS
    wildcards out of keys: a name like `>` must not read or write some other object."""
    check_name(resource, name, namespace)
    return f"{namespace}.{name}" if resource.namespaced else name


class KvStore:
    """`Store` backed by JetStream KV buckets (see the module docstring).

    The buckets must exist: create them with `gpudra_bus.ensure_buckets` at start.
    """

    def __init__(
        self,
        nc: Client,
        *,
        buckets: Mapping[Resource, str] = BUCKETS,
        request_timeout: float = 5.0,
    ) -> None:
        self._nc = nc
        self._js = nc.jetstream(timeout=request_timeout)
        self._buckets = dict(buckets)
        self._timeout = request_timeout
        # (bucket, key) -> (revision, stored JSON at that revision), oldest first
        self._recent: dict[tuple[str, str], tuple[int, bytes]] = {}

    async def close(self) -> None:
        """Nothing to release: the NATS connection belongs to the caller."""

    def _bucket(self, resource: Resource) -> str:
        try:
            return self._buckets[resource]
        except KeyError as exc:
            raise InvalidObjectError(f"no KV bucket configured for {resource.kind}") from exc

    def _stream(self, resource: Resource) -> str:
        return f"KV_{self._bucket(resource)}"

    def _subject(self, resource: Resource, key: str) -> str:
        return f"$KV.{self._bucket(resource)}.{key}"

    def _remember(self, resource: Resource, key: str, seq: int, data: bytes | None) -> None:
        where = (self._bucket(resource), key)
        self._recent.pop(where, None)
        if data is None or not seq:
            return
        self._recent[where] = (seq, data)
        if len(self._recent) > _RECENT:
            del self._recent[next(iter(self._recent))]

    def _seen(self, resource: Resource, subject: str, seq: int, data: bytes | None) -> None:
        """Remember what a watch delivered, unless this store knows a later revision already."""
        key = subject.removeprefix(f"$KV.{self._bucket(resource)}.")
        known = self._recent.get((self._bucket(resource), key))
        if known is None or known[0] < seq:
            self._remember(resource, key, seq, data)

    def seen_at(
        self, resource: Resource, name: str, namespace: str | None, resource_version: str
    ) -> KubeObject | None:
        """The object at `resource_version` when this store read, wrote or watched that revision
        lately (no round trip), else None. What a key held at a revision never changes, but the
        key may have moved on since: a write built on the answer must name the revision."""
        key = object_key(resource, name, namespace)
        return self._remembered(resource, key, resource_version)

    def _remembered(self, resource: Resource, key: str, wanted: object) -> KubeObject | None:
        """The object at revision `wanted` when this store saw that revision lately."""
        if wanted in (None, ""):
            return None
        entry = self._recent.get((self._bucket(resource), key))
        if entry is None or str(entry[0]) != str(wanted):
            return None
        return _decode(entry[1], entry[0], resource, key)

    # -- reads ---------------------------------------------------------------------------------

    async def _last(self, resource: Resource, key: str) -> tuple[int, KubeObject | None]:
        """(revision, object) of the key's last entry; object None for a tombstone/no entry."""
        try:
            msg = await self._js.get_last_msg(self._stream(resource), self._subject(resource, key))
        except nats.js.errors.NotFoundError:
            return 0, None
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            raise UnavailableError(f"read {resource.kind} {key}: {exc}") from exc
        seq = int(msg.seq or 0)
        if (msg.headers or {}).get(_KV_OP) in _TOMBSTONES:
            self._remember(resource, key, seq, None)
            return seq, None
        obj = _decode(msg.data, seq, resource, key)
        self._remember(resource, key, seq, msg.data)
        return seq, obj

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> KubeObject:
        key = object_key(resource, name, namespace)
        _, obj = await self._last(resource, key)
        if obj is None:
            raise NotFoundError(f"{resource.kind} {key} not found", status=404)
        return obj

    async def list(self, resource: Resource, namespace: str | None = None) -> ObjectList:
        try:
            info = await self._js.stream_info(self._stream(resource))
        except nats.js.errors.NotFoundError as exc:
            raise InvalidObjectError(f"KV bucket for {resource.kind} does not exist") from exc
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            raise UnavailableError(f"list {resource.plural}: {exc}") from exc
        version = int(info.state.last_seq)
        items: list[KubeObject] = []
        if info.state.messages:
            async for msg in self._scan(resource, namespace, DeliverPolicy.LAST_PER_SUBJECT, None):
                seq = msg.metadata.sequence.stream
                version = max(version, seq)
                if (msg.headers or {}).get(_KV_OP) not in _TOMBSTONES:
                    items.append(_decode(msg.data, seq, resource, msg.subject))
                if msg.metadata.num_pending == 0:
                    break
        return ObjectList(items, str(version))

    async def _scan(
        self,
        resource: Resource,
        namespace: str | None,
        policy: DeliverPolicy,
        start: int | None,
        *,
        idle: float | None = None,
    ) -> AsyncIterator[Msg]:
        """Messages of an ordered consumer on the bucket (filtered to `namespace`)."""
        if resource.namespaced and namespace:
            try:
                pattern = f"{validate_namespace(namespace)}.>"
            except InvalidSubjectError as exc:
                raise InvalidObjectError(f"{resource.kind}: {exc}") from exc
        else:
            pattern = ">"
        config = ConsumerConfig(opt_start_seq=start) if start is not None else None
        try:
            sub = await self._js.subscribe(
                self._subject(resource, pattern),
                ordered_consumer=True,
                deliver_policy=policy,
                config=config,
                stream=self._stream(resource),
            )
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            raise UnavailableError(f"watch {resource.plural}: {exc}") from exc
        try:
            if idle is None:
                # A list: nothing matching means nothing will arrive; ask before waiting. (The
                # consumer's stream position may already be past non-matching messages, so
                # count what it delivered, not where it stands.)
                ci = await sub.consumer_info()
                if ci.num_pending == 0 and (ci.delivered is None or not ci.delivered.consumer_seq):
                    return
            while True:
                try:
                    yield await sub.next_msg(timeout=idle if idle is not None else self._timeout)
                except nats.errors.TimeoutError:
                    if idle is None:
                        raise UnavailableError(f"list {resource.plural}: timed out") from None
                    return
                except (nats.errors.Error, OSError) as exc:
                    raise UnavailableError(f"watch {resource.plural}: {exc}") from exc
        finally:
            with contextlib.suppress(nats.errors.Error, OSError, TimeoutError):
                await sub.unsubscribe()

    async def watch(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        resource_version: str,
        timeout: float = 300.0,
    ) -> AsyncIterator[WatchEvent]:
        try:
            after = int(resource_version or 0)
        except ValueError as exc:
            raise InvalidObjectError(f"invalid resourceVersion {resource_version!r}") from exc
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        stream = self._scan(
            resource, namespace, DeliverPolicy.BY_START_SEQUENCE, after + 1, idle=timeout
        )
        try:
            async for msg in stream:
                seq = msg.metadata.sequence.stream
                headers = msg.headers or {}
                self._seen(
                    resource,
                    msg.subject,
                    seq,
                    None if headers.get(_KV_OP) in _TOMBSTONES else msg.data,
                )
                if headers.get(_KV_OP) in _TOMBSTONES:
                    gone = _decode(msg.data, seq, resource, msg.subject) if msg.data else None
                    if gone is None:
                        gone = _stub(resource, msg.subject, self._bucket(resource), seq)
                    yield WatchEvent(EventType.DELETED, gone, str(seq))
                else:
                    obj = _decode(msg.data, seq, resource, msg.subject)
                    kind = (
                        EventType.ADDED
                        if headers.get(_EVENT_HEADER) == "ADDED"
                        else EventType.MODIFIED
                    )
                    yield WatchEvent(kind, obj, str(seq))
                if loop.time() >= deadline:
                    return
        finally:
            await stream.aclose()  # type: ignore[attr-defined]

    # -- writes --------------------------------------------------------------------------------

    async def _write(
        self, resource: Resource, key: str, obj: KubeObject, last: int, event: str
    ) -> int:
        stored = {k: v for k, v in obj.items()}
        stored["metadata"] = {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}
        headers = {Header.EXPECTED_LAST_SUBJECT_SEQUENCE.value: str(last)}
        if event == "DELETED":
            headers[_KV_OP] = "DEL"
        else:
            headers[_EVENT_HEADER] = event
        data = json.dumps(stored, separators=(",", ":")).encode()
        try:
            ack = await self._js.publish(
                self._subject(resource, key), data, headers=headers, stream=self._stream(resource)
            )
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            if wrong_revision(exc):
                raise ConflictError(
                    f"{resource.kind} {key} changed concurrently; re-read and retry", status=409
                ) from exc
            raise UnavailableError(f"write {resource.kind} {key}: {exc}") from exc
        obj["metadata"]["resourceVersion"] = str(ack.seq)
        self._remember(resource, key, int(ack.seq), None if event == "DELETED" else data)
        return int(ack.seq)

    async def create(self, resource: Resource, obj: KubeObject) -> KubeObject:
        new = semantics.prepare_create(resource, obj)
        key = object_key(resource, name_of(new), namespace_of(new))
        # A name never used is the common case: a write that expects no entry at all under the
        # key (revision-checked by the server) saves the read; a refusal (the name exists, or its
        # tombstone does) takes the read that says which. Not while disconnected: nats-py would
        # keep the write and send it after the reconnect, so a create that failed would land.
        if self._nc.is_connected:
            with contextlib.suppress(ConflictError):
                await self._write(resource, key, new, 0, "ADDED")
                return new
        last, existing = await self._last(resource, key)
        if existing is not None:
            raise AlreadyExistsError(f"{resource.kind} {key} already exists", status=409)
        try:
            await self._write(resource, key, new, last, "ADDED")
        except ConflictError as exc:  # created (or re-created) by someone else meanwhile
            raise AlreadyExistsError(f"{resource.kind} {key} already exists", status=409) from exc
        return new

    async def _current(self, resource: Resource, obj: KubeObject) -> tuple[str, int, KubeObject]:
        check_scope(resource, obj)
        key = object_key(resource, name_of(obj), namespace_of(obj))
        last, old = await self._last(resource, key)
        if old is None:
            raise NotFoundError(f"{resource.kind} {key} not found", status=404)
        wanted = obj["metadata"].get("resourceVersion")
        if wanted not in (None, "") and str(wanted) != str(last):
            raise ConflictError(
                f"{resource.kind} {key}: resourceVersion {wanted} is stale (now {last})", status=409
            )
        return key, last, old

    async def _store(self, resource: Resource, key: str, new: KubeObject, last: int) -> KubeObject:
        await self._write(
            resource, key, new, last, "DELETED" if semantics.is_gone(new) else "MODIFIED"
        )
        return new

    async def _update(
        self,
        resource: Resource,
        obj: KubeObject,
        merge: Callable[[Resource, KubeObject, KubeObject], KubeObject],
    ) -> KubeObject:
        check_scope(resource, obj)
        key = object_key(resource, name_of(obj), namespace_of(obj))
        wanted = obj["metadata"].get("resourceVersion")
        old = self._remembered(resource, key, wanted)
        if old is not None:
            try:
                return await self._store(resource, key, merge(resource, old, obj), int(wanted))
            except ConflictError:
                pass  # moved on (or gone) since: the slow path says which
        key, last, old = await self._current(resource, obj)
        return await self._store(resource, key, merge(resource, old, obj), last)

    async def replace(self, resource: Resource, obj: KubeObject) -> KubeObject:
        return await self._update(resource, obj, semantics.merge_update)

    async def replace_status(self, resource: Resource, obj: KubeObject) -> KubeObject:
        return await self._update(resource, obj, semantics.merge_status)

    async def delete(self, resource: Resource, name: str, namespace: str | None = None) -> None:
        key = object_key(resource, name, namespace)
        for _ in range(10):
            last, old = await self._last(resource, key)
            if old is None:
                raise NotFoundError(f"{resource.kind} {key} not found", status=404)
            if old["metadata"].get("finalizers"):
                if old["metadata"].get("deletionTimestamp"):
                    return
                new, event = semantics.mark_deleted(old), "MODIFIED"
            else:
                new, event = old, "DELETED"
            try:
                await self._write(resource, key, new, last, event)
                return
            except ConflictError:
                continue  # changed between read and write: decide again on the new state
        raise ConflictError(f"{resource.kind} {key} keeps changing; delete not applied", status=409)


def _decode(data: bytes | None, seq: int, resource: Resource, where: str) -> KubeObject:
    try:
        obj: Any = json.loads(data or b"")
    except ValueError as exc:
        raise UnavailableError(f"{resource.kind} at {where} is not JSON") from exc
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
        raise UnavailableError(f"{resource.kind} at {where} is not an object with metadata")
    obj.setdefault("kind", resource.kind)
    obj.setdefault("apiVersion", resource.api_version)
    obj["metadata"]["resourceVersion"] = str(seq)
    return obj


def _stub(resource: Resource, subject: str, bucket: str, seq: int) -> KubeObject:
    # A tombstone written by someone else (plain kv.delete) carries no object: rebuild the identity.
    key = subject.removeprefix(f"$KV.{bucket}.")
    namespace, _, name = key.partition(".") if resource.namespaced else ("", "", key)
    meta: dict[str, Any] = {"name": name, "resourceVersion": str(seq)}
    if namespace:
        meta["namespace"] = namespace
    return {"kind": resource.kind, "apiVersion": resource.api_version, "metadata": meta}
