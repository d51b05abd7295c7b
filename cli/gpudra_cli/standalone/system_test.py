from __future__ import annotations

import asyncio
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from gpudra_cli.standalone.fleet import parse_fleet
from gpudra_cli.standalone.system import System
from gpudra_standalone import ServiceSpec, Supervisor


@pytest.mark.parametrize(
    ("code", "started", "kept"),
    [
        pytest.param(0, True, False, id="clean-stop-removes-the-run-dir"),
        pytest.param(3, True, True, id="a-failure-keeps-the-logs"),
        pytest.param(3, False, False, id="an-interrupted-start-leaves-nothing"),
    ],
)
def test_the_temp_run_dir_is_kept_when_a_service_failed(
    tmp_path: Path, code: int, started: bool, kept: bool
) -> None:
    # The error that reports a dead service names its log under the run directory: stop()
    # must not delete that log right after (with a clean stop, nothing is left behind).
    (tmp_path / "svc.py").write_text(
        f"import sys\nprint('svc ready', flush=True)\nsys.exit({code})\n", encoding="utf-8"
    )
    system = System(parse_fleet("l4-pcie=1"))
    system.supervisor = Supervisor(system.log_dir, python=sys.executable)
    child = system.supervisor.launch(
        ServiceSpec("svc", "svc", env={"PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])})
    )
    deadline = time.monotonic() + 30
    while child.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    child.done.wait(10)
    if started:
        system.timings["services"] = 1.0  # as start_services records a complete start
    log = system.log_dir / "svc.log"
    assert "svc ready" in log.read_text(encoding="utf-8")
    system.stop()
    try:
        assert system.exit_codes == {"svc": code}
        assert log.exists() == kept
        assert system.run_dir.exists() == kept
    finally:
        shutil.rmtree(system.run_dir, ignore_errors=True)


def test_a_service_that_stops_on_its_own_keeps_the_logs_even_with_code_0(tmp_path: Path) -> None:
    # `hold` reports "service X exited with code 0; see <log>": that log must still be there.
    import asyncio

    from gpudra_cli.standalone import session
    from gpudra_cli.standalone.errors import StartError

    (tmp_path / "quits.py").write_text("print('svc ready', flush=True)\n", encoding="utf-8")
    system = System(parse_fleet("l4-pcie=1"))
    system.supervisor = Supervisor(system.log_dir, python=sys.executable)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    system.supervisor.launch(ServiceSpec("quits", "quits", env=env))
    try:
        with pytest.raises(StartError, match="service quits exited with code 0"):
            asyncio.run(session.hold(system, tmp_path / "state.json"))
        system.stop()
        assert (system.log_dir / "quits.log").exists()
    finally:
        shutil.rmtree(system.run_dir, ignore_errors=True)


def test_a_store_dir_that_cannot_be_a_folder_is_a_clear_error(tmp_path: Path) -> None:
    from gpudra_cli.standalone.errors import StartError

    a_file = tmp_path / "taken"
    a_file.write_text("", encoding="utf-8")
    for store in (a_file, a_file / "below"):
        with pytest.raises(StartError, match=f"cannot use {store} as the store directory"):
            System(parse_fleet("l4-pcie=1"), store_dir=store)


async def test_waiting_for_slices_stops_at_once_when_a_service_died(
    nats_url: str, tmp_path: Path
) -> None:
    # `up` and the demo wait (up to a minute) for every node's slices. A node-agent that died
    # after its readiness line will never publish them: say which service died, now, and keep
    # its log, instead of "no ResourceSlices ... after 60s" a minute later.
    from gpudra_bus import ensure_buckets, ensure_streams
    from gpudra_cli.standalone.client import Client
    from gpudra_cli.standalone.errors import StartError
    from gpudra_cli.standalone.showcase import wait_for_pools

    (tmp_path / "dies.py").write_text(
        "print('svc ready', flush=True)\nraise SystemExit(4)\n", encoding="utf-8"
    )
    system = System(parse_fleet("l4-pcie=1"))
    system.supervisor = Supervisor(system.log_dir, python=sys.executable)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    child = system.supervisor.launch(ServiceSpec("node-agent-x", "dies", env=env))
    client = await Client.open(nats_url)
    try:
        await ensure_streams(client.nc.jetstream())
        await ensure_buckets(client.nc.jetstream())
        while child.proc.poll() is None:
            await asyncio.sleep(0.05)
        # (waiting for the timeout would raise "no ResourceSlices for no-such-node after 30s")
        with pytest.raises(StartError, match="service node-agent-x exited with code 4"):
            await wait_for_pools(client, ["no-such-node"], timeout=30, system=system)
        assert system.failed
    finally:
        await client.close()
        system.stop()
        shutil.rmtree(system.run_dir, ignore_errors=True)
