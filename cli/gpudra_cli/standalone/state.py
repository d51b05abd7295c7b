"""The state file of a running `gpudra up` (or `demo --keep-running`): how the other commands find
the system. Written atomically (temp file + rename) when the system is up, removed when it stops.

Location: `--state-file`, else `$GPUDRA_STATE_FILE`, else `~/.gpudra/standalone.json`. `load`
fails with `NotRunningError` when the file is missing, unreadable, or names a process that is gone
(a crashed `up` leaves a stale file; the message says so).

`owned` is held by the system that uses a state file for its whole life, from before it starts
anything: a second `gpudra up` is refused while the first is still starting (before it has written
the state file) as well as once it runs. It is an flock on `<state file>.lock`, so the kernel
releases it when its holder dies: a crash leaves no stale lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpudra_cli.standalone.errors import NotRunningError, StartError, make_dir

ENV = "GPUDRA_STATE_FILE"


def default_path() -> Path:
    return Path(os.environ.get(ENV) or Path.home() / ".gpudra" / "standalone.json")


@dataclass(frozen=True)
class State:
    nats_url: str
    run_dir: str
    pid: int
    fleet: str
    nodes: dict[str, str] = field(default_factory=dict)  # node -> simulator profile
    registry_dirs: dict[str, str] = field(default_factory=dict)  # node -> kubelet registry dir
    otlp_endpoint: str = ""

    def registry_dir(self, node: str) -> Path:
        return Path(self.registry_dirs.get(node, ""))


@contextlib.contextmanager
def owned(path: Path) -> Iterator[None]:
    """Own the state file `path` while the context runs; a `StartError` if another process owns
    it (see the module docstring)."""
    make_dir(path.parent, f"cannot create the state file's folder {path.parent}")
    lock = path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StartError(f"cannot open the lock file {lock}: {exc}") from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            raise StartError(
                f"gpudra is already running or starting (pid {holder}) with the state file "
                f"{path}; stop it first or use another --state-file"
            ) from None
        # The lock file is never removed: another process may have it open, waiting to lock it.
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)  # releases the lock


def save(state: State, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def remove(path: Path, pid: int) -> None:
    """Remove the state file if it is still this process's."""
    with contextlib.suppress(OSError, NotRunningError):
        if _read(path).pid == pid:
            path.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read(path: Path) -> State:
    try:
        raw: Any = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise NotRunningError(
            f"no running gpudra found ({path} does not exist); start one with `gpudra up`"
        ) from exc
    except (OSError, ValueError) as exc:
        raise NotRunningError(f"cannot read the state file {path}: {exc}") from exc
    try:
        return State(**raw)
    except TypeError as exc:
        raise NotRunningError(f"the state file {path} is not a gpudra state file") from exc


def load(path: Path) -> State:
    state = _read(path)
    if not _alive(state.pid):
        raise NotRunningError(
            f"the gpudra that wrote {path} (pid {state.pid}) is gone; start one with `gpudra up`"
        )
    return state
