"""What starting the CLI imports: commands that do not talk to the cluster must not pay for the
Kubernetes client (kubernetes-asyncio costs well over half a second to import). Each case runs in
a fresh interpreter, since this one has imported everything already."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

_PROBE = """
import json, sys
argv = json.loads(sys.argv[1])
exec(sys.argv[2])
print(json.dumps(sorted(m for m in ("kubernetes_asyncio", "nats") if m in sys.modules)))
"""
_RUN = """
from gpudra_cli.main import main
try:
    main(argv)
except SystemExit:
    pass
"""


def heavy_imports(code: str, argv: list[str]) -> list[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(argv), code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    found: list[str] = json.loads(out.stdout.strip().splitlines()[-1])
    return found


NEITHER = ["kubernetes_asyncio", "nats"]


@pytest.mark.parametrize(
    ("code", "argv", "absent"),
    [
        pytest.param("import gpudra_cli", [], NEITHER, id="import-gpudra_cli"),
        pytest.param(_RUN, ["version"], NEITHER, id="version"),
        pytest.param(_RUN, ["profiles"], NEITHER, id="profiles"),
        pytest.param(_RUN, ["slices", "--help"], NEITHER, id="slices"),
        pytest.param(_RUN, ["drift", "--help"], ["kubernetes_asyncio"], id="drift-reads-files"),
    ],
)
def test_commands_without_the_api_do_not_import_it(
    code: str, argv: list[str], absent: list[str]
) -> None:
    assert set(heavy_imports(code, argv)) & set(absent) == set()


def test_the_probe_sees_the_client_when_it_is_imported() -> None:
    assert "kubernetes_asyncio" in heavy_imports("import gpudra_kube.api_backend", [])
