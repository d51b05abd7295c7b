"""Driver files for containers, borrowed from the node's own NVIDIA CDI spec.

A container needs more than device nodes to run CUDA: the driver's libraries (`libcuda.so`, ...),
binaries and the hooks that link them in. NVIDIA's toolkit already describes exactly those for the
node (`nvidia-ctk cdi generate` → e.g. `/var/run/cdi/nvidia.yaml`, kind `nvidia.com/gpu`); its
top-level `containerEdits` are device-independent. gpudra reads them once at start and adds them to
every claim spec, rather than rediscovering the driver itself.

Taken: `mounts`, `hooks`, `additionalGIDs`, `deviceNodes` (merged with gpudra's by path) and `env`
other than `NVIDIA_VISIBLE_DEVICES` (the base spec says `void`; the claim says which GPUs).
A base spec that cannot be read or has no usable `containerEdits` is a `CdiError` at start.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from gpudra_kubelet_plugin.errors import CdiError

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
TAKEN = ("deviceNodes", "env", "mounts", "hooks", "additionalGIDs")


def load_base_edits(path: Path) -> dict[str, Any]:
    """The device-independent edits of the CDI spec at `path` (JSON or YAML)."""
    try:
        text = path.read_text(encoding="utf-8")
        document = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise CdiError(f"cannot read base CDI spec {path}: {exc}") from exc
    edits = document.get("containerEdits") if isinstance(document, dict) else None
    if not isinstance(edits, dict):
        raise CdiError(f"base CDI spec {path} has no top-level containerEdits")
    base = {key: edits[key] for key in TAKEN if edits.get(key)}
    if "env" in base:
        base["env"] = [e for e in base["env"] if not str(e).startswith(VISIBLE_DEVICES + "=")]
    if not all(isinstance(v, list) for v in base.values()):
        raise CdiError(f"base CDI spec {path}: containerEdits fields must be lists")
    return {k: v for k, v in base.items() if v}


def merge_edits(ours: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """`ours` plus `base`: device nodes united by path, lists of the other fields appended."""
    merged = {k: list(v) for k, v in ours.items()}
    for key, values in base.items():
        current = merged.setdefault(key, [])
        if key == "deviceNodes":
            paths = {node["path"] for node in current}
            current.extend(
                n for n in values if not isinstance(n, dict) or n.get("path") not in paths
            )
        else:
            current.extend(v for v in values if v not in current)
    return merged
