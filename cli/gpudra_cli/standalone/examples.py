"""Where the demo finds the repository's `examples/`: `--examples`, else `$GPUDRA_EXAMPLES`, else
`./examples` (how `./pants run //:gpudra -- demo` runs, from the repository root), else the folder
beside this source tree (a checkout run with `python -m gpudra_cli`)."""

from __future__ import annotations

import os
from pathlib import Path

from gpudra_cli.standalone.errors import ManifestError

ENV = "GPUDRA_EXAMPLES"


def find_examples(given: Path | None) -> Path:
    candidates = [given] if given else []
    if not given:
        if os.environ.get(ENV):
            candidates.append(Path(os.environ[ENV]))
        candidates.append(Path.cwd() / "examples")
        candidates.append(Path(__file__).resolve().parents[3] / "examples")
    for path in candidates:
        if path is not None and path.is_dir():
            return path
    tried = ", ".join(str(p) for p in candidates)
    raise ManifestError(f"no examples folder found (tried {tried}); pass --examples DIR")
