"""Device minors of MIG access capabilities.

A MIG device is used through `/dev/nvidia-caps/nvidia-cap<M>` for its GPU instance and its compute
instance. `MigMinors` reads M from the driver's `/proc/driver/nvidia-caps/mig-minors` (lines
`gpu<minor>/gi<gi>/access <M>` and `gpu<minor>/gi<gi>/ci<ci>/access <M>`); without that file
(simulated nodes) it uses the driver's own layout: `config` 1, `monitor` 2, then for each GPU minor
(0-31) and GI (0-14) the GI's access followed by its CIs' (0-7).
"""

from __future__ import annotations

import re
from pathlib import Path

from gpudra_kubelet_plugin.errors import DeviceError

MIG_MINORS_FILE = Path("/proc/driver/nvidia-caps/mig-minors")
_GIS_PER_GPU, _CIS_PER_GI = 15, 8
_MINOR_LINE = re.compile(r"^gpu(\d+)/gi(\d+)(?:/ci(\d+))?/access\s+(\d+)$")


class MigMinors:
    """Device minors of MIG access capabilities (see the module docstring)."""

    def __init__(self, table: dict[tuple[int, int, int | None], int] | None = None) -> None:
        self._table = table

    @classmethod
    def load(cls, path: Path = MIG_MINORS_FILE) -> MigMinors:
        """The driver's table when `path` exists, else the driver's layout computed."""
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return cls()
        except OSError as exc:
            raise DeviceError(f"cannot read {path}: {exc}") from exc
        table: dict[tuple[int, int, int | None], int] = {}
        for line in text.splitlines():
            match = _MINOR_LINE.match(line.strip())
            if match:
                gpu, gi, ci, minor = match.groups()
                table[(int(gpu), int(gi), None if ci is None else int(ci))] = int(minor)
        return cls(table)

    def minor(self, gpu_minor: int, gi: int, ci: int | None = None) -> int:
        """The capability minor of GI `gi` (or its CI `ci`) on the GPU with minor `gpu_minor`."""
        if self._table is not None:
            try:
                return self._table[(gpu_minor, gi, ci)]
            except KeyError:
                raise DeviceError(
                    f"no MIG capability minor for gpu{gpu_minor}/gi{gi}"
                    + ("" if ci is None else f"/ci{ci}")
                ) from None
        if not (0 <= gi < _GIS_PER_GPU and (ci is None or 0 <= ci < _CIS_PER_GI)):
            raise DeviceError(f"MIG instance gi{gi}/ci{ci} outside the driver's range")
        base = 3 + gpu_minor * _GIS_PER_GPU * (1 + _CIS_PER_GI) + gi * (1 + _CIS_PER_GI)
        return base if ci is None else base + 1 + ci
