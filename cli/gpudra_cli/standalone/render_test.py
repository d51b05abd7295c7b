from __future__ import annotations

import pytest

from gpudra_cli.standalone.render import compact_cdi

UID = "0919d0cf-72b9-47a7-9f08-5af9c63f9c7e"


@pytest.mark.parametrize(
    ("ids", "text"),
    [
        pytest.param([], "", id="none"),
        pytest.param(
            [f"k8s.gpu.nvidia.com/claim={UID}-gpu-0"],
            f"k8s.gpu.nvidia.com/claim={UID}-gpu-0",
            id="one",
        ),  # fmt: skip
        pytest.param(
            [f"k8s.gpu.nvidia.com/claim={UID}-gpu-0", f"k8s.gpu.nvidia.com/claim={UID}-gpu-1"],
            f"k8s.gpu.nvidia.com/claim={UID}-{{gpu-0,gpu-1}}",
            id="shared-prefix",
        ),
        pytest.param(["a/b=x", "c/d=y"], "a/b=x\nc/d=y", id="unrelated"),
    ],
)
def test_compact_cdi(ids: list[str], text: str) -> None:
    assert compact_cdi(ids) == text
