"""Pools written to the slices bucket with revision checks, so that a second writer is noticed.

Promises of `SliceWriter`:
- `read()` returns every slice the bucket holds and remembers each key's revision (delete markers
  included) and which node each slice belongs to; a listing that missed keys is repeated.
- `sync(node, slices)` leaves the bucket holding exactly `slices` for that node: each key written
  at the revision this writer last saw for it (created when it has seen none), the node's other
  keys deleted at their revision. Slices are written before stale ones are deleted, so a reader
  never sees a pool with fewer slices than it announces.
- `remove(node)` deletes every slice of the node's pool the same way (each at its revision) and
  forgets the node: a pool that comes back later is created as a new one.
- A key whose revision moved since (another process wrote it) stops the call with
  `NotLeaderError`; so does `may_write()` turning False before any single write (the lease lapsed
  mid-pool). Either way the caller must `read()` again, under a valid lease, before writing on.
- NATS failures are `BusError`s (retryable when NATS is away); the revisions stay as they were,
  so retrying `sync` is safe.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from nats.js.kv import KeyValue

from gpudra_bus import current_entries, translate
from gpudra_inventory.errors import NotLeaderError
from gpudra_inventory.nats_errors import NATS_ERRORS, wrong_revision
from gpudra_inventory.pools import node_of

log = logging.getLogger(__name__)

_READ_TRIES = 5


def _always() -> bool:
    return True


class SliceWriter:
    def __init__(self, kv: KeyValue, may_write: Callable[[], bool] = _always) -> None:
        self._kv = kv
        self._may_write = may_write
        self.revisions: dict[str, int] = {}
        self.nodes: dict[str, set[str]] = {}
        self.writes = 0

    async def read(self) -> list[dict[str, Any]]:
        """Every slice in the bucket (revisions and owners remembered).

        nats-py's watcher may signal "no more entries" before delivering the first ones when it
        loses a race with them; a listing shorter than the bucket's message count (one per key,
        delete markers included, as the bucket keeps no history) is therefore read again.
        """
        for _ in range(_READ_TRIES - 1):
            slices = await self._read_once()
            try:
                stored = (await self._kv.status()).values
            except NATS_ERRORS as exc:
                raise translate(exc, "reading the slices bucket's status") from exc
            if len(self.revisions) >= stored:
                return slices
            log.info("listed %d of %d keys; reading again", len(self.revisions), stored)
        return await self._read_once()

    async def _read_once(self) -> list[dict[str, Any]]:
        revisions: dict[str, int] = {}
        nodes: dict[str, set[str]] = {}
        slices: list[dict[str, Any]] = []
        try:
            entries = await current_entries(self._kv)
        except NATS_ERRORS as exc:
            raise translate(exc, "reading slices") from exc
        for entry in entries:
            if entry.revision is not None:
                revisions[entry.key] = entry.revision
            if not entry.value:
                continue  # a delete marker: nothing to adopt, but its revision counts
            try:
                s = json.loads(entry.value)
            except ValueError:
                log.error("slice %s in the bucket is not JSON; it will be replaced", entry.key)
                continue
            node = node_of(s)
            if node is not None:
                nodes.setdefault(node, set()).add(entry.key)
            slices.append(s)
        self.revisions, self.nodes = revisions, nodes
        return slices

    def _check(self, what: str) -> None:
        if not self._may_write():
            raise NotLeaderError(f"not the leader any more; {what} not written")

    async def sync(self, node: str, slices: list[dict[str, Any]]) -> list[str]:
        """Write the node's pool; returns the names of the stale slices deleted."""
        names: set[str] = set()
        for s in slices:
            name = s["metadata"]["name"]
            self._check(f"slice {name}")
            data = json.dumps(s, separators=(",", ":"), sort_keys=True).encode()
            last = self.revisions.get(name)
            try:
                if last is None:
                    revision = await self._kv.create(name, data)
                else:
                    revision = await self._kv.update(name, data, last=last)
            except NATS_ERRORS as exc:
                if wrong_revision(exc):
                    raise NotLeaderError(f"slice {name} was written by another process") from exc
                raise translate(exc, f"writing slice {name}") from exc
            self.revisions[name] = revision
            self.writes += 1
            names.add(name)
        self.nodes[node] = self.nodes.get(node, set()) | names
        deleted = []
        for name in sorted(self.nodes[node] - names):
            self._check(f"deletion of slice {name}")
            try:
                await self._kv.delete(name, last=self.revisions.get(name))
            except NATS_ERRORS as exc:
                if wrong_revision(exc):
                    raise NotLeaderError(f"slice {name} was written by another process") from exc
                raise translate(exc, f"deleting slice {name}") from exc
            # The delete marker's revision is unknown here; `create` re-reads it if needed.
            self.revisions.pop(name, None)
            self.nodes[node].discard(name)
            deleted.append(name)
        return deleted

    async def remove(self, node: str) -> list[str]:
        """Delete the node's whole pool (as `sync(node, [])`) and forget the node; returns the
        names of the slices deleted."""
        deleted = await self.sync(node, [])
        self.nodes.pop(node, None)
        return deleted
