"""The prepare checkpoint: which claims this node has prepared, and how far each got.

One JSON file, `{"version": 1, "checksum": "sha256:<hex>", "data": {"bootID", "claims"}}`; the
checksum covers the canonical JSON of `data`, so a torn or edited file is detected, not trusted.
Each claim is `PrepareStarted` (work may be half done: its CDI spec and the MIG devices it planned
to create may or may not exist) or `PrepareCompleted` (the stored devices are the answer to a
repeated prepare). Writes go to a temp file, are fsynced and renamed, and the directory is fsynced.

A checkpoint written under another boot ID describes a previous boot (MIG devices and `/var/run`
are gone): loading it yields no claims, and hands the stale records back for cleanup.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

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
class ClaimRecord:
    """What the checkpoint knows about one claim."""

    state: State
    namespace: str
    name: str
    devices: tuple[PreparedDevice, ...] = ()
    mig_devices: tuple[str, ...] = ()  # MIG devices this prepare creates (and unprepare destroys)

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "namespace": self.namespace,
            "name": self.name,
            "devices": [d.to_json() for d in self.devices],
            "migDevices": list(self.mig_devices),
        }

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
