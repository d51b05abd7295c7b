"""`EventRecorder`: Kubernetes Events (`events.k8s.io/v1`) written the way client-go's event
recorder writes them, so a retried failure is one Event with a growing count, not a flood.

Promises:
- `record` never blocks and never raises: it queues the event (a full queue drops it and counts
  `dropped`); `run` (a service loop) writes it. An API failure is logged and counted, never
  passed to the caller — events are for people, losing one must not stop an allocation.
- Isomorphic events — same regarding object, related object, reason, action and type, as
  client-go's `getKey` (the note is not part of the identity: an unschedulable reason that names
  changing counts is still the same story) — seen again within `window` seconds (client-go: 6
  minutes) of the last one become a series on the first Event: `series.count` and
  `series.lastObservedTime` are bumped and the note replaced by the latest one. The second
  occurrence is written at once (so the series shows), later ones at most once per
  `series_interval` seconds per Event (`flush`, which `run` calls that often): a claim retried
  every 100 ms costs the API one write per interval, whatever the retry rate.
- Creates pass a token bucket (`burst` at once, `qps` per second after that); what exceeds it is
  dropped and counted, as client-go's spam filter drops it.
- A series update that meets a 409 re-reads the Event and writes again; one whose Event is gone
  (the API server's event TTL) creates a new Event for the latest occurrence, a new series.
- A series update that fails otherwise — refused for good (403: RBAC without `update`, a
  namespace being terminated; 422) or for now (5xx, 429) — is logged and tried again after a
  pause that doubles from `series_interval` up to `window`, whatever the occurrences meanwhile
  (they are counted, not lost: the next write carries them); a write that succeeds ends the
  pauses.
- The remembered series are bounded (`max_series`, the oldest forgotten first) and forgotten once
  `window` has passed without an occurrence.
- Every Event written carries `reportingController`, `reportingInstance`, `eventTime` (RFC 3339
  with microseconds), `regarding` (and `related` when given), `note` cut to the API's 1 kB, and
  lives in the regarding object's namespace (`default` for a cluster-scoped one).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import secrets
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpudra_bus import Backoff
from gpudra_kube.errors import ConflictError, KubeError, KubePermanentError, NotFoundError
from gpudra_kube.resources import EVENTS, KubeObject
from gpudra_kube.store import Store

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"
NOTE_MAX_BYTES = 1024
_NAME_MAX = 253 - 17  # room for "." and 16 hex digits

# (regarding uid/namespace/name/kind, related identity, reason, action, type)
_Key = tuple[tuple[str, ...], tuple[str, ...], str, str, str]


def reference(obj: Mapping[str, Any]) -> dict[str, str]:
    """The `ObjectReference` of a Kubernetes object (apiVersion, kind, namespace, name, uid)."""
    meta = obj.get("metadata") or {}
    ref = {
        "apiVersion": str(obj.get("apiVersion") or ""),
        "kind": str(obj.get("kind") or ""),
        "namespace": str(meta.get("namespace") or ""),
        "name": str(meta.get("name") or ""),
        "uid": str(meta.get("uid") or ""),
    }
    return {k: v for k, v in ref.items() if v}


def micro_time(epoch: float) -> str:
    """A `MicroTime`: RFC 3339 in UTC with microseconds, as the API server serialises it."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def cut_note(note: str) -> str:
    """`note` cut to the API's limit (1 kB of UTF-8), never inside a character."""
    raw = note.encode()
    if len(raw) <= NOTE_MAX_BYTES:
        return note
    return raw[: NOTE_MAX_BYTES - 3].decode(errors="ignore") + "..."


@dataclass
class _Pending:
    key: _Key
    regarding: dict[str, str]
    related: dict[str, str] | None
    type: str
    reason: str
    action: str
    note: str
    at: float


@dataclass
class _Series:
    event: KubeObject  # as last written (resourceVersion included)
    count: int
    last: float
    note: str
    written_count: int
    written_at: float
    failures: int = 0  # consecutive failed updates
    retry_at: float = 0.0  # no update before this (after a failed one)


def _identity(ref: Mapping[str, str] | None) -> tuple[str, ...]:
    if not ref:
        return ()
    return tuple(ref.get(k, "") for k in ("uid", "namespace", "name", "kind"))


class EventRecorder:
    """See the module docstring. `store`: any `Store` that serves `EVENTS` (the API backend)."""

    def __init__(
        self,
        store: Store,
        *,
        controller: str,
        instance: str,
        window: float = 360.0,
        series_interval: float = 30.0,
        burst: int = 25,
        qps: float = 5.0,
        queue_size: int = 1000,
        max_series: int = 4096,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._controller = controller
        self._instance = instance[:128]
        self._window = window
        self._interval = series_interval
        self._burst = max(1, burst)
        self._qps = qps
        self._tokens = float(self._burst)
        self._refilled = clock()
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue(max(1, queue_size))
        self._series: OrderedDict[_Key, _Series] = OrderedDict()
        self._max_series = max(1, max_series)
        self._clock = clock
        self.counts: Counter[str] = Counter()

    # -- the caller's side -----------------------------------------------------------------------

    def record(
        self,
        regarding: Mapping[str, str],
        *,
        type: str,
        reason: str,
        action: str,
        note: str,
        related: Mapping[str, str] | None = None,
    ) -> None:
        """Queue one event (see the module docstring); `regarding`/`related`: `reference`s."""
        item = _Pending(
            key=(_identity(regarding), _identity(related), reason, action, type),
            regarding=dict(regarding),
            related=dict(related) if related else None,
            type=type,
            reason=reason[:128],
            action=action[:128],
            note=cut_note(note),
            at=self._clock(),
        )
        try:
            self._queue.put_nowait(item)
        except asyncio.QueueFull:
            self.counts["dropped"] += 1

    # -- the writer's side -----------------------------------------------------------------------

    async def run(self) -> None:
        """Write queued events; flush series every `series_interval` seconds. Never returns."""
        loop = asyncio.get_running_loop()
        next_flush = loop.time() + self._interval
        while True:
            try:
                item = await asyncio.wait_for(self._queue.get(), max(0.0, next_flush - loop.time()))
            except TimeoutError:
                await self.flush()
                next_flush = loop.time() + self._interval
                continue
            await self._handle(item)

    async def process_pending(self) -> None:
        """Write everything queued now (tests; a last effort at shutdown)."""
        while not self._queue.empty():
            await self._handle(self._queue.get_nowait())

    async def flush(self, *, force: bool = False) -> None:
        """Write the series that grew since their last write and whose interval has passed (all
        that grew, with `force`); forget the ones idle for longer than `window`."""
        now = self._clock()
        for key, series in list(self._series.items()):
            if now - series.last > self._window and series.written_count == series.count:
                del self._series[key]
            elif series.count > series.written_count and (
                force or (now - series.written_at >= self._interval and now >= series.retry_at)
            ):
                await self._update(key, series, now)

    async def _handle(self, item: _Pending) -> None:
        series = self._series.get(item.key)
        if series is not None and item.at - series.last <= self._window:
            series.count += 1
            series.last = item.at
            series.note = item.note
            self._series.move_to_end(item.key)
            due = series.written_count == 1 or item.at - series.written_at >= self._interval
            if due and item.at >= series.retry_at:
                await self._update(item.key, series, item.at)
            return
        await self._create(item)

    async def _create(self, item: _Pending) -> None:
        if not self._take_token(item.at):
            self.counts["dropped"] += 1
            log.debug("event %s about %s dropped (rate limit)", item.reason, item.regarding)
            return
        body = self._build(item)
        try:
            created = await self._store.create(EVENTS, body)
        except KubeError as exc:
            self.counts["failed"] += 1
            log.warning("recording event %s about %s failed: %s", item.reason, item.regarding, exc)
            return
        self.counts["created"] += 1
        self._series[item.key] = _Series(created, 1, item.at, item.note, 1, item.at)
        while len(self._series) > self._max_series:
            self._series.popitem(last=False)

    async def _update(self, key: _Key, series: _Series, now: float) -> None:
        event = series.event
        for _ in range(3):
            wanted = copy.deepcopy(event)
            wanted["series"] = {"count": series.count, "lastObservedTime": micro_time(series.last)}
            wanted["note"] = series.note
            try:
                series.event = await self._store.replace(EVENTS, wanted)
            except ConflictError:
                try:
                    meta = event["metadata"]
                    event = await self._store.get(EVENTS, meta["name"], meta.get("namespace"))
                except NotFoundError:
                    await self._recreate(key, series)
                    return
                except KubeError as exc:
                    self._pause(series, now, "re-reading", exc)
                    return
                continue
            except NotFoundError:
                await self._recreate(key, series)
                return
            except KubeError as exc:
                self._pause(series, now, "updating", exc)
                return
            series.written_count, series.written_at = series.count, now
            series.failures, series.retry_at = 0, 0.0
            self.counts["updated"] += 1
            return
        self._pause(series, now, "updating", None)

    def _pause(self, series: _Series, now: float, doing: str, exc: KubeError | None) -> None:
        """A failed series update: try again after a pause that doubles up to `window`."""
        self.counts["failed"] += 1
        series.failures += 1
        pause = Backoff(self._interval, self._window, jitter=0.0).delay(series.failures - 1)
        series.retry_at = now + pause
        name = series.event["metadata"].get("name")
        if exc is None:
            why = "kept meeting conflicts"
        elif isinstance(exc, KubePermanentError):
            why = f"was refused ({exc})"
        else:
            why = f"failed ({exc})"
        log.warning(
            "%s event %s %s; its series (%d occurrences) is written again in %.0f s at the earliest",
            doing,
            name,
            why,
            series.count,
            pause,
        )

    async def _recreate(self, key: _Key, series: _Series) -> None:
        """The series' Event is gone (the API server's event TTL): a new Event for the latest
        occurrence starts the story again."""
        self._series.pop(key, None)
        event = series.event
        await self._create(
            _Pending(
                key=key,
                regarding=dict(event.get("regarding") or {}),
                related=dict(event["related"]) if event.get("related") else None,
                type=str(event.get("type") or ""),
                reason=str(event.get("reason") or ""),
                action=str(event.get("action") or ""),
                note=series.note,
                at=series.last,
            )
        )

    def _take_token(self, now: float) -> bool:
        self._tokens = min(
            float(self._burst), self._tokens + max(0.0, now - self._refilled) * self._qps
        )
        self._refilled = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    def _build(self, item: _Pending) -> KubeObject:
        namespace = item.regarding.get("namespace") or "default"
        # Cut names stay DNS subdomains: no "." or "-" right before the suffix's dot.
        base = (item.regarding.get("name") or "event")[:_NAME_MAX].rstrip(".-") or "event"
        event: KubeObject = {
            "apiVersion": EVENTS.api_version,
            "kind": EVENTS.kind,
            "metadata": {"name": f"{base}.{secrets.token_hex(8)}", "namespace": namespace},
            "eventTime": micro_time(item.at),
            "reportingController": self._controller,
            "reportingInstance": self._instance,
            "action": item.action,
            "reason": item.reason,
            "type": item.type,
            "note": item.note,
            "regarding": item.regarding,
        }
        if item.related:
            event["related"] = item.related
        return event
