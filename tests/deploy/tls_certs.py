"""Throwaway X.509 material for tests, made with the `openssl` command line tool.

`make_pki(dir, clients)` writes a CA, a server certificate for localhost/127.0.0.1 and one client
certificate per common name, all signed by that CA, plus a client certificate from a second,
untrusted CA (`rogue`) and one from the right CA for a name no server config knows (`stranger`). Everything is EC P-256 and valid for one day. Layout mirrors the
Kubernetes TLS secrets the deployment mounts: `<name>/tls.crt`, `<name>/tls.key`, `<name>/ca.crt`.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

ROGUE = "rogue"
STRANGER = "stranger"


class PkiError(Exception):
    """openssl is missing or failed."""


# Where distributions install openssl, for sandboxes (Pants) that run tests without PATH.
_WELL_KNOWN = (Path("/usr/bin/openssl"), Path("/usr/local/bin/openssl"), Path("/bin/openssl"))


def openssl_binary() -> Path | None:
    """The openssl executable: on PATH, else in a well-known place; None when absent."""
    found = shutil.which("openssl")
    if found:
        return Path(found)
    return next((p for p in _WELL_KNOWN if p.is_file()), None)


def openssl_available() -> bool:
    return openssl_binary() is not None


def _openssl(*args: str, cwd: Path) -> None:
    binary = openssl_binary()
    if binary is None:
        raise PkiError("openssl is not installed")
    try:
        proc = subprocess.run(
            [str(binary), *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PkiError(f"cannot run openssl: {exc}") from exc
    if proc.returncode != 0:
        raise PkiError(f"openssl {' '.join(args)}: {proc.stderr.strip()}")


def _ca(directory: Path, name: str) -> tuple[Path, Path]:
    key, crt = directory / f"{name}.key", directory / f"{name}.crt"
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key), cwd=directory)
    _openssl(
        "req", "-x509", "-new", "-key", str(key), "-out", str(crt), "-days", "1",
        "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip
    return key, crt


def _leaf(
    directory: Path, name: str, cn: str, ca: tuple[Path, Path], extensions: list[str]
) -> Path:
    out = directory / name
    out.mkdir()
    key, csr, crt = out / "tls.key", out / "tls.csr", out / "tls.crt"
    ext = out / "ext.cnf"
    ext.write_text("\n".join(extensions) + "\n", encoding="utf-8")
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key), cwd=out)
    _openssl("req", "-new", "-key", str(key), "-out", str(csr), "-subj", f"/CN={cn}", cwd=out)
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca[1]), "-CAkey", str(ca[0]),
        "-CAcreateserial", "-out", str(crt), "-days", "1", "-extfile", str(ext),
        cwd=out,
    )  # fmt: skip
    shutil.copyfile(ca[1], out / "ca.crt")
    return out


def make_pki(directory: Path, clients: Iterable[str]) -> dict[str, Path]:
    """Write the PKI under `directory`; returns secret-like folders by name (`server`, each CN,
    `stranger` and `rogue`)."""
    ca = _ca(directory, "ca")
    folders = {
        "server": _leaf(
            directory,
            "server",
            "localhost",
            ca,
            [
                "subjectAltName=DNS:localhost,IP:127.0.0.1",
                "extendedKeyUsage=serverAuth,clientAuth",
            ],
        )
    }
    for cn in clients:
        folders[cn] = _leaf(directory, cn, cn, ca, ["extendedKeyUsage=clientAuth"])
    folders[STRANGER] = _leaf(
        directory, STRANGER, "gpudra-stranger", ca, ["extendedKeyUsage=clientAuth"]
    )
    rogue_ca = _ca(directory, "rogue-ca")
    folders[ROGUE] = _leaf(
        directory, ROGUE, "gpudra-allocator", rogue_ca, ["extendedKeyUsage=clientAuth"]
    )
    # The rogue client trusts the real CA (so it accepts the server): only its own certificate,
    # a known user name from the wrong CA, is at fault.
    shutil.copyfile(ca[1], folders[ROGUE] / "ca.crt")
    return folders
