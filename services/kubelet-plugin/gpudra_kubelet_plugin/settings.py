"""The kubelet plugin's settings: one frozen dataclass, every field a flag and an env variable.

Precedence is flag > environment (`GPUDRA_KUBELET_PLUGIN_<NAME>`) > the conventional variable in
`FALLBACK_ENV` (the shared `gpudra-config` ConfigMap's `GPUDRA_NATS_URL`, ..., `NODE_NAME`,
`OTEL_TRACES_EXPORTER`) > default. Each field carries its
help text and unit in `metadata`, so `--help` documents all three. Values are parsed by the field's
type (str, int, float, Path); a malformed value is a `SettingsError`, never a traceback.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import hashlib
import os
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpudra_kubelet_plugin.errors import SettingsError

ENV_PREFIX = "GPUDRA_KUBELET_PLUGIN_"
#: Conventional variables read when the prefixed one is absent (gpudra-config, downward API, OTel).
FALLBACK_ENV = {
    "node_name": "NODE_NAME",
    "nats_url": "GPUDRA_NATS_URL",
    "nats_tls_ca": "GPUDRA_NATS_TLS_CA",
    "nats_tls_cert": "GPUDRA_NATS_TLS_CERT",
    "nats_tls_key": "GPUDRA_NATS_TLS_KEY",
    "health_port": "GPUDRA_HEALTH_PORT",
    "log_level": "GPUDRA_LOG_LEVEL",
    "trace_exporter": "OTEL_TRACES_EXPORTER",
}
TRACE_EXPORTERS = ("none", "console", "otlp")
MAX_SOCKET_PATH = 107  # sun_path is 108 bytes on Linux, NUL included


def _doc(help: str, unit: str = "") -> dict[str, str]:
    return {"help": help, "unit": unit}


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything the kubelet plugin can be told; see `--help` for each field."""

    driver_name: str = dataclasses.field(
        default="gpu.nvidia.com", metadata=_doc("DRA driver name served and registered")
    )
    node_name: str = dataclasses.field(
        default="",
        metadata=_doc("this node's name (the driver's pool name); empty means the host name"),
    )
    registry_dir: Path = dataclasses.field(
        default=Path("/var/lib/kubelet/plugins_registry"),
        metadata=_doc(
            "kubelet plugin registry directory; <driver>-reg.sock is created here",
            "path",
        ),
    )
    plugins_dir: Path = dataclasses.field(
        default=Path("/var/lib/kubelet/plugins"),
        metadata=_doc(
            "kubelet plugins directory; <driver>/dra.sock and the checkpoint live below it",
            "path",
        ),
    )
    plugin_dir: str = dataclasses.field(
        default="",
        metadata=_doc("the driver's own directory; empty means <plugins-dir>/<driver>", "path"),
    )
    pod_uid: str = dataclasses.field(
        default="",
        metadata=_doc(
            "this pod's UID: enables rolling updates (sockets named after the pod, so old and new "
            "pods serve side by side); empty: fixed socket names",
            "UID",
        ),
    )
    cdi_dir: Path = dataclasses.field(
        default=Path("/var/run/cdi"), metadata=_doc("directory CDI specs are written to", "path")
    )
    cdi_base_spec: str = dataclasses.field(
        default="",
        metadata=_doc(
            "the node's NVIDIA CDI spec (nvidia-ctk cdi generate) whose driver libraries, binaries "
            "and hooks every claim spec includes; empty: device nodes and env only",
            "path",
        ),
    )
    checkpoint_file: str = dataclasses.field(
        default="checkpoint.json",
        metadata=_doc("checkpoint file name inside <plugins-dir>/<driver>/", "file name"),
    )
    boot_id_file: Path = dataclasses.field(
        default=Path("/proc/sys/kernel/random/boot_id"),
        metadata=_doc(
            "file holding the node boot ID; a changed ID invalidates the checkpoint",
            "path",
        ),
    )
    claim_source: str = dataclasses.field(
        default="nats",
        metadata=_doc("where claims are read: 'nats' (standalone KV) or 'kubernetes'", "choice"),
    )
    kubeconfig: str = dataclasses.field(
        default="",
        metadata=_doc(
            "kubeconfig for claim source 'kubernetes'; empty: in-cluster, else ~/.kube/config",
            "path",
        ),
    )
    nats_url: str = dataclasses.field(
        default="nats://127.0.0.1:4222", metadata=_doc("NATS server URL", "URL")
    )
    nats_creds: str = dataclasses.field(
        default="", metadata=_doc("NATS credentials file (JWT + NKey); empty: none", "path")
    )
    nats_tls_ca: str = dataclasses.field(
        default="",
        metadata=_doc("CA bundle to verify NATS TLS; empty: no TLS unless a cert", "path"),
    )
    nats_tls_cert: str = dataclasses.field(
        default="", metadata=_doc("client certificate for NATS mTLS", "path")
    )
    nats_tls_key: str = dataclasses.field(
        default="", metadata=_doc("client key for NATS mTLS", "path")
    )
    nats_connect_deadline: float = dataclasses.field(
        default=30.0,
        metadata=_doc("how long to wait for NATS at start before giving up", "seconds"),
    )
    claims_bucket: str = dataclasses.field(
        default="gpudra-claims", metadata=_doc("JetStream KV bucket of standalone claims", "bucket")
    )
    device_source: str = dataclasses.field(
        default="nvml",
        metadata=_doc(
            "where devices come from: nvml, simulator:<profile> (standalone), table:<json path>",
            "source",
        ),
    )
    mig_minors_file: Path = dataclasses.field(
        default=Path("/proc/driver/nvidia-caps/mig-minors"),
        metadata=_doc("the driver's MIG capability minors; absent: the driver's layout", "path"),
    )
    registration_retry: float = dataclasses.field(
        default=5.0,
        metadata=_doc(
            "delay before re-registering after the kubelet refused registration", "seconds"
        ),
    )
    health_timeout: int = dataclasses.field(
        default=0,
        metadata=_doc(
            "health check timeout reported to the kubelet; 0 lets the kubelet decide", "seconds"
        ),
    )
    health_refresh: float = dataclasses.field(
        default=10.0,
        metadata=_doc(
            "re-send the full device health list this often without changes (keeps it fresh for "
            "the kubelet's timeout)",
            "seconds",
        ),
    )
    shutdown_grace: float = dataclasses.field(
        default=5.0,
        metadata=_doc("how long in-flight gRPC calls may finish on shutdown", "seconds"),
    )
    health_host: str = dataclasses.field(
        default="0.0.0.0", metadata=_doc("address of the /healthz and /readyz server", "address")
    )
    health_port: int = dataclasses.field(
        default=8080, metadata=_doc("port of the /healthz and /readyz server; 0: any", "port")
    )
    trace_exporter: str = dataclasses.field(
        default="none", metadata=_doc(f"trace exporter: {', '.join(TRACE_EXPORTERS)}", "choice")
    )
    trace_endpoint: str = dataclasses.field(
        default="", metadata=_doc("OTLP/HTTP traces endpoint; empty: the SDK default", "URL")
    )
    trace_file: str = dataclasses.field(
        default="", metadata=_doc("console exporter writes JSON lines here; empty: stderr", "path")
    )
    log_level: str = dataclasses.field(
        default="INFO", metadata=_doc("logging level (DEBUG, INFO, WARNING, ERROR)", "level")
    )

    @property
    def node(self) -> str:
        """The effective node name (the setting, else the host name)."""
        return self.node_name or socket.gethostname()

    @property
    def data_dir(self) -> Path:
        """The driver's directory (DRA socket, checkpoint): `plugin_dir`, else
        `<plugins-dir>/<driver>`."""
        return Path(self.plugin_dir) if self.plugin_dir else self.plugins_dir / self.driver_name

    @property
    def dra_socket(self) -> Path:
        return self.data_dir / (f"dra-{self.pod_uid}.sock" if self.pod_uid else "dra.sock")

    @property
    def registration_socket(self) -> Path:
        if not self.pod_uid:
            return self.registry_dir / f"{self.driver_name}-reg.sock"
        return self.registry_dir / rolling_registration_name(
            self.registry_dir, self.driver_name, self.pod_uid
        )

    @property
    def checkpoint_path(self) -> Path:
        return self.data_dir / self.checkpoint_file

    @classmethod
    def parser(cls) -> argparse.ArgumentParser:
        """An argument parser with one flag per field; defaults are left unset (env decides)."""
        parser = argparse.ArgumentParser(
            prog="python -m gpudra_kubelet_plugin",
            description="gpudra kubelet plugin: serves the kubelet's DRA gRPC API on this node.",
        )
        for field in dataclasses.fields(cls):
            unit = field.metadata["unit"]
            help_text = (
                f"{field.metadata['help']} [{unit + ', ' if unit else ''}"
                f"env {env_name(field.name)}, default {field.default!s}]"
            )
            parser.add_argument(
                flag_name(field.name), dest=field.name, default=None, help=help_text
            )
        return parser

    @classmethod
    def load(
        cls, argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
    ) -> Settings:
        """Settings from flags, then the environment, then defaults."""
        environ = os.environ if environ is None else environ
        args = vars(cls.parser().parse_args(argv))
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            raw = args.get(field.name)
            source = flag_name(field.name)
            if raw is None:
                raw, source = environ.get(env_name(field.name)), env_name(field.name)
            if raw is None and field.name in FALLBACK_ENV:
                source = FALLBACK_ENV[field.name]
                raw = environ.get(source)
            if raw is None:
                continue
            values[field.name] = _convert(field.default, raw, source)
        settings = cls(**values)
        settings.validate()
        return settings

    def validate(self) -> None:
        """Raise `SettingsError` for values no component could use."""
        if self.claim_source not in {"nats", "kubernetes"}:
            raise SettingsError(
                f"claim source must be 'nats' or 'kubernetes', got {self.claim_source!r}"
            )
        if not self.driver_name or "/" in self.driver_name:
            raise SettingsError(f"invalid driver name {self.driver_name!r}")
        if self.registration_retry <= 0 or self.shutdown_grace < 0:
            raise SettingsError("registration retry must be > 0 and shutdown grace >= 0")
        if self.pod_uid and not all(c.isalnum() or c == "-" for c in self.pod_uid):
            raise SettingsError(f"pod UID {self.pod_uid!r} is not a UID")
        if bool(self.nats_tls_cert) != bool(self.nats_tls_key):
            raise SettingsError("nats-tls-cert and nats-tls-key go together")
        if not 0 <= self.health_port <= 65535:
            raise SettingsError(f"health port {self.health_port} is not a TCP port")
        if self.trace_exporter not in TRACE_EXPORTERS:
            raise SettingsError(
                f"trace exporter must be one of {TRACE_EXPORTERS}, got {self.trace_exporter!r}"
            )
        kind, _, argument = self.device_source.partition(":")
        if not (self.device_source == "nvml" or (kind in ("simulator", "table") and argument)):
            raise SettingsError(
                "device source must be nvml, simulator:<profile> or table:<path>, "
                f"got {self.device_source!r}"
            )
        if not self.checkpoint_file or "/" in self.checkpoint_file:
            raise SettingsError(
                f"checkpoint file must be a file name, got {self.checkpoint_file!r}"
            )
        if self.health_refresh <= 0:
            raise SettingsError("health refresh must be > 0")
        if self.health_timeout < 0:
            raise SettingsError("health timeout must be >= 0")


def rolling_registration_name(registry_dir: Path, driver: str, pod_uid: str) -> str:
    """Registration socket name of one pod during rolling updates: `<driver>-<pod UID>-reg.sock`,
    shortened with hashes (as the Kubernetes DRA helpers do) while the path is too long."""
    uid_hash = base64.urlsafe_b64encode(hashlib.sha256(pod_uid.encode()).digest()[:8])
    pair_hash = base64.urlsafe_b64encode(
        hashlib.sha256(f"{driver}\0{pod_uid}".encode()).digest()[:16]
    )
    candidates = [
        f"{driver}-{pod_uid}-reg.sock",
        f"{driver}-{uid_hash.decode().rstrip('=')}-reg.sock",
        f"dra-{pair_hash.decode().rstrip('=')}-reg.sock",
    ]
    for name in candidates:
        if len(os.fsencode(registry_dir / name)) <= MAX_SOCKET_PATH:
            return name
    return candidates[-1]


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def env_name(name: str) -> str:
    return ENV_PREFIX + name.upper()


def _convert(default: Any, raw: str, source: str) -> Any:
    try:
        if isinstance(default, Path):
            return Path(raw)
        if isinstance(default, bool):
            raise TypeError("no boolean settings yet")
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
    except ValueError as exc:
        raise SettingsError(f"{source}: cannot parse {raw!r}: {exc}") from exc
    return raw
