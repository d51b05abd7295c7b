"""Kubernetes mode: the cluster's Nodes, so that each pool's slices are owned by their Node.

Why an informer (one list, then a watch) and not a GET per pool: the mirror needs a Node's UID
for every slice it writes and every resync compares every pool, so with thousands of nodes a GET
per pool would be thousands of requests per resync; the watch costs one request per change of a
Node. A GET is left for one case only: confirming, before a pool's slices are deleted, that a
Node the watch does not know is really gone (the watch may lag behind a Node just registered).

Promises of `ClusterNodes`:
- `run()` follows `v1` Nodes with `gpudra_kube.informer` (list, watch, resume, relist on 410)
  until cancelled; a permanent API error (RBAC forbids listing Nodes), or any other exception, is
  logged and the informer is started again after `retry_permanent` seconds, keeping what was
  known.
- `synced` is False until the first list has been seen whole: before that no Node is known to be
  absent, and nothing may be deleted for that reason.
- `uid(name)` is the UID of the Node `name` as last seen (None: no such Node); `owner(name)` is
  the ownerReference a slice of that Node's pool carries (`apiVersion: v1, kind: Node, name, uid,
  controller: true`, as the kubelet plugin helper's ResourceSlice controller writes it).
- `take_changed()` returns (and forgets) the names of Nodes added, deleted or re-created (a new
  UID) since the last call: their pools must be written again, or removed from the API.
- `confirm(name)` GETs the Node: its UID, or None when the API has no such Node.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from gpudra_kube.errors import KubePermanentError, NotFoundError
from gpudra_kube.informer import informer, metadata_only
from gpudra_kube.resources import NODES, KubeObject
from gpudra_kube.store import EventType, Store

log = logging.getLogger(__name__)


def _name(obj: KubeObject) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _uid(obj: KubeObject) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def owner_reference(name: str, uid: str) -> dict[str, Any]:
    """The ownerReference that makes the Node `name` (of `uid`) own a slice."""
    return {"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid, "controller": True}


class ClusterNodes:
    def __init__(
        self,
        store: Store,
        *,
        watch_timeout: float = 300.0,
        retry_permanent: float = 30.0,
    ) -> None:
        self._store = store
        self._watch_timeout = watch_timeout
        self._retry_permanent = retry_permanent
        self._uids: dict[str, str] = {}
        self._changed: set[str] = set()
        self.synced = False

    def __len__(self) -> int:
        return len(self._uids)

    def uid(self, name: str) -> str | None:
        return self._uids.get(name)

    def owner(self, name: str) -> dict[str, Any] | None:
        uid = self._uids.get(name)
        return None if uid is None else owner_reference(name, uid)

    def take_changed(self) -> set[str]:
        changed, self._changed = self._changed, set()
        return changed

    async def confirm(self, name: str) -> str | None:
        try:
            node = await self._store.get(NODES, name)
        except NotFoundError:
            return None
        return _uid(node) or None

    async def run(self) -> None:
        """Follow the Nodes until cancelled (see the module docstring)."""
        while True:
            try:
                await self._follow()
            except KubePermanentError as exc:
                log.error(
                    "watching Nodes failed (%s); slices are not mirrored for nodes not seen "
                    "yet, and none is removed for its Node's deletion; retrying in %.0fs",
                    exc,
                    self._retry_permanent,
                )
                await asyncio.sleep(self._retry_permanent)
            except Exception:  # a bug must not freeze the view of the Nodes for good: log, go on
                log.exception("watching Nodes broke; retrying in %.0fs", self._retry_permanent)
                await asyncio.sleep(self._retry_permanent)

    async def _follow(self) -> None:
        # Name and UID are all it needs: a Node's status (images, conditions) stays out of memory.
        events = informer(
            self._store, NODES, watch_timeout=self._watch_timeout, transform=metadata_only
        )
        # A new informer lists afresh and reports no deletion: Nodes known from before that its
        # first list lacks were deleted meanwhile.
        listed: set[str] | None = set()
        async with contextlib.aclosing(events):  # type: ignore[type-var]
            async for event in events:
                name = _name(event.object)
                if event.type is EventType.SYNCED:
                    if listed is not None:
                        for gone in sorted(self._uids.keys() - listed):
                            del self._uids[gone]
                            self._changed.add(gone)
                            log.info("Node %s deleted: its slices go", gone)
                        listed = None
                    if not self.synced:
                        log.info("%d Nodes listed", len(self._uids))
                    self.synced = True
                elif event.type is EventType.DELETED:
                    # The informer gives the deleted object: a stale DELETED (a Node already
                    # re-created under a new UID) must not remove the new one.
                    if name and self._uids.get(name) == _uid(event.object):
                        del self._uids[name]
                        self._changed.add(name)
                        log.info("Node %s deleted: its slices go", name)
                elif event.type in (EventType.ADDED, EventType.MODIFIED) and name:
                    uid = _uid(event.object)
                    if listed is not None:
                        listed.add(name)
                    if uid and self._uids.get(name) != uid:
                        self._uids[name] = uid
                        self._changed.add(name)
