"""Fault scripts for the simulator: what goes wrong, on which GPU, when.

A script is a YAML list (in a profile under `faults:`, or in a file given to the node-agent with
`--simulator-faults`), each entry `{at: <seconds since start>, gpu: <index>, <what>}` where what is
`xid: <code>`, `lost: true` (falls off the bus, XID 79), `recover: true` (reset: answers again,
volatile ECC counters cleared, a pending row remap applied), `ecc: <uncorrected errors>`,
`remap-pending: true` (a row remapped for an uncorrectable error, waiting for a reset) or
`remap-failed: true` (a row the remapper could not remap; stays through resets). Parsing checks every entry and
raises `ProfileError` naming the entry; nothing is half-applied.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpudra_nvml.errors import ProfileError

KINDS = ("xid", "lost", "recover", "ecc", "remap-pending", "remap-failed")


@dataclass(frozen=True)
class FaultSpec:
    at: float
    gpu: int
    kind: str
    #: The XID for `xid`, the error count for `ecc`, else 0.
    code: int = 0


def parse_faults(where: str, raw: Any, gpu_count: int) -> tuple[FaultSpec, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ProfileError(f"{where}: expected a list of faults")
    out: list[FaultSpec] = []
    for i, entry in enumerate(raw):
        here = f"{where}[{i}]"
        if not isinstance(entry, dict):
            raise ProfileError(f"{here}: expected a mapping")
        kinds = [k for k in KINDS if k in entry]
        if len(kinds) != 1:
            raise ProfileError(f"{here}: give exactly one of {', '.join(KINDS)}")
        at, gpu, value = entry.get("at", 0), entry.get("gpu"), entry[kinds[0]]
        if isinstance(at, bool) or not isinstance(at, int | float) or at < 0:
            raise ProfileError(f"{here}.at: expected seconds >= 0, got {at!r}")
        if isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu < gpu_count:
            raise ProfileError(f"{here}.gpu: expected a GPU index below {gpu_count}, got {gpu!r}")
        if kinds[0] in ("xid", "ecc"):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ProfileError(f"{here}.{kinds[0]}: expected a positive integer, got {value!r}")
            code = value
        elif value is not True:
            raise ProfileError(f"{here}.{kinds[0]}: expected true, got {value!r}")
        else:
            code = 0
        out.append(FaultSpec(float(at), gpu, kinds[0], code))
    return tuple(out)


def load_faults(path: str, gpu_count: int) -> tuple[FaultSpec, ...]:
    """A fault script from a file; `ProfileError` when unreadable or invalid."""
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ProfileError(f"fault script {path}: {exc}") from exc
    return parse_faults(path, raw, gpu_count)
