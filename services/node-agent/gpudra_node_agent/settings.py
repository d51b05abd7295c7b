"""The node-agent's settings: one frozen dataclass; every field is a flag and an env variable.

Precedence: flag > `GPUDRA_NODE_AGENT_<NAME>` > the variable all services share for that field
(`NODE_NAME` from the downward API, `GPUDRA_NATS_URL`, ...; see `gpudra_service.SHARED_ENV`) >
default. `Settings.load` validates what it read and raises `SettingsError` with one readable line.
"""

from __future__ import annotations

import dataclasses
import socket
from dataclasses import field

from gpudra_bus import subjects
from gpudra_bus.errors import InvalidSubjectError
from gpudra_node_agent.errors import SettingsError
from gpudra_service import CommonSettings, doc

ENV_PREFIX = "GPUDRA_NODE_AGENT_"


@dataclasses.dataclass(frozen=True)
class Settings(CommonSettings):
    """Everything the node-agent can be told; `--help` shows each field's unit and default."""

    ENV_PREFIX = ENV_PREFIX
    PROG = "python -m gpudra_node_agent"
    DESCRIPTION = "gpudra node-agent: publishes this node's GPUs, their health and use."

    node_name: str = field(
        default="", metadata=doc("this node's name (DNS subdomain); empty: the host name", "name")
    )
    simulator_profile: str = field(
        default="",
        metadata=doc("run this simulator profile instead of NVML (`gpudra profiles`)", "name"),
    )
    fallback_profile: str = field(
        default="",
        metadata=doc("simulator profile to run when the NVML library is missing", "name"),
    )
    simulator_faults: str = field(
        default="",
        metadata=doc("YAML fault script for the simulator (XID at T, lost GPU, ECC)", "path"),
    )
    poll_interval: float = field(
        default=2.0, metadata=doc("health (XID, ECC, lost GPU) polling period", "seconds")
    )
    discovery_interval: float = field(
        default=30.0, metadata=doc("full rediscovery period (also after health changes)", "seconds")
    )
    heartbeat_interval: float = field(
        default=15.0, metadata=doc("republish an unchanged inventory this often", "seconds")
    )
    utilization_interval: float = field(
        default=10.0, metadata=doc("utilisation sampling period; 0 disables", "seconds")
    )
    xid_hold: float = field(
        default=300.0,
        metadata=doc("an XID condition clears after this long without another", "seconds"),
    )

    @property
    def node(self) -> str:
        return self.node_name or socket.gethostname().lower()

    def validate(self) -> None:
        self.validate_common()
        try:
            # Here, not when the agent is built: a bad name (flag, NODE_NAME or host name) is a
            # configuration error (exit 2) found before NVML is opened or NATS is waited for.
            subjects.validate_node_name(self.node)
        except InvalidSubjectError as exc:
            raise SettingsError(f"node-name: {exc}") from exc
        for name in ("poll_interval", "discovery_interval", "heartbeat_interval"):
            if getattr(self, name) <= 0:
                raise SettingsError(f"{name.replace('_', '-')} must be > 0 seconds")
        if self.simulator_faults and not (self.simulator_profile or self.fallback_profile):
            # On NVML a fault script does nothing: say so rather than run without the faults.
            raise SettingsError(
                "simulator-faults needs a simulator (simulator-profile or fallback-profile)"
            )
        if self.utilization_interval < 0 or self.xid_hold < 0:
            raise SettingsError("utilization-interval and xid-hold must not be negative")
