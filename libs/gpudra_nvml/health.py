"""GPU health from NVML: XID events, uncorrected ECC errors, row remapping, GPUs gone off the bus.

`HealthMonitor.poll()` returns transitions (a condition appeared or cleared) and keeps the current
conditions per GPU index. Policy:
- XID: critical XIDs from the event set raise a condition; XIDs that are the application's fault
  (13, 31, 43, 45, 68, 109, as NVIDIA's device plugin skips them) are ignored. NVML never reports
  that an XID is over, so the condition clears after `xid_hold_s` seconds without a new one.
- ECC: the volatile uncorrected count > 0 raises a condition; a GPU reset zeroes the count and
  clears it.
- Row remapping (`nvmlDeviceGetRemappedRows`, Ampere and later): a remap pending (a row remapped
  for an uncorrectable error, applied at the next reset) raises ROW_REMAP_PENDING until the flag
  drops; a remap failure (spare rows exhausted; sticky in the InfoROM) raises ROW_REMAP_FAILED.
  Both carry the rows remapped for uncorrectable errors; rows remapped for correctable ones are
  normal wear and no condition. NOT_SUPPORTED (pre-Ampere GPUs, and MIG-enabled GPUs with
  instances, as NVML documents) raises and clears nothing: what was known stays known.
- Lost: a GPU answering NVML_ERROR_GPU_IS_LOST, or refused as unusable (INSUFFICIENT_POWER,
  IRQ_ISSUE), raises a condition that clears when it answers again.
- A GPU whose check fails with another NVML error keeps its conditions until a check succeeds;
  it does not stop the checks of the others.
  A GPU that was lost when the event set was opened (or whose registration failed) is registered
  for events once it answers.
- An event wait that fails (any NVML error but TIMEOUT) delivers no XIDs this poll; the per-GPU
  checks still run, and the events queued meanwhile come with the next wait that answers.
- An event set NVML will not create (NOT_SUPPORTED on some platforms, a driver error) leaves XIDs
  unwatched, not the monitor failed: ECC and lost-GPU checks go on, and creating it is tried again
  at every poll.
- A registration failing with NVML_ERROR_UNKNOWN leaves the event set "in an undefined state"
  that "should be freed" (NVML's API reference): it is freed and the other GPUs are registered
  with a new one at once; the failing GPU is tried again at its next check.
Blocking: `poll()` may wait up to `timeout_ms` in NVML's event wait; run it off the event loop.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from gpudra_nvml.errors import DeviceLostError, NvmlCallError
from gpudra_nvml.nvcall import Nvml
from gpudrapb.v1 import inventory_pb2 as pb

log = logging.getLogger(__name__)

#: Application-caused XIDs: not a sign of a bad GPU.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
_TIMEOUT = 10  # NVML_ERROR_TIMEOUT
_UNKNOWN = 999  # NVML_ERROR_UNKNOWN


@dataclass(frozen=True)
class Transition:
    index: int
    condition: pb.HealthCondition
    cleared: bool


def _timestamp(seconds: float) -> Timestamp:
    ts = Timestamp()
    ts.FromNanoseconds(int(seconds * 1e9))
    return ts


class HealthMonitor:
    """Tracks health conditions per GPU index over one NVML library object."""

    def __init__(
        self,
        nvml: Nvml,
        *,
        clock: Callable[[], float] = time.time,
        xid_hold_s: float = 300.0,
        ignored_xids: Iterable[int] = APPLICATION_XIDS,
    ) -> None:
        self._nvml = nvml
        self._clock = clock
        self._xid_hold_s = xid_hold_s
        self._ignored = frozenset(ignored_xids)
        self._event_set: Any = None
        self._by_address: dict[int, int] = {}
        self._conditions: dict[int, dict[int, pb.HealthCondition]] = {}
        self._xid_seen: dict[int, float] = {}
        self._registered: dict[int, Any] = {}  # GPU index -> handle registered with the set
        self._wait_failing = False  # the last event wait failed (logged once per streak)
        self._open = False  # between open() and close(): an event set is wanted
        self._set_failing = False  # the last event set creation failed (logged once per streak)
        self._breaking: set[int] = set()  # GPUs whose registration broke a set (logged once)

    def open(self, handles: dict[int, Any]) -> None:
        """Create the event set and register every GPU for the event types it supports."""
        self._open = True
        self._create_event_set(handles)

    def _create_event_set(self, handles: dict[int, Any]) -> None:
        pending = dict(handles)
        while True:
            try:
                self._event_set = self._nvml.call("nvmlEventSetCreate")
            except NvmlCallError as exc:
                if not self._set_failing:
                    log.warning("no NVML event set (%s): XIDs not watched until there is one", exc)
                self._set_failing = True
                return
            self._set_failing = False
            self._registered.clear()  # registrations belong to an event set
            broken: int | None = None
            for index, handle in pending.items():
                # One GPU that cannot be registered now is registered by a later `_check`.
                try:
                    self._register(index, handle)
                except DeviceLostError:
                    continue
                except NvmlCallError as exc:
                    if exc.code == _UNKNOWN and exc.function == "nvmlDeviceRegisterEvents":
                        broken = index
                        break
            if broken is None:
                return
            if broken not in self._breaking:
                log.warning("registering GPU %d for events broke the event set: replaced", broken)
                self._breaking.add(broken)
            self._free_event_set()
            del pending[broken]

    def _replace_event_set(self, without: int) -> None:
        """A new event set for the GPUs registered now, except `without` (whose registration
        left the current one undefined)."""
        handles = {i: h for i, h in self._registered.items() if i != without}
        self._free_event_set()
        self._create_event_set(handles)

    def _free_event_set(self) -> None:
        event_set, self._event_set = self._event_set, None
        self._registered.clear()
        if event_set is not None:
            with contextlib.suppress(DeviceLostError, NvmlCallError):
                self._nvml.optional("nvmlEventSetFree", event_set)

    def _register(self, index: int, handle: Any) -> None:
        wanted = int(
            self._nvml.const("nvmlEventTypeXidCriticalError")
            | self._nvml.const("nvmlEventTypeDoubleBitEccError")
        )
        supported = self._nvml.optional("nvmlDeviceGetSupportedEventTypes", handle)
        mask = wanted & int(supported) if supported is not None else 0
        if mask:
            self._nvml.optional("nvmlDeviceRegisterEvents", handle, mask, self._event_set)
        self._by_address[int(ctypes.cast(handle, ctypes.c_void_p).value or 0)] = index
        self._registered[index] = handle
        self._breaking.discard(index)

    def close(self) -> None:
        self._open = False
        if self._event_set is not None:
            event_set, self._event_set = self._event_set, None
            self._nvml.optional("nvmlEventSetFree", event_set)

    def conditions(self, index: int) -> list[pb.HealthCondition]:
        current = self._conditions.get(index, {})
        return [current[k] for k in sorted(current)]

    def _raise(self, index: int, kind: int, code: int, message: str) -> Transition | None:
        current = self._conditions.setdefault(index, {})
        if kind in current and current[kind].code == code:
            return None
        condition = pb.HealthCondition(kind=kind, code=code, message=message, since=_timestamp(self._clock()))  # type: ignore[arg-type]
        current[kind] = condition
        return Transition(index, condition, cleared=False)

    def _clear(self, index: int, kind: int) -> Transition | None:
        condition = self._conditions.get(index, {}).pop(kind, None)
        return Transition(index, condition, cleared=True) if condition is not None else None

    def poll(self, gpu_count: int, timeout_ms: int = 0) -> list[Transition]:
        """Drain XID events (waiting up to `timeout_ms` for the first) and check every GPU."""
        out: list[Transition | None] = []
        if self._open and self._event_set is None:
            self._create_event_set({})  # the GPUs are registered by their checks below
        out.extend(self._drain_events(timeout_ms))
        now = self._clock()
        for index in range(gpu_count):
            out.extend(self._check(index))
            seen = self._xid_seen.get(index)
            if seen is not None and now - seen >= self._xid_hold_s:
                del self._xid_seen[index]
                out.append(self._clear(index, pb.HealthCondition.KIND_XID))
        return [t for t in out if t is not None]

    def _drain_events(self, timeout_ms: int) -> list[Transition | None]:
        out: list[Transition | None] = []
        if self._event_set is None:
            return out
        xid_type = int(self._nvml.const("nvmlEventTypeXidCriticalError"))
        wait = timeout_ms
        while True:
            try:
                event = self._nvml.call("nvmlEventSetWait_v2", self._event_set, wait)
            except DeviceLostError:
                # NVML may answer the wait with GPU_IS_LOST while a GPU of the set is off the
                # bus; the per-GPU checks still run and mark the one that is lost.
                return out
            except NvmlCallError as exc:
                if exc.code != _TIMEOUT and not self._wait_failing:
                    log.warning("XID events not readable (%s); GPUs are still checked", exc)
                # Not fatal: raising here would stop the ECC and lost-GPU checks of every GPU
                # (and the agent's whole turn) for as long as the wait keeps failing.
                self._wait_failing = exc.code != _TIMEOUT
                return out
            self._wait_failing = False
            wait = 0
            index = self._by_address.get(int(ctypes.cast(event.device, ctypes.c_void_p).value or 0))
            if index is None or not int(event.eventType) & xid_type:
                continue  # ECC events are picked up by the counter check
            xid = int(event.eventData)
            if xid in self._ignored:
                continue
            self._xid_seen[index] = self._clock()
            out.append(self._raise(index, pb.HealthCondition.KIND_XID, xid, f"XID {xid}"))

    def _check(self, index: int) -> list[Transition | None]:
        try:
            handle = self._nvml.call("nvmlDeviceGetHandleByIndex", index)
            if self._event_set is not None and index not in self._registered:
                # Lost (or refused) when the set was opened: else its XIDs would never be seen.
                # Failing again, it is tried at the next check; its checks go on meanwhile.
                try:
                    self._register(index, handle)
                except NvmlCallError as exc:
                    if exc.code == _UNKNOWN and exc.function == "nvmlDeviceRegisterEvents":
                        if index not in self._breaking:
                            log.warning("registering GPU %d for events broke the event set", index)
                            self._breaking.add(index)
                        self._replace_event_set(without=index)
            count = self._nvml.optional(
                "nvmlDeviceGetTotalEccErrors",
                handle,
                self._nvml.const("NVML_MEMORY_ERROR_TYPE_UNCORRECTED"),
                self._nvml.const("NVML_VOLATILE_ECC"),
            )
        except DeviceLostError as exc:
            return [self._raise(index, pb.HealthCondition.KIND_LOST, 0, exc.reason)]
        except NvmlCallError:
            # Unreadable this time (NVML's unknown error, say): its conditions stay as they are,
            # and the other GPUs are still checked.
            return []
        out = [self._clear(index, pb.HealthCondition.KIND_LOST)]
        if count:
            out.append(
                self._raise(
                    index,
                    pb.HealthCondition.KIND_ECC,
                    int(count),
                    f"{count} uncorrected ECC errors",
                )
            )
        else:
            out.append(self._clear(index, pb.HealthCondition.KIND_ECC))
        out.extend(self._check_row_remapper(index, handle))
        return out

    def _check_row_remapper(self, index: int, handle: Any) -> list[Transition | None]:
        try:
            rows = self._nvml.optional("nvmlDeviceGetRemappedRows", handle)
        except DeviceLostError as exc:
            return [self._raise(index, pb.HealthCondition.KIND_LOST, 0, exc.reason)]
        except NvmlCallError:
            return []  # unreadable this time: its remap conditions stay as they are
        if rows is None:
            return []  # no row remapper (pre-Ampere), or not readable in this MIG layout
        _corrected, uncorrected, is_pending, has_failed = (int(v) for v in rows)
        rows_text = f"{uncorrected} rows remapped for uncorrectable errors"
        out: list[Transition | None] = []
        kind = pb.HealthCondition.KIND_ROW_REMAP_PENDING
        if is_pending:
            out.append(
                self._raise(index, kind, uncorrected, f"{rows_text}; pending: reset the GPU")
            )
        else:
            out.append(self._clear(index, kind))
        kind = pb.HealthCondition.KIND_ROW_REMAP_FAILED
        if has_failed:
            out.append(self._raise(index, kind, uncorrected, f"row remapping failed ({rows_text})"))
        else:
            out.append(self._clear(index, kind))
        return out
