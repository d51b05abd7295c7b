from __future__ import annotations

from typing import Any

import pytest

from gpudra_inventory.errors import SettingsError
from gpudra_inventory.settings import Settings


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        pytest.param([], {}, {"mode": "standalone", "heartbeat_timeout": 30.0}, id="defaults"),
        pytest.param(
            [], {"GPUDRA_INVENTORY_DYNAMIC_MIG": "false"}, {"dynamic_mig": False}, id="env-bool"
        ),
        pytest.param(
            ["--mode", "kubernetes", "--kubeconfig", "/k"],
            {},
            {"mode": "kubernetes", "kubeconfig": "/k"},
            id="kubernetes",
        ),
        pytest.param(
            [], {"GPUDRA_NATS_URL": "nats://n:1"}, {"nats_url": "nats://n:1"}, id="shared"
        ),
    ],
)
def test_load(argv: list[str], env: dict[str, str], expected: dict[str, Any]) -> None:
    settings = Settings.load(argv, env)
    for name, value in expected.items():
        assert getattr(settings, name) == value


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        pytest.param(["--mode", "cloud"], {}, "mode", id="unknown-mode"),
        pytest.param(["--heartbeat-timeout", "0"], {}, "heartbeat", id="zero-timeout"),
        pytest.param([], {"GPUDRA_INVENTORY_DYNAMIC_MIG": "maybe"}, "DYNAMIC_MIG", id="bad-bool"),
    ],
)
def test_bad_values(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.load(argv, env)
