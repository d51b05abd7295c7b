"""Kubernetes mode: the inventory's ResourceSlices mirrored to the API server.

Promises: after `apply(change)` the API holds exactly the change's slices for that node (created or
replaced with the resourceVersion last read; a 409 conflict re-reads and writes again, never
blindly) and none of the slices the change removed. `prune(book)` removes slices of our driver
that no pool of the book owns any more (left over from nodes that vanished while we were down).
`drifted(book)` names the nodes whose slices in the API differ from their pool's (missing, changed)
and counts our driver's slices no pool owns, from one list: what a periodic resync repairs.
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
from gpudra_inventory.pools import Change, PoolBook
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
    def __init__(self, store: Store, driver: str, may_write: Callable[[], bool] = _always) -> None:
        self._store = store
        self._driver = driver
        self.may_write = may_write
        self.writes = 0

    def _check(self, name: str) -> None:
        if not self.may_write():
            raise NotLeaderError(f"not the leader any more; slice {name} not mirrored")

    async def apply(self, change: Change) -> None:
        for s in change.write:
            await self._upsert(s)
        for name in change.delete:
            self._check(name)
            with contextlib.suppress(NotFoundError):
                await self._store.delete(RESOURCE_SLICES, name)

    async def drifted(self, book: PoolBook) -> Drift:
        """Which pools the API does not hold as the book does, and how many of our driver's
        slices in the API no pool owns (one list of the API's slices; nothing written)."""
        listed = await self._store.list(RESOURCE_SLICES)
        ours = {
            name_of(obj): obj.get("spec")
            for obj in listed.items
            if obj.get("spec", {}).get("driver") == self._driver
        }
        nodes = sorted(
            node
            for node, pool in book.pools.items()
            if any(ours.get(name) != desired.get("spec") for name, desired in pool.slices.items())
        )
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

    async def _upsert(self, desired: dict[str, Any]) -> None:
        name = desired["metadata"]["name"]
        for _ in range(_MAX_TRIES):
            try:
                current = await self._store.get(RESOURCE_SLICES, name)
            except NotFoundError:
                self._check(name)
                try:
                    await self._store.create(RESOURCE_SLICES, copy.deepcopy(desired))
                    self.writes += 1
                    return
                except AlreadyExistsError:
                    continue
            if current.get("spec") == desired["spec"]:
                return
            obj = copy.deepcopy(desired)
            obj["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            self._check(name)
            try:
                await self._store.replace(RESOURCE_SLICES, obj)
                self.writes += 1
                return
            except (ConflictError, NotFoundError) as exc:
                log.info("slice %s changed meanwhile (%s); re-reading", name, exc)
        raise ConflictError(f"slice {name} keeps changing; giving up this round")
