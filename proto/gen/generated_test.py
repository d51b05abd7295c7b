"""Fails when the committed generated code in proto/gen is stale: fix with proto/regen.sh."""

from __future__ import annotations

from pathlib import Path

import protogen


def test_generated_code_is_up_to_date(tmp_path: Path) -> None:
    protogen.generate(tmp_path)
    expected, committed = protogen.tree(tmp_path), protogen.tree(
        Path(protogen.__file__).parent / "gen"
    )
    stale = sorted(
        k for k in expected.keys() | committed.keys() if expected.get(k) != committed.get(k)
    )
    assert not stale, f"stale generated code {stale}: run proto/regen.sh"
