"""Device reservations shared by all allocator replicas, in the `gpudra-reservations` KV bucket.

Why this is safe with several replicas (the invariant "a device is never allocated twice"):
- Every change of a pool's holdings is a revision-checked KV write (`create` when the key is new,
  `update(last=revision)` otherwise). Two replicas that decided from the same revision cannot both
  write: the second gets a wrong-last-sequence error, refreshes that pool and decides again. The
  holdings a replica writes are also checked against the fresh content before writing.
- An allocation spanning several pools reserves them one by one; a conflict on a later pool rolls
  back the earlier ones, so a decision holds all of its devices or none.
- A decision becomes final when `c.<uid>` is *created* (exactly once per claim). A replica that
  loses that race (the same claim redelivered to two replicas) or finds a tombstone (the claim was
  released meanwhile) removes the holdings of its own attempt (`token`) and nothing else.
- A replica killed after reserving but before recording leaves holdings without a record; the
  claim's redelivery removes them once they are older than `stale_after` (longer than any live
  attempt takes), and the claim's release removes every holding of its UID.

`start()` mirrors the bucket into memory with a KV watch: `state` is the `AllocatedState` the
allocation core reads, and `changed` is set whenever any replica changes anything. A watch that
fails or ends (a lost connection, the watcher stopped under it) is opened again with backoff
(`RETRY_FIRST` to `RETRY_MAX` seconds, counted in `rewatches`); its replay brings the mirror up to
date. (Pool keys are never deleted, only emptied; one an operator removed while no watch ran
stays in the mirror, which errs on the side of devices held, until its next write refreshes it.)
The mirror must keep following: a release frees the holdings the mirror knows of, so a mirror
left behind would leave devices another replica reserved for a deleted claim held for good.

Within one replica, writes of one pool take turns (a lock per pool), so concurrent claims of the
replica landing on the same node do not make each other's revision-checked writes fail. `hold`
marks a decision's exclusive devices in use in `state` before they are written, so that the
replica may decide its next claim while this one's write is on its way; `unhold` takes the marks
away again (a device stays in use when a pool of the mirror holds it by then). A mark is only a
hint to this replica's next decisions: what two replicas may hold is decided by the
revision-checked writes alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable

import nats.errors
import nats.js.errors
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from gpudra_alloc.state import AllocatedState, DeviceID
from gpudra_allocator.errors import ReservationConflict
from gpudra_allocator.holdings import (
    POOL_PREFIX,
    BadReservationError,
    ClaimRecord,
    Holding,
    PoolHoldings,
    apply_holdings,
    claim_key,
    pool_key,
)
from gpudra_bus import NATS_ERRORS, translate, wrong_revision
from gpudra_service import cancel_until_done

log = logging.getLogger(__name__)

_MAX_CAS_TRIES = 50
RETRY_FIRST = 0.5  # seconds before the first new watch after a failed one
RETRY_MAX = 10.0


class Reservations:
    """The reservation bucket plus its in-memory mirror (see the module docstring)."""

    def __init__(self, kv: KeyValue, *, clock: Callable[[], float] = time.time) -> None:
        self._kv = kv
        self._clock = clock
        self._pools: dict[str, tuple[int, PoolHoldings]] = {}
        # claim UID -> keys of the pools holding something of it (so a claim's lookup does not
        # walk every holding of the fleet)
        self._uid_pools: dict[str, set[str]] = {}
        self._pool_locks: dict[str, asyncio.Lock] = {}
        self.state = AllocatedState()
        self.changed = asyncio.Event()
        self.version = 0
        self._watch_task: asyncio.Task[None] | None = None
        self._synced = asyncio.Event()
        self.rewatches = 0

    @property
    def kv(self) -> KeyValue:
        """The bucket itself (gang membership and decisions live there too: `gangs`)."""
        return self._kv

    # -- mirror -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start mirroring; returns once every existing key has been read."""
        try:
            watcher = await self._kv.watch(f"{POOL_PREFIX}>")
        except NATS_ERRORS as exc:
            raise translate(exc, "watching reservations") from exc
        self._watch_task = asyncio.create_task(self._supervise(watcher), name="reservations-watch")
        await self._synced.wait()

    async def stop(self) -> None:
        task, self._watch_task = self._watch_task, None
        if task is not None:
            await cancel_until_done(task)

    async def _supervise(self, watcher: KeyValue.KeyWatcher) -> None:
        """Follow `watcher`; when it fails or ends, watch again (backoff) until cancelled."""
        delay = RETRY_FIRST
        while True:
            try:
                synced = await self._follow(watcher)
                log.warning("reservations watch ended; watching again")
            except NATS_ERRORS as exc:
                synced = False
                log.warning("reservations watch failed (%s); watching again", exc)
            except Exception:  # a bug must not leave the mirror silently stale: log, go on
                synced = False
                log.exception("reservations watch broke; watching again")
            delay = RETRY_FIRST if synced else min(delay * 2, RETRY_MAX)
            while True:
                await asyncio.sleep(delay)
                try:
                    watcher = await self._kv.watch(f"{POOL_PREFIX}>")
                    break
                except NATS_ERRORS as exc:
                    log.warning("watching reservations again failed (%s)", exc)
                    delay = min(delay * 2, RETRY_MAX)
            self.rewatches += 1

    async def _follow(self, watcher: KeyValue.KeyWatcher) -> bool:
        """Apply `watcher`'s entries until it ends; whether it got past its replay of the bucket.

        Pools the replay lacks are kept: this replica's own writes made while the new watch
        replays may come after its end marker, and dropping them from the mirror even for a
        moment could let a release miss their holdings."""
        synced = False
        try:
            async for entry in watcher:
                if entry is None:
                    synced = True
                    self._synced.set()
                    continue
                if entry.operation in (KV_DEL, KV_PURGE) or not entry.value:
                    self._set(entry.key, entry.revision or 0, None)
                    continue
                try:
                    self._set(entry.key, entry.revision or 0, PoolHoldings.decode(entry.value))
                except BadReservationError as exc:
                    log.error("ignoring reservation key %s: %s", entry.key, exc)
            return synced
        finally:
            with contextlib.suppress(*NATS_ERRORS):
                await watcher.stop()  # type: ignore[no-untyped-call]

    def _set(self, key: str, revision: int, value: PoolHoldings | None) -> None:
        current = self._pools.get(key)
        if current is not None and current[0] >= revision:
            return  # our own write, seen again (or an older one arriving late)
        if current is not None:
            apply_holdings(self.state, current[1], -1)
            for h in current[1].holdings:
                keys = self._uid_pools.get(h.uid)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del self._uid_pools[h.uid]
        if value is None:
            self._pools.pop(key, None)
        else:
            self._pools[key] = (revision, value)
            apply_holdings(self.state, value, +1)
            for h in value.holdings:
                self._uid_pools.setdefault(h.uid, set()).add(key)
        self.version += 1
        self.changed.set()

    def holdings_of(self, uid: str) -> list[tuple[PoolHoldings, Holding]]:
        """Every holding of `uid` the mirror knows, with the pool it is in."""
        return [
            (pool, h)
            for key in sorted(self._uid_pools.get(uid, ()))
            for pool in (self._pools[key][1],)
            for h in pool.holdings
            if h.uid == uid
        ]

    def pool(self, driver: str, pool: str) -> PoolHoldings:
        entry = self._pools.get(pool_key(driver, pool))
        return entry[1] if entry is not None else PoolHoldings(driver, pool)

    def hold(self, by_pool: dict[tuple[str, str], list[Holding]]) -> list[DeviceID] | None:
        """Mark the exclusive devices of a decision in use now, before `reserve` writes them.

        Returns the devices marked (for `unhold`), or None when the decision holds shares or
        capacity: those add up per device, so such a decision must be written before the next
        one is made (nothing is marked then)."""
        if any(h.share_id is not None or h.capacity for hs in by_pool.values() for h in hs):
            return None
        marked: list[DeviceID] = []
        for (driver, pool), holdings in by_pool.items():
            for h in holdings:
                device = DeviceID(driver, pool, h.device)
                if device not in self.state.devices:
                    self.state.devices.add(device)
                    marked.append(device)
        return marked

    def unhold(self, devices: Iterable[DeviceID]) -> None:
        """Take `hold`'s marks away; a device a pool of the mirror holds by now stays in use."""
        freed = False
        for device in devices:
            entry = self._pools.get(pool_key(device.driver, device.pool))
            holders = entry[1].holdings if entry is not None else ()
            if not any(h.device == device.device and h.share_id is None for h in holders):
                self.state.devices.discard(device)
                freed = True
        if freed:
            self.version += 1
            self.changed.set()

    # -- claim records -------------------------------------------------------------------------

    async def record(self, uid: str) -> ClaimRecord | None:
        """The claim's record, or None when nothing is decided for it (none, or `cleared`)."""
        stored = await self.stored(uid)
        return None if stored is None or stored.cleared else stored

    async def stored(self, uid: str) -> ClaimRecord | None:
        """Whatever the claim's key holds, the mark of a cleared allocation included."""
        return (await self._entry(uid))[1]

    async def _entry(self, uid: str) -> tuple[int, ClaimRecord | None]:
        try:
            entry = await self._kv.get(claim_key(uid))
        except nats.js.errors.KeyNotFoundError:
            return 0, None
        except NATS_ERRORS as exc:
            raise translate(exc, f"reading claim record {uid}") from exc
        if not entry.value:
            return entry.revision or 0, None
        return entry.revision or 0, ClaimRecord.decode(entry.value)

    async def commit(self, uid: str, record: ClaimRecord) -> ClaimRecord:
        """Record `record` unless the claim has a record already; returns the record that stands.

        A `cleared` mark is replaced by a record from an event not older than the mark (`pos`:
        the claims-stream position, compared within one incarnation of the stream; a sequence 0
        is unknown, as for records of older replicas): an older one answers news the mark has
        overtaken (an adoption, or a gang decision settled, after the deallocation that followed
        it), and the mark stands."""
        key = claim_key(uid)
        for _ in range(_MAX_CAS_TRIES):
            try:
                await self._kv.create(key, record.encode())
                return record
            except NATS_ERRORS as exc:
                if not wrong_revision(exc):
                    raise translate(exc, f"recording decision for {uid}") from exc
            revision, existing = await self._entry(uid)
            if existing is not None and not (
                existing.cleared and (record.seq == 0 or not existing.pos.after(record.pos))
            ):
                return existing
            if existing is None:
                continue  # deleted (collected) meanwhile: create again
            try:
                await self._kv.update(key, record.encode(), last=revision)
                return record
            except NATS_ERRORS as exc:
                if not wrong_revision(exc):
                    raise translate(exc, f"recording decision for {uid}") from exc
        raise ReservationConflict(f"claim record {uid} keeps changing")

    # -- holdings ------------------------------------------------------------------------------

    async def reserve(self, by_pool: dict[tuple[str, str], list[Holding]]) -> None:
        """Add holdings to their pools, all or none; `ReservationConflict` when they collide."""
        done: list[tuple[str, str, Holding]] = []
        try:
            for (driver, pool), holdings in sorted(by_pool.items()):
                await self._add(driver, pool, holdings)
                done.append((driver, pool, holdings[0]))
        except Exception:
            for driver, pool, h in done:
                await self._remove(driver, pool, h.uid, h.token)
            raise

    async def drop(
        self, uid: str, token: str | None = None, pools: Iterable[tuple[str, str]] = ()
    ) -> int:
        """Remove `uid`'s holdings (only attempt `token`'s, when given) from the pools the mirror
        knows it holds something in, and from `pools` (driver, pool) too, which the mirror may
        not have seen written yet (read when the mirror shows nothing there); returns the number
        of pools looked at."""
        found = {(p.driver, p.pool) for p, h in self.holdings_of(uid) if token in (None, h.token)}
        touched = found | set(pools)
        for driver, pool in sorted(touched):
            await self._remove(driver, pool, uid, token)
        return len(touched)

    async def drop_stale(self, uid: str, stale_after: float) -> bool:
        """Remove holdings of `uid` older than `stale_after` s; False when younger ones remain."""
        now = self._clock()
        tokens = {h.token for _, h in self.holdings_of(uid) if now - h.at >= stale_after}
        for token in sorted(tokens):
            await self.drop(uid, token)
        return not self.holdings_of(uid)

    async def release(self, uid: str, claim: str, pools: Iterable[tuple[str, str]] = ()) -> None:
        """The claim is gone: tombstone its record, then free every holding of its UID (`pools`:
        where its record says it holds devices, looked at even when the mirror is behind)."""
        try:
            await self._kv.put(claim_key(uid), ClaimRecord("released", claim=claim).encode())
        except NATS_ERRORS as exc:
            raise translate(exc, f"tombstoning claim {uid}") from exc
        await self.drop(uid, pools=pools)

    async def forget(
        self,
        uid: str,
        claim: str = "",
        seq: int = 0,
        pools: Iterable[tuple[str, str]] = (),
        *,
        epoch: int = 0,
        refused: tuple[int, str] | None = None,
    ) -> None:
        """The claim's allocation was cleared but the claim lives on: mark it `cleared` (at
        claims-stream sequence `seq` of the stream's incarnation `epoch`; `refused`: because the
        API server refused it, at the claim's (generation, resourceVersion)), then free every
        holding of its UID (`pools` as for `release`). The mark is no decision: the next one
        replaces it (`commit`), and older events of the claim that come late find it and change
        nothing."""
        mark = ClaimRecord("cleared", claim=claim, seq=seq, epoch=epoch, refused=refused)
        try:
            await self._kv.put(claim_key(uid), mark.encode())
        except NATS_ERRORS as exc:
            raise translate(exc, f"forgetting claim {uid}") from exc
        await self.drop(uid, pools=pools)

    async def _add(self, driver: str, pool: str, holdings: Iterable[Holding]) -> None:
        new = list(holdings)

        def change(current: PoolHoldings) -> PoolHoldings:
            conflicts = current.conflicts(new)
            if conflicts:
                raise ReservationConflict(f"pool {driver}/{pool}: {', '.join(conflicts)}")
            return PoolHoldings(driver, pool, current.holdings + tuple(new))

        await self._cas(driver, pool, change, fresh=False)

    async def _remove(self, driver: str, pool: str, uid: str, token: str | None) -> None:
        await self._cas(driver, pool, lambda current: current.without(uid, token), fresh=True)

    async def _cas(
        self,
        driver: str,
        pool: str,
        change: Callable[[PoolHoldings], PoolHoldings],
        *,
        fresh: bool,
    ) -> None:
        """Apply `change` to the pool with a revision-checked write.

        An add (`fresh=False`) starts from the mirror — the state the decision was made on — and
        fails with `ReservationConflict` when the revision moved (after refreshing the mirror), so
        the caller decides again. A removal (`fresh=True`) starts from the mirror too, which saves
        a read per pool of every release: the write is revision-checked, so a mirror behind the
        bucket only costs a refusal, then the pool is read and the removal retried until it
        lands. A removal the mirror says changes nothing reads the pool before concluding so
        (the mirror may not have seen a holding another replica wrote yet).
        """
        key = pool_key(driver, pool)
        lock = self._pool_locks.setdefault(key, asyncio.Lock())
        async with lock:
            await self._cas_locked(key, driver, pool, change, fresh=fresh)

    async def _cas_locked(
        self,
        key: str,
        driver: str,
        pool: str,
        change: Callable[[PoolHoldings], PoolHoldings],
        *,
        fresh: bool,
    ) -> None:
        read = not fresh  # an add trusts the mirror; a removal's "nothing to do" needs a read
        for _ in range(_MAX_CAS_TRIES):
            revision, current = self._pools.get(key, (0, PoolHoldings(driver, pool)))
            updated = change(current)
            if updated.holdings == current.holdings:
                if read:
                    return
                await self._refresh(key)
                read = True
                continue
            try:
                if revision == 0:
                    new_revision = await self._kv.create(key, updated.encode())
                else:
                    new_revision = await self._kv.update(key, updated.encode(), last=revision)
            except NATS_ERRORS as exc:
                if not wrong_revision(exc):
                    raise translate(exc, f"writing reservations of {driver}/{pool}") from exc
                await self._refresh(key)
                if not fresh:
                    raise ReservationConflict(f"pool {driver}/{pool} changed meanwhile") from exc
                read = True
                continue
            self._set(key, new_revision, updated)
            return
        raise ReservationConflict(f"pool {driver}/{pool} keeps changing")

    async def _refresh(self, key: str) -> None:
        try:
            entry = await self._kv.get(key)
        except nats.js.errors.KeyNotFoundError as exc:
            # Deleted (or never written): a later `create` is the right write.
            revision = getattr(getattr(exc, "entry", None), "revision", None) or 0
            if revision:
                self._set(key, revision, None)
            return
        except NATS_ERRORS as exc:
            raise translate(exc, f"reading reservations {key}") from exc
        if entry.value:
            self._set(key, entry.revision or 0, PoolHoldings.decode(entry.value))
