"""Kubernetes mode, the NATS side of a deleted Node: its pool leaves the bucket and the stream.

Promises of `GonePools` (every replica's; the service asks it once a turn, once caught up):
- Once a pool's Node is deleted (the watch has no such Node and a GET confirms it) **and** its
  node-agent is silent (tainted for missed heartbeats; for a pool known only from the bucket,
  nothing heard for a whole `heartbeat_timeout` since this replica caught up or NATS came back),
  the leader removes the pool's slices from the bucket (revision-checked, as every bucket write)
  and then purges the node's inventories from the inventory stream (subject
  `subjects.inventory(node)`, up to the last one it read: `saw(node, sequence)`), so neither a
  restart nor a takeover re-creates the pool; every replica drops the pool from its book (a
  standby would otherwise republish it when it takes over; it keeps the sequence of the node's
  last inventory, which it purges should it take over before the leader did). A node-agent still
  heard keeps its pool in the bucket while its Node is missing (a Node being registered again):
  only the API loses the slices. If the agent speaks again, the pool comes back as for a new node
  (generation 1). `removed` (`poolsRemoved` in `/statusz`) counts the removals.
- Nothing is removed before the Nodes have been listed once, while this replica is cut off from
  NATS, or while it holds the lease but has not taken over yet (the takeover writes the bucket
  first); a leader leaves a pool alone while it is still to be written to the bucket or to the
  API. A Node the GET still finds (the watch lags behind), a failed GET, a failed removal or
  purge: that node is looked at again a `heartbeat_timeout` later.
- The bucket goes first: should the purge fail for good, a restart rebuilds the pool from the
  stream, and it is removed again. A purge once the lease is lost stops with `NotLeaderError`:
  the leadership steps down.
- Standalone mode has no Node objects and none of this (the service has no `GonePools`): no
  owner, nothing removed for a Node, and the bucket keeps a silent node's pool (tainted).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from nats.aio.client import Client

from gpudra_bus import INVENTORY_STREAM, BusError, subjects
from gpudra_inventory.errors import NotLeaderError
from gpudra_inventory.heartbeats import Heartbeats
from gpudra_inventory.leadership import Leadership
from gpudra_inventory.nats_errors import NATS_ERRORS
from gpudra_inventory.nodes import ClusterNodes
from gpudra_inventory.pools import PoolBook
from gpudra_inventory.writer import SliceWriter
from gpudra_kube.errors import KubeError

log = logging.getLogger(__name__)


class GonePools:
    def __init__(
        self,
        nc: Client,
        writer: SliceWriter,
        nodes: ClusterNodes,
        leadership: Leadership,
        heartbeats: Heartbeats,
        *,
        timeout: float,
        clock: Callable[[], float],
    ) -> None:
        self._nc = nc
        self._writer = writer
        self._nodes = nodes
        self._leadership = leadership
        self._heartbeats = heartbeats
        self._timeout = timeout
        self._clock = clock
        # The stream sequence of each node's last inventory (what a purge may remove), nodes not
        # to look at again before a time (this process's clock).
        self._sequences: dict[str, int] = {}
        self._retry: dict[str, float] = {}
        self.removed = 0

    def saw(self, node: str, sequence: int) -> None:
        """This replica read the node's inventory at `sequence` of the stream."""
        self._sequences[node] = max(self._sequences.get(node, 0), sequence)

    def _gone(self, book: PoolBook) -> list[str]:
        """The pools whose Node the watch does not have and whose node-agent is silent: tainted
        for missed heartbeats, or (a pool known only from the bucket) no inventory heard in a
        whole heartbeat timeout since this replica caught up or NATS came back."""
        now = self._heartbeats.now()
        quiet_since = self._heartbeats.quiet_since
        gone = []
        for node, state in book.pools.items():
            if self._nodes.uid(node) is not None:
                continue
            if state.inventory is not None:
                silent = state.unreachable
            else:
                silent = now - quiet_since > self._timeout
            if silent:
                gone.append(node)
        return sorted(gone)

    async def sweep(
        self, book: PoolBook, busy: Callable[[str], bool], forget: Callable[[str], None]
    ) -> int:
        """Remove (the leader) and forget (every replica) the pools whose Node is deleted and
        whose node-agent is silent; `busy(node)`: the pool is still to be written, `forget(node)`
        drops it from the caller's book. The number of pools removed from the bus."""
        nodes = self._nodes
        if not nodes.synced or self._heartbeats.blind or not self._nc.is_connected:
            return 0
        if self._leadership.holds() and not self._leadership.leading():
            return 0  # taking over: the takeover writes the bucket first
        now = self._clock()
        again = now + self._timeout
        removals = self.removed
        for node in self._gone(book):
            if now < self._retry.get(node, float("-inf")):
                continue
            leading = self._leadership.leading()
            if leading and busy(node):
                continue
            try:
                uid = await nodes.confirm(node)
            except KubeError as exc:
                log.warning("cannot confirm that Node %s is gone (%s); retrying", node, exc)
                self._retry[node] = again
                continue
            if uid is not None:
                self._retry[node] = again  # the watch lags behind: ask again later
                continue
            if leading:
                try:
                    removed = await self._remove_from_bus(node)
                except NotLeaderError as exc:
                    log.warning("removals stopped: %s", exc)
                    self._leadership.step_down()
                    break
                if not removed:
                    self._retry[node] = again
                    continue
                self.removed += 1
                log.info(
                    "pool %s removed from the bucket and the inventory stream: its Node is "
                    "deleted and its node-agent silent",
                    node,
                )
            else:
                log.info("pool %s forgotten: its Node is deleted and its node-agent silent", node)
            forget(node)
            if leading:
                self._sequences.pop(node, None)
            self._retry.pop(node, None)
        return self.removed - removals

    async def _remove_from_bus(self, node: str) -> bool:
        """Delete the node's slices from the bucket (revision-checked), then purge the node's
        inventories up to the last one this replica read (a newer one, its agent speaking
        again, stays and brings the pool back); whether both were done."""
        try:
            await self._writer.remove(node)
        except BusError as exc:
            log.warning("pool %s not removed from the bucket (%s); retrying", node, exc)
            return False
        sequence = self._sequences.get(node)
        if sequence is None:
            return True  # no inventory read: nothing of it to purge
        if not self._leadership.leading():
            raise NotLeaderError(f"not the leader any more; inventories of {node} not purged")
        try:
            await self._nc.jetstream().purge_stream(
                INVENTORY_STREAM, seq=sequence + 1, subject=subjects.inventory(node)
            )
        except NATS_ERRORS as exc:
            log.warning("inventories of %s not purged from the stream (%s); retrying", node, exc)
            return False
        return True
