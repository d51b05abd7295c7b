"""Device taints and request tolerations (the DeviceTaints feature).

Only the effects NoSchedule and NoExecute keep a device from being allocated; any other effect
(including None) is informational. Toleration matching follows Kubernetes: an empty key with
`Exists` tolerates everything, an empty effect matches every effect.
"""

from __future__ import annotations

from gpudra_api import Device, DeviceTaint, DeviceToleration, ExactDeviceRequest

_BLOCKING = frozenset({"NoSchedule", "NoExecute"})


def tolerates(toleration: DeviceToleration, taint: DeviceTaint) -> bool:
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    if toleration.operator == "Equal":
        return toleration.value == taint.value
    return False


def taint_prevents_allocation(device: Device, request: ExactDeviceRequest) -> bool:
    for taint in device.taints:
        if taint.effect in _BLOCKING and not any(tolerates(t, taint) for t in request.tolerations):
            return True
    return False
