from __future__ import annotations

from typing import Any

import pytest

from gpudra_claim_writer.errors import SettingsError
from gpudra_claim_writer.settings import Settings
from gpudra_testing.configmap import SHARED_CONFIG_ENV, SHARED_CONFIG_FIELDS


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        pytest.param(
            [], {}, {"mode": "standalone", "gate_pods": True, "mirror_classes": True}, id="defaults"
        ),
        pytest.param(
            ["--mirror-classes", "false"], {}, {"mirror_classes": False}, id="no-class-mirror"
        ),
        pytest.param(
            [], {"GPUDRA_CLAIM_WRITER_GATE_PODS": "off"}, {"gate_pods": False}, id="env-bool"
        ),
        pytest.param(
            ["--namespace", "team-a", "--watch-timeout", "3"],
            {},
            {"namespace": "team-a", "watch_timeout": 3.0},
            id="flags",
        ),
        pytest.param(
            [],
            {**SHARED_CONFIG_ENV, "GPUDRA_NATS_URL": "tls://nats:4222"},
            {**SHARED_CONFIG_FIELDS, "nats_url": "tls://nats:4222"},
            id="shared-config-map",
        ),
        pytest.param(
            [],
            {"GPUDRA_HEALTH_PORT": "9090", "GPUDRA_CLAIM_WRITER_HEALTH_PORT": "9191"},
            {"health_port": 9191},
            id="own-beats-shared",
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
        pytest.param(["--health-port", "x"], "--health-port: invalid value 'x'", id="not-a-port"),
        pytest.param(["--stream-replicas", "0"], "stream-replicas", id="zero-replicas"),
        pytest.param(["--nats-tls-key", "/k"], "go together", id="key-without-cert"),
        pytest.param(["--log-level", "loud"], "not a logging level", id="log-level"),
    ],
)
def test_bad_values(argv: list[str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.load(argv, {})
