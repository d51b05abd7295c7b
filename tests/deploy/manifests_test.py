"""The manifest helpers: which schema folder a Kubernetes version uses."""

from __future__ import annotations

import pytest

from deploy import manifests


@pytest.mark.parametrize(
    ("version", "folder"),
    [
        pytest.param("1.34", "v1.34.0-local-strict", id="floor"),
        pytest.param("v1.35.2", "v1.35.0-local-strict", id="patch-and-v"),
        pytest.param("1.99", f"v{manifests.SCHEMA_VERSIONS[-1]}-local-strict", id="newer-than-all"),
        pytest.param("1.2", None, id="older-than-all"),
        pytest.param("latest", None, id="not-a-version"),
    ],
)
def test_schema_folder(version: str, folder: str | None) -> None:
    if folder is None:
        with pytest.raises(ValueError, match="schemas|version"):
            manifests._schema_dir(version)
    else:
        assert manifests._schema_dir(version) == folder


def test_unknown_kind_is_a_problem_not_a_crash() -> None:
    obj = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    assert "no schema" in (manifests.validate_strict(obj, "1.34") or "")
