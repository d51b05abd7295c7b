"""Kubernetes mode: a pool's slices deleted by someone else (the kubelet) are noticed at once.

Why: the kubelet's DRA plugin manager deletes ResourceSlices by field selector. At every kubelet
start it deletes all of its node's (`spec.nodeName=<node>`, every driver: no plugin has registered
yet, and pods must not be scheduled against a driver that may never come back); and a wiping delay
(30 s by default) after the last kubelet plugin of a driver on the node went away (unregistered,
or, in newer kubelets, its gRPC connection lost) it deletes that driver's
(`spec.nodeName=<node>,spec.driver=<driver>`), unless a plugin of the driver came back meanwhile.
Kubernetes' own drivers publish their slices from the kubelet plugin, which publishes them again
once registered. gpudra publishes every node's slices centrally from the inventory, so without
this module a node's GPUs stay missing from the API after a kubelet restart until the periodic
resync (`api_resync`, 60 s by default) notices.

Promises of `SliceWatch` (the leader's: the service follows only while it leads):
- `follow(True)` starts following ResourceSlices with `gpudra_kube.informer` (list, watch, resume,
  relist on 410), keeping of each slice only its identity, driver and node (the `Store` offers no
  selector, so other drivers' slices are listed too, slimmed); `follow(False)` stops and forgets
  what it saw. A permanent API error (403: a ClusterRole without `watch` on resourceslices) or an
  unexpected one is logged and the informer started again after `retry_permanent` seconds;
  retryable ones are the informer's (backoff up to 5 s): an API outage never makes it spin.
- A slice of our driver with a `spec.nodeName` that goes away (the watch's DELETED, a relist's
  difference, or, for an informer started again after an error, absent from its first list though
  seen before) opens a window for its node, unless one is open: `due()` returns the node once the
  window's delay has passed since that first deletion, and closes the window. The kubelet deletes
  a node's slices within milliseconds of each other: one window, one repair, one log line.
- The delay is `delay`; a node whose slices go again within `quiet` seconds of the last
  `repaired(node)` waits twice as long as the time before, up to `max_delay`: someone who keeps
  deleting them (a second publisher under the same driver name) is not fought in a loop.
- `missing(node, names)`: which of `names` the watch does not see now.
It judges nothing: whether a slice went because the inventory itself deleted it (a pool change,
a deleted Node, a prune) is for the caller, who knows the pools (`repair.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable

from gpudra_kube.errors import KubePermanentError
from gpudra_kube.informer import informer, metadata_only
from gpudra_kube.resources import RESOURCE_SLICES, KubeObject
from gpudra_kube.store import EventType, Store

log = logging.getLogger(__name__)


def _identity(obj: KubeObject) -> KubeObject:
    """What the watch keeps of a slice: its identity, driver and node."""
    spec = obj.get("spec") or {}
    slim = metadata_only(obj)
    slim["spec"] = {k: spec[k] for k in ("driver", "nodeName") if k in spec}
    return slim


def _name(obj: KubeObject) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


class SliceWatch:
    def __init__(
        self,
        store: Store,
        driver: str,
        *,
        delay: float,
        quiet: float = 300.0,
        max_delay: float = 300.0,
        watch_timeout: float = 300.0,
        retry_permanent: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._driver = driver
        self.delay = delay
        self._quiet = quiet
        self._max_delay = max_delay
        self._watch_timeout = watch_timeout
        self._retry_permanent = retry_permanent
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        self._stopping: set[asyncio.Task[None]] = set()
        self._present: dict[str, str] = {}  # our driver's slices the watch sees: name -> node
        self._windows: dict[str, float] = {}  # node -> when its repair is due
        self._fights: dict[str, tuple[float, int]] = {}  # node -> (last repair, repairs in a row)
        self.deletions = 0  # slices of ours seen going, for tests and logs

    @property
    def following(self) -> bool:
        return self._task is not None

    def follow(self, on: bool) -> None:
        """Start or stop following (idempotent); stopping forgets every window."""
        if on and self._task is None:
            self._task = asyncio.create_task(self._run(), name="inventory-slice-watch")
        elif not on and self._task is not None:
            self._task.cancel()
            self._stopping.add(self._task)
            self._task.add_done_callback(self._stopping.discard)
            self._task = None
            self._present.clear()
            self._windows.clear()

    async def close(self) -> None:
        """Stop following and wait until the watch has ended."""
        self.follow(False)
        for task in list(self._stopping):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def due(self) -> list[str]:
        """Nodes whose window has passed (their windows closed), in name order."""
        now = self._clock()
        ready = sorted(node for node, at in self._windows.items() if at <= now)
        for node in ready:
            del self._windows[node]
        return ready

    def missing(self, node: str, names: Iterable[str]) -> list[str]:
        return sorted(n for n in names if self._present.get(n) != node)

    def repaired(self, node: str) -> None:
        """The caller writes the node's pool again: a next deletion soon after waits longer."""
        now = self._clock()
        last = self._fights.get(node)
        streak = last[1] + 1 if last is not None and now - last[0] < self._quiet else 1
        self._fights[node] = (now, streak)

    def _deleted(self, name: str, node: str) -> None:
        self.deletions += 1
        if node in self._windows:
            return
        now = self._clock()
        last = self._fights.get(node)
        streak = last[1] if last is not None and now - last[0] < self._quiet else 0
        wait = min(self.delay * 2**streak, self._max_delay)
        self._windows[node] = now + wait
        log.debug("slice %s of node %s deleted; looking again in %.1fs", name, node, wait)

    async def _run(self) -> None:
        while True:
            try:
                await self._follow()
            except KubePermanentError as exc:
                log.error(
                    "watching ResourceSlices failed (%s); slices the kubelet deletes wait for the "
                    "resync; retrying in %.0fs",
                    exc,
                    self._retry_permanent,
                )
            except Exception:  # a bug must not end the watch for good: log, go on
                log.exception(
                    "watching ResourceSlices broke; retrying in %.0fs", self._retry_permanent
                )
            await asyncio.sleep(self._retry_permanent)

    async def _follow(self) -> None:
        events = informer(
            self._store, RESOURCE_SLICES, watch_timeout=self._watch_timeout, transform=_identity
        )
        listed: set[str] | None = set()  # until this informer's first SYNCED
        async with contextlib.aclosing(events):  # type: ignore[type-var]
            async for event in events:
                if event.type is EventType.SYNCED:
                    if listed is not None:
                        # A new informer reports no deletion: what it did not list went meanwhile.
                        for gone in sorted(self._present.keys() - listed):
                            self._deleted(gone, self._present.pop(gone))
                        listed = None
                    continue
                spec = event.object.get("spec") or {}
                name, node = _name(event.object), str(spec.get("nodeName") or "")
                if spec.get("driver") != self._driver or not name or not node:
                    continue
                if event.type is EventType.DELETED:
                    self._present.pop(name, None)
                    self._deleted(name, node)
                else:
                    self._present[name] = node
                    if listed is not None:
                        listed.add(name)
