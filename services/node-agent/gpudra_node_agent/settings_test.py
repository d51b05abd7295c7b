from __future__ import annotations

import pytest

from gpudra_node_agent.errors import SettingsError
from gpudra_node_agent.settings import ENV_PREFIX, Settings
from gpudra_service import build_parser


@pytest.mark.parametrize(
    ("argv", "env", "field", "want"),
    [
        pytest.param([], {}, "poll_interval", 2.0, id="default"),
        pytest.param(
            [], {"GPUDRA_NODE_AGENT_POLL_INTERVAL": "0.5"}, "poll_interval", 0.5, id="env"
        ),
        pytest.param(
            ["--poll-interval", "1"],
            {"GPUDRA_NODE_AGENT_POLL_INTERVAL": "0.5"},
            "poll_interval",
            1.0,
            id="flag-wins",
        ),
        pytest.param([], {"NODE_NAME": "gpu-7"}, "node_name", "gpu-7", id="downward-api"),
        pytest.param(
            [],
            {"NODE_NAME": "a", "GPUDRA_NODE_AGENT_NODE_NAME": "b"},
            "node_name",
            "b",
            id="prefixed-wins",
        ),
        pytest.param(
            [],
            {"GPUDRA_NATS_URL": "nats://n:4222"},
            "nats_url",
            "nats://n:4222",
            id="shared-nats-url",
        ),
        pytest.param(
            ["--simulator-profile", "l4-pcie"], {}, "simulator_profile", "l4-pcie", id="profile"
        ),
    ],
)
def test_precedence(argv: list[str], env: dict[str, str], field: str, want: object) -> None:
    assert getattr(Settings.load(argv, env), field) == want


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--poll-interval", "fast"], "invalid value 'fast'", id="not-a-number"),
        pytest.param(["--heartbeat-interval", "0"], "must be > 0", id="zero-heartbeat"),
        pytest.param(["--utilization-interval", "-1"], "must not be negative", id="negative"),
        pytest.param(["--nats-url", " , "], "no NATS URL", id="no-url"),
        pytest.param(["--nats-tls-cert", "c.pem"], "go together", id="half-mtls"),
        pytest.param(["--health-port", "70000"], "not a TCP port", id="bad-port"),
        pytest.param(["--trace-exporter", "jaeger"], "trace-exporter", id="bad-exporter"),
        pytest.param(["--log-level", "loud"], "logging level", id="bad-level"),
        pytest.param(["--node-name", "GPU_Node"], "node name", id="bad-node-name"),
        pytest.param(["--node-name", "a" * 254], "node name", id="node-name-too-long"),
        pytest.param(
            ["--simulator-faults", "faults.yaml"], "needs a simulator", id="faults-without-profile"
        ),
    ],
)
def test_bad_settings(argv: list[str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.load(argv, {})


def test_every_field_has_help_and_env() -> None:
    text = build_parser(Settings, ENV_PREFIX, "node-agent", "").format_help()
    for name in ("GPUDRA_NODE_AGENT_NODE_NAME", "GPUDRA_NODE_AGENT_NATS_CREDS", "[seconds,"):
        assert name in text
