from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from gpudra_kubelet_plugin.checkpoint import (
    PREPARE_COMPLETED,
    PREPARE_STARTED,
    Checkpoint,
    ClaimRecord,
    MigIdentity,
    PreparedDevice,
)
from gpudra_kubelet_plugin.errors import CheckpointError

RECORDS = {
    "u1": ClaimRecord(
        PREPARE_COMPLETED,
        "ns",
        "a",
        (PreparedDevice(("r",), "node-a", "gpu-0", ("k8s.x/claim=u1-gpu-0",), "s1"),),
        ("gpu-1-mig-3g-40gb-4",),
    ),
    "u2": ClaimRecord(PREPARE_STARTED, "ns", "b"),
}


@pytest.fixture
def checkpoint(tmp_path: Path) -> Checkpoint:
    (tmp_path / "boot_id").write_text("boot-1\n")
    return Checkpoint(tmp_path / "state" / "checkpoint.json", tmp_path / "boot_id")


def test_round_trip(checkpoint: Checkpoint) -> None:
    assert checkpoint.load().claims == {}
    checkpoint.save(RECORDS)
    loaded = checkpoint.load()
    assert loaded.claims == RECORDS
    assert loaded.stale == {}
    assert [p.name for p in checkpoint.path.parent.iterdir()] == ["checkpoint.json"]


def test_boot_id_change_makes_claims_stale(checkpoint: Checkpoint) -> None:
    checkpoint.save(RECORDS)
    checkpoint.boot_id_file.write_text("boot-2\n")
    loaded = checkpoint.load()
    assert loaded.claims == {}
    assert loaded.stale == RECORDS


def _tamper(path: Path, how: str) -> None:
    document = json.loads(path.read_text())
    if how == "checksum":
        document["data"]["claims"]["u2"]["name"] = "c"
    elif how == "version":
        document["version"] = 99
    elif how == "state":
        document["data"]["claims"]["u2"]["state"] = "Prepared?"
        document["checksum"] = __import__("gpudra_kubelet_plugin.checkpoint").checkpoint._checksum(
            document["data"]
        )
    elif how == "not-json":
        path.write_text("{")
        return
    path.write_text(json.dumps(document))


@pytest.mark.parametrize(
    ("how", "message"),
    [
        pytest.param("checksum", "fails its checksum", id="checksum"),
        pytest.param("version", "unknown version 99", id="version"),
        pytest.param("state", "malformed claim", id="state"),
        pytest.param("not-json", "is not a checkpoint", id="not-json"),
    ],
)
def test_corruption_is_detected(checkpoint: Checkpoint, how: str, message: str) -> None:
    checkpoint.save(RECORDS)
    _tamper(checkpoint.path, how)
    with pytest.raises(CheckpointError, match=message):
        checkpoint.load()


def test_unreadable_boot_id(tmp_path: Path) -> None:
    checkpoint = Checkpoint(tmp_path / "c.json", tmp_path / "missing")
    with pytest.raises(CheckpointError, match="cannot read boot ID"):
        checkpoint.save({})


def test_created_mig_devices_are_recorded_by_identity(checkpoint: Checkpoint) -> None:
    record = ClaimRecord(
        PREPARE_COMPLETED,
        "ns",
        "m",
        mig_devices=("gpu-1-mig-3g-40gb-4", "gpu-1-mig-1g-10gb-6"),
        created={
            "gpu-1-mig-3g-40gb-4": MigIdentity("MIG-a", "GPU-p", 2, 0),
            "gpu-1-mig-1g-10gb-6": MigIdentity("MIG-b", "GPU-p"),  # simulated: no ids
        },
    )
    checkpoint.save({"u": record})
    assert checkpoint.load().claims == {"u": record}
    # What an older plugin instance (rolling update) writes has no identities, and loads.
    older = dataclasses.replace(record, created={})
    assert "migCreated" not in older.to_json()
    checkpoint.save({"u": older})
    assert checkpoint.load().claims == {"u": older}


def test_a_created_mig_device_without_uuid_is_malformed(checkpoint: Checkpoint) -> None:
    raw = ClaimRecord(PREPARE_STARTED, "ns", "m", (), ("p",), {"p": MigIdentity("X", "G")})
    document = raw.to_json()
    document["migCreated"]["p"]["uuid"] = ""
    with pytest.raises(ValueError, match="without UUID"):
        ClaimRecord.from_json(document)
