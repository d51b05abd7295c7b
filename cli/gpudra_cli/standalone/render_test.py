from __future__ import annotations

import io
import re
from typing import Any

import pytest
from rich.console import Console

from gpudra_cli.standalone.render import claims_table, compact_cdi, rows_table
from gpudra_cli.standalone.results import Row

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


# A claim name as long as Kubernetes allows in spirit (DNS subdomain, up to 253 characters).
LONG = "a-very-long-claim-name-" + "x" * 200


def _printed(table: Any, width: int) -> list[str]:
    out = Console(file=io.StringIO(), width=width, highlight=False)
    out.print(table)
    text = out.file.getvalue()  # type: ignore[attr-defined]
    return [line.rstrip() for line in str(text).splitlines()]


def _column(lines: list[str], header: str, following: str) -> str:
    """The text of one column, lines joined: what a person would copy out of the table."""

    def column_at(line: str, name: str) -> int:
        return next(m.start() for m in re.finditer(rf"(?<!\S){name}(?!\S)", line))

    at = next(i for i, line in enumerate(lines) if header in line and following in line)
    start, end = column_at(lines[at], header), column_at(lines[at], following)
    return "".join(line[start:end].strip() for line in lines[at + 2 :])


@pytest.mark.parametrize("width", [100, 160])
def test_get_tables_show_long_names_whole(width: int) -> None:
    rows = [{"NAMESPACE": "team-with-a-rather-long-namespace-name", "NAME": LONG, "STATE": "x"}]
    lines = _printed(rows_table(rows, ["NAMESPACE", "NAME", "STATE", "NODE"]), width)
    assert not any("…" in line for line in lines), "\n".join(lines)
    assert _column(lines, "NAME", "STATE") == LONG
    assert _column(lines, "NAMESPACE", "NAME") == rows[0]["NAMESPACE"]


@pytest.mark.parametrize("width", [100, 160])
def test_the_claims_table_keeps_every_column_and_the_whole_name(width: int) -> None:
    row = Row("default", LONG, "uid", "gpu: 1 x gpu.nvidia.com + CEL", "unschedulable")
    row.reason = "needs 1 GPU; best node dgx-h100-0 has 0 usable"
    lines = _printed(claims_table([row]), width)
    text = "\n".join(lines)
    assert "…" not in text, text
    for header in ("CLAIM", "ASKS FOR", "NODE", "DEVICES", "ALLOC"):
        assert header in text, text
    assert _column(lines, "CLAIM", "ASKS FOR") == LONG
    assert "unschedulable" in text
