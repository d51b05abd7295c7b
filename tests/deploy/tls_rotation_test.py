"""Certificates renewed in place, on both ends of a NATS connection, with a real nats-server.

cert-manager renews gpudra's certificates in the mounted Secrets while everything keeps running.
- The server: the StatefulSet's `tls-reloader` sidecar (`base/nats/config/reload-tls.sh`) tells
  nats-server to reload when its files change; without that it keeps presenting what it read at
  start. Here the script runs against a local server whose files are replaced by a new CA's.
- The services: `gpudra_service.nats_options` re-reads the client files into the TLS context when
  the connection drops, so the reconnection presents the renewed certificate and trusts the
  renewed server. Here the server restarts with a new CA's files while the client's are replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client

from deploy import manifests, tls_certs
from gpudra_bus import connect
from gpudra_service.nats_options import TlsFiles, nats_options
from gpudra_service.settings import CommonSettings
from gpudra_standalone.nats_server import find_nats_server_binary
from gpudra_testing.statusz import free_port

SCRIPT = manifests.KUSTOMIZE / "base" / "nats" / "config" / "reload-tls.sh"
CLIENT = "gpudra-allocator"


@pytest.fixture(scope="module")
def pkis(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Path], dict[str, Path]]:
    """Two unrelated PKIs: the one in use, and the one it is renewed to."""
    if not tls_certs.openssl_available():
        pytest.skip("openssl is not on PATH: cannot make test certificates")
    return (
        tls_certs.make_pki(tmp_path_factory.mktemp("before"), [CLIENT]),
        tls_certs.make_pki(tmp_path_factory.mktemp("after"), [CLIENT]),
    )


def install(source: Path, target: Path) -> None:
    """Replace the files of a mounted kubernetes.io/tls Secret (`tls.crt`, `tls.key`, `ca.crt`)."""
    target.mkdir(exist_ok=True)
    for name in ("tls.crt", "tls.key", "ca.crt"):
        shutil.copyfile(source / name, target / name)


class TlsServer:
    """nats-server on a fixed port, verifying client certificates against `tls/ca.crt`."""

    def __init__(self, root: Path) -> None:
        self.port = free_port()
        self.tls = root / "tls"
        self.pid_file = root / "nats.pid"
        self.conf = root / "nats.conf"
        self.conf.write_text(
            f"listen: 127.0.0.1:{self.port}\n"
            f'pid_file: "{self.pid_file}"\n'
            "tls {\n"
            f"  cert_file: {self.tls}/tls.crt\n"
            f"  key_file: {self.tls}/tls.key\n"
            f"  ca_file: {self.tls}/ca.crt\n"
            "  verify: true\n"
            "  timeout: 3\n"
            "}\n",
            encoding="utf-8",
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [str(find_nats_server_binary()), "-c", str(self.conf)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(200):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError("nats-server did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[TlsServer]:
    srv = TlsServer(tmp_path)
    yield srv
    srv.stop()


async def connects(port: int, folder: Path) -> bool:
    """Whether a client with `folder`'s certificate and CA gets a connection now."""
    context = ssl.create_default_context(cafile=str(folder / "ca.crt"))
    context.load_cert_chain(str(folder / "tls.crt"), str(folder / "tls.key"))

    async def quiet(exc: Exception) -> None:
        """Handshake failures are the expected answer here."""

    try:
        nc = await nats.connect(
            f"tls://127.0.0.1:{port}",
            tls=context,
            allow_reconnect=False,
            max_reconnect_attempts=0,
            connect_timeout=2,
            error_cb=quiet,
        )
    except Exception:  # - any refusal: handshake, verification, timeout
        return False
    await nc.close()
    return True


def connected(nc: Client) -> bool:
    """The client's state now (a call, so a type checker does not keep an earlier answer)."""
    return bool(nc.is_connected)


def run_script(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """The sidecar's script, as its container runs it, logging to `log`."""
    with log.open("wb") as out:
        return subprocess.Popen(["/bin/sh", str(SCRIPT)], env=env, stdout=out, stderr=out)


async def test_the_sidecar_reloads_nats_server_when_its_certificate_is_renewed(
    server: TlsServer, pkis: tuple[dict[str, Path], dict[str, Path]], tmp_path: Path
) -> None:
    before, after = pkis
    install(before["server"], server.tls)
    server.start()
    env = {
        **os.environ,
        "TLS_DIR": str(server.tls),
        "PID_FILE": str(server.pid_file),
        "INTERVAL": "0.2",
        "PATH": f"{find_nats_server_binary().parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    log = tmp_path / "reloader.log"
    reloader = await asyncio.to_thread(run_script, env, log)
    try:
        assert await connects(server.port, before[CLIENT])
        assert not await connects(server.port, after[CLIENT]), "the renewed CA is not in use yet"
        install(after["server"], server.tls)  # cert-manager renews the Secret
        for _ in range(100):
            if await connects(server.port, after[CLIENT]):
                break
            await asyncio.sleep(0.1)
        assert await connects(server.port, after[CLIENT]), log.read_text()
        assert server.proc is not None
        assert server.proc.poll() is None, "reloaded, not restarted"
        assert "nats-server reloaded" in log.read_text()
    finally:
        reloader.terminate()
        reloader.wait(timeout=10)


async def test_a_service_reconnects_with_its_renewed_certificate(
    server: TlsServer, pkis: tuple[dict[str, Path], dict[str, Path]], tmp_path: Path
) -> None:
    before, after = pkis
    install(before["server"], server.tls)
    mounted = tmp_path / "client"
    install(before[CLIENT], mounted)
    server.start()
    settings = CommonSettings(
        nats_tls_ca=str(mounted / "ca.crt"),
        nats_tls_cert=str(mounted / "tls.crt"),
        nats_tls_key=str(mounted / "tls.key"),
    )
    nc = await connect(
        f"tls://127.0.0.1:{server.port}",
        name="rotation-test",
        deadline=10,
        **nats_options(settings),
    )
    try:
        assert nc.is_connected
        # Both Secrets renewed to a new CA, then the server restarts (a rolling update): the
        # service's old certificate and old CA are worthless from then on.
        install(after[CLIENT], mounted)
        install(after["server"], server.tls)
        server.stop()
        for _ in range(50):
            if not connected(nc):
                break
            await asyncio.sleep(0.1)
        server.start()
        for _ in range(200):
            if connected(nc):
                break
            await asyncio.sleep(0.1)
        assert connected(nc), "reconnected with the renewed files"
    finally:
        # A client still failing its handshakes may not finish closing (nats-py): bounded.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(nc.close(), timeout=5)


def test_files_that_do_not_load_leave_the_context_as_it_was(
    pkis: tuple[dict[str, Path], dict[str, Path]], tmp_path: Path
) -> None:
    """A Secret caught half-written (or a wrong key) is not taken; the next change is."""
    before, after = pkis
    mounted = tmp_path / "client"
    install(before[CLIENT], mounted)
    files = TlsFiles(str(mounted / "ca.crt"), str(mounted / "tls.crt"), str(mounted / "tls.key"))
    assert not files.refresh(), "nothing changed"
    (mounted / "tls.crt").write_text("-----BEGIN CERTIFICATE-----\ntruncated", encoding="utf-8")
    assert not files.refresh()
    assert files.reloads == 0
    install(after[CLIENT], mounted)
    assert files.refresh()
    assert files.reloads == 1
    assert len(files.context.get_ca_certs()) == 2, "the renewed CA is trusted too"
    assert not files.refresh(), "read once"
