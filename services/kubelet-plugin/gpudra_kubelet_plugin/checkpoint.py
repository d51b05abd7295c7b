"""The prepare checkpoint: which claims this node has prepared, and how far each got.

One JSON file, `{"version": 1, "checksum": "sha256:<hex>", "data": {"bootID", "claims"}}`; the
checksum covers the canonical JSON of `data`, so a torn or edited file is detected, not trusted.
Each claim is `PrepareStarted` (work may be half done: its CDI spec and the MIG devices it planned
to create may or may not exist) or `PrepareCompleted` (the stored devices are the answer to a
repeated prepare). Writes go to a temp file, are fsynced and renamed, and the directory is fsynced.

A checkpoint written under another boot ID describes a previous boot (MIG devices and `/var/run`
are gone): loading it yields no claims, and hands the stale records back for cleanup.

A MIG device a claim's prepare created is recorded by name (`migDevices`, the placement name the
allocation used) and, once created, by what identifies it (`migCreated`: its MIG UUID, parent GPU
UUID and GPU/compute instance ids). A name does not identify a device: NVML reuses instance ids
after a reconfiguration, so `gpu-<i>-mig-<gi>-<ci>` can later denote a device of another profile,
and a placement name denotes whichever instance occupies that placement now. Unprepare destroys
the recorded UUID, never "what the name denotes now". `migCreated` is optional, so the version stays
1: an older plugin instance (a rolling update) reads such a checkpoint and rewrites it without
the identities, and a record without one falls back to the name, as before.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

from gpudra_kubelet_plugin.devices import DeviceInfo
from gpudra_kubelet_plugin.errors import CheckpointError

VERSION = 1
PREPARE_STARTED: Final = "PrepareStarted"
PREPARE_COMPLETED: Final = "PrepareCompleted"
State = Literal["PrepareStarted", "PrepareCompleted"]


@dataclasses.dataclass(frozen=True)
class PreparedDevice:
    """One entry of the kubelet's answer: a device, the requests it serves, its CDI IDs."""

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "requestNames": list(self.request_names),
            "poolName": self.pool_name,
            "deviceName": self.device_name,
            "cdiDeviceIDs": list(self.cdi_device_ids),
        }
        if self.share_id is not None:
            out["shareID"] = self.share_id
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> PreparedDevice:
        return cls(
            request_names=tuple(raw["requestNames"]),
            pool_name=str(raw["poolName"]),
            device_name=str(raw["deviceName"]),
            cdi_device_ids=tuple(raw["cdiDeviceIDs"]),
            share_id=raw.get("shareID"),
        )


@dataclasses.dataclass(frozen=True)
class MigIdentity:
    """What identifies a MIG device that a prepare created: its UUID (never reused), and where
    it was created (its parent GPU, GPU and compute instance ids; the ids when NVML gave them)."""

    uuid: str
    parent_uuid: str
    gi_id: int | None = None
    ci_id: int | None = None

    @classmethod
    def of(cls, device: DeviceInfo) -> MigIdentity:
        return cls(device.uuid, device.parent_uuid, device.gi_id, device.ci_id)

    def applied_to(self, device: DeviceInfo) -> DeviceInfo:
        """`device` (looked up by name) as the recorded device, whatever the name denotes now."""
        return dataclasses.replace(
            device,
            uuid=self.uuid,
            parent_uuid=self.parent_uuid,
            gi_id=self.gi_id,
            ci_id=self.ci_id,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"uuid": self.uuid, "parentUUID": self.parent_uuid}
        if self.gi_id is not None and self.ci_id is not None:
            out |= {"giID": self.gi_id, "ciID": self.ci_id}
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> MigIdentity:
        uuid = str(raw["uuid"])
        if not uuid:
            raise ValueError("a created MIG device without UUID")
        gi_id, ci_id = raw.get("giID"), raw.get("ciID")
        return cls(
            uuid,
            str(raw["parentUUID"]),
            None if gi_id is None else int(gi_id),
            None if ci_id is None else int(ci_id),
        )


@dataclasses.dataclass(frozen=True)
class ClaimRecord:
    """What the checkpoint knows about one claim."""

    state: State
    namespace: str
    name: str
    devices: tuple[PreparedDevice, ...] = ()
    mig_devices: tuple[str, ...] = ()  # MIG devices this prepare creates (and unprepare destroys)
    # Those of `mig_devices` known to exist, by name: what unprepare destroys (see the docstring).
    created: Mapping[str, MigIdentity] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "state": self.state,
            "namespace": self.namespace,
            "name": self.name,
            "devices": [d.to_json() for d in self.devices],
            "migDevices": list(self.mig_devices),
        }
        if self.created:
            out["migCreated"] = {n: self.created[n].to_json() for n in sorted(self.created)}
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ClaimRecord:
        state = raw["state"]
        if state not in (PREPARE_STARTED, PREPARE_COMPLETED):
            raise ValueError(f"unknown claim state {state!r}")
        return cls(
            state=state,
            namespace=str(raw["namespace"]),
            name=str(raw["name"]),
            devices=tuple(PreparedDevice.from_json(d) for d in raw["devices"]),
            mig_devices=tuple(str(n) for n in raw["migDevices"]),
            created={
                str(n): MigIdentity.from_json(i) for n, i in raw.get("migCreated", {}).items()
            },
        )


@dataclasses.dataclass(frozen=True)
class Loaded:
    """A loaded checkpoint: the live claims, and the claims of a previous boot (to clean up)."""

    claims: dict[str, ClaimRecord]
    stale: dict[str, ClaimRecord]


class Checkpoint:
    """Reads and atomically rewrites the checkpoint file."""

    def __init__(self, path: Path, boot_id_file: Path) -> None:
        self.path = path
        self.boot_id_file = boot_id_file

    def boot_id(self) -> str:
        try:
            return self.boot_id_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise CheckpointError(f"cannot read boot ID from {self.boot_id_file}: {exc}") from exc

    def load(self) -> Loaded:
        """The checkpoint's claims; none when there is no file yet."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return Loaded({}, {})
        except OSError as exc:
            raise CheckpointError(f"cannot read checkpoint {self.path}: {exc}") from exc
        try:
            document = json.loads(text)
            version, checksum, data = document["version"], document["checksum"], document["data"]
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(f"checkpoint {self.path} is not a checkpoint: {exc!r}") from exc
        if version != VERSION:
            raise CheckpointError(f"checkpoint {self.path} has unknown version {version!r}")
        if checksum != _checksum(data):
            raise CheckpointError(
                f"checkpoint {self.path} fails its checksum; it is corrupt (move it away to start "
                "afresh: claims will be prepared again)"
            )
        try:
            claims = {uid: ClaimRecord.from_json(raw) for uid, raw in data["claims"].items()}
            boot_id = data["bootID"]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CheckpointError(f"checkpoint {self.path} has a malformed claim: {exc!r}") from exc
        if boot_id != self.boot_id():
            return Loaded({}, claims)
        return Loaded(claims, {})

    def save(self, claims: Mapping[str, ClaimRecord]) -> None:
        """Replace the checkpoint with `claims`, atomically."""
        data = {
            "bootID": self.boot_id(),
            "claims": {uid: claims[uid].to_json() for uid in sorted(claims)},
        }
        document = {"version": VERSION, "checksum": _checksum(data), "data": data}
        temp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with temp.open("w", encoding="utf-8") as handle:
                json.dump(document, handle, indent=1, sort_keys=True)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, self.path)
            fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise CheckpointError(f"cannot write checkpoint {self.path}: {exc}") from exc


def _checksum(data: Any) -> str:
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(canonical).hexdigest()
