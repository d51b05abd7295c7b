from __future__ import annotations

import dataclasses
from dataclasses import field
from pathlib import Path
from typing import Any

import pytest

from gpudra_service.errors import SettingsError
from gpudra_service.settings import CommonSettings, build_parser, doc, load

PREFIX = "GPUDRA_DEMO_"


@dataclasses.dataclass(frozen=True)
class DemoSettings(CommonSettings):
    ENV_PREFIX = PREFIX
    PROG = "demo"
    node_name: str = field(default="", metadata=doc("node", "name"))
    interval: float = field(default=2.0, metadata=doc("period", "seconds"))
    retries: int = field(default=3, metadata=doc("retries"))
    dry_run: bool = field(default=False, metadata=doc("do nothing"))
    state_dir: Path = field(default=Path("/var/lib/x"), metadata=doc("state", "path"))


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        pytest.param([], {}, {"interval": 2.0, "nats_url": "nats://127.0.0.1:4222"}, id="defaults"),
        pytest.param([], {"GPUDRA_DEMO_INTERVAL": "5"}, {"interval": 5.0}, id="own-env"),
        pytest.param(
            ["--interval", "7"], {"GPUDRA_DEMO_INTERVAL": "5"}, {"interval": 7.0}, id="flag-wins"
        ),
        pytest.param(
            [], {"GPUDRA_NATS_URL": "nats://a:1"}, {"nats_url": "nats://a:1"}, id="shared-env"
        ),
        pytest.param(
            [],
            {"GPUDRA_NATS_URL": "nats://a:1", "GPUDRA_DEMO_NATS_URL": "nats://b:2"},
            {"nats_url": "nats://b:2"},
            id="own-beats-shared",
        ),
        pytest.param([], {"NODE_NAME": "dgx-1"}, {"node_name": "dgx-1"}, id="downward-api"),
        pytest.param([], {"OTEL_TRACES_EXPORTER": "otlp"}, {"trace_exporter": "otlp"}, id="otel"),
        pytest.param(["--dry-run", "yes"], {}, {"dry_run": True}, id="bool"),
        pytest.param(["--state-dir", "/tmp/s"], {}, {"state_dir": Path("/tmp/s")}, id="path"),
    ],
)
def test_precedence_and_types(
    argv: list[str], env: dict[str, str], expected: dict[str, object]
) -> None:
    settings = load(DemoSettings, PREFIX, argv, env)
    for name, value in expected.items():
        assert getattr(settings, name) == value


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        pytest.param(["--retries", "many"], {}, "--retries: invalid value 'many'", id="bad-flag"),
        pytest.param([], {"GPUDRA_DEMO_DRY_RUN": "perhaps"}, "GPUDRA_DEMO_DRY_RUN", id="bad-env"),
        # NaN compares false with everything, so it would slip past every `<= 0` check a service's
        # `validate` makes; infinity is no duration either.
        pytest.param([], {"GPUDRA_DEMO_INTERVAL": "nan"}, "GPUDRA_DEMO_INTERVAL", id="nan"),
        pytest.param(["--interval", "inf"], {}, "--interval: invalid value 'inf'", id="inf"),
        pytest.param(["--interval=-Infinity"], {}, "--interval", id="minus-inf"),
        # An empty variable (`value: ""` in a manifest) is Path("."): the working directory.
        pytest.param([], {"GPUDRA_DEMO_STATE_DIR": ""}, "GPUDRA_DEMO_STATE_DIR", id="empty-path"),
        pytest.param(["--state-dir", " "], {}, "--state-dir", id="blank-path"),
    ],
)
def test_bad_values_name_their_source(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load(DemoSettings, PREFIX, argv, env)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        pytest.param({"nats_url": " , "}, "no NATS URL", id="no-url"),
        pytest.param({"health_port": 70000}, "not a TCP port", id="port"),
        pytest.param({"stream_replicas": 0}, "stream-replicas", id="replicas"),
        pytest.param({"trace_exporter": "jaeger"}, "trace-exporter", id="exporter"),
        pytest.param({"log_level": "loud"}, "logging level", id="log-level"),
        pytest.param({"nats_tls_cert": "/c"}, "go together", id="cert-without-key"),
    ],
)
def test_common_validation(changes: dict[str, Any], message: str) -> None:
    settings = dataclasses.replace(DemoSettings(), **changes)
    with pytest.raises(SettingsError, match=message):
        settings.validate_common()


def test_help_shows_unit_env_and_default() -> None:
    text = " ".join(build_parser(DemoSettings, PREFIX, "demo", "d").format_help().split())
    assert "env GPUDRA_DEMO_NATS_URL or GPUDRA_NATS_URL" in text
    assert "seconds" in text
    assert "default 2.0" in text


def test_servers_split() -> None:
    assert DemoSettings(nats_url="nats://a:1, nats://b:2").nats_servers == [
        "nats://a:1",
        "nats://b:2",
    ]


def test_load_classmethod_reads_the_prefix_and_validates() -> None:
    assert DemoSettings.load([], {"GPUDRA_DEMO_RETRIES": "7"}).retries == 7
    with pytest.raises(SettingsError, match="not a TCP port"):
        DemoSettings.load(["--health-port", "70000"], {})
