from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpudra_cli.standalone import state
from gpudra_cli.standalone.errors import NotRunningError, StartError


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


# Holds the state file's lock, as a starting or running `gpudra up` does, until killed.
_HOLDER = """\
import sys, time
from pathlib import Path
from gpudra_cli.standalone import state
with state.owned(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(120)
"""


def _hold(path: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path)], env=env, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_only_one_system_owns_a_state_file_and_a_dead_owner_frees_it(tmp_path: Path) -> None:
    # Before any state file is written (`up` writes it once every service is up), a second `up`
    # must already see the first: the lock is taken before anything starts.
    path = tmp_path / "state.json"
    holder = _hold(path)
    try:
        pattern = rf"already running or starting \(pid {holder.pid}\)"
        with pytest.raises(StartError, match=pattern), state.owned(path):
            pass
    finally:
        holder.kill()
        holder.wait()
    with state.owned(path):  # a killed owner leaves no stale lock behind
        pass


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["up", "--fleet", "l4-pcie=1"], id="up"),
        # a bad fleet: without the lock this would fail for that reason instead
        pytest.param(["up", "--fleet", "nope=1"], id="up-checks-the-lock-first"),
        pytest.param(["demo", "--keep-running", "--fleet", "nope"], id="demo-keep-running"),
    ],
)
def test_a_second_system_on_one_state_file_is_refused_while_the_first_is_starting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    from gpudra_cli.main import main

    path = tmp_path / "state.json"
    holder = _hold(path)
    try:
        code = main([*argv, "--state-file", str(path)])
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err
    assert code == 1
    assert "already running or starting" in err
    assert err.count("\n") == 1, err


def test_a_stale_state_file_whose_pid_was_reused_does_not_block_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A crashed `up` (SIGKILL, OOM, power loss) leaves its state file; after a restart its pid
    # may belong to another process. Nobody holds the lock, so no gpudra owns the file: `up` must
    # go on (here to the bad fleet it was given) instead of "already running" for ever.
    from gpudra_cli.main import main

    path = tmp_path / "state.json"
    state.save(sample(os.getpid()), path)  # a live pid, but not a gpudra holding the file
    code = main(["up", "--fleet", "nope=1", "--state-file", str(path)])
    err = capsys.readouterr().err
    assert code == 1
    assert "unknown simulator profile 'nope'" in err, err


def test_a_state_file_that_cannot_be_created_is_a_clear_error(tmp_path: Path) -> None:
    a_file = tmp_path / "taken"
    a_file.write_text("", encoding="utf-8")
    with (
        pytest.raises(StartError, match="cannot create the state file's folder"),
        state.owned(a_file / "state.json"),
    ):
        pass
