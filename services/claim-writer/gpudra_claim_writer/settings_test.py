from __future__ import annotations

from typing import Any

import pytest

from gpudra_claim_writer.errors import SettingsError
from gpudra_claim_writer.settings import Settings


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        pytest.param([], {}, {"mode": "standalone", "gate_pods": True}, id="defaults"),
        pytest.param(
            [], {"GPUDRA_CLAIM_WRITER_GATE_PODS": "off"}, {"gate_pods": False}, id="env-bool"
        ),
        pytest.param(
            ["--namespace", "team-a", "--watch-timeout", "3"],
            {},
            {"namespace": "team-a", "watch_timeout": 3.0},
            id="flags",
        ),
    ],
)
def test_load(argv: list[str], env: dict[str, str], expected: dict[str, Any]) -> None:
    settings = Settings.load(argv, env)
    for name, value in expected.items():
        assert getattr(settings, name) == value


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--mode", "cloud"], "mode", id="unknown-mode"),
        pytest.param(["--watch-timeout", "-1"], "watch timeout", id="negative-timeout"),
        pytest.param(["--health-port", "x"], "--health-port", id="not-a-port"),
    ],
)
def test_bad_values(argv: list[str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.load(argv, {})
