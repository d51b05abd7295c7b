"""The variables deploy's shared ConfigMap gives every control-plane service, and the
`gpudra_service.CommonSettings` fields they must land in: one table for every service's
settings test, each of which proves its own service reads them."""

from __future__ import annotations

from typing import Any

SHARED_CONFIG_ENV: dict[str, str] = {
    "GPUDRA_NATS_TLS_CA": "/etc/gpudra/nats-tls/ca.crt",
    "GPUDRA_NATS_TLS_CERT": "/etc/gpudra/nats-tls/tls.crt",
    "GPUDRA_NATS_TLS_KEY": "/etc/gpudra/nats-tls/tls.key",
    "GPUDRA_NATS_STREAM_REPLICAS": "3",
    "GPUDRA_HEALTH_PORT": "9090",
    "GPUDRA_LOG_LEVEL": "DEBUG",
    "OTEL_TRACES_EXPORTER": "otlp",
}

SHARED_CONFIG_FIELDS: dict[str, Any] = {
    "nats_tls_ca": "/etc/gpudra/nats-tls/ca.crt",
    "nats_tls_cert": "/etc/gpudra/nats-tls/tls.crt",
    "nats_tls_key": "/etc/gpudra/nats-tls/tls.key",
    "stream_replicas": 3,
    "health_port": 9090,
    "log_level": "DEBUG",
    "trace_exporter": "otlp",
}
