"""Settings as one frozen dataclass per service: every field a flag and an environment variable.

Precedence: `--field-name` > `<PREFIX>FIELD_NAME` (e.g. `GPUDRA_ALLOCATOR_NATS_URL`) > the
variable every gpudra service shares for that field, if any (`SHARED_ENV`: what the deploy
ConfigMap and the downward API set, e.g. `GPUDRA_NATS_URL`, `NODE_NAME`, `OTEL_TRACES_EXPORTER`)
> the field's default. Values are converted by the default's type (str, int, float, bool, Path); a
malformed value is a `SettingsError` naming the flag or variable, never a traceback. A float must
be finite (NaN would pass every range check) and a path non-empty (an empty one is "."). `--help`
shows each field's help text, unit, variables and default.

`CommonSettings` holds the fields every service has (NATS connection, probes, tracing, logging)
and the one `load` classmethod; a service's dataclass inherits it, sets `ENV_PREFIX`, `PROG` and
`DESCRIPTION`, adds its own fields and extends `validate` (calling `validate_common` first).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import field
from pathlib import Path
from typing import Any, ClassVar, Self, TypeVar

from gpudra_service.errors import SettingsError

#: Variables all gpudra services share, read when the service's own prefixed one is absent.
SHARED_ENV: Mapping[str, str] = {
    "node_name": "NODE_NAME",
    "nats_url": "GPUDRA_NATS_URL",
    "nats_creds": "GPUDRA_NATS_CREDS",
    "nats_tls_ca": "GPUDRA_NATS_TLS_CA",
    "nats_tls_cert": "GPUDRA_NATS_TLS_CERT",
    "nats_tls_key": "GPUDRA_NATS_TLS_KEY",
    "stream_replicas": "GPUDRA_NATS_STREAM_REPLICAS",
    "health_port": "GPUDRA_HEALTH_PORT",
    "log_level": "GPUDRA_LOG_LEVEL",
    "trace_exporter": "OTEL_TRACES_EXPORTER",
}
TRACE_EXPORTERS = ("none", "console", "otlp")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}

S = TypeVar("S")


def doc(help_text: str, unit: str = "") -> dict[str, str]:
    """A settings field's metadata: its help text and unit (shown by `--help`)."""
    return {"help": help_text, "unit": unit}


@dataclasses.dataclass(frozen=True)
class CommonSettings:
    """The settings every gpudra service has."""

    # Set by each service's subclass: its variables' prefix and its `--help` header.
    ENV_PREFIX: ClassVar[str] = "GPUDRA_"
    PROG: ClassVar[str] = ""
    DESCRIPTION: ClassVar[str] = ""

    nats_url: str = field(
        default="nats://127.0.0.1:4222", metadata=doc("NATS server URL(s), comma-separated", "URL")
    )
    nats_creds: str = field(
        default="", metadata=doc("NATS credentials file (JWT + NKey); empty: none", "path")
    )
    nats_tls_ca: str = field(default="", metadata=doc("CA bundle to verify NATS TLS", "path"))
    nats_tls_cert: str = field(default="", metadata=doc("client certificate for NATS mTLS", "path"))
    nats_tls_key: str = field(default="", metadata=doc("client key for NATS mTLS", "path"))
    stream_replicas: int = field(
        default=1, metadata=doc("JetStream replicas of streams and buckets this service creates")
    )
    health_port: int = field(
        default=8080, metadata=doc("HTTP port of /healthz and /readyz; 0 picks a free one", "port")
    )
    health_host: str = field(default="0.0.0.0", metadata=doc("address the health server binds"))
    trace_exporter: str = field(
        default="none", metadata=doc(f"trace exporter: {', '.join(TRACE_EXPORTERS)}", "choice")
    )
    trace_endpoint: str = field(
        default="",
        metadata=doc("OTLP/HTTP traces endpoint; empty: OTEL_EXPORTER_OTLP_* decide", "URL"),
    )
    trace_file: str = field(
        default="", metadata=doc("console exporter writes JSON lines here; empty: stdout", "path")
    )
    log_level: str = field(default="INFO", metadata=doc("logging level", "level"))

    @property
    def nats_servers(self) -> list[str]:
        return [u.strip() for u in self.nats_url.split(",") if u.strip()]

    @classmethod
    def load(
        cls, argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
    ) -> Self:
        """Settings from flags, then the environment, then defaults; validated."""
        settings = load(
            cls, cls.ENV_PREFIX, argv, environ, prog=cls.PROG, description=cls.DESCRIPTION
        )
        settings.validate()
        return settings

    def validate(self) -> None:
        """Raise `SettingsError` for values no component could use; services extend it."""
        self.validate_common()

    def validate_common(self) -> None:
        """Checks of the common fields; a service's own `validate` calls it first."""
        if not self.nats_servers:
            raise SettingsError("no NATS URL given")
        if not 0 <= self.health_port <= 65535:
            raise SettingsError(f"health-port {self.health_port} is not a TCP port")
        if self.stream_replicas < 1:
            raise SettingsError("stream-replicas must be >= 1")
        if self.trace_exporter not in TRACE_EXPORTERS:
            raise SettingsError(f"trace-exporter must be one of {', '.join(TRACE_EXPORTERS)}")
        if self.log_level.upper() not in LOG_LEVELS:
            raise SettingsError(f"log-level {self.log_level!r} is not a logging level")
        if bool(self.nats_tls_cert) != bool(self.nats_tls_key):
            raise SettingsError("nats-tls-cert and nats-tls-key go together")


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def env_names(prefix: str, name: str) -> list[str]:
    own = prefix + name.upper()
    shared = SHARED_ENV.get(name)
    return [own, shared] if shared else [own]


def build_parser(
    cls: type[Any], prefix: str, prog: str, description: str
) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    for f in dataclasses.fields(cls):
        unit = f.metadata.get("unit", "")
        envs = " or ".join(env_names(prefix, f.name))
        default = f.default if f.default is not dataclasses.MISSING else "required"
        parser.add_argument(
            flag_name(f.name),
            dest=f.name,
            default=None,
            help=f"{f.metadata.get('help', '')} [{unit + ', ' if unit else ''}"
            f"env {envs}, default {default!r}]",
        )
    return parser


def convert(default: Any, raw: str, source: str) -> Any:
    """`raw` as the type of `default`; `SettingsError` naming `source` when it is not one."""
    try:
        if isinstance(default, bool):
            low = raw.strip().lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise ValueError(f"expected one of {sorted(_TRUE | _FALSE)}")
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            value = float(raw)
            # NaN compares false with every bound, so it would pass each range check a service's
            # `validate` makes; no setting means "infinitely long" either.
            if not math.isfinite(value):
                raise ValueError("expected a finite number")
            return value
        if isinstance(default, Path):
            # Path("") is Path("."): the working directory, never what an empty value meant.
            if not raw.strip():
                raise ValueError("expected a path")
            return Path(raw)
        return raw
    except ValueError as exc:
        raise SettingsError(f"{source}: invalid value {raw!r}: {exc}") from exc


def load(
    cls: type[S],
    prefix: str,
    argv: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    prog: str = "",
    description: str = "",
) -> S:
    """An instance of the dataclass `cls` from flags, then environment, then the defaults."""
    env = os.environ if environ is None else environ
    parser = build_parser(cls, prefix, prog or cls.__name__, description)
    args = vars(parser.parse_args(argv))
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        raw, source = args.get(f.name), flag_name(f.name)
        if raw is None:
            for name in env_names(prefix, f.name):
                if name in env:
                    raw, source = env[name], name
                    break
        if raw is not None:
            values[f.name] = convert(f.default, raw, source)
    return cls(**values)
