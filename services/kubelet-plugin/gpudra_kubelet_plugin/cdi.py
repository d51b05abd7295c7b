"""CDI specs for prepared claims: one file per claim, written atomically, removed exactly.

Spec kind is `k8s.<driver>/claim` (vendor `k8s.<driver>`, as the Kubernetes DRA helpers name it, so
it never collides with the node's static `nvidia.com/gpu` spec); the file is
`<cdi-dir>/k8s.<driver>-claim_<claim-uid>.json`, device names `<claim-uid>-<device>` (plus
`-<shareID>` for a consumable-capacity share). Per device: its device nodes (`/dev/nvidiaN`; for MIG
the parent's node and the GI/CI access capabilities `/dev/nvidia-caps/nvidia-cap<M>`). For the whole
claim: `/dev/nvidiactl`, `/dev/nvidia-uvm`, `/dev/nvidia-uvm-tools` and `NVIDIA_VISIBLE_DEVICES`
(the UUIDs of all the claim's devices, in result order) plus any sharing environment, plus the
driver's libraries, binaries and hooks when a base spec is configured (see `cdibase`). The spec
declares CDI 0.6.0, or 0.7.0 when it carries `additionalGIDs` (see `CDI_VERSION`).

Every spec is validated against `cdi_schema.json` before it is written; a write goes to a dot-file
temp `.<spec file>.tmp` (CDI runtimes load only `*.json`/`*.yaml`), is fsynced and renamed, so a
runtime never sees a partial spec. A crash between the two leaves the temp: `remove_temps` (called
at start) removes exactly the temps this driver's writer names, never another driver's files.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Sequence
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema

from gpudra_kubelet_plugin.cdibase import merge_edits
from gpudra_kubelet_plugin.devices import DeviceInfo
from gpudra_kubelet_plugin.errors import CdiError

# The spec version a claim spec declares: the lowest the CDI library (containerd, CRI-O) accepts
# for what it contains. Spec annotations need 0.6.0; `additionalGIDs`, which a base spec may
# bring, need 0.7.0. Never more than needed: runtimes built on an older CDI library reject
# versions they do not know.
CDI_VERSION = "0.6.0"
CDI_VERSION_ADDITIONAL_GIDS = "0.7.0"
CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


@dataclasses.dataclass(frozen=True)
class CdiDevice:
    """One CDI device of a claim spec: its name and the node's device it exposes."""

    name: str
    info: DeviceInfo


def device_nodes(info: DeviceInfo) -> list[str]:
    """Device node paths a container needs for `info` (beyond the claim-wide control nodes)."""
    if not info.exists:
        raise CdiError(f"device {info.name} does not exist (MIG placement not created)")
    nodes = [f"/dev/nvidia{info.minor}"]
    if info.kind == "mig":
        if info.gi_cap is None or info.ci_cap is None:
            raise CdiError(f"MIG device {info.name} has no GI/CI capability minors")
        nodes += [
            f"/dev/nvidia-caps/nvidia-cap{info.gi_cap}",
            f"/dev/nvidia-caps/nvidia-cap{info.ci_cap}",
        ]
    return nodes


@cache
def schema() -> dict[str, Any]:
    """The CDI schema subset shipped with this package."""
    text = files("gpudra_kubelet_plugin").joinpath("cdi_schema.json").read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


@cache
def _validator() -> jsonschema.protocols.Validator:
    # Checking the schema itself is the expensive part of `jsonschema.validate`: do it once.
    cls = jsonschema.validators.validator_for(schema())
    cls.check_schema(schema())
    return cls(schema())


def validate(spec: Any) -> None:
    """Raise `CdiError` naming the most relevant schema violation of `spec`."""
    error = jsonschema.exceptions.best_match(_validator().iter_errors(spec))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "<root>"
        raise CdiError(f"invalid CDI spec at {where}: {error.message}")


class CdiWriter:
    """Builds, writes and removes the per-claim CDI specs of one driver in one directory."""

    def __init__(
        self, directory: Path, driver: str, base_edits: dict[str, Any] | None = None
    ) -> None:
        self.directory = directory
        self.base_edits = base_edits or {}
        self.vendor = f"k8s.{driver}"
        self.kind = f"{self.vendor}/claim"

    def device_name(self, claim_uid: str, device: str, share_id: str | None = None) -> str:
        return f"{claim_uid}-{device}" + (f"-{share_id}" if share_id else "")

    def qualified(self, name: str) -> str:
        """The fully qualified CDI device ID the kubelet hands to the runtime."""
        return f"{self.kind}={name}"

    def spec_path(self, claim_uid: str) -> Path:
        return self.directory / f"{self.vendor}-claim_{claim_uid}.json"

    def temp_path(self, claim_uid: str) -> Path:
        """Where `write` puts the claim's spec until it is complete."""
        path = self.spec_path(claim_uid)
        return path.with_name(f".{path.name}.tmp")

    def build(
        self, claim_uid: str, devices: Sequence[CdiDevice], env: Sequence[str] = ()
    ) -> dict[str, Any]:
        """The spec for one claim; validated, so a returned spec is always writable."""
        uuids = list(dict.fromkeys(d.info.uuid for d in devices))
        spec: dict[str, Any] = {
            "cdiVersion": CDI_VERSION,
            "kind": self.kind,
            "annotations": {"gpudra.io/claim-uid": claim_uid},
            "devices": [
                {
                    "name": d.name,
                    "containerEdits": {
                        "deviceNodes": [{"path": p} for p in device_nodes(d.info)],
                    },
                }
                for d in devices
            ],
            "containerEdits": merge_edits(
                {
                    "deviceNodes": [{"path": p} for p in CONTROL_NODES],
                    "env": [f"NVIDIA_VISIBLE_DEVICES={','.join(uuids)}", *env],
                },
                self.base_edits,
            ),
        }
        if spec["containerEdits"].get("additionalGIDs"):
            spec["cdiVersion"] = CDI_VERSION_ADDITIONAL_GIDS
        validate(spec)
        return spec

    def write(self, claim_uid: str, spec: dict[str, Any]) -> Path:
        """Write `spec` atomically (temp, fsync, rename, fsync directory)."""
        validate(spec)
        path = self.spec_path(claim_uid)
        temp = self.temp_path(claim_uid)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with temp.open("w", encoding="utf-8") as handle:
                json.dump(spec, handle, indent=2, sort_keys=True)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, path)
            _fsync_dir(self.directory)
        except OSError as exc:
            temp.unlink(missing_ok=True)
            raise CdiError(f"cannot write CDI spec {path}: {exc}") from exc
        return path

    def remove(self, claim_uid: str) -> bool:
        """Remove the claim's spec (and any temp left by a crash); True if a spec was there."""
        path = self.spec_path(claim_uid)
        try:
            self.temp_path(claim_uid).unlink(missing_ok=True)
            existed = path.exists()
            path.unlink(missing_ok=True)
            if existed:
                _fsync_dir(self.directory)
        except OSError as exc:
            raise CdiError(f"cannot remove CDI spec {path}: {exc}") from exc
        return existed

    def claim_uids(self) -> set[str]:
        """UIDs of the claims that have a spec of this driver in the directory."""
        prefix, suffix = f"{self.vendor}-claim_", ".json"
        if not self.directory.is_dir():
            return set()
        return {
            p.name[len(prefix) : -len(suffix)]
            for p in self.directory.iterdir()
            if p.name.startswith(prefix) and p.name.endswith(suffix)
        }

    def remove_temps(self) -> list[str]:
        """Remove every temp spec of this driver left by a crash; returns their file names.

        Only names `temp_path` makes match (`.<vendor>-claim_<uid>.json.tmp`, a UID being letters,
        digits, `-` and `.`); another driver's vendor differs in the part before `-claim_`, which a
        driver name (a DNS subdomain, no `_`) cannot make equal. Call it while no write of this
        driver can be under way (`DeviceState` holds the node-wide lock): a temp being written
        would be taken from under its writer.
        """
        pattern = re.compile(
            rf"\.{re.escape(self.vendor)}-claim_[A-Za-z0-9][A-Za-z0-9.-]*\.json\.tmp"
        )
        if not self.directory.is_dir():
            return []
        removed = []
        try:
            for path in sorted(self.directory.iterdir()):
                if pattern.fullmatch(path.name) and path.is_file():
                    path.unlink(missing_ok=True)
                    removed.append(path.name)
            if removed:
                _fsync_dir(self.directory)
        except OSError as exc:
            raise CdiError(f"cannot remove temp CDI specs in {self.directory}: {exc}") from exc
        return removed


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
