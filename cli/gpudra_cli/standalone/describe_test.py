from __future__ import annotations

from typing import Any

import pytest

from gpudra_cli.standalone.describe import describe_claim
from gpudra_cli.standalone.testdata import claim


@pytest.mark.parametrize(
    ("reserved", "line"),
    [
        pytest.param(None, "Reserved for: <none>", id="no-consumers"),
        pytest.param(
            [{"resource": "pods", "name": "p1", "uid": "u1"}],
            "Reserved for: pods/p1",
            id="one-pod",
        ),
    ],
)
def test_describe_shows_consumers(reserved: list[dict[str, Any]] | None, line: str) -> None:
    obj = claim("a", [("node-a", "gpu-0")])
    if reserved is not None:
        obj["status"]["reservedFor"] = reserved
    assert line in describe_claim(obj, {}, [])
