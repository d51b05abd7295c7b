"""Thin gRPC handlers of the kubelet's DRAPlugin service, v1 and v1beta1, over `DeviceState`.

Claims of one call are handled concurrently and independently: each claim's failure becomes that
claim's `error` string in the response map (keyed by claim UID), never a failed RPC. v1beta1 is the
same conversation without `share_id`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from grpc.aio import ServicerContext as Ctx

from gpudra_kubelet_plugin.errors import KubeletPluginError
from gpudra_kubelet_plugin.events import device_v1
from gpudra_kubelet_plugin.state import ClaimRef, DeviceState
from kubeletpb.dra.v1 import api_pb2 as v1
from kubeletpb.dra.v1 import api_pb2_grpc as v1_grpc
from kubeletpb.dra.v1beta1 import api_pb2 as v1beta1
from kubeletpb.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc

log = logging.getLogger(__name__)
T = TypeVar("T")
ClaimMessage = v1.Claim | v1beta1.Claim


async def _each(
    claims: Sequence[ClaimMessage], call: Callable[[ClaimRef], Awaitable[T]], what: str
) -> dict[str, T | str]:
    """Run `call` per claim concurrently; a claim's failure becomes its error string."""

    async def one(claim: ClaimMessage) -> T | str:
        ref = ClaimRef(uid=claim.uid, namespace=claim.namespace, name=claim.name)
        if not ref.uid or not ref.name:
            return f"{what}: the kubelet sent a claim without uid or name"
        try:
            return await call(ref)
        except KubeletPluginError as exc:
            log.warning("%s claim %s/%s (%s): %s", what, ref.namespace, ref.name, ref.uid, exc)
            return f"{what} {ref.namespace}/{ref.name}: {exc}"
        except Exception as exc:
            # A bug must fail this claim only, visibly, and never the other claims of the call.
            log.exception("%s claim %s/%s: unexpected error", what, ref.namespace, ref.name)
            return f"{what} {ref.namespace}/{ref.name}: internal error: {exc!r}"

    answers = await asyncio.gather(*(one(c) for c in claims))
    return {c.uid: a for c, a in zip(claims, answers, strict=True)}


class DraServicerV1(v1_grpc.DRAPluginServicer):
    """`k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`."""

    def __init__(self, state: DeviceState) -> None:
        self._state = state

    async def NodePrepareResources(
        self,
        request: v1.NodePrepareResourcesRequest,
        context: Ctx[v1.NodePrepareResourcesRequest, v1.NodePrepareResourcesResponse],
    ) -> v1.NodePrepareResourcesResponse:
        answers = await _each(request.claims, self._state.prepare, "prepare")
        response = v1.NodePrepareResourcesResponse()
        for uid, answer in answers.items():
            if isinstance(answer, str):
                response.claims[uid].error = answer
                continue
            response.claims[uid].devices.extend(device_v1(d) for d in answer)
        return response

    async def NodeUnprepareResources(
        self,
        request: v1.NodeUnprepareResourcesRequest,
        context: Ctx[v1.NodeUnprepareResourcesRequest, v1.NodeUnprepareResourcesResponse],
    ) -> v1.NodeUnprepareResourcesResponse:
        answers = await _each(request.claims, self._state.unprepare, "unprepare")
        response = v1.NodeUnprepareResourcesResponse()
        for uid, answer in answers.items():
            response.claims[uid].error = answer if isinstance(answer, str) else ""
        return response


class DraServicerV1beta1(v1beta1_grpc.DRAPluginServicer):
    """`k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin` (kubelets before 1.34)."""

    def __init__(self, state: DeviceState) -> None:
        self._state = state

    async def NodePrepareResources(
        self,
        request: v1beta1.NodePrepareResourcesRequest,
        context: Ctx[v1beta1.NodePrepareResourcesRequest, v1beta1.NodePrepareResourcesResponse],
    ) -> v1beta1.NodePrepareResourcesResponse:
        answers = await _each(request.claims, self._state.prepare, "prepare")
        response = v1beta1.NodePrepareResourcesResponse()
        for uid, answer in answers.items():
            if isinstance(answer, str):
                response.claims[uid].error = answer
                continue
            response.claims[uid].devices.extend(
                v1beta1.Device(
                    request_names=d.request_names,
                    pool_name=d.pool_name,
                    device_name=d.device_name,
                    cdi_device_ids=d.cdi_device_ids,
                )
                for d in answer
            )
        return response

    async def NodeUnprepareResources(
        self,
        request: v1beta1.NodeUnprepareResourcesRequest,
        context: Ctx[v1beta1.NodeUnprepareResourcesRequest, v1beta1.NodeUnprepareResourcesResponse],
    ) -> v1beta1.NodeUnprepareResourcesResponse:
        answers = await _each(request.claims, self._state.unprepare, "unprepare")
        response = v1beta1.NodeUnprepareResourcesResponse()
        for uid, answer in answers.items():
            response.claims[uid].error = answer if isinstance(answer, str) else ""
        return response
