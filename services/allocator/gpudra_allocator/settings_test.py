from __future__ import annotations

from typing import Any

import pytest

from gpudra_allocator.errors import SettingsError
from gpudra_allocator.settings import Settings
from gpudra_testing.configmap import SHARED_CONFIG_ENV, SHARED_CONFIG_FIELDS


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        pytest.param([], {}, {"policy": "topology", "ack_wait": 10.0}, id="defaults"),
        pytest.param(
            [], {"GPUDRA_ALLOCATOR_POLICY": "first-fit"}, {"policy": "first-fit"}, id="env"
        ),
        pytest.param(
            ["--policy", "topology"],
            {"GPUDRA_ALLOCATOR_POLICY": "first-fit"},
            {"policy": "topology"},
            id="flag-beats-env",
        ),
        pytest.param(
            [],
            {"GPUDRA_NATS_URL": "nats://a:1, nats://b:2"},
            {"nats_servers": ["nats://a:1", "nats://b:2"]},
            id="shared-nats-url",
        ),
        pytest.param(
            ["--nats-url", "nats://own:1"],
            {"GPUDRA_NATS_URL": "nats://shared:2"},
            {"nats_url": "nats://own:1"},
            id="own-nats-flag",
        ),
        pytest.param(
            ["--ack-wait", "2.5", "--batch", "8"], {}, {"ack_wait": 2.5, "batch": 8}, id="numbers"
        ),
        pytest.param([], {}, {"warmup_delay": 0.03}, id="warm-up-by-default"),
        pytest.param(
            [], {"GPUDRA_ALLOCATOR_WARMUP_DELAY": "0"}, {"warmup_delay": 0.0}, id="warm-up-off"
        ),
        pytest.param(
            [],
            SHARED_CONFIG_ENV,
            SHARED_CONFIG_FIELDS,
            id="shared-config-map",
        ),
        pytest.param(
            [], {}, {"reserve": 0, "reserve_floor": 0, "mig_homes": 1}, id="no-reserve-by-default"
        ),
        pytest.param(
            ["--reserve", "6", "--reserve-floor", "6", "--mig-homes", "2"],
            {},
            {"reserve": 6, "reserve_floor": 6, "mig_homes": 2},
            id="reserve-flags",
        ),
        pytest.param(
            [],
            {
                "GPUDRA_ALLOCATOR_RESERVE": "4",
                "GPUDRA_ALLOCATOR_RESERVE_FLOOR": "1",
                "GPUDRA_ALLOCATOR_MIG_HOMES": "0",
            },
            {"reserve": 4, "reserve_floor": 1, "mig_homes": 0},
            id="reserve-env",
        ),
        pytest.param(
            ["--reserve", "2"],
            {"GPUDRA_ALLOCATOR_RESERVE": "8", "GPUDRA_ALLOCATOR_RESERVE_FLOOR": "2"},
            {"reserve": 2, "reserve_floor": 2},
            id="reserve-flag-beats-env",
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
        pytest.param(["--policy", "best"], "policy", id="unknown-policy"),
        pytest.param(["--ack-wait", "soon"], "--ack-wait: invalid value 'soon'", id="not-a-number"),
        pytest.param(["--ack-wait", "0"], "ack wait", id="zero-wait"),
        pytest.param(["--warmup-delay", "-1"], "warm-up delay", id="negative-warm-up-delay"),
        pytest.param(["--health-port", "70000"], "TCP port", id="bad-port"),
        pytest.param(["--trace-exporter", "jaeger"], "trace-exporter", id="bad-exporter"),
        pytest.param(["--stream-replicas", "0"], "stream-replicas", id="zero-replicas"),
        pytest.param(["--nats-tls-cert", "/c"], "go together", id="cert-without-key"),
        pytest.param(["--consumer", "a b"], "consumer", id="bad-consumer"),
        pytest.param(["--reserve", "-1"], "must be >= 0 domains", id="negative-reserve"),
        pytest.param(["--mig-homes", "-1"], "must be >= 0 domains", id="negative-mig-homes"),
        pytest.param(
            ["--reserve", "2", "--reserve-floor", "3"],
            r"reserve floor \(3\) must be at most the reserve \(2 domains\)",
            id="floor-above-reserve",
        ),
        pytest.param(["--reserve", "two"], "--reserve: invalid value 'two'", id="not-a-count"),
    ],
)
def test_bad_values_are_settings_errors(argv: list[str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.load(argv, {})


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param(
            {"GPUDRA_ALLOCATOR_RESERVE_FLOOR": "1"}, "reserve floor", id="floor-no-reserve"
        ),
        pytest.param({"GPUDRA_ALLOCATOR_RESERVE": "-2"}, ">= 0 domains", id="negative-reserve"),
        pytest.param({"GPUDRA_ALLOCATOR_MIG_HOMES": "x"}, "GPUDRA_ALLOCATOR_MIG_HOMES", id="nan"),
    ],
)
def test_bad_reserve_from_the_environment(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.load([], env)
