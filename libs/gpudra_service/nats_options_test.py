from __future__ import annotations

import asyncio
import contextlib
import shutil
import ssl
import subprocess
from pathlib import Path

import nats
import pytest

from gpudra_service.errors import SettingsError
from gpudra_service.nats_options import nats_options
from gpudra_service.settings import CommonSettings
from gpudra_testing import NatsServer


def test_plain_connection_has_no_options() -> None:
    assert nats_options(CommonSettings()) == {}


def test_credentials_file_is_passed_on() -> None:
    assert nats_options(CommonSettings(nats_creds="/etc/nats/x.creds")) == {
        "user_credentials": "/etc/nats/x.creds"
    }


def test_missing_tls_files_are_a_settings_error(tmp_path: Path) -> None:
    settings = CommonSettings(
        nats_tls_cert=str(tmp_path / "no-cert.pem"), nats_tls_key=str(tmp_path / "no-key.pem")
    )
    with pytest.raises(SettingsError, match="NATS TLS files"):
        nats_options(settings)


def test_ca_only_gives_a_verifying_context() -> None:
    options = nats_options(CommonSettings(nats_tls_ca=ssl.get_default_verify_paths().cafile or ""))
    assert isinstance(options["tls"], ssl.SSLContext)
    assert options["tls"].verify_mode == ssl.CERT_REQUIRED


# On PATH, else where distributions put it (Pants runs tests without PATH).
OPENSSL = shutil.which("openssl") or next(
    (p for p in ("/usr/bin/openssl", "/usr/local/bin/openssl") if Path(p).is_file()), None
)


def _openssl(*args: str, cwd: Path) -> None:
    assert OPENSSL is not None
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _pki(directory: Path) -> Path:
    """A CA (`ca.crt`) and a server certificate it signed for 127.0.0.1 (`server.crt`/`.key`)."""
    directory.mkdir()
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ca.key", cwd=directory)
    _openssl(
        "req", "-x509", "-new", "-key", "ca.key", "-out", "ca.crt", "-days", "1",
        "-subj", f"/CN={directory.name}", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip
    (directory / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    _openssl(
        "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "server.key", cwd=directory
    )
    _openssl("req", "-new", "-key", "server.key", "-out", "server.csr", "-subj", "/CN=nats", cwd=directory)  # fmt: skip
    _openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.crt", "-days", "1", "-extfile", "ext.cnf",
        cwd=directory,
    )  # fmt: skip
    return directory


def _serving(pki: Path) -> tuple[str, ...]:
    return ("--tls", "--tlscert", str(pki / "server.crt"), "--tlskey", str(pki / "server.key"))


@pytest.mark.skipif(OPENSSL is None, reason="needs openssl for test certificates")
async def test_renewed_files_that_arrive_after_the_disconnection_are_read(tmp_path: Path) -> None:
    # The server restarts with a new CA's certificate; the kubelet updates the service's mounted
    # Secret a while later (its sync period): the reconnection attempts in between fail, and the
    # files read at the disconnection are stale. The next attempts must read them again.
    before, after = _pki(tmp_path / "ca-before"), _pki(tmp_path / "ca-after")
    mounted = tmp_path / "ca.crt"
    shutil.copyfile(before / "ca.crt", mounted)
    options = nats_options(CommonSettings(nats_tls_ca=str(mounted)))
    chained = options.pop("error_cb", None)
    handshakes: list[ssl.SSLError] = []

    async def on_error(exc: Exception) -> None:
        if isinstance(exc, ssl.SSLError):
            handshakes.append(exc)
        if chained is not None:
            await chained(exc)

    server = NatsServer(extra_args=_serving(before)).start()
    try:
        nc = await nats.connect(
            f"tls://127.0.0.1:{server.port}",
            name="t",
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.1,
            error_cb=on_error,
            **options,
        )
        try:
            await asyncio.to_thread(server.kill)
            server.extra_args = _serving(after)
            await asyncio.to_thread(server.restart)
            for _ in range(200):
                if handshakes:
                    break
                await asyncio.sleep(0.05)
            assert handshakes, "the old CA does not verify the renewed server"
            shutil.copyfile(after / "ca.crt", mounted)  # the Secret arrives
            for _ in range(200):
                if nc.is_connected:
                    break
                await asyncio.sleep(0.05)
            assert nc.is_connected, "reconnected once the renewed CA was mounted"
        finally:
            # A client still failing its handshakes may not finish closing (nats-py): bounded.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(nc.close(), timeout=5)
    finally:
        server.stop()
