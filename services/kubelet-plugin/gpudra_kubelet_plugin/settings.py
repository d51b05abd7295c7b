"""The kubelet plugin's settings: one frozen dataclass, every field a flag and an env variable.

The fields every gpudra service has (NATS connection and TLS, probes, tracing, logging) come from
`gpudra_service.CommonSettings`; this module adds the plugin's own and checks them. Precedence is
flag > `GPUDRA_KUBELET_PLUGIN_<NAME>` > the variable all services share for that field (the
`gpudra-config` ConfigMap's `GPUDRA_NATS_URL`, ..., `NODE_NAME` from the downward API,
`OTEL_TRACES_EXPORTER`; see `gpudra_service.SHARED_ENV`) > default. `Settings.load` validates what
it read; a malformed or unusable value is a `SettingsError` naming it, never a traceback.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import os
import socket
from dataclasses import field
from pathlib import Path

from gpudra_kubelet_plugin.errors import SettingsError
from gpudra_service import CommonSettings, doc

ENV_PREFIX = "GPUDRA_KUBELET_PLUGIN_"
MAX_SOCKET_PATH = 107  # sun_path is 108 bytes on Linux, NUL included


@dataclasses.dataclass(frozen=True)
class Settings(CommonSettings):
    """Everything the kubelet plugin can be told; see `--help` for each field."""

    ENV_PREFIX = ENV_PREFIX
    PROG = "python -m gpudra_kubelet_plugin"
    DESCRIPTION = "gpudra kubelet plugin: serves the kubelet's DRA gRPC API on this node."

    driver_name: str = field(
        default="gpu.nvidia.com", metadata=doc("DRA driver name served and registered")
    )
    node_name: str = field(
        default="",
        metadata=doc("this node's name (the driver's pool name); empty means the host name"),
    )
    registry_dir: Path = field(
        default=Path("/var/lib/kubelet/plugins_registry"),
        metadata=doc(
            "kubelet plugin registry directory; <driver>-reg.sock is created here",
            "path",
        ),
    )
    plugins_dir: Path = field(
        default=Path("/var/lib/kubelet/plugins"),
        metadata=doc(
            "kubelet plugins directory; <driver>/dra.sock and the checkpoint live below it",
            "path",
        ),
    )
    plugin_dir: str = field(
        default="",
        metadata=doc("the driver's own directory; empty means <plugins-dir>/<driver>", "path"),
    )
    pod_uid: str = field(
        default="",
        metadata=doc(
            "this pod's UID: enables rolling updates (sockets named after the pod, so old and new "
            "pods serve side by side); empty: fixed socket names",
            "UID",
        ),
    )
    cdi_dir: Path = field(
        default=Path("/var/run/cdi"), metadata=doc("directory CDI specs are written to", "path")
    )
    cdi_base_spec: str = field(
        default="",
        metadata=doc(
            "the node's NVIDIA CDI spec (nvidia-ctk cdi generate) whose driver libraries, binaries "
            "and hooks every claim spec includes; empty: device nodes and env only",
            "path",
        ),
    )
    checkpoint_file: str = field(
        default="checkpoint.json",
        metadata=doc("checkpoint file name inside <plugins-dir>/<driver>/", "file name"),
    )
    boot_id_file: Path = field(
        default=Path("/proc/sys/kernel/random/boot_id"),
        metadata=doc(
            "file holding the node boot ID; a changed ID invalidates the checkpoint",
            "path",
        ),
    )
    claim_source: str = field(
        default="nats",
        metadata=doc("where claims are read: 'nats' (standalone KV) or 'kubernetes'", "choice"),
    )
    kubeconfig: str = field(
        default="",
        metadata=doc(
            "kubeconfig for claim source 'kubernetes'; empty: in-cluster, else ~/.kube/config",
            "path",
        ),
    )
    nats_connect_deadline: float = field(
        default=30.0,
        metadata=doc("how long to wait for NATS at start before giving up", "seconds"),
    )
    claims_bucket: str = field(
        default="gpudra-claims", metadata=doc("JetStream KV bucket of standalone claims", "bucket")
    )
    device_source: str = field(
        default="nvml",
        metadata=doc(
            "where devices come from: nvml, simulator:<profile> (standalone), table:<json path>",
            "source",
        ),
    )
    mig_minors_file: Path = field(
        default=Path("/proc/driver/nvidia-caps/mig-minors"),
        metadata=doc("the driver's MIG capability minors; absent: the driver's layout", "path"),
    )
    registration_retry: float = field(
        default=5.0,
        metadata=doc(
            "delay before re-registering after the kubelet refused registration", "seconds"
        ),
    )
    socket_check: float = field(
        default=1.0,
        metadata=doc(
            "how often to check that the DRA and registration sockets still exist; a removed one "
            "is created again and the plugin registers anew",
            "seconds",
        ),
    )
    health_timeout: int = field(
        default=0,
        metadata=doc(
            "health check timeout reported to the kubelet, and how long the health feed may be "
            "down before devices are reported unknown; 0: the kubelet's default (30)",
            "seconds",
        ),
    )
    health_refresh: float = field(
        default=10.0,
        metadata=doc(
            "re-send the full device health list this often without changes (keeps it fresh for "
            "the kubelet's timeout), and check it against the node's last inventory as often",
            "seconds",
        ),
    )
    shutdown_grace: float = field(
        default=5.0,
        metadata=doc("how long in-flight gRPC calls may finish on shutdown", "seconds"),
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

    def validate(self) -> None:
        """Raise `SettingsError` for values no component could use (common fields first)."""
        self.validate_common()
        if self.claim_source not in {"nats", "kubernetes"}:
            raise SettingsError(
                f"claim source must be 'nats' or 'kubernetes', got {self.claim_source!r}"
            )
        if not self.driver_name or "/" in self.driver_name:
            raise SettingsError(f"invalid driver name {self.driver_name!r}")
        if self.registration_retry <= 0 or self.shutdown_grace < 0:
            raise SettingsError("registration retry must be > 0 and shutdown grace >= 0")
        if self.socket_check <= 0:
            raise SettingsError("socket check interval must be > 0")
        if self.pod_uid and not all(c.isalnum() or c == "-" for c in self.pod_uid):
            raise SettingsError(f"pod UID {self.pod_uid!r} is not a UID")
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
