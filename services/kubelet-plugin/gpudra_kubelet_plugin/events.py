"""Prepare and unprepare results on the bus: `gpudra.prepared.<node>`, one message per claim.

Payload: the kubelet's own answer for that claim, `k8s.io.kubelet.pkg.apis.dra.v1`
`NodePrepareResourcesResponse` / `NodeUnprepareResourcesResponse` with one entry keyed by the
claim UID (devices and CDI IDs, or the error), under gpudra_bus' schema header, plus
`Gpudra-Claim: <namespace>/<name>` and the W3C trace context of the claim's prepare span, so the
claim's trace continues to whoever listens (CLI, standalone status, tests).

Core NATS, not JetStream: these are notifications, the checkpoint is the record. A failed publish
is logged and never fails the kubelet's call.
"""

from __future__ import annotations

import logging
from typing import Protocol

import nats.errors
from nats.aio.client import Client

from gpudra_bus import Codec, CodecError, subjects, tracing
from gpudra_kubelet_plugin.checkpoint import PreparedDevice
from kubeletpb.dra.v1 import api_pb2 as v1

log = logging.getLogger(__name__)

PREPARED: Codec[v1.NodePrepareResourcesResponse] = Codec(v1.NodePrepareResourcesResponse)
UNPREPARED: Codec[v1.NodeUnprepareResourcesResponse] = Codec(v1.NodeUnprepareResourcesResponse)
CLAIM_HEADER = "Gpudra-Claim"


def device_v1(device: PreparedDevice) -> v1.Device:
    """The kubelet's v1 `Device` for a prepared device."""
    message = v1.Device(
        request_names=device.request_names,
        pool_name=device.pool_name,
        device_name=device.device_name,
        cdi_device_ids=device.cdi_device_ids,
    )
    if device.share_id is not None:
        message.share_id = device.share_id
    return message


class EventSink(Protocol):
    """Where `DeviceState` reports each claim's outcome (inside the claim's span)."""

    async def prepared(
        self, uid: str, claim: str, devices: tuple[PreparedDevice, ...], error: str = ""
    ) -> None: ...

    async def unprepared(self, uid: str, claim: str, error: str = "") -> None: ...


class NoEvents:
    """An `EventSink` that reports nothing."""

    async def prepared(
        self, uid: str, claim: str, devices: tuple[PreparedDevice, ...], error: str = ""
    ) -> None:
        return None

    async def unprepared(self, uid: str, claim: str, error: str = "") -> None:
        return None


class NatsEvents:
    """Publishes outcomes on `gpudra.prepared.<node>`."""

    def __init__(self, nc: Client, node: str) -> None:
        self._nc = nc
        self.subject = subjects.prepared(node)

    async def prepared(
        self, uid: str, claim: str, devices: tuple[PreparedDevice, ...], error: str = ""
    ) -> None:
        message = v1.NodePrepareResourcesResponse()
        message.claims[uid].error = error
        message.claims[uid].devices.extend(device_v1(d) for d in devices)
        try:
            data, headers = PREPARED.encode(message)
        except CodecError as exc:
            log.warning("not reporting prepare of %s: %s", claim, exc)
            return
        await self._publish(data, headers, claim)

    async def unprepared(self, uid: str, claim: str, error: str = "") -> None:
        message = v1.NodeUnprepareResourcesResponse()
        message.claims[uid].error = error
        data, headers = UNPREPARED.encode(message)
        await self._publish(data, headers, claim)

    async def _publish(self, data: bytes, headers: dict[str, str], claim: str) -> None:
        with tracing.publish_span(self.subject, size=len(data)):
            try:
                await self._nc.publish(
                    self.subject, data, headers=tracing.inject({**headers, CLAIM_HEADER: claim})
                )
            except (nats.errors.Error, TimeoutError, OSError) as exc:
                log.warning("publish to %s failed: %s", self.subject, exc)
