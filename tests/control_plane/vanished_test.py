"""Kubernetes mode, across the three services (real NATS, processes, the fake API server): a
claim deleted while the claim-writer was down (kube-controller-manager deallocates it and removes
its finalizer, so it is simply gone at the restart) has its devices freed by the restarted
claim-writer, which finds the allocator's record of a claim that no longer exists."""

from __future__ import annotations

from pathlib import Path

import pytest
from nats.aio.client import Client

from control_plane.cluster import Cluster, all_started, wait_for
from control_plane.gang_test import holders as held
from control_plane.lifecycle_test import _find, _reserved_for_job_1
from gpudra_kube.api_backend import ApiStore
from gpudra_kube.resources import PODS, RESOURCE_CLAIMS
from gpudra_testing.kubeapi import FakeKubeApi

pytestmark = pytest.mark.slow


async def test_kubernetes_mode_a_claim_deleted_while_the_claim_writer_was_down_is_released(
    nc: Client, cluster: Cluster, tmp_path: Path
) -> None:
    async with FakeKubeApi(validate_version="1.34", bookmark_interval=0.1) as api:
        kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig"))
        kube = ("--mode", "kubernetes", "--kubeconfig", kubeconfig)
        await _reserved_for_job_1(api, nc, cluster, kube)

        cluster.kill("claim-writer")
        client = await ApiStore.from_kubeconfig(kubeconfig)
        try:
            await client.delete(PODS, "job-1", "default")
            await client.delete(RESOURCE_CLAIMS, "data", "default")  # Terminating: finalizer
            # kube-controller-manager: nobody uses it any more, so deallocate, drop the finalizer.
            claim = await client.get(RESOURCE_CLAIMS, "data", "default")
            claim["status"] = {}
            claim = await client.replace_status(RESOURCE_CLAIMS, claim)
            claim["metadata"]["finalizers"] = []
            await client.replace(RESOURCE_CLAIMS, claim)
        finally:
            await client.close()
        assert _find(api, RESOURCE_CLAIMS, "data") is None, "gone for good"
        assert await held(nc) == {"default/data"}, "nobody told the allocator yet"

        cluster.start_claim_writer(*kube)
        await all_started(cluster)

        async def freed() -> bool:
            return not await held(nc)

        await wait_for(freed, 60, "data's devices freed after the restart", cluster)
        logs = cluster.logs()
        assert "Traceback" not in logs, logs
