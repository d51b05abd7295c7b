"""`Store` on NATS JetStream KV: standalone mode's "API server".

Layout: one bucket per resource (`gpudra-claims`, `gpudra-slices`, ...; see `BUCKETS`), key
`<namespace>.<name>` for namespaced objects (namespaces have no dots, so the first dot splits) and
`<name>` for cluster-scoped ones, value the object's v1 JSON without `resourceVersion`.

Promises (the `Store` contract, mapped onto KV):
- `resourceVersion` is the KV revision (the bucket stream's sequence number); every write is a
  compare-and-set on the key's last revision (`Nats-Expected-Last-Subject-Sequence`), so a stale
  `resourceVersion` gives `ConflictError` and two writers can never both win.
- A delete writes a tombstone that carries the deleted object, so watchers get DELETED with it.
- Tombstones do not stay for ever (each cost its object's JSON in the bucket and in every list):
  `compact` removes those older than a grace period (`collect_deleted` does it on a timer; in
  standalone mode the claim-writer runs it). Before it removes any, it raises the bucket's
  compacted revision (key `_compacted`, a key no object can have: no Kubernetes name or namespace
  starts with `_`) to at least theirs, so that it is a bound on every tombstone ever removed.
  Each removal is a purge of the key up to the tombstone's revision: a re-creation written after
  the scan stays, and any number of processes may compact at once.
- `watch` resumes from a revision: it replays the latest entry of every key changed after it
  (intermediate values of a key are compacted away, as an API server's watch cache may). From a
  revision older than the compacted revision it raises `GoneError` (410), as an API server does
  for a compacted revision, so the caller relists (`informer`) instead of missing a deletion.
  The check reads the compacted revision after the watch's consumer exists: a compaction that
  raised it later finds the watch already under way, and removes only tombstones older than the
  grace, which a current watch has long been sent. (A watch that falls more than the grace
  behind could miss one: the grace is minutes, a watch is normally milliseconds behind.) A watch
  from "0" is never gone: it knows no object whose deletion it could miss, and replays what is
  left.
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
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy, Header, PubAck

from gpudra_bus.connection import wrong_revision
from gpudra_bus.errors import InvalidSubjectError
from gpudra_bus.kvwatch import WATCH_HEARTBEAT, nothing_to_deliver, resume_quickly
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
    GoneError,
    InvalidObjectError,
    KubeRetryableError,
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
from gpudra_kube.store import EventType, ObjectList, Transform, WatchEvent

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
# The key of the bucket's compacted revision (see the module docstring).
_COMPACTED_KEY = "_compacted"

DELETED_GRACE = 600.0  # seconds a deleted object's tombstone is kept (`collect_deleted`)
COLLECT_INTERVAL = 60.0  # seconds between two passes of `collect_deleted`

log = logging.getLogger(__name__)
_UNREADABLE_LOGGED: set[tuple[str, int]] = set()  # (where, revision) of values logged as unreadable


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
        self._remember(resource, key, seq, msg.data if obj is not None else None)
        return seq, obj

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> KubeObject:
        key = object_key(resource, name, namespace)
        _, obj = await self._last(resource, key)
        if obj is None:
            raise NotFoundError(f"{resource.kind} {key} not found", status=404)
        return obj

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        transform: Transform | None = None,
    ) -> ObjectList:
        """Every object's last entry, one message at a time: each object is decoded and
        transformed before the next message is read (one whole object alive at a time)."""
        try:
            info = await self._js.stream_info(self._stream(resource))
        except nats.js.errors.NotFoundError as exc:
            raise InvalidObjectError(f"KV bucket for {resource.kind} does not exist") from exc
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            raise UnavailableError(f"list {resource.plural}: {exc}") from exc
        version = int(info.state.last_seq)
        items: list[KubeObject] = []
        compacted = self._subject(resource, _COMPACTED_KEY)
        if info.state.messages:
            scan = self._scan(resource, namespace, DeliverPolicy.LAST_PER_SUBJECT, None)
            # Closed here, not whenever the garbage collector gets to it: its subscription (and
            # nats-py's tasks for it) must not outlive the list.
            async with contextlib.aclosing(scan):  # type: ignore[type-var]
                async for msg in scan:
                    seq = msg.metadata.sequence.stream
                    version = max(version, seq)
                    tombstone = (msg.headers or {}).get(_KV_OP) in _TOMBSTONES
                    if not tombstone and msg.subject != compacted:
                        obj = _decode(msg.data, seq, resource, msg.subject)
                        if obj is not None:
                            items.append(transform(obj) if transform is not None else obj)
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
        fence: Callable[[], Awaitable[None]] | None = None,
    ) -> AsyncIterator[Msg]:
        """Messages of an ordered consumer on the bucket (filtered to `namespace`); `fence`, if
        given, runs once the consumer exists, before the first message."""
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
                # nats-py's 5 s default (and its check) left a watch quiet for up to 20 s after
                # a NATS restart; see gpudra_bus.kvwatch.
                idle_heartbeat=WATCH_HEARTBEAT,
                deliver_policy=policy,
                config=config,
                stream=self._stream(resource),
            )
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            raise UnavailableError(f"watch {resource.plural}: {exc}") from exc
        resume_quickly(sub, WATCH_HEARTBEAT)
        try:
            if fence is not None:
                await fence()
            # A list: nothing matching means nothing will arrive; ask before waiting. (The
            # consumer's stream position may already be past non-matching messages, so count
            # what it delivered, not where it stands.)
            if idle is None and nothing_to_deliver(await sub.consumer_info()):
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
        compacted = self._subject(resource, _COMPACTED_KEY)

        async def fence() -> None:
            if not after:
                return  # from the start: nothing known, so no deletion can be missed
            revision = await self._compacted(resource)
            if revision > after:
                raise GoneError(
                    f"watch {resource.plural}: resourceVersion {after} is older than the "
                    f"compacted revision {revision}",
                    status=410,
                )

        stream = self._scan(
            resource,
            namespace,
            DeliverPolicy.BY_START_SEQUENCE,
            after + 1,
            idle=timeout,
            fence=fence,
        )
        try:
            async for msg in stream:
                seq = msg.metadata.sequence.stream
                headers = msg.headers or {}
                if msg.subject == compacted:
                    continue  # bookkeeping, no object
                tombstone = headers.get(_KV_OP) in _TOMBSTONES
                obj = None if tombstone else _decode(msg.data, seq, resource, msg.subject)
                self._seen(resource, msg.subject, seq, msg.data if obj is not None else None)
                if obj is None:
                    gone = None
                    if tombstone and msg.data:
                        gone = _decode(msg.data, seq, resource, msg.subject)
                    if gone is None:
                        gone = _stub(resource, msg.subject, self._bucket(resource), seq)
                    yield WatchEvent(EventType.DELETED, gone, str(seq))
                else:
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

    # -- removing tombstones -------------------------------------------------------------------

    async def _compacted_entry(self, resource: Resource) -> tuple[int, int]:
        """(revision of the `_compacted` key, the compacted revision it holds); (0, 0) if none."""
        try:
            msg = await self._js.get_last_msg(
                self._stream(resource), self._subject(resource, _COMPACTED_KEY)
            )
        except nats.js.errors.NotFoundError:
            return 0, 0
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            raise UnavailableError(f"read compacted revision of {resource.plural}: {exc}") from exc
        try:
            revision = int(json.loads(msg.data or b"{}").get("revision", 0))
        except (ValueError, AttributeError, TypeError) as exc:
            raise UnavailableError(f"compacted revision of {resource.plural} unreadable") from exc
        return int(msg.seq or 0), revision

    async def _compacted(self, resource: Resource) -> int:
        """The bucket's compacted revision: every tombstone removed had this revision or a lower."""
        return (await self._compacted_entry(resource))[1]

    async def _raise_compacted(self, resource: Resource, revision: int) -> None:
        """Make the compacted revision at least `revision` (compare-and-set: it never goes down)."""
        for _ in range(10):
            last, current = await self._compacted_entry(resource)
            if current >= revision:
                return
            data = json.dumps({"revision": revision}).encode()
            with contextlib.suppress(ConflictError):  # another compaction raised it: compare again
                await self._publish_expecting(
                    resource, _COMPACTED_KEY, data, {}, last, "compacted revision"
                )
                return
        raise ConflictError(f"compacted revision of {resource.plural} keeps changing", status=409)

    async def compact(self, resource: Resource, grace: float) -> int:
        """Remove the tombstones (deletes and purges) of `resource` older than `grace` seconds (by
        their write time); returns how many. Safe to run from several processes at once."""
        stream = self._stream(resource)
        compacted = self._subject(resource, _COMPACTED_KEY)
        now = time.time()
        expired: list[tuple[str, int]] = []
        async for msg in self._scan(resource, None, DeliverPolicy.LAST_PER_SUBJECT, None):
            meta = msg.metadata
            if (
                msg.subject != compacted
                and (msg.headers or {}).get(_KV_OP) in _TOMBSTONES
                and now - meta.timestamp.timestamp() >= grace
            ):
                expired.append((msg.subject, int(meta.sequence.stream)))
            if meta.num_pending == 0:
                break
        if not expired:
            return 0
        # First the bound, then the removals: a watch that reads the bound after its consumer
        # exists either finds it raised (and is gone) or was under way before any removal.
        await self._raise_compacted(resource, max(seq for _, seq in expired))
        try:
            for subject, seq in expired:
                # Up to the tombstone only: a re-creation written since the scan stays.
                await self._js.purge_stream(stream, seq=seq + 1, subject=subject)
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            raise UnavailableError(f"remove deleted {resource.plural}: {exc}") from exc
        return len(expired)

    async def collect_deleted(
        self,
        resources: Iterable[Resource],
        *,
        grace: float = DELETED_GRACE,
        interval: float = COLLECT_INTERVAL,
    ) -> None:
        """Run `compact` on each resource's bucket every `interval` seconds, until cancelled.
        Retryable errors (NATS away) are logged and the pass is tried again next time."""
        resources = list(resources)
        me = asyncio.current_task()
        while True:
            if me is not None and me.cancelling():
                # A cancel that lands just as a NATS reply does can be lost inside nats-py
                # (`asyncio.wait_for` before Python 3.12): the task is still marked, so stop here.
                raise asyncio.CancelledError
            for resource in resources:
                try:
                    removed = await self.compact(resource, grace)
                except KubeRetryableError as exc:
                    log.warning("removing deleted %s failed: %s", resource.plural, exc)
                    continue
                if removed:
                    log.info(
                        "removed %d deleted %s older than %.0f s", removed, resource.plural, grace
                    )
            await asyncio.sleep(interval)

    # -- writes --------------------------------------------------------------------------------

    async def _publish_expecting(
        self,
        resource: Resource,
        key: str,
        data: bytes,
        headers: dict[str, str],
        last: int,
        what: str,
    ) -> PubAck:
        """Publish `data` under `key` if its last revision is `last` (0: none yet); a write
        another writer beat is a `ConflictError`, any other failure `UnavailableError`."""
        expected = {**headers, Header.EXPECTED_LAST_SUBJECT_SEQUENCE.value: str(last)}
        try:
            return await self._js.publish(
                self._subject(resource, key), data, headers=expected, stream=self._stream(resource)
            )
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            if wrong_revision(exc):
                raise ConflictError(
                    f"{what} changed concurrently; re-read and retry", status=409
                ) from exc
            raise UnavailableError(f"write {what}: {exc}") from exc

    async def _write(
        self, resource: Resource, key: str, obj: KubeObject, last: int, event: str
    ) -> int:
        stored = {k: v for k, v in obj.items()}
        stored["metadata"] = {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}
        headers = {_KV_OP: "DEL"} if event == "DELETED" else {_EVENT_HEADER: event}
        data = json.dumps(stored, separators=(",", ":")).encode()
        ack = await self._publish_expecting(
            resource, key, data, headers, last, f"{resource.kind} {key}"
        )
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
        for _ in range(10):
            last, existing = await self._last(resource, key)
            if existing is not None:
                raise AlreadyExistsError(f"{resource.kind} {key} already exists", status=409)
            try:
                await self._write(resource, key, new, last, "ADDED")
                return new
            except ConflictError:
                # Changed between read and write: created by someone else (the read says so), or
                # its tombstone removed by `compact` (then the name is free: try again).
                continue
        raise ConflictError(f"{resource.kind} {key} keeps changing; create not applied", status=409)

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


def _decode(data: bytes | None, seq: int, resource: Resource, where: str) -> KubeObject | None:
    """The object stored at revision `seq`, or None (logged once per revision) when the value is
    not a JSON object with metadata: plain KV tools can write anything, and such a value reads as
    a deletion (lists leave it out, get is 404, a watch says DELETED, create takes the name), not
    as an error that would stall every list and watch of the bucket for good."""
    try:
        obj: Any = json.loads(data or b"")
    except ValueError:
        obj = None
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
        if (where, seq) not in _UNREADABLE_LOGGED:
            if len(_UNREADABLE_LOGGED) >= _RECENT:
                _UNREADABLE_LOGGED.clear()
            _UNREADABLE_LOGGED.add((where, seq))
            log.error(
                "%s at %s (revision %d) is not a JSON object with metadata; read as deleted "
                "until a valid object is written there",
                resource.kind,
                where,
                seq,
            )
        return None
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
