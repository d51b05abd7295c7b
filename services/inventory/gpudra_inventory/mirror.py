"""Kubernetes mode: the inventory's ResourceSlices mirrored to the API server.

Promises: after `apply(change)` the API holds exactly the change's slices for that node (created or
replaced with the resourceVersion last read; a 409 conflict re-reads and writes again, never
blindly) and none of the slices the change removed. `prune(book)` removes slices of our driver
that no pool of the book owns any more (left over from nodes that vanished while we were down).
`drifted(book)` names the nodes whose slices in the API differ from their pool's (missing, changed)
and counts our driver's slices no pool owns, from one list: what a periodic resync repairs.
With `nodes` (`ClusterNodes`, the cluster's Nodes; main.py always gives it) every slice written
carries an ownerReference to its node's Node with the Node's UID, a slice that lacks it (or names
another UID) is replaced, and `apply` of a pool whose Node the API does not have (the watch's
view, confirmed by a GET) removes the pool's slices from the API instead of writing them;
`drifted` counts such a pool as drifted while any of its slices is still there. Without `nodes`
slices are written without an owner, as before.
`may_write()` (the service installs its leader check) is asked before every API write; once it answers False (this replica's lease
lapsed) the call stops with `NotLeaderError`, so a deposed leader never overwrites its successor.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpudra_inventory.errors import NotLeaderError
from gpudra_inventory.nodes import ClusterNodes, owner_reference
from gpudra_inventory.pools import Change, PoolBook, PoolState
from gpudra_kube.errors import AlreadyExistsError, ConflictError, NotFoundError
from gpudra_kube.resources import RESOURCE_SLICES, name_of
from gpudra_kube.store import Store

log = logging.getLogger(__name__)

_MAX_TRIES = 10


def _always() -> bool:
    return True


@dataclass(frozen=True)
class Drift:
    """What `SliceMirror.drifted` found: pools to write again, slices no pool owns."""

    nodes: list[str]
    strangers: int


class SliceMirror:
    def __init__(
        self,
        store: Store,
        driver: str,
        may_write: Callable[[], bool] = _always,
        *,
        nodes: ClusterNodes | None = None,
    ) -> None:
        self._store = store
        self._driver = driver
        self.may_write = may_write
        self.nodes = nodes
        self.writes = 0

    def _check(self, name: str) -> None:
        if not self.may_write():
            raise NotLeaderError(f"not the leader any more; slice {name} not mirrored")

    async def apply(self, change: Change) -> None:
        owner: dict[str, Any] | None = None
        if self.nodes is not None:
            uid = self.nodes.uid(change.node)
            if uid is None:
                # The watch may lag behind a Node just registered: ask before deleting.
                uid = await self.nodes.confirm(change.node)
            if uid is None:
                await self._remove(change.node, [s["metadata"]["name"] for s in change.write])
                await self._remove(change.node, change.delete)
                return
            owner = owner_reference(change.node, uid)
        for s in change.write:
            await self._upsert(s, owner)
        await self._remove(change.node, change.delete)

    async def _remove(self, node: str, names: list[str]) -> None:
        for name in names:
            self._check(name)
            with contextlib.suppress(NotFoundError):
                await self._store.delete(RESOURCE_SLICES, name)
                log.info("slice %s of node %s removed from the API", name, node)

    def _owners(self, node: str) -> list[dict[str, Any]] | None:
        """The ownerReferences a slice of `node`'s pool carries (None: no Node to own it, or
        no Nodes followed at all)."""
        owner = self.nodes.owner(node) if self.nodes is not None else None
        return None if owner is None else [owner]

    def _same(self, current: dict[str, Any], desired: dict[str, Any]) -> bool:
        """Whether the API's slice is the desired one: its spec and, when Nodes are followed,
        its owner (a slice an older inventory wrote without one is not)."""
        if current.get("spec") != desired.get("spec"):
            return False
        if self.nodes is None:
            return True
        owners = (current.get("metadata") or {}).get("ownerReferences")
        return bool(owners == desired["metadata"].get("ownerReferences"))

    async def drifted(self, book: PoolBook) -> Drift:
        """Which pools the API does not hold as the book does, and how many of our driver's
        slices in the API no pool owns (one list of the API's slices; nothing written). When
        Nodes are followed, a pool whose Node the API lacks differs while any slice of it is
        still there, and a slice without its Node as owner differs."""
        listed = await self._store.list(RESOURCE_SLICES)
        ours = {
            name_of(obj): obj
            for obj in listed.items
            if obj.get("spec", {}).get("driver") == self._driver
        }

        def differs(node: str, pool: PoolState) -> bool:
            if self.nodes is not None and self.nodes.uid(node) is None:
                return any(name in ours for name in pool.slices)
            owners = self._owners(node)
            for name, desired in pool.slices.items():
                current = ours.get(name)
                if current is None:
                    return True
                wanted = {"spec": desired.get("spec"), "metadata": {"ownerReferences": owners}}
                if not self._same(current, wanted):
                    return True
            return False

        nodes = sorted(node for node, pool in book.pools.items() if differs(node, pool))
        owned = {name for pool in book.pools.values() for name in pool.slices}
        return Drift(nodes, sum(1 for name in ours if name not in owned))

    async def prune(self, book: PoolBook) -> int:
        owned = {name for pool in book.pools.values() for name in pool.slices}
        listed = await self._store.list(RESOURCE_SLICES)
        removed = 0
        for obj in listed.items:
            if obj.get("spec", {}).get("driver") != self._driver or name_of(obj) in owned:
                continue
            self._check(name_of(obj))
            try:
                await self._store.delete(RESOURCE_SLICES, name_of(obj))
                removed += 1
            except NotFoundError:
                pass
        return removed

    async def _upsert(self, desired: dict[str, Any], owner: dict[str, Any] | None) -> None:
        name = desired["metadata"]["name"]
        wanted = copy.deepcopy(desired)
        if owner is not None:
            wanted["metadata"]["ownerReferences"] = [owner]
        for _ in range(_MAX_TRIES):
            try:
                current = await self._store.get(RESOURCE_SLICES, name)
            except NotFoundError:
                self._check(name)
                try:
                    await self._store.create(RESOURCE_SLICES, copy.deepcopy(wanted))
                    self.writes += 1
                    return
                except AlreadyExistsError:
                    continue
            if self._same(current, wanted):
                return
            obj = copy.deepcopy(wanted)
            obj["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            self._check(name)
            try:
                await self._store.replace(RESOURCE_SLICES, obj)
                self.writes += 1
                return
            except (ConflictError, NotFoundError) as exc:
                log.info("slice %s changed meanwhile (%s); re-reading", name, exc)
        raise ConflictError(f"slice {name} keeps changing; giving up this round")
