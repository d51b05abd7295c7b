"""Where the CLI finds the demo's `examples/` at run time. Order: the flag, else the environment variable, else `./<path>`
(how `./pants run //:gpudra -- ...` runs, from the repository root), else the path beside this
source tree (a checkout run with `python -m gpudra_cli`). A miss names every place tried."""

from __future__ import annotations

import os
from pathlib import Path

from gpudra_cli.standalone.errors import ManifestError

ENV = "GPUDRA_EXAMPLES"


def _find(relative: Path, given: Path | None, env: str, what: str, flag: str) -> Path:
    candidates: list[Path] = [given] if given else []
    if not given:
        if os.environ.get(env):
            candidates.append(Path(os.environ[env]))
        candidates.append(Path.cwd() / relative)
        candidates.append(Path(__file__).resolve().parents[3] / relative)
    for path in candidates:
        if path.exists():
            return path
    tried = ", ".join(str(p) for p in candidates)
    raise ManifestError(f"no {what} found (tried {tried}); pass {flag}")


def find_examples(given: Path | None) -> Path:
    return _find(Path("examples"), given, ENV, "examples folder", "--examples DIR")
