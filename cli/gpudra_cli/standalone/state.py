"""The state file of a running `gpudra up` (or `demo --keep-running`): how the other commands find
the system. Written atomically (temp file + rename) when the system is up, removed when it stops.

Location: `--state-file`, else `$GPUDRA_STATE_FILE`, else `~/.gpudra/standalone.json`. `load`
fails with `NotRunningError` when the file is missing, unreadable, or names a process that is gone
(a crashed `up` leaves a stale file; the message says so).
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpudra_cli.standalone.errors import NotRunningError

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
