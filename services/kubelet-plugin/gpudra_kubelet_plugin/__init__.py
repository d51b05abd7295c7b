"""gpudra's kubelet plugin: the kubelet's DRA gRPC service on one node.

Registration (with retry, and pod-UID sockets for rolling updates), NodePrepareResources /
NodeUnprepareResources (v1, v1beta1), per-claim CDI specs, a checksummed checkpoint shared safely
between plugin instances, dynamic MIG (simulated, or through NVML), device health streaming (v1,
v1alpha1) fed from NATS, outcome events on `gpudra.prepared.<node>` in the claim's trace, probes.
Run it with `python -m gpudra_kubelet_plugin`; `FakeKubelet` drives it the way the kubelet does.
"""

from __future__ import annotations

from gpudra_kubelet_plugin.claimsource import (
    ClaimSource,
    MemoryClaimSource,
    NatsKvClaimSource,
    StoreClaimSource,
)
from gpudra_kubelet_plugin.devices import DeviceControl, DeviceInfo, DeviceLookup, DeviceTable
from gpudra_kubelet_plugin.errors import KubeletPluginError, PermanentError, RetryableError
from gpudra_kubelet_plugin.fakekubelet import ClaimName, FakeKubelet
from gpudra_kubelet_plugin.health import HealthEvent, HealthHub
from gpudra_kubelet_plugin.nodedevices import open_devices
from gpudra_kubelet_plugin.plugin import KubeletPlugin
from gpudra_kubelet_plugin.settings import Settings
from gpudra_kubelet_plugin.state import ClaimRef, DeviceState

__all__ = [
    "ClaimName",
    "ClaimRef",
    "ClaimSource",
    "DeviceControl",
    "DeviceInfo",
    "DeviceLookup",
    "DeviceState",
    "DeviceTable",
    "FakeKubelet",
    "HealthEvent",
    "HealthHub",
    "KubeletPlugin",
    "KubeletPluginError",
    "MemoryClaimSource",
    "NatsKvClaimSource",
    "PermanentError",
    "RetryableError",
    "Settings",
    "StoreClaimSource",
    "open_devices",
]
