"""The inventory loop: NodeInventory snapshots and heartbeats in, ResourceSlices out.

Promises:
- Each node's latest inventory (the stream keeps the last one per node) becomes that node's pool
  in the `gpudra-slices` bucket (key = slice name, value = v1 JSON); a change bumps the pool's
  generation on every slice of it and removes slices that no longer exist. Every replica reads
  every inventory through its own consumer (`consumer.py`), so a (re)started replica rebuilds all
  pools; a pool whose write failed is written again on the next turn, so a change is never
  skipped.
- Only the leader writes (`leadership.py`: the lease, the term, how writes are fenced). A standby
  keeps its pools warm from the same inventories. On taking the lease over, the new leader
  re-reads the bucket and republishes every pool it has an inventory for with a generation above
  anything in the bucket.
- A node silent for `heartbeat_timeout` keeps its devices, tainted NoSchedule, until its next
  inventory (`heartbeats.py`: silence on the NATS server's clock, not while the bus is away).
- A malformed inventory (bad payload, schema, node name, or one that cannot be sliced) is
  dead-lettered by the leader (logged by a standby) and acknowledged; it never blocks the stream.
- After every change the leader publishes a drift summary (driver / CUDA versions per node,
  outliers) on `gpudra.drift` (`drift.py`). In Kubernetes mode the same slices are mirrored to
  the API, again until the API has them, and compared with it every `api_resync` seconds
  (`apisync.py`).
- Kubernetes mode, slices the kubelet deletes (at its every start, and after its driver's plugin
  went away): with `wipes` (a `SliceWatch`; main.py gives it unless `api_repair_delay` is 0) the
  leader writes them back to the API `api_repair_delay` seconds after they went, if their pool
  and its Node are still there (`repair.py`: the rules, and why they are written back at all).
- Kubernetes mode, slice lifetime: each pool's slices in the API are owned by their Node and go
  with it; a pool whose Node the API does not have is not written there (`apisync.py`). Nothing
  is mirrored, pruned or compared until the Nodes have been listed once, and a leader is not
  ready until then.
- Kubernetes mode, the NATS side: a pool whose Node is deleted and whose node-agent is silent
  leaves the bucket and the inventory stream (the leader) and every replica's book, so neither a
  restart nor a takeover re-creates it (`gone.py`; `poolsRemoved` in `/statusz`). Standalone
  mode has no Node objects and none of this.
- `ready` (readiness): the replica has caught up with the inventories and, when it holds the
  lease, has taken over and written every pool; a warm standby is ready too. `alive` (liveness)
  and `role` are the leadership's; `status()` says them with readiness and counters, for the
  health server's `/statusz`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.kv import KeyValue

from gpudra_bus import (
    BusError,
    BusPermanentError,
    BusRetryableError,
    Codec,
    DeadLetters,
    Publisher,
    subjects,
    tracing,
)
from gpudra_inventory.apisync import ApiSync
from gpudra_inventory.consumer import BATCH, InventoryConsumer
from gpudra_inventory.drift import DriftPublisher
from gpudra_inventory.errors import NotLeaderError
from gpudra_inventory.gone import GonePools
from gpudra_inventory.heartbeats import Heartbeats
from gpudra_inventory.leadership import Leadership
from gpudra_inventory.lease import Lease
from gpudra_inventory.mirror import SliceMirror
from gpudra_inventory.nats_errors import NATS_ERRORS
from gpudra_inventory.pools import PoolBook
from gpudra_inventory.repair import WipeRepair
from gpudra_inventory.settings import Settings
from gpudra_inventory.wipes import SliceWatch
from gpudra_inventory.writer import SliceWriter
from gpudra_slices import SliceError, SliceOptions
from gpudrapb.v1 import inventory_pb2 as pb

log = logging.getLogger(__name__)

NODE_INVENTORY: Codec[pb.NodeInventory] = Codec(pb.NodeInventory)


class InventoryService:
    def __init__(
        self,
        nc: Client,
        kv: KeyValue,
        settings: Settings,
        mirror: SliceMirror | None = None,
        clock: Callable[[], float] = time.time,
        lease: Lease | None = None,
        wipes: SliceWatch | None = None,
    ) -> None:
        self._nc = nc
        self._settings = settings
        self._mirror = mirror
        self._clock = clock
        self._heartbeats = Heartbeats(nc, settings.heartbeat_timeout, clock)
        self._leadership = Leadership(lease)
        self._publisher = Publisher(nc)
        self._dead = DeadLetters(self._publisher, service="inventory")
        self._writer = SliceWriter(kv, self.leading)
        if mirror is not None:
            mirror.may_write = self.leading
        self.book = PoolBook(SliceOptions(driver=settings.driver, dynamic_mig=settings.dynamic_mig))
        # Kubernetes mode: the API's slices brought up to the bucket.
        self._api: ApiSync | None = None
        if mirror is not None:
            self._api = ApiSync(
                mirror,
                self._leadership,
                resync=settings.api_resync,
                clock=clock,
                repair=WipeRepair(wipes, mirror.nodes) if wipes is not None else None,
            )
        self._consumer = InventoryConsumer(
            nc, settings.consumer, interval=min(1.0, settings.heartbeat_timeout / 4)
        )
        self.changes = 0
        self._subscribed = False
        self._caught_up = False
        self._dirty: set[str] = set()
        # False from a takeover until every pool has been written in the new term.
        self._republished = True
        self._drift = DriftPublisher(nc)
        # Kubernetes mode: the pools of deleted Nodes leave the bus.
        self._gone: GonePools | None = None
        if mirror is not None and mirror.nodes is not None:
            self._gone = GonePools(
                nc,
                self._writer,
                mirror.nodes,
                self._leadership,
                self._heartbeats,
                timeout=settings.heartbeat_timeout,
                clock=clock,
            )

    def leading(self) -> bool:
        """Whether this replica may write now (holds the lease and has taken over in its term)."""
        return self._leadership.leading()

    @property
    def role(self) -> str:
        return self._leadership.role

    @property
    def takeovers(self) -> int:
        """Times this replica has taken the lead."""
        return self._leadership.takeovers

    @property
    def api_repairs(self) -> int:
        """Pools written to the API again because the API's copy differed (or was wiped)."""
        return self._api.api_repairs if self._api is not None else 0

    @property
    def consumer(self) -> str:
        """The name of this replica's inventory consumer."""
        return self._consumer.name

    @property
    def pools_removed(self) -> int:
        """Pools this replica, as leader, removed from the bus because their Node was deleted."""
        return self._gone.removed if self._gone is not None else 0

    @property
    def ready(self) -> bool:
        """Caught up with the inventories; a lease holder also has taken over."""
        if not (self._subscribed and self._caught_up):
            return False
        return (self.leading() and self._republished) or not self._leadership.holds()

    @property
    def alive(self) -> bool:
        """False once the lease task has ended while the loop runs (this replica could never
        lead again): the liveness probe fails and the replica is restarted."""
        return self._leadership.alive

    def status(self) -> dict[str, object]:
        """What the health server's `/statusz` serves (JSON): `role` (leader or standby), `holder`
        (this replica's name in the lease; null without one), `ready`, `alive`, `takeovers` (times
        this replica has taken the lead), `pools` (nodes it keeps a pool for), `apiRepairs`
        (kubernetes mode: pools mirrored again because the API's slices differed from them),
        `apiRefused` (pools the API refused for good, 403 or 422, tried again with a backoff) and
        `poolsRemoved` (kubernetes mode: pools this replica, as leader, removed from the bucket
        and the inventory stream because their Node was deleted and their node-agent silent)."""
        return {
            "role": self.role,
            "holder": self._leadership.holder,
            "ready": self.ready,
            "alive": self.alive,
            "takeovers": self.takeovers,
            "pools": len(self.book.pools),
            "apiRepairs": self.api_repairs,
            "apiRefused": self._api.refused if self._api is not None else 0,
            "poolsRemoved": self.pools_removed,
        }

    async def load(self) -> None:
        """Read the bucket's slices so generations continue where they were."""
        slices = await self._writer.read()
        self.book.load(slices)
        self._leadership.standalone()
        log.info("loaded %d slices of %d pools", len(slices), len(self.book.pools))

    async def run(self, stop: asyncio.Event) -> None:
        await self._consumer.open()
        self._subscribed = True
        self._leadership.start()
        nodes = self._mirror.nodes if self._mirror is not None else None
        nodes_task = None
        if nodes is not None:
            nodes_task = asyncio.create_task(nodes.run(), name="inventory-nodes")
        try:
            while not stop.is_set():
                msgs = await self._consumer.fetch()
                if msgs is None:
                    self._heartbeats.cut_off()
                    continue
                for msg in msgs:
                    await self._guarded(msg)
                if len(msgs) < BATCH and not self._caught_up:
                    self._caught_up = True
                    self._heartbeats.caught_up()
                self._dirty.update(self._heartbeats.expire(self.book))
                if self._api is not None:
                    self._api.note_wipes(self.book)
                await self._lead()
                await self._forget_gone()
        finally:
            self._subscribed = False
            if self._api is not None:
                await self._api.close()
            if nodes_task is not None:
                nodes_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await nodes_task
            await self._leadership.stop()
            await self._consumer.close()
            await self._leadership.release()

    async def _lead(self) -> None:
        """The leader's part of one turn: take over in a new term, write what changed."""
        if self._leadership.lost():
            return
        if self._leadership.due():
            if not self._caught_up:
                return  # take over with warm pools, not half-read ones
            if not await self._takeover():
                return
        await self._flush()
        api = self._api
        if api is not None:
            api.note_nodes(self.book)
            await api.flush(self.book)
        if not self._dirty and (api is None or api.settled()) and self.leading():
            self._republished = True
            if api is not None:
                await api.tidy(self.book)

    async def _takeover(self) -> bool:
        """Re-read the bucket and mark every pool for republishing; whether that worked."""
        epoch = self._leadership.epoch()
        try:
            written = await self._writer.read()
        except BusError as exc:
            log.warning("cannot read the slices to take over (%s); retrying", exc)
            return False
        changes = self.book.adopt(written)
        self._dirty = {c.node for c in changes}
        self._leadership.took_over(epoch)
        if self._api is not None:
            self._api.taken_over()
        self._republished = False
        log.info(
            "leader (epoch %d): republishing %d of %d pools",
            epoch,
            len(changes),
            len(self.book.pools),
        )
        return True

    async def _flush(self) -> None:
        """Write every pool whose bucket copy is behind; failures stay for the next turn."""
        if not self._dirty:
            return
        for node in sorted(self._dirty):
            state = self.book.pools[node]
            try:
                deleted = await self._writer.sync(node, list(state.slices.values()))
                self._dirty.discard(node)
                self.changes += 1
                log.info(
                    "pool %s: generation %d, %d slice(s), %d removed",
                    node,
                    state.generation,
                    len(state.slices),
                    len(deleted),
                )
                if self._api is not None:
                    self._api.written(node, deleted)
            except NotLeaderError as exc:
                log.warning("writes stopped: %s", exc)
                self._leadership.step_down()  # re-read under a valid lease before writing again
                return
            except BusRetryableError as exc:
                log.warning("pool %s not written (%s); retrying", node, exc)
                return
        await self._publish_drift()

    async def _forget_gone(self) -> None:
        """Kubernetes mode: pools whose Node is deleted and whose node-agent is silent leave the
        bus (see `gone.py`) and the book."""
        if self._gone is None or not self._caught_up:
            return
        if await self._gone.sweep(self.book, self._unwritten, self._forget):
            await self._publish_drift()

    def _forget(self, node: str) -> None:
        """Drop the pool from this replica."""
        self.book.pools.pop(node, None)
        self._dirty.discard(node)
        if self._api is not None:
            self._api.forget(node)

    def _unwritten(self, node: str) -> bool:
        """Whether the node's pool is still to be written to the bucket or to the API."""
        return node in self._dirty or (self._api is not None and self._api.pending(node))

    async def _guarded(self, msg: Msg) -> None:
        try:
            await self.handle(msg)
        except (BusPermanentError, SliceError) as exc:
            if self.leading():
                try:
                    await self._dead.park(msg, exc)
                except BusRetryableError as send_exc:
                    log.warning("inventory on %s deferred: %s", msg.subject, send_exc)
                    with contextlib.suppress(*NATS_ERRORS):
                        await msg.nak(delay=1.0)
                    return
            else:
                log.warning("skipping inventory on %s: %s", msg.subject, exc)
        with contextlib.suppress(*NATS_ERRORS):
            await msg.ack()

    async def handle(self, msg: Msg) -> None:
        """Observe one inventory (the caller acknowledges it)."""
        inventory = NODE_INVENTORY.decode(msg.data, msg.headers)
        with tracing.process_span(msg.subject, msg.headers, size=len(msg.data)):
            node = subjects.parse(msg.subject).node
            if inventory.node != node:
                raise BusPermanentError(
                    f"inventory of node {inventory.node!r} published on {msg.subject}"
                )
            seen_at = self._heartbeats.seen_at(msg)
            if self._gone is not None and msg.metadata and msg.metadata.sequence:
                self._gone.saw(node, msg.metadata.sequence.stream)
            if self.book.observe(inventory, seen_at) is not None:
                self._dirty.add(node)

    async def _publish_drift(self) -> None:
        if not self.leading():
            return
        await self._drift.publish(
            {n: s.inventory for n, s in self.book.pools.items() if s.inventory}
        )
