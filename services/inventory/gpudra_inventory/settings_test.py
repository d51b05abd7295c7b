from __future__ import annotations

from typing import Any

import pytest

from gpudra_inventory.errors import SettingsError
from gpudra_inventory.settings import Settings
from gpudra_testing.configmap import SHARED_CONFIG_ENV, SHARED_CONFIG_FIELDS


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        pytest.param(
            [],
            {},
            {"mode": "standalone", "heartbeat_timeout": 30.0, "api_resync": 60.0},
            id="defaults",
        ),
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
        pytest.param(
            [],
            SHARED_CONFIG_ENV,
            SHARED_CONFIG_FIELDS,
            id="shared-config-map",
        ),
        pytest.param(
            [],
            {"GPUDRA_NATS_STREAM_REPLICAS": "3", "GPUDRA_INVENTORY_STREAM_REPLICAS": "1"},
            {"stream_replicas": 1},
            id="own-beats-shared",
        ),
        pytest.param([], {}, {"lease_ttl": 10.0, "lease_holder": ""}, id="lease-defaults"),
        pytest.param([], {}, {"api_repair_delay": 2.0}, id="repair-delay-default"),
        pytest.param(
            [], {"GPUDRA_INVENTORY_API_REPAIR_DELAY": "0"}, {"api_repair_delay": 0.0}, id="no-watch"
        ),
        pytest.param(
            ["--lease-ttl", "4.5"],
            {"GPUDRA_INVENTORY_LEASE_HOLDER": "gpudra-inventory-7d9f-x2"},
            {"lease_ttl": 4.5, "lease_holder": "gpudra-inventory-7d9f-x2"},
            id="lease",
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
        pytest.param(
            [], {"GPUDRA_NATS_STREAM_REPLICAS": "three"}, "invalid value 'three'", id="bad-int"
        ),
        pytest.param(["--stream-replicas", "0"], {}, "stream-replicas", id="zero-replicas"),
        pytest.param(["--nats-tls-cert", "/c"], {}, "go together", id="cert-without-key"),
        pytest.param(["--trace-exporter", "jaeger"], {}, "trace-exporter", id="exporter"),
        pytest.param(["--lease-ttl", "0.1"], {}, "lease TTL", id="lease-ttl-too-short"),
        pytest.param(["--lease-ttl", "3600"], {}, "lease TTL", id="lease-ttl-too-long"),
        pytest.param([], {"GPUDRA_INVENTORY_LEASE_TTL": "soon"}, "invalid value", id="lease-nan"),
        pytest.param(["--api-resync", "-1"], {}, "API resync", id="negative-resync"),
        pytest.param(["--api-repair-delay", "-1"], {}, "repair delay", id="negative-repair"),
    ],
)
def test_bad_values(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.load(argv, env)
