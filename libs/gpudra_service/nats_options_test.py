from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from gpudra_service.errors import SettingsError
from gpudra_service.nats_options import nats_options
from gpudra_service.settings import CommonSettings


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
