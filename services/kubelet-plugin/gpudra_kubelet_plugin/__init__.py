"""gpudra's kubelet plugin: the kubelet's DRA gRPC service on one node.

Registration, NodePrepareResources/NodeUnprepareResources (v1, v1beta1), per-claim CDI specs,
a checksummed checkpoint, dynamic MIG and device health streaming (v1, v1alpha1). Run it with
`python -m gpudra_kubelet_plugin`; `fakekubelet.FakeKubelet` drives it the way the kubelet does.
"""

from __future__ import annotations

from gpudra_kubelet_plugin.claimsource import ClaimSource, MemoryClaimSource, NatsKvClaimSource
from gpudra_kubelet_plugin.devices import DeviceControl, DeviceInfo, DeviceLookup, DeviceTable
from gpudra_kubelet_plugin.errors import KubeletPluginError, PermanentError, RetryableError
from gpudra_kubelet_plugin.health import HealthEvent, HealthHub
from gpudra_kubelet_plugin.plugin import KubeletPlugin
from gpudra_kubelet_plugin.settings import Settings
from gpudra_kubelet_plugin.state import ClaimRef, DeviceState

__all__ = [
    "ClaimRef",
    "ClaimSource",
    "DeviceControl",
    "DeviceInfo",
    "DeviceLookup",
    "DeviceState",
    "DeviceTable",
    "HealthEvent",
    "HealthHub",
    "KubeletPlugin",
    "KubeletPluginError",
    "MemoryClaimSource",
    "NatsKvClaimSource",
    "PermanentError",
    "RetryableError",
    "Settings",
]
