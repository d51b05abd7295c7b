from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest

from gpudra_standalone.errors import StandaloneError
from gpudra_standalone.supervisor import ServiceSpec, Supervisor


def _script(tmp_path: Path, name: str, body: str) -> str:
    (tmp_path / f"{name}.py").write_text(body, encoding="utf-8")
    return name


def test_start_waits_for_ready_and_stop_terminates(tmp_path: Path) -> None:
    mod = _script(
        tmp_path,
        "svc_ok",
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (print('bye'), sys.exit(0)))\n"
        "print('starting'); print('svc ready', flush=True)\n"
        "while True: time.sleep(0.05)\n",
    )
    with Supervisor(tmp_path / "logs") as sup:
        child = sup.start(ServiceSpec("svc/ok", mod, env={"PYTHONPATH": str(tmp_path)}))
        assert child.proc.poll() is None
        assert sup.exited() == []
        assert sup.stop(child) == 0
    assert "svc ready" in (tmp_path / "logs" / "svc_ok.log").read_text()
    assert "bye" in (tmp_path / "logs" / "svc_ok.log").read_text()


def test_child_that_dies_before_ready_is_a_clear_error(tmp_path: Path) -> None:
    mod = _script(
        tmp_path, "svc_bad", "import sys\nprint('config error: no NATS_URL')\nsys.exit(3)\n"
    )
    with Supervisor(tmp_path / "logs") as sup, pytest.raises(StandaloneError) as info:
        sup.start(ServiceSpec("svc/bad", mod, env={"PYTHONPATH": str(tmp_path)}))
    assert "svc/bad exited" in str(info.value)
    assert "config error: no NATS_URL" in str(info.value)


def test_child_ignoring_sigterm_is_killed(tmp_path: Path) -> None:
    mod = _script(
        tmp_path,
        "svc_stubborn",
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('up', flush=True)\nwhile True: time.sleep(0.05)\n",
    )
    sup = Supervisor(tmp_path / "logs", python=sys.executable)
    child = sup.start(
        ServiceSpec("s", mod, env={"PYTHONPATH": str(tmp_path)}, ready=re.compile("up"))
    )
    assert sup.stop(child, grace=0.3) == -9
    assert sup.exited() == [("s", -9)]


def test_stop_together_signals_all_before_waiting(tmp_path: Path) -> None:
    mod = _script(
        tmp_path,
        "svc_slow",
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (time.sleep(1.0), sys.exit(0)))\n"
        "print('svc ready', flush=True)\nwhile True: time.sleep(0.05)\n",
    )
    with Supervisor(tmp_path / "logs") as sup:
        children = [
            sup.launch(ServiceSpec(f"s{i}", mod, env={"PYTHONPATH": str(tmp_path)}))
            for i in range(3)
        ]
        for child in children:
            sup.wait_ready(child, timeout=30)
        t0 = time.monotonic()
        codes = sup.stop_together(children, grace=5)
        took = time.monotonic() - t0
    assert codes == {"s0": 0, "s1": 0, "s2": 0}
    assert took < 2.5, f"stopping three children one after another took {took:.2f}s"
