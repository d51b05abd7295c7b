"""The slices as the API server gives them back: what a mirror compares must survive a round trip.

The API server serializes ResourceSlices with Go's `omitempty`: an empty list or map (`devices`,
`sharedCounters`, `attributes`, `capacity`, `consumesCounters`, `taints`, `counters`) come back
absent. A slice that carries one differs from its API copy forever, so the
inventory's mirror would rewrite it on every apply and report it drifted on every resync.
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from gpudra_nvml import open_simulator, profile_names
from gpudra_slices import build_slices
from gpudrapb.v1 import inventory_pb2 as pb


def _omitempty(value: Any) -> Any:
    """`value` as encoding/json writes it back for resource.k8s.io/v1 (every optional list and map
    of a ResourceSlice is `omitempty`; strings behind pointers and numbers are kept)."""
    if isinstance(value, dict):
        out = {k: _omitempty(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in ([], {})}
    if isinstance(value, list):
        return [_omitempty(v) for v in value]
    return value


def _inventory(profile: str | None) -> pb.NodeInventory:
    inv = pb.NodeInventory(node="node-a", generation=3)
    if profile is not None:
        found = open_simulator(profile).adapter.discover()
        inv.versions.CopyFrom(found.versions)
        inv.devices.extend(found.devices)
    return inv


@pytest.mark.parametrize("profile", [None, *profile_names()])
def test_slices_survive_the_api_servers_round_trip(profile: str | None) -> None:
    for obj in build_slices(_inventory(profile)):
        assert obj == _omitempty(obj)


def test_an_empty_pool_is_one_valid_slice_without_devices() -> None:
    (only,) = build_slices(_inventory(None))
    assert only["spec"]["pool"] == {"name": "node-a", "generation": 3, "resourceSliceCount": 1}
    assert "devices" not in only["spec"]
    assert "sharedCounters" not in only["spec"]
    for version in ("1.34.0", "1.35.0"):
        kubernetes_validate.validate(only, version, strict=True)
