"""What starting the CLI imports: commands that do not talk to the cluster must not pay for the
Kubernetes client (kubernetes-asyncio costs well over half a second to import), nor do the
standalone paths of `get`, `apply` and `describe` (they reach the KV backend through `gpudra_kube`,
whose package no longer imports the API backend). Each case runs in a fresh interpreter, since
this one has imported everything already."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpudra_bus import connect, ensure_buckets
from gpudra_cli.main import main
from gpudra_cli.standalone import state
from gpudra_standalone.nats_server import NatsServer

_PROBE = """
import json, sys
argv = json.loads(sys.argv[1])
exec(sys.argv[2])
print(json.dumps(sorted(m for m in ("kubernetes_asyncio", "nats") if m in sys.modules)))
"""
_RUN = """
from gpudra_cli.main import main
try:
    code = main(argv)
except SystemExit as exc:
    code = exc.code
print(f"exit code {code}")
"""


def run_probe(code: str, argv: list[str]) -> tuple[list[str], str]:
    """The heavy modules a fresh interpreter holds after running `code`, and its output before."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(argv), code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    *printed, last = out.stdout.strip().splitlines()
    found: list[str] = json.loads(last)
    return found, "\n".join(printed)


def heavy_imports(code: str, argv: list[str]) -> list[str]:
    return run_probe(code, argv)[0]


NEITHER = ["kubernetes_asyncio", "nats"]


@pytest.mark.parametrize(
    ("code", "argv", "absent"),
    [
        pytest.param("import gpudra_cli", [], NEITHER, id="import-gpudra_cli"),
        pytest.param(_RUN, ["version"], NEITHER, id="version"),
        pytest.param(_RUN, ["profiles"], NEITHER, id="profiles"),
        pytest.param(_RUN, ["slices", "--help"], NEITHER, id="slices"),
        pytest.param(_RUN, ["drift", "--help"], ["kubernetes_asyncio"], id="drift-reads-files"),
        pytest.param(_RUN, ["get", "claims", "--help"], ["kubernetes_asyncio"], id="get-help"),
        pytest.param(_RUN, ["apply", "--help"], ["kubernetes_asyncio"], id="apply-help"),
        pytest.param(_RUN, ["describe", "--help"], ["kubernetes_asyncio"], id="describe-help"),
    ],
)
def test_commands_without_the_api_do_not_import_it(
    code: str, argv: list[str], absent: list[str]
) -> None:
    assert set(heavy_imports(code, argv)) & set(absent) == set()


def test_the_probe_sees_the_client_when_it_is_imported() -> None:
    assert "kubernetes_asyncio" in heavy_imports("import gpudra_kube.api_backend", [])


_CLAIM = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: {name}
spec:
  devices:
    requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
"""


async def _layout(url: str) -> None:
    nc = await connect(url, name="startup-test", deadline=10)
    try:
        await ensure_buckets(nc.jetstream())
    finally:
        await nc.drain()


@pytest.fixture
def running(fresh_nats_server: NatsServer, tmp_path: Path) -> Path:
    """A state file naming a real NATS (as `gpudra up` writes it; this process stands in for
    `up`), holding one claim, `startup-probe`, applied through the CLI itself."""
    asyncio.run(_layout(fresh_nats_server.url))
    path = tmp_path / "standalone.json"
    state.save(
        state.State(
            nats_url=fresh_nats_server.url, run_dir=str(tmp_path), pid=os.getpid(), fleet="none"
        ),
        path,
    )
    for name in ("startup-probe", "startup-other"):
        (tmp_path / f"{name}.yaml").write_text(_CLAIM.format(name=name), encoding="utf-8")
    assert (
        main(["apply", "-f", str(tmp_path / "startup-probe.yaml"), "--state-file", str(path)]) == 0
    )
    return path


@pytest.mark.parametrize(
    ("argv", "printed"),
    [
        pytest.param(
            ["apply", "-f", "{dir}/startup-other.yaml"],
            "resourceclaim/startup-other created",
            id="apply",
        ),
        pytest.param(["get", "claims"], "startup-probe", id="get-claims"),
        pytest.param(["get", "claims", "-o", "json"], '"name": "startup-probe"', id="get-json"),
        pytest.param(["describe", "claim", "startup-probe"], "startup-probe", id="describe"),
    ],
)
def test_standalone_commands_do_not_import_the_api_client(
    running: Path, argv: list[str], printed: str
) -> None:
    argv = [a.format(dir=running.parent) for a in argv] + ["--state-file", str(running)]
    found, output = run_probe(_RUN, argv)
    assert output.endswith("exit code 0"), output
    assert printed in output
    assert "kubernetes_asyncio" not in found
    assert "nats" in found  # it did reach the system
