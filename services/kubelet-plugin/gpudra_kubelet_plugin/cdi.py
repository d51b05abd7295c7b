"""CDI specs for prepared claims: one file per request of a claim, written atomically, removed
exactly.

Spec kind is `k8s.<driver>/claim` (vendor `k8s.<driver>`, as the Kubernetes DRA helpers name it, so
it never collides with the node's static `nvidia.com/gpu` spec); device names `<claim-uid>-<device>`
(plus `-<shareID>` for a consumable-capacity share). Per device: its device nodes (`/dev/nvidiaN`;
for MIG the parent's node and the GI/CI access capabilities `/dev/nvidia-caps/nvidia-cap<M>`). For
the whole spec: `/dev/nvidiactl`, `/dev/nvidia-uvm`, `/dev/nvidia-uvm-tools` and
`NVIDIA_VISIBLE_DEVICES` (the UUIDs of the spec's devices, in result order) plus any sharing
environment for those devices, plus the driver's libraries, binaries and hooks when a base spec is
configured (see `cdibase`). A spec declares CDI 0.6.0, or 0.7.0 when it carries `additionalGIDs`
(see `CDI_VERSION`).

Why a file per request. A CDI runtime applies a spec's top-level `containerEdits` to a container
whenever it injects any device of that spec, and the kubelet injects into a container only the
devices of the requests its `resources.claims[]` entry names. With one spec per claim, a container
naming request `a` of a claim with requests `a` and `b` got the UUIDs of `b` in
`NVIDIA_VISIBLE_DEVICES`, and the NVIDIA container runtime in legacy or auto mode mounts the GPUs
that variable names: a leak between the containers of one pod. The variable cannot be moved to the
devices: several devices setting one variable leave only the last value (CDI merges environment
by name), so a container with two GPUs of one request would see one. So the devices are grouped
by the requests they serve (normally one; a device serving several requests is one group of its
own) and each group gets its own spec, whose top-level edits name only that group's devices:
  - a container naming one request sees exactly its GPUs;
  - a container naming several requests of the claim (or the whole claim, when it has several
    requests) gets every device node it was given, but `NVIDIA_VISIBLE_DEVICES` of the last of
    its specs only (CDI again: the last value wins). It never names a GPU the container was not
    given, so whatever the NVIDIA runtime adds from it is a subset of what CDI injected.
  - the claim-wide edits (control nodes, the base spec's mounts and hooks) are in every spec;
    CDI replaces device nodes and mounts of the same path, and runs hooks once per spec, as it
    does for a container given two claims (NVIDIA's DRA driver, whose claim spec is one file,
    relies on that too).
NVIDIA's own DRA driver avoids the variable altogether (`NVIDIA_VISIBLE_DEVICES=void`, devices
only as CDI device nodes); gpudra keeps it because without a base spec the NVIDIA runtime in legacy
mode is what brings the driver's libraries into the container.

Files: a claim with one request group has `<cdi-dir>/k8s.<driver>-claim_<claim-uid>.json`, the
name every claim had before the split (so an upgrade changes nothing for those); a claim with
several has `k8s.<driver>-claim_<claim-uid>_<requests>.json` per group (`<requests>`: the group's
request names joined by `_`, or a digest of them when too long). A claim UID has no `_` (it is a
UUID), so the UID is the part of a name before its first `_` after `-claim_`. Removal and the
start-up sweep find a claim's files by that UID on disk, so they also remove what a plugin before
the split wrote (one file naming every device of the claim). Writing a claim's specs first removes
any other file of that claim: two files defining one device name make CDI resolve neither.

Every spec is validated against `cdi_schema.json` before any file of the claim is written; each
write goes to a dot-file temp `.<spec file>.tmp` (CDI runtimes load only `*.json`/`*.yaml`), is
fsynced and renamed, so a runtime never sees a partial spec. A crash part-way leaves some of the
claim's files or a temp, and its claim `PrepareStarted` in the checkpoint (rolled back by removing
every file of the claim); `remove_temps` (called at start) removes exactly the temps this
driver's writer names, never another driver's files.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Callable, Sequence
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
# Longest `<requests>` part of a spec file name before a digest stands in for it: file names end
# at 255 bytes, and a claim may have up to 32 requests of up to 63 characters.
MAX_LABEL = 100
# A claim UID as file names carry it (a Kubernetes UID is a UUID; the tests' are like "uid-1").
_UID = r"[A-Za-z0-9][A-Za-z0-9.-]*"
# The `<requests>` part: request names (DNS labels) joined by `_`, or a digest.
_LABEL = r"[a-z0-9][a-z0-9_-]*"
_DNS_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


@dataclasses.dataclass(frozen=True)
class CdiDevice:
    """One CDI device of a claim spec: its name, the node's device it exposes and the claim's
    requests it serves (as the kubelet is told them; they choose its spec file)."""

    name: str
    info: DeviceInfo
    requests: tuple[str, ...] = ()


def request_label(requests: Sequence[str]) -> str:
    """The `<requests>` part of the spec file name of a group of devices serving `requests`:
    their names joined by `_`; a digest of them when that is too long, or when a name is not a
    DNS label (as Kubernetes requires), so two groups never share a file."""
    label = "_".join(requests)
    if len(label) <= MAX_LABEL and all(_DNS_LABEL.fullmatch(r) for r in requests):
        return label
    return "requests-" + hashlib.sha256(json.dumps(list(requests)).encode()).hexdigest()[:16]


def group_by_requests(devices: Sequence[CdiDevice]) -> dict[tuple[str, ...], list[CdiDevice]]:
    """`devices` grouped by the requests they serve, groups and devices in their given order."""
    groups: dict[tuple[str, ...], list[CdiDevice]] = {}
    for device in devices:
        groups.setdefault(device.requests, []).append(device)
    return groups


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

    def spec_path(self, claim_uid: str, requests: Sequence[str] = ()) -> Path:
        """The file of the claim's spec for the devices serving `requests`; with none, the file
        of a claim whose devices form one group (see the module docstring)."""
        if not requests:
            return self.directory / f"{self.vendor}-claim_{claim_uid}.json"
        return self.directory / f"{self.vendor}-claim_{claim_uid}_{request_label(requests)}.json"

    def temp_path(self, claim_uid: str, requests: Sequence[str] = ()) -> Path:
        """Where `write` puts that spec until it is complete."""
        path = self.spec_path(claim_uid, requests)
        return path.with_name(f".{path.name}.tmp")

    def spec_paths(self, claim_uid: str) -> list[Path]:
        """Every spec file of the claim in the directory, whichever layout wrote it."""
        pattern = re.compile(
            rf"{re.escape(self.vendor)}-claim_{re.escape(claim_uid)}(_{_LABEL})?\.json"
        )
        return [path for path in self._listing() if pattern.fullmatch(path.name)]

    def _listing(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        return sorted(self.directory.iterdir())

    def build(
        self, claim_uid: str, devices: Sequence[CdiDevice], env: Sequence[str] = ()
    ) -> dict[str, Any]:
        """The spec for `devices` of one claim, one request group of it (see `specs`) or all of it;
        validated, so a returned spec is always writable."""
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

    def specs(
        self,
        claim_uid: str,
        devices: Sequence[CdiDevice],
        env: Callable[[Sequence[CdiDevice]], Sequence[str]] = lambda _: (),
    ) -> dict[tuple[str, ...], dict[str, Any]]:
        """The claim's specs by the requests their devices serve (`()` for a claim whose devices
        form one group, see the module docstring); `env(group)` is a group's extra environment."""
        groups = group_by_requests(devices)
        if len(groups) == 1:
            return {(): self.build(claim_uid, devices, env(devices))}
        return {reqs: self.build(claim_uid, group, env(group)) for reqs, group in groups.items()}

    def write_claim(
        self,
        claim_uid: str,
        devices: Sequence[CdiDevice],
        env: Callable[[Sequence[CdiDevice]], Sequence[str]] = lambda _: (),
    ) -> list[Path]:
        """Write the claim's specs (`specs`), after removing any other file of the claim."""
        specs = self.specs(claim_uid, devices, env)
        wanted = {self.spec_path(claim_uid, reqs) for reqs in specs}
        try:
            for path in self.spec_paths(claim_uid):
                if path not in wanted:
                    path.unlink(missing_ok=True)
        except OSError as exc:
            raise CdiError(f"cannot remove an old CDI spec of claim {claim_uid}: {exc}") from exc
        return [self.write(claim_uid, spec, reqs) for reqs, spec in specs.items()]

    def write(self, claim_uid: str, spec: dict[str, Any], requests: Sequence[str] = ()) -> Path:
        """Write `spec` atomically (temp, fsync, rename, fsync directory) to
        `spec_path(claim_uid, requests)`."""
        validate(spec)
        path = self.spec_path(claim_uid, requests)
        temp = self.temp_path(claim_uid, requests)
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
        """Remove every spec file of the claim, of either layout, and any temp of it left by a
        crash; True if a spec was there."""
        temp = re.compile(
            rf"\.{re.escape(self.vendor)}-claim_{re.escape(claim_uid)}(_{_LABEL})?\.json\.tmp"
        )
        try:
            paths = self.spec_paths(claim_uid)
            for path in paths + [p for p in self._listing() if temp.fullmatch(p.name)]:
                path.unlink(missing_ok=True)
            if paths:
                _fsync_dir(self.directory)
        except OSError as exc:
            raise CdiError(f"cannot remove the CDI specs of claim {claim_uid}: {exc}") from exc
        return bool(paths)

    def claim_uids(self) -> set[str]:
        """UIDs of the claims that have a spec of this driver in the directory."""
        pattern = re.compile(rf"{re.escape(self.vendor)}-claim_({_UID})(_{_LABEL})?\.json")
        return {m.group(1) for p in self._listing() if (m := pattern.fullmatch(p.name))}

    def remove_temps(self) -> list[str]:
        """Remove every temp spec of this driver left by a crash; returns their file names.

        Only names `temp_path` makes match (`.<vendor>-claim_<uid>[_<requests>].json.tmp`, a UID
        being letters, digits, `-` and `.`); another driver's vendor differs in the part before
        `-claim_`, which a driver name (a DNS subdomain, no `_`) cannot make equal. Call it while
        no write of this driver can be under way (`DeviceState` holds the node-wide lock): a temp
        being written would be taken from under its writer.
        """
        pattern = re.compile(rf"\.{re.escape(self.vendor)}-claim_{_UID}(_{_LABEL})?\.json\.tmp")
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
