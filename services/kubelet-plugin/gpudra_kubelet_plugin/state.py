"""Device state of the node: prepares and unprepares claims, and is the only writer of the
checkpoint, the CDI specs and dynamic MIG devices.

Promises:
- Prepare and unprepare are serialized, across coroutines and across plugin instances sharing the
  plugin directory (rolling update), by a file lock; each starts from the checkpoint file's state.
- The claim store is read outside the lock, so a slow or hanging read holds up no other claim;
  what to do is decided after it, under the lock, from the checkpoint as it is then.
- Prepare checks the claim's UID against the store (a mismatch fails that claim only), resolves
  every device and config *before* any side effect, records `PrepareStarted` (with the MIG devices it
  will create) in the checkpoint, creates those MIG devices, writes the CDI specs (one per request
  group, see `cdi`), then records `PrepareCompleted` with the answer. A failure rolls back what
  this call did.
- A repeated prepare of a completed claim returns the stored answer without reading the store.
- A claim found `PrepareStarted` (a crash mid-prepare or mid-unprepare) is rolled back — its specs
  removed, its planned MIG devices destroyed — before it is prepared again; unprepare of such a
  claim cleans up the same. Unprepare records a completed claim as `PrepareStarted` before it
  removes anything, so a `PrepareCompleted` answer always names specs that exist. A prepare
  cancelled part-way (the kubelet's deadline) stays `PrepareStarted`; a MIG device it is creating
  is waited for first, so the rollback finds and destroys it.
- Unprepare removes exactly the claim's specs (also the one a plugin before the per-request layout
  wrote) and the MIG devices it created (unless another prepared claim shares them, under any of
  their names), identified by the UUIDs the checkpoint recorded at creation, not by their names
  (see `checkpoint`); unprepare of an unknown claim succeeds, and so does unprepare of a claim
  whose MIG device this node no longer has.
- Prepare checks each existing MIG device of the claim against the node (`DeviceControl.refresh`),
  so a spec never names a device that only this process' table remembers. A device name the
  lookup lacks makes it re-read the node once (`DeviceLookup.reread`), under the lock, before the
  name is that claim's error (which the kubelet retries): devices made since the start need no
  restart.
- Each prepare and unprepare is a span; prepare continues the claim's trace (see `traces`), and
  its outcome goes to the `EventSink` inside that span (see `events`).
- At start, claims of a previous boot are dropped (their specs removed), specs of this driver
  that no checkpointed claim owns are removed, so no spec outlives its claim, and so are this
  driver's temp specs a crash left. A claim of several requests still in the one spec a plugin
  before the per-request layout wrote is kept as it is, with a warning.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from contextlib import AbstractContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

from opentelemetry.trace import Span, Tracer

from gpudra_kubelet_plugin.cdi import CdiDevice, CdiWriter
from gpudra_kubelet_plugin.checkpoint import (
    PREPARE_COMPLETED,
    PREPARE_STARTED,
    Checkpoint,
    ClaimRecord,
    MigIdentity,
    PreparedDevice,
)
from gpudra_kubelet_plugin.claim import Allocation, claim_uid, parse_allocation
from gpudra_kubelet_plugin.claimsource import ClaimSource
from gpudra_kubelet_plugin.config import Sharing, resolve_sharing
from gpudra_kubelet_plugin.devices import DeviceControl, DeviceInfo, DeviceLookup
from gpudra_kubelet_plugin.errors import (
    ClaimUidMismatchError,
    ConfigError,
    DeviceError,
    InvalidClaimError,
    KubeletPluginError,
)
from gpudra_kubelet_plugin.events import EventSink, NoEvents
from gpudra_kubelet_plugin.filelock import file_lock
from gpudra_kubelet_plugin.traces import claim_span

log = logging.getLogger(__name__)
T = TypeVar("T")
DevicesListener = Callable[[list[DeviceInfo]], Awaitable[object]]


async def _to_the_end(work: Coroutine[Any, Any, T]) -> T:
    """`await work`; if the caller is cancelled meanwhile, let `work` finish first, then re-raise.

    NVML creates a MIG device in a worker thread that a cancellation (the kubelet's deadline)
    cannot stop: the device appears anyway, and only a `create_mig` that runs to its end records
    it where the rollback and unprepare look for it. Until then the caller keeps the lock.
    """
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait({task})
        if not task.cancelled() and task.exception() is not None:
            log.warning("work finished after its caller was cancelled: %r", task.exception())
        raise


@dataclasses.dataclass(frozen=True)
class ClaimRef:
    """A claim as the kubelet names it."""

    uid: str
    namespace: str
    name: str


class DeviceState:
    """Prepare/unprepare with checkpointing; see the module docstring for the promises."""

    def __init__(
        self,
        *,
        driver: str,
        node: str,
        claims: ClaimSource,
        lookup: DeviceLookup,
        control: DeviceControl,
        cdi: CdiWriter,
        checkpoint: Checkpoint,
        tracer: Tracer | None = None,
        lock_file: Path | None = None,
        events: EventSink | None = None,
    ) -> None:
        self.driver = driver
        self.node = node
        self._claims = claims
        self._lookup = lookup
        self._control = control
        self._cdi = cdi
        self._checkpoint = checkpoint
        self._tracer = tracer
        self._lock_file = lock_file or checkpoint.path.with_name("serialize.lock")
        self._records: dict[str, ClaimRecord] = {}
        self._lock = asyncio.Lock()
        self._events = events or NoEvents()
        self._listeners: list[DevicesListener] = []

    def on_devices_changed(self, listener: DevicesListener) -> None:
        """Call `listener` with every device of the node (`DeviceLookup.devices`) each time
        dynamic MIG made or destroyed some (e.g. `HealthHub.sync`)."""
        self._listeners.append(listener)

    async def _devices_changed(self) -> None:
        if self._listeners:
            devices = await self._lookup.devices()
            for listener in self._listeners:
                await listener(devices)

    @property
    def records(self) -> Mapping[str, ClaimRecord]:
        """The checkpointed claims by UID (read-only view)."""
        return dict(self._records)

    async def start(self) -> None:
        """Load the checkpoint; clean up a previous boot's claims and orphaned specs."""
        async with file_lock(self._lock_file):
            self._start()

    def _start(self) -> None:
        loaded = self._checkpoint.load()
        self._records = dict(loaded.claims)
        for uid in loaded.stale:
            log.info("dropping claim %s prepared before the node rebooted", uid)
            self._cdi.remove(uid)
        for uid in self._cdi.claim_uids() - self._records.keys():
            log.warning("removing orphaned CDI spec of claim %s", uid)
            self._cdi.remove(uid)
        # A crash between a spec's temp write and its rename leaves the temp, whose claim may be
        # PrepareStarted (rolled back only when the kubelet calls again) or not recorded at all
        # (a checkpoint moved away). No write is under way while we hold the lock.
        for name in self._cdi.remove_temps():
            log.warning("removed temp CDI spec %s left by a crash", name)
        if loaded.stale:
            self._checkpoint.save(self._records)
        for uid, record in self._records.items():
            # Prepared by a plugin before the per-request layout (see `cdi`): its stored answer
            # stands, and so does the spec's claim-wide NVIDIA_VISIBLE_DEVICES. Rewriting it
            # would need the claim's sharing config, which only a read of the claim gives.
            groups = {d.request_names for d in record.devices}
            old = self._cdi.spec_paths(uid) == [self._cdi.spec_path(uid)]
            if record.state == PREPARE_COMPLETED and len(groups) > 1 and old:
                log.warning(
                    "claim %s/%s (%s) was prepared with one CDI spec for all its requests: until "
                    "it is unprepared, a container naming one request is also told the GPUs of "
                    "the others in NVIDIA_VISIBLE_DEVICES",
                    record.namespace,
                    record.name,
                    uid,
                )

    async def prepare(self, ref: ClaimRef) -> tuple[PreparedDevice, ...]:
        """The claim's devices with CDI IDs; idempotent."""
        async with self._serialized():
            done = await self._completed_or_rolled_back(ref.uid)
            if done is not None:
                return done
        # The read may take as long as the store's request timeout (an unreachable API server):
        # made under the node-wide lock it would hold up every other claim's prepare and
        # unprepare behind it, and a request of several claims would outlast the kubelet's
        # deadline. So read first, then decide under the lock from the checkpoint as it is then.
        claim = await self._claims.get(ref.namespace, ref.name)
        async with self._serialized():
            done = await self._completed_or_rolled_back(ref.uid)  # another call may have run
            if done is not None:
                return done
            with self._span("prepare", ref, claim) as span:
                name = f"{ref.namespace}/{ref.name}"
                try:
                    devices = await self._prepare(ref, claim)
                except KubeletPluginError as exc:
                    await self._events.prepared(ref.uid, name, (), str(exc))
                    raise
                span.set_attribute("gpudra.devices", [d.device_name for d in devices])
                await self._events.prepared(ref.uid, name, devices)
                return devices

    async def _completed_or_rolled_back(self, uid: str) -> tuple[PreparedDevice, ...] | None:
        """The stored answer of a completed claim; else None, after rolling back a claim left
        `PrepareStarted` (interrupted mid-prepare or mid-unprepare). Call with the lock held."""
        record = self._records.get(uid)
        if record is not None and record.state == PREPARE_COMPLETED:
            return record.devices
        if record is not None:
            log.warning("claim %s was left half prepared or unprepared; rolling back", uid)
            await self._release(uid, record)
        return None

    async def unprepare(self, ref: ClaimRef) -> None:
        """Undo prepare; succeeds for claims this node never prepared."""
        async with self._serialized():
            record = self._records.get(ref.uid)
            with self._span("unprepare", ref) as span:
                span.set_attribute("gpudra.claim.known", record is not None)
                name = f"{ref.namespace}/{ref.name}"
                if record is None:
                    self._cdi.remove(ref.uid)
                    return
                try:
                    await self._release(ref.uid, record)
                except KubeletPluginError as exc:
                    await self._events.unprepared(ref.uid, name, str(exc))
                    raise
                await self._events.unprepared(ref.uid, name)

    @asynccontextmanager
    async def _serialized(self) -> AsyncIterator[None]:
        # Another instance (rolling update) may have changed the checkpoint since our last call:
        # hold the shared lock and work from the file's state, not from memory.
        # The asyncio lock queues this process' callers in order; the file lock then only ever
        # waits for another process.
        async with self._lock, file_lock(self._lock_file):
            self._records = dict(self._checkpoint.load().claims)
            yield

    def _span(
        self, operation: str, ref: ClaimRef, claim: Mapping[str, Any] | None = None
    ) -> AbstractContextManager[Span]:
        return claim_span(
            operation,
            uid=ref.uid,
            namespace=ref.namespace,
            name=ref.name,
            node=self.node,
            claim=claim,
            tracer=self._tracer,
        )

    async def _prepare(self, ref: ClaimRef, claim: Mapping[str, Any]) -> tuple[PreparedDevice, ...]:
        uid = claim_uid(claim)
        if uid != ref.uid:
            raise ClaimUidMismatchError(
                f"claim {ref.namespace}/{ref.name} has UID {uid}, kubelet asked for {ref.uid} "
                "(the claim was deleted and recreated)"
            )
        allocation = parse_allocation(claim, self.driver, self.node)
        if not allocation.results:
            raise InvalidClaimError(
                f"claim {ref.namespace}/{ref.name} has no devices of driver {self.driver} "
                f"on node {self.node}"
            )
        infos = await self._current(await self._devices_of(allocation))
        sharing, shared = self._sharing(allocation, infos)
        planned = tuple(n for n, info in infos.items() if info.kind == "mig" and not info.exists)
        # A device another prepared claim made (deallocated before the kubelet unprepared it,
        # and allocated again, by its placement name or by its instance ids) is shared with it:
        # the last of them to be unprepared destroys it.
        owned = planned + tuple(
            n
            for n in infos
            if n not in planned and self._owned_elsewhere(n, infos[n].uuid, ref.uid)
        )
        created = {
            n: i
            for n in owned
            if (i := self._created_elsewhere(n, infos[n].uuid, ref.uid)) is not None
        }
        started = ClaimRecord(PREPARE_STARTED, ref.namespace, ref.name, (), owned, created)
        await self._save(ref.uid, started)
        try:
            for name in planned:
                log.info("claim %s: creating MIG device %s", ref.uid, name)
                infos[name] = await _to_the_end(self._control.create_mig(infos[name]))
                # Recorded at once: from here on a rollback destroys this device by its UUID.
                created[name] = MigIdentity.of(infos[name])
                await self._save(ref.uid, dataclasses.replace(started, created=dict(created)))
            if planned:
                await self._devices_changed()
            devices, cdi_devices = self._answer(allocation, infos)
            shared_uuids = [infos[n].uuid for n in shared]

            def env(group: Sequence[CdiDevice]) -> list[str]:
                # A spec's environment reaches only containers given its devices: name no other,
                # and tell a container whose devices are not shared nothing about sharing.
                uuids = {d.info.uuid for d in group}
                mine = [u for u in shared_uuids if u in uuids]
                return sharing.env(mine) if mine else []

            self._cdi.write_claim(ref.uid, cdi_devices, env)
        except KubeletPluginError:
            try:
                await self._release(ref.uid, self._records[ref.uid])
            except KubeletPluginError as rollback:
                # The claim stays PrepareStarted; the next prepare or unprepare retries the
                # rollback. The caller needs the original error, not this one.
                log.error("claim %s: rollback after a failed prepare failed: %s", ref.uid, rollback)
            raise
        completed = ClaimRecord(
            PREPARE_COMPLETED, ref.namespace, ref.name, devices, owned, dict(created)
        )
        await self._save(ref.uid, completed)
        return devices

    async def _devices_of(self, allocation: Allocation) -> dict[str, DeviceInfo]:
        """The claim's devices by name. A name the lookup lacks makes it re-read the node once
        before it is this claim's error: a MIG device made since the start (by an operator, or by
        dynamic MIG, which the node-agent then publishes under its instance ids) has a name in
        the slices, and so in allocations, that the devices read at the start do not have."""
        names = list(dict.fromkeys(r.device for r in allocation.results))
        try:
            return {name: await self._lookup.device(name) for name in names}
        except DeviceError:
            added = await self._lookup.reread()
        if added:
            log.info("devices made since the last read: %s", ", ".join(added))
            await self._devices_changed()
        return {name: await self._lookup.device(name) for name in names}

    async def _current(self, infos: Mapping[str, DeviceInfo]) -> dict[str, DeviceInfo]:
        """`infos` with every existing MIG device checked against the node: a table that another
        plugin instance's (or an operator's) changes bypassed must not put a device's old UUID
        and its reused instance ids, now another device's, into a spec."""
        current, changed = dict(infos), False
        try:
            for name, info in infos.items():
                if info.kind == "mig" and info.exists:
                    current[name] = await self._control.refresh(info)
                    changed = changed or current[name] != info
        except DeviceError:
            changed = True
            raise
        finally:
            if changed:
                await self._devices_changed()
        return current

    def _answer(
        self, allocation: Allocation, infos: Mapping[str, DeviceInfo]
    ) -> tuple[tuple[PreparedDevice, ...], list[CdiDevice]]:
        # One answer entry per (device, shareID); several requests served by the same device
        # (possible with prioritized alternatives) share one CDI device. The kubelet gives a
        # container the devices whose request names contain, exactly, the request its
        # `resources.claims[]` entry names: a request of the claim, never a subrequest. So a
        # result of subrequest "gpu/small" is answered as request "gpu" (kubeletplugin's
        # stripSubrequestNames does the same).
        grouped: dict[tuple[str, str | None], list[str]] = {}
        for result in allocation.results:
            names = grouped.setdefault((result.device, result.share_id), [])
            request = result.request.split("/", 1)[0]
            if request not in names:
                names.append(request)
        devices, cdi_devices = [], []
        for (device, share_id), requests in grouped.items():
            name = self._cdi.device_name(allocation.uid, device, share_id)
            cdi_devices.append(CdiDevice(name, infos[device], tuple(requests)))
            devices.append(
                PreparedDevice(
                    request_names=tuple(requests),
                    pool_name=self.node,
                    device_name=device,
                    cdi_device_ids=(self._cdi.qualified(name),),
                    share_id=share_id,
                )
            )
        return tuple(devices), cdi_devices

    def _sharing(
        self, allocation: Allocation, infos: Mapping[str, DeviceInfo]
    ) -> tuple[Sharing, list[str]]:
        """The claim's sharing setting and the devices it applies to.

        One setting per claim: each of the claim's specs (see `cdi`) carries its environment,
        for the shared devices of that spec.
        """
        by_sharing: dict[Sharing, list[str]] = {}
        for result in allocation.results:
            params = [c.parameters for c in allocation.configs_for(result)]
            sharing = resolve_sharing(params, infos[result.device].kind, result.device)
            if sharing.strategy and result.device not in by_sharing.get(sharing, []):
                by_sharing.setdefault(sharing, []).append(result.device)
        if len(by_sharing) > 1:
            raise ConfigError(
                f"claim {allocation.namespace}/{allocation.name}: its devices have different "
                "sharing settings; gpudra applies one sharing setting per claim"
            )
        return next(iter(by_sharing.items()), (Sharing(), []))

    def _owned_elsewhere(self, device: str, uuid: str, uid: str) -> bool:
        """Whether a claim other than `uid` owns the MIG device called `device` (or, when it
        exists, the one with `uuid`, whatever it called it)."""
        return any(
            device in r.mig_devices or any(uuid and i.uuid == uuid for i in r.created.values())
            for u, r in self._records.items()
            if u != uid
        )

    def _created_elsewhere(self, device: str, uuid: str, uid: str) -> MigIdentity | None:
        """The identity of that device, as the claim that made it recorded it."""
        for u, r in self._records.items():
            if u == uid:
                continue
            for name, identity in r.created.items():
                if name == device or (uuid and identity.uuid == uuid):
                    return identity
        return None

    async def _release(self, uid: str, record: ClaimRecord) -> None:
        """Remove the claim's spec and the MIG devices only it owns, then forget the claim."""
        if record.state == PREPARE_COMPLETED:
            # From the first removal on, the stored answer names a spec that is gone: record the
            # claim as half done first, so that a crash or a failed MIG destroy part-way leaves a
            # claim the next prepare rolls back and prepares afresh, never an answer it repeats.
            await self._save(uid, dataclasses.replace(record, state=PREPARE_STARTED, devices=()))
        self._cdi.remove(uid)
        destroyed = False
        try:
            for name in record.mig_devices:
                identity = record.created.get(name)
                if self._owned_elsewhere(name, identity.uuid if identity else "", uid):
                    continue
                try:
                    info = await self._lookup.device(name)
                except DeviceError:
                    # Not on this node any more (its GPU gone, the MIG layout changed by hand since
                    # the plugin started): nothing is left to destroy. Failing here would fail the
                    # kubelet's unprepare on every retry and keep the pod from terminating.
                    log.warning("claim %s: MIG device %s is no longer on this node", uid, name)
                    continue
                if identity is not None:
                    # The device this claim created, whatever the name denotes now: after a
                    # reconfiguration its ids may belong to another device, and another plugin
                    # instance (rolling update) may have made it where our table has none.
                    info = identity.applied_to(info)
                elif not info.exists:
                    continue
                log.info("claim %s: destroying MIG device %s (%s)", uid, name, info.uuid)
                await self._control.destroy_mig(info)
                destroyed = True
        finally:
            if destroyed:  # also when a later one failed: the ones before are gone
                await self._devices_changed()
        del self._records[uid]
        self._checkpoint.save(self._records)

    async def _save(self, uid: str, record: ClaimRecord) -> None:
        previous = self._records.get(uid)
        self._records[uid] = record
        try:
            self._checkpoint.save(self._records)
        except KubeletPluginError:
            if previous is None:
                del self._records[uid]
            else:
                self._records[uid] = previous
            raise
