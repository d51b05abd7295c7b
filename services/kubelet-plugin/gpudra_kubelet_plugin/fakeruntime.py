"""A stand-in for a CDI container runtime's injection, reading the spec files on disk, for tests.

It resolves fully qualified CDI device IDs as the CDI library that containerd and CRI-O use
(`pkg/cdi`, `Cache.InjectDevices`) does, so a test can say what a container really gets:
- every `*.json` / `*.yaml` file in the directory is a spec (dot-files and other names are not);
- a device that two specs define (same kind and name) is a conflict: neither resolves;
- an ID that does not resolve fails the injection (the container is not created);
- a spec's top-level `containerEdits` are applied once, when the first of its devices is
  injected, then each injected device's own edits, in the order of the IDs;
- edits merge as the library's spec editor merges them: an environment variable set again takes
  the later value (the last wins), a device node or mount of a path already there is replaced,
  hooks and additional GIDs accumulate.
It checks no schema (see `cdi.validate`) and knows nothing of the NVIDIA container runtime.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml


class UnresolvableDevicesError(LookupError):
    """CDI IDs the runtime cannot resolve: the container would not be created."""


@dataclasses.dataclass
class Container:
    """What injection gave a container."""

    env: dict[str, str] = dataclasses.field(default_factory=dict)
    device_nodes: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    mounts: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    hooks: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    additional_gids: list[int] = dataclasses.field(default_factory=list)

    def apply(self, edits: Mapping[str, Any]) -> None:
        for entry in edits.get("env", []):
            key, _, value = str(entry).partition("=")
            self.env[key] = value
        for node in edits.get("deviceNodes", []):
            self.device_nodes.pop(node["path"], None)  # re-added last, as RemoveDevice+AddDevice
            self.device_nodes[node["path"]] = node
        for mount in edits.get("mounts", []):
            self.mounts.pop(mount["containerPath"], None)
            self.mounts[mount["containerPath"]] = mount
        self.hooks.extend(edits.get("hooks", []))
        self.additional_gids.extend(g for g in edits.get("additionalGIDs", []) if g)

    def visible_devices(self) -> list[str]:
        """The UUIDs `NVIDIA_VISIBLE_DEVICES` names (what the NVIDIA runtime in legacy mode
        would mount); none when it is unset, empty or `void`."""
        value = self.env.get("NVIDIA_VISIBLE_DEVICES", "")
        return [] if value in ("", "void", "none") else value.split(",")


def load_specs(directory: Path) -> dict[str, dict[str, Any]]:
    """The specs a runtime would load from `directory`, by file name."""
    specs: dict[str, dict[str, Any]] = {}
    if not directory.is_dir():
        return specs
    for path in sorted(directory.iterdir()):
        if path.name.startswith(".") or not path.is_file():
            continue
        if path.suffix == ".json":
            specs[path.name] = json.loads(path.read_text(encoding="utf-8"))
        elif path.suffix == ".yaml":
            specs[path.name] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return specs


def resolve(specs: Mapping[str, Mapping[str, Any]]) -> dict[str, tuple[str, Mapping[str, Any]]]:
    """Every resolvable qualified device ID: its spec's file name and its device entry."""
    found: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
    for file, spec in specs.items():
        for device in spec.get("devices", []):
            found.setdefault(f"{spec['kind']}={device['name']}", []).append((file, device))
    return {cdi_id: places[0] for cdi_id, places in found.items() if len(places) == 1}


def inject(directory: Path, cdi_ids: Iterable[str]) -> Container:
    """The container the runtime makes for a container the kubelet gave `cdi_ids`."""
    specs = load_specs(directory)
    devices = resolve(specs)
    ids = list(cdi_ids)
    unresolved = [i for i in ids if i not in devices]
    if unresolved:
        raise UnresolvableDevicesError(f"unresolvable CDI devices {', '.join(unresolved)}")
    container, applied = Container(), set()
    for cdi_id in ids:
        file, device = devices[cdi_id]
        if file not in applied:
            applied.add(file)
            container.apply(specs[file].get("containerEdits", {}))
        container.apply(device.get("containerEdits", {}))
    return container
