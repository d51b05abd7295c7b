from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpudra_cli.standalone import state
from gpudra_cli.standalone.errors import NotRunningError


def sample(pid: int) -> state.State:
    return state.State(
        nats_url="nats://127.0.0.1:4222",
        run_dir="/tmp/x",
        pid=pid,
        fleet="small",
        nodes={"n": "l4-pcie"},
        registry_dirs={"n": "/tmp/x/nodes/n/registry"},
    )


def test_save_load_remove(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "state.json"
    state.save(sample(os.getpid()), path)
    loaded = state.load(path)
    assert loaded == sample(os.getpid())
    assert loaded.registry_dir("n") == Path("/tmp/x/nodes/n/registry")
    state.remove(path, pid=os.getpid() + 1)  # not ours: kept
    assert path.exists()
    state.remove(path, pid=os.getpid())
    assert not path.exists()


def test_a_dead_writer_is_not_running(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True)  # fmt: skip
    path = tmp_path / "state.json"
    state.save(sample(int(done.stdout)), path)
    with pytest.raises(NotRunningError, match=r"\(pid \d+\) is gone"):
        state.load(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(None, "does not exist", id="missing"),
        pytest.param("{not json", "cannot read the state file", id="garbage"),
        pytest.param('{"pid": 1}', "is not a gpudra state file", id="wrong-shape"),
    ],
)
def test_unusable_state_files(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "state.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(NotRunningError, match=message):
        state.load(path)


def test_default_path_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(state.ENV, "/tmp/elsewhere.json")
    assert state.default_path() == Path("/tmp/elsewhere.json")
