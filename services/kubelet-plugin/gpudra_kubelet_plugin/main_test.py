"""The service as wired by `main`: real NATS (claims KV, health subject), a device-table file, the
fake kubelet over the real sockets; and the process itself under SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import socket
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest

from gpudra_bus import INVENTORY_STREAM, STREAMS, ensure_stream, subjects
from gpudra_kube import RESOURCE_CLAIMS
from gpudra_kubelet_plugin import healthfeed
from gpudra_kubelet_plugin.conftest import DRIVER, GPU0, NODE, make_claim, node_devices
from gpudra_kubelet_plugin.errors import ClaimSourceUnavailableError, DeviceError, SettingsError
from gpudra_kubelet_plugin.fakekubelet import ClaimName, FakeKubelet, wait_for_socket
from gpudra_kubelet_plugin.main import main, serve, start_probes
from gpudra_kubelet_plugin.settings import Settings
from gpudra_testing.kubeapi import FakeKubeApi
from gpudra_testing.statusz import free_port
from gpudrapb.v1 import inventory_pb2 as pb


def write_table(path: Path) -> Path:
    devices = [
        {
            "name": d.name,
            "type": d.kind,
            "uuid": d.uuid,
            "minor": d.minor,
            "parentUUID": d.parent_uuid,
            "profile": d.profile,
            "placement": {"start": d.placement_start, "size": d.placement_size},
            "giCap": d.gi_cap,
            "ciCap": d.ci_cap,
        }
        for d in node_devices()
    ]
    path.write_text(json.dumps({"devices": devices}))
    return path


def settings_for(root: Path, nats_url: str, bucket: str) -> Settings:
    (root / "boot_id").write_text("boot-1\n")
    return Settings(
        driver_name=DRIVER,
        node_name=NODE,
        registry_dir=root / "registry",
        plugins_dir=root / "plugins",
        cdi_dir=root / "cdi",
        boot_id_file=root / "boot_id",
        nats_url=nats_url,
        claims_bucket=bucket,
        device_source="table:" + str(write_table(root / "devices.json")),
        shutdown_grace=0.5,
        health_host="127.0.0.1",
        health_port=free_port(),
    )


async def http_get(port: int, path: str) -> str:
    """The status line the probe server answers to `GET path`."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: probe\r\n\r\n".encode())
    await writer.drain()
    response = await reader.read()
    writer.close()
    await writer.wait_closed()
    return response.decode().split("\r\n", 1)[0]


async def terminate(process: asyncio.subprocess.Process, timeout: float = 20) -> str:
    """SIGTERM `process` and its stderr once it exits. A process still running after `timeout`
    gets SIGABRT: with PYTHONFAULTHANDLER set it prints every thread's stack, and the test fails
    with that stack (where it hung) instead of a bare timeout."""
    process.send_signal(signal.SIGTERM)
    try:
        _, err = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.send_signal(signal.SIGABRT)
        _, err = await asyncio.wait_for(process.communicate(), 20)
        pytest.fail(f"still running {timeout}s after SIGTERM:\n{err.decode()[-8000:]}")
    return err.decode()


@contextlib.asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[None]:
    """The plugin's `serve` with `settings`, ready; stopped (and awaited) on the way out."""
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(serve(settings, stop, ready))
    try:
        await asyncio.wait_for(ready.wait(), 10)
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_serve_end_to_end(short_root: Path, nats_url: str) -> None:
    bucket = f"claims-{uuid.uuid4().hex[:10]}"
    nc = await nats.connect(nats_url)
    kv = await nc.jetstream().create_key_value(bucket=bucket)
    claim = make_claim("c", "uid-e2e", [("gpu", "gpu-0")])
    await kv.put("default.c", json.dumps(claim).encode())
    settings = settings_for(short_root, nats_url, bucket)
    try:
        async with serving(settings):
            assert await http_get(settings.health_port, "/healthz") == "HTTP/1.1 200 OK"
            assert await http_get(settings.health_port, "/readyz") == (
                "HTTP/1.1 503 Service Unavailable"  # not registered with the kubelet yet
            )
            async with FakeKubelet(settings.registry_dir, DRIVER) as kubelet:
                await kubelet.register()
                assert await http_get(settings.health_port, "/readyz") == "HTTP/1.1 200 OK"
                answer = (await kubelet.prepare([ClaimName("uid-e2e", "default", "c")])).claims
                assert answer["uid-e2e"].error == ""
                assert list(answer["uid-e2e"].devices[0].cdi_device_ids) == [
                    f"k8s.{DRIVER}/claim=uid-e2e-gpu-0"
                ]
                stream = kubelet.watch_health()
                await anext(stream)
                event = pb.HealthEvent(
                    node=NODE,
                    device_uuid=GPU0,
                    condition=pb.HealthCondition(kind=pb.HealthCondition.KIND_XID, code=79),
                )
                data, headers = healthfeed.HEALTH_EVENT.encode(event)
                await nc.publish(f"gpudra.health.{NODE}", data, headers=headers)
                update = await asyncio.wait_for(anext(stream), 5)
                assert update["gpu-0"] == (2, "XID 79")
                await stream.aclose()
                unprepared = await kubelet.unprepare([ClaimName("uid-e2e", "default", "c")])
                assert unprepared.claims["uid-e2e"].error == ""
    finally:
        await nc.drain()
    assert not settings.dra_socket.exists()
    assert not settings.registration_socket.exists()


async def test_health_an_event_missed_comes_back_from_the_next_inventory(
    short_root: Path, nats_url: str
) -> None:
    node = f"node-{uuid.uuid4().hex[:8]}"
    bucket = f"claims-{uuid.uuid4().hex[:10]}"
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    await ensure_stream(js, next(s for s in STREAMS if s.name == INVENTORY_STREAM))
    await js.create_key_value(bucket=bucket)

    async def store(generation: int, *conditions: pb.HealthCondition) -> None:
        inventory = pb.NodeInventory(
            node=node,
            generation=generation,
            devices=[
                pb.Device(name="gpu-0", uuid=GPU0, type=pb.Device.TYPE_GPU, health=conditions)
            ],
        )
        data, headers = healthfeed.NODE_INVENTORY.encode(inventory)
        await js.publish(subjects.inventory(node), data, headers=headers)

    await store(1, pb.HealthCondition(kind=pb.HealthCondition.KIND_XID, code=79))
    settings = dataclasses.replace(
        settings_for(short_root, nats_url, bucket), node_name=node, health_refresh=0.2
    )
    try:
        async with serving(settings), FakeKubelet(settings.registry_dir, DRIVER) as kubelet:
            await kubelet.register()
            stream = kubelet.watch_health()
            assert (await asyncio.wait_for(anext(stream), 10))["gpu-0"] == (2, "XID 79")
            # The XID cleared while the plugin's NATS connection was away: the event that said
            # so is lost, but the node-agent stored its next inventory.
            await store(2)

            async def healthy() -> None:
                while (await anext(stream))["gpu-0"] != (1, ""):
                    pass

            await asyncio.wait_for(healthy(), 10)
            await stream.aclose()
    finally:
        await nc.drain()


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        pytest.param(
            {"device_source": "gpus"}, SettingsError, "device source must be", id="bad-source"
        ),
        pytest.param(
            {"device_source": "simulator:nope"},
            DeviceError,
            "cannot discover devices",
            id="bad-profile",
        ),
        pytest.param(
            {"claim_source": "kubernetes", "kubeconfig": "/nonexistent/kubeconfig"},
            SettingsError,
            "cannot load Kubernetes configuration",
            id="kubeconfig",
        ),
        pytest.param(
            {"claims_bucket": "no-such-bucket"},
            ClaimSourceUnavailableError,
            "cannot open KV bucket",
            id="bucket",
        ),
        pytest.param(
            {"nats_tls_ca": "/nonexistent/ca.pem"}, SettingsError, "NATS TLS files", id="tls"
        ),
        pytest.param(
            {"nats_url": "nats://127.0.0.1:1", "nats_connect_deadline": 0.2},
            ClaimSourceUnavailableError,
            "no NATS server reachable",
            id="nats-down",
        ),
    ],
)
async def test_serve_refuses_to_start(
    short_root: Path, nats_url: str, change: dict[str, object], error: type[Exception], message: str
) -> None:
    settings = dataclasses.replace(settings_for(short_root, nats_url, "unused"), **change)  # type: ignore[arg-type]
    with pytest.raises(error, match=message):
        await serve(settings, asyncio.Event())
    assert not settings.registration_socket.exists()


def test_main_rejects_bad_settings(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--health-timeout", "x"]) == 2
    assert "--health-timeout: invalid value 'x'" in capsys.readouterr().err


def test_main_exits_2_when_the_probe_port_is_taken(
    short_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A SettingsError raised while starting (not while loading) still means exit code 2.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        argv = ["--health-host", "127.0.0.1", "--health-port", str(taken.getsockname()[1])]
        argv += ["--registry-dir", str(short_root / "r"), "--plugins-dir", str(short_root / "p")]
        assert main(argv) == 2


async def test_a_taken_probe_port_is_a_settings_error(short_root: Path, nats_url: str) -> None:
    settings = settings_for(short_root, nats_url, "unused")
    first = await start_probes(settings, lambda: True)
    try:
        taken = dataclasses.replace(settings, health_port=first.port)
        with pytest.raises(SettingsError, match="cannot serve probes on 127.0.0.1:"):
            await start_probes(taken, lambda: True)
        with pytest.raises(SettingsError, match="cannot serve probes"):
            await serve(taken, asyncio.Event())
    finally:
        await first.stop()


async def test_process_stops_cleanly_on_sigterm(short_root: Path, nats_url: str) -> None:
    bucket = f"claims-{uuid.uuid4().hex[:10]}"
    nc = await nats.connect(nats_url)
    await nc.jetstream().create_key_value(bucket=bucket)
    await nc.drain()
    settings = settings_for(short_root, nats_url, bucket)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "PYTHONFAULTHANDLER": "1",
        "GPUDRA_KUBELET_PLUGIN_NODE_NAME": NODE,
        "GPUDRA_KUBELET_PLUGIN_CLAIMS_BUCKET": bucket,
        "GPUDRA_KUBELET_PLUGIN_NATS_URL": nats_url,
        "GPUDRA_KUBELET_PLUGIN_DEVICE_SOURCE": "simulator:a100-mig",
        "GPUDRA_KUBELET_PLUGIN_BOOT_ID_FILE": str(settings.boot_id_file),
        "GPUDRA_KUBELET_PLUGIN_CDI_DIR": str(settings.cdi_dir),
        "GPUDRA_KUBELET_PLUGIN_HEALTH_PORT": "0",
    }
    argv = [
        sys.executable,
        "-m",
        "gpudra_kubelet_plugin",
        "--registry-dir",
        str(settings.registry_dir),
        "--plugins-dir",
        str(settings.plugins_dir),
    ]
    process = await asyncio.create_subprocess_exec(*argv, env=env, stderr=asyncio.subprocess.PIPE)
    try:
        # As long as the probe wait below: a loaded CI machine can take many seconds to import.
        await wait_for_socket(settings.registration_socket, timeout=90)
        stderr = await terminate(process)
        code = process.returncode
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert code == 0, stderr
    assert "stopping" in stderr
    assert not settings.registration_socket.exists()
    assert not settings.dra_socket.exists()


async def test_serve_reads_claims_from_the_kubernetes_api(short_root: Path, nats_url: str) -> None:
    async with FakeKubeApi(validate_version=None) as api:
        claim = make_claim("c", "", [("gpu", "gpu-0")])
        del claim["metadata"]["uid"]  # the API server assigns it
        stored = await api.put(RESOURCE_CLAIMS, claim)
        uid = stored["metadata"]["uid"]
        settings = dataclasses.replace(
            settings_for(short_root, nats_url, "unused"),
            claim_source="kubernetes",
            kubeconfig=str(api.write_kubeconfig(short_root / "kubeconfig")),
        )
        async with serving(settings), FakeKubelet(settings.registry_dir, DRIVER) as kubelet:
            await kubelet.register()
            answer = (await kubelet.prepare([ClaimName(uid, "default", "c")])).claims[uid]
            assert answer.error == ""
            assert answer.devices[0].device_name == "gpu-0"


async def test_process_stops_while_waiting_for_nats(short_root: Path) -> None:
    settings = settings_for(short_root, "nats://127.0.0.1:1", "unused")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "PYTHONFAULTHANDLER": "1",
        "GPUDRA_KUBELET_PLUGIN_NATS_CONNECT_DEADLINE": "60",
        "GPUDRA_KUBELET_PLUGIN_HEALTH_HOST": "127.0.0.1",
        "GPUDRA_KUBELET_PLUGIN_HEALTH_PORT": str(settings.health_port),
    }
    argv = ["--nats-url", "nats://127.0.0.1:1", "--device-source", settings.device_source]
    argv += [
        "--registry-dir",
        str(settings.registry_dir),
        "--plugins-dir",
        str(settings.plugins_dir),
    ]
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpudra_kubelet_plugin",
        *argv,
        env=env,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        # The probe server answers first; NATS never will. Wait for the probe (not a fixed time:
        # a loaded CI machine can take many seconds to import), so that SIGTERM reaches a process
        # whose signal handlers are installed.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 90
        answered = False
        while not answered and loop.time() < deadline and process.returncode is None:
            with contextlib.suppress(OSError):
                answered = await http_get(settings.health_port, "/healthz") == "HTTP/1.1 200 OK"
            if not answered:
                await asyncio.sleep(0.05)
        assert answered, "the probe server never answered"
        stderr = await terminate(process)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, stderr
    assert "stopping before the plugin was ready" in stderr
