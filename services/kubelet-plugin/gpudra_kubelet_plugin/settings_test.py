from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from gpudra_kubelet_plugin.errors import SettingsError
from gpudra_kubelet_plugin.settings import ENV_PREFIX, Settings
from gpudra_service import build_parser, env_names, flag_name


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        pytest.param(
            [], {}, {"driver_name": "gpu.nvidia.com", "registration_retry": 5.0}, id="defaults"
        ),
        pytest.param(
            [],
            {
                "GPUDRA_KUBELET_PLUGIN_CDI_DIR": "/tmp/cdi",
                "GPUDRA_KUBELET_PLUGIN_HEALTH_TIMEOUT": "30",
            },
            {"cdi_dir": Path("/tmp/cdi"), "health_timeout": 30},
            id="env",
        ),
        pytest.param(
            ["--registration-retry", "0.5", "--node-name", "n1"],
            {
                "GPUDRA_KUBELET_PLUGIN_REGISTRATION_RETRY": "9",
                "GPUDRA_KUBELET_PLUGIN_NODE_NAME": "n2",
            },
            {"registration_retry": 0.5, "node_name": "n1"},
            id="flag-beats-env",
        ),
        pytest.param(
            ["--driver-name", "gpu.example.com", "--plugins-dir", "/p"],
            {},
            {
                "dra_socket": Path("/p/gpu.example.com/dra.sock"),
                "checkpoint_path": Path("/p/gpu.example.com/checkpoint.json"),
            },
            id="derived-paths",
        ),
    ],
)
def test_load(argv: list[str], environ: dict[str, str], expected: dict[str, Any]) -> None:
    settings = Settings.load(argv, environ)
    for name, value in expected.items():
        assert getattr(settings, name) == value


def test_registration_socket_and_node_fallback() -> None:
    settings = Settings.load(["--registry-dir", "/r"], {})
    assert settings.registration_socket == Path("/r/gpu.nvidia.com-reg.sock")
    assert settings.node  # the host name when no node name is set


@pytest.mark.parametrize(
    ("argv", "environ", "message"),
    [
        pytest.param(
            ["--health-timeout", "soon"], {}, "--health-timeout: invalid value 'soon'", id="bad-int"
        ),
        pytest.param(
            [],
            {"GPUDRA_KUBELET_PLUGIN_REGISTRATION_RETRY": "x"},
            "GPUDRA_KUBELET_PLUGIN_REGISTRATION_RETRY",
            id="bad-env",
        ),
        pytest.param(["--claim-source", "etcd"], {}, "claim source must be", id="bad-choice"),
        pytest.param(["--driver-name", "a/b"], {}, "invalid driver name", id="bad-driver"),
        pytest.param(
            ["--registration-retry", "0"], {}, "registration retry must be > 0", id="zero-retry"
        ),
        pytest.param(
            ["--socket-check", "0"], {}, "socket check interval must be > 0", id="zero-check"
        ),
        pytest.param(
            ["--health-timeout", "-1"], {}, "health timeout must be >= 0", id="negative-timeout"
        ),
    ],
)
def test_bad_values_are_clear_errors(
    argv: list[str], environ: dict[str, str], message: str
) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.load(argv, environ)


def test_every_field_is_a_documented_flag_and_env_variable() -> None:
    text = " ".join(build_parser(Settings, ENV_PREFIX, "kubelet-plugin", "").format_help().split())
    for field in dataclasses.fields(Settings):
        assert flag_name(field.name) in text
        assert " or ".join(env_names(ENV_PREFIX, field.name)) in text
        assert field.metadata["help"]


@pytest.mark.parametrize(
    ("registry", "uid", "expected"),
    [
        pytest.param("/r", "", "gpu.nvidia.com-reg.sock", id="fixed"),
        pytest.param(
            "/r",
            "0b6f6b2e-8a35-4d5e-9c1e-2f0a4e6d7c11",
            "gpu.nvidia.com-0b6f6b2e-8a35-4d5e-9c1e-2f0a4e6d7c11-reg.sock",
            id="pod-uid",
        ),
        pytest.param(
            "/" + "r" * 50,
            "0b6f6b2e-8a35-4d5e-9c1e-2f0a4e6d7c11",
            "gpu.nvidia.com-",
            id="hashed-uid",
        ),
    ],
)
def test_rolling_update_socket_names(registry: str, uid: str, expected: str) -> None:
    settings = Settings.load(["--registry-dir", registry, "--pod-uid", uid], {})
    check_socket_name(settings, expected, uid)


def test_rolling_update_socket_name_for_a_long_driver_name() -> None:
    driver = "a" * 40 + ".example.com"
    uid = "0b6f6b2e-8a35-4d5e-9c1e-2f0a4e6d7c11"
    settings = Settings.load(
        ["--registry-dir", "/" + "r" * 40, "--pod-uid", uid, "--driver-name", driver], {}
    )
    check_socket_name(settings, "dra-", uid)


def check_socket_name(settings: Settings, expected: str, uid: str) -> None:
    name = settings.registration_socket.name
    assert name.startswith(expected)
    assert name.endswith("-reg.sock")
    assert len(str(settings.registration_socket)) <= 107
    assert settings.dra_socket.name == (f"dra-{uid}.sock" if uid else "dra.sock")


def test_plugin_dir_override() -> None:
    settings = Settings.load([], {"GPUDRA_KUBELET_PLUGIN_PLUGIN_DIR": "/var/lib/kubelet/plugins/x"})
    assert settings.checkpoint_path == Path("/var/lib/kubelet/plugins/x/checkpoint.json")


def test_bad_pod_uid() -> None:
    with pytest.raises(SettingsError, match="is not a UID"):
        Settings.load(["--pod-uid", "../x"], {})


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        pytest.param(
            {"GPUDRA_NATS_URL": "tls://nats:4222", "GPUDRA_HEALTH_PORT": "9090", "NODE_NAME": "n7"},
            {"nats_url": "tls://nats:4222", "health_port": 9090, "node_name": "n7"},
            id="shared-config",
        ),
        pytest.param(
            {"GPUDRA_LOG_LEVEL": "debug", "GPUDRA_KUBELET_PLUGIN_LOG_LEVEL": "WARNING"},
            {"log_level": "WARNING"},
            id="own-variable-wins",
        ),
        pytest.param({"OTEL_TRACES_EXPORTER": "otlp"}, {"trace_exporter": "otlp"}, id="otel"),
        pytest.param(
            {"GPUDRA_NATS_TLS_CA": "/etc/nats/ca.pem", "GPUDRA_NATS_CREDS": "/etc/nats/p.creds"},
            {"nats_tls_ca": "/etc/nats/ca.pem", "nats_creds": "/etc/nats/p.creds"},
            id="shared-nats-files",
        ),
    ],
)
def test_fallback_variables(environ: dict[str, str], expected: dict[str, Any]) -> None:
    settings = Settings.load([], environ)
    for name, value in expected.items():
        assert getattr(settings, name) == value


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--nats-tls-cert", "c.pem"], "go together", id="cert-without-key"),
        pytest.param(["--health-port", "70000"], "not a TCP port", id="port"),
        pytest.param(["--trace-exporter", "jaeger"], "trace-exporter must be", id="exporter"),
        pytest.param(["--device-source", "simulator"], "device source must be", id="device-source"),
        pytest.param(["--log-level", "loud"], "not a logging level", id="log-level"),
        pytest.param(
            ["--checkpoint-file", "a/b.json"], "must be a file name", id="checkpoint-file"
        ),
    ],
)
def test_more_bad_values(argv: list[str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.load(argv, {})
