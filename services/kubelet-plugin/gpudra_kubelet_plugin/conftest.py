"""Fixtures for the kubelet plugin's tests: a simulated node (device table, claim store, boot ID,
short directories for Unix sockets) and builders for ResourceClaim JSON."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from gpudra_kubelet_plugin.cdi import CdiWriter
from gpudra_kubelet_plugin.checkpoint import Checkpoint
from gpudra_kubelet_plugin.claimsource import MemoryClaimSource
from gpudra_kubelet_plugin.devices import DeviceInfo, DeviceTable
from gpudra_kubelet_plugin.fakekubelet import ClaimName, FakeKubelet
from gpudra_kubelet_plugin.health import HealthHub
from gpudra_kubelet_plugin.plugin import KubeletPlugin
from gpudra_kubelet_plugin.settings import Settings
from gpudra_kubelet_plugin.state import DeviceState

DRIVER = "gpu.nvidia.com"
NODE = "node-a"
GPU0 = "GPU-00000000-0000-0000-0000-000000000000"
GPU1 = "GPU-11111111-1111-1111-1111-111111111111"
MIG_STATIC = "MIG-22222222-2222-2222-2222-222222222222"


def node_devices() -> list[DeviceInfo]:
    """gpu-0 whole; gpu-1 in MIG mode with one existing 1g.10gb and two dynamic placements."""
    return [
        DeviceInfo("gpu-0", "gpu", GPU0, 0),
        DeviceInfo("gpu-1", "gpu", GPU1, 1),
        DeviceInfo("gpu-1-mig-1-0", "mig", MIG_STATIC, 1, GPU1, "1g.10gb", 0, 1, 21, 22),
        DeviceInfo("gpu-1-mig-3g-40gb-4", "mig", "", 1, GPU1, "3g.40gb", 4, 4),
        DeviceInfo("gpu-1-mig-4g-40gb-0", "mig", "", 1, GPU1, "4g.40gb", 0, 4),
    ]


def make_claim(
    name: str,
    uid: str,
    results: Sequence[tuple[str, str] | dict[str, Any]],
    configs: Sequence[dict[str, Any]] = (),
    namespace: str = "default",
) -> dict[str, Any]:
    """A ResourceClaim v1 JSON allocated on NODE; results as (request, device) or full dicts."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": {"devices": {"requests": []}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        (
                            r
                            if isinstance(r, dict)
                            else {"request": r[0], "driver": DRIVER, "pool": NODE, "device": r[1]}
                        )
                        for r in results
                    ],
                    "config": list(configs),
                }
            }
        },
    }


def sharing_config(
    sharing: dict[str, Any], kind: str = "GpuConfig", **extra: Any
) -> dict[str, Any]:
    return {
        "source": "FromClaim",
        **extra,
        "opaque": {
            "driver": DRIVER,
            "parameters": {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": kind,
                "sharing": sharing,
            },
        },
    }


KIND = f"k8s.{DRIVER}/claim"


def ref(claim: dict[str, Any]) -> ClaimName:
    meta = claim["metadata"]
    return ClaimName(meta["uid"], meta["namespace"], meta["name"])


def read_spec(node: Node, uid: str) -> dict[str, Any]:
    """The spec of a claim whose devices serve one request (group), the claim's only spec file."""
    spec: dict[str, Any] = json.loads(node.cdi.spec_path(uid).read_text())
    return spec


def read_specs(node: Node, uid: str) -> list[dict[str, Any]]:
    """Every spec file of the claim, by file name (so requests `a`, `b` come in that order)."""
    return [json.loads(path.read_text()) for path in node.cdi.spec_paths(uid)]


Running = tuple[KubeletPlugin, FakeKubelet]


@dataclasses.dataclass
class Node:
    """One simulated node's files and devices; `plugin()` starts a plugin process-equivalent."""

    root: Path
    claims: MemoryClaimSource
    table: DeviceTable
    registration_retry: float = 5.0
    socket_check: float = 1.0

    @property
    def settings(self) -> Settings:
        return Settings(
            driver_name=DRIVER,
            node_name=NODE,
            registry_dir=self.root / "registry",
            plugins_dir=self.root / "plugins",
            cdi_dir=self.root / "cdi",
            boot_id_file=self.root / "boot_id",
            registration_retry=self.registration_retry,
            socket_check=self.socket_check,
            shutdown_grace=0.5,
        )

    @property
    def cdi(self) -> CdiWriter:
        return CdiWriter(self.settings.cdi_dir, DRIVER)

    def checkpoint(self) -> Checkpoint:
        return Checkpoint(self.settings.checkpoint_path, self.settings.boot_id_file)

    def state(self, checkpoint: Checkpoint | None = None) -> DeviceState:
        return DeviceState(
            driver=DRIVER,
            node=NODE,
            claims=self.claims,
            lookup=self.table,
            control=self.table,
            cdi=self.cdi,
            checkpoint=checkpoint or self.checkpoint(),
        )

    async def plugin(
        self, state: DeviceState | None = None, settings: Settings | None = None
    ) -> KubeletPlugin:
        hub = HealthHub(NODE, await self.table.devices())
        return KubeletPlugin(settings or self.settings, state or self.state(), hub)

    def reboot(self, boot_id: str) -> None:
        (self.root / "boot_id").write_text(boot_id + "\n")


@pytest.fixture
def short_root() -> Iterator[Path]:
    # Unix socket paths are limited to 107 bytes; pytest's tmp_path can exceed that.
    root = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def node(short_root: Path) -> Node:
    (short_root / "boot_id").write_text("boot-1\n")
    return Node(short_root, MemoryClaimSource(), DeviceTable(node_devices()))


@contextlib.asynccontextmanager
async def serving(node: Node, plugin: KubeletPlugin) -> AsyncIterator[FakeKubelet]:
    """`plugin` (of `node`) started, and a fake kubelet that has registered it; the plugin stops
    on the way out."""
    await plugin.start()
    try:
        async with FakeKubelet(node.settings.registry_dir, DRIVER) as kubelet:
            await kubelet.register()
            yield kubelet
    finally:
        await plugin.stop()


@pytest_asyncio.fixture
async def running(node: Node) -> AsyncIterator[Running]:
    """A started plugin and a registered fake kubelet."""
    plugin = await node.plugin()
    async with serving(node, plugin) as kubelet:
        yield plugin, kubelet
