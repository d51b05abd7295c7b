"""Simulator profiles: realistic machines described as YAML data files inside this package.

A profile is data only (`profiles/<name>.yaml`, MIG tables in `profiles/mig-tables.yaml`); this
module parses and checks it into frozen dataclasses that `gpudra_nvml.fake` serves through the NVML
function surface. Promises: every loaded profile is internally consistent (bus IDs unique, MIG
instances on legal, non-overlapping placements, NVLink peers exist), and any defect is reported as
`ProfileError` naming the profile and the field, never as a KeyError or a traceback.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import yaml

from gpudra_nvml.errors import ProfileError
from gpudra_nvml.faults import FaultSpec, parse_faults

_PACKAGE = "gpudra_nvml"
_DIR = "profiles"
_MIG_TABLES = "mig-tables.yaml"
#: Memory slices a MIG-capable GPU is cut into (A100, H100, B200 alike).
MEMORY_SLICES = 8


@dataclass(frozen=True)
class MigProfileSpec:
    name: str
    nvml_index: int
    profile_id: int
    size: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    memory_mib: int
    placements: tuple[int, ...]


@dataclass(frozen=True)
class GpuModel:
    name: str
    brand: str
    architecture: str
    compute_capability: tuple[int, int]
    memory_mib: int
    multiprocessors: int
    vbios: str
    pci_device_id: int
    mig_capable: bool
    mig_profiles: tuple[MigProfileSpec, ...]


@dataclass(frozen=True)
class MigInstanceSpec:
    profile: MigProfileSpec
    start: int
    #: False: a GPU instance with no compute instance yet (no MIG device, its slices still held).
    compute: bool = True


@dataclass(frozen=True)
class GpuSpec:
    index: int
    uuid: str
    bus_id: str
    pcie_root: str
    numa_node: int | None
    #: None: MIG disabled; a tuple (maybe empty): MIG enabled with these GPU instances.
    mig: tuple[MigInstanceSpec, ...] | None


@dataclass(frozen=True)
class LinkSpec:
    """One NVLink of one GPU: to an NVSwitch or to a peer GPU, by the remote's PCI bus ID."""

    remote_is_switch: bool
    remote_bus_id: str


@dataclass(frozen=True)
class FabricSpec:
    cluster_uuid: str
    clique_id: int


@dataclass(frozen=True)
class UtilizationPattern:
    """`constant` (gpu, memory), `sine` (periodS, min, max) or `idle-allocated` (0 % busy)."""

    pattern: str
    gpu: int = 0
    memory: int = 0
    period_s: float = 60.0
    low: int = 0
    high: int = 100
    memory_used_mib: int = 0


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    driver_version: str
    cuda_driver_version: int
    nvml_version: str
    model: GpuModel
    gpus: tuple[GpuSpec, ...]
    links: dict[int, tuple[LinkSpec, ...]] = field(default_factory=dict)
    fabric: FabricSpec | None = None
    utilization: dict[int, UtilizationPattern] = field(default_factory=dict)
    faults: tuple[FaultSpec, ...] = ()

    def utilization_for(self, index: int) -> UtilizationPattern:
        return (
            self.utilization.get(index)
            or self.utilization.get(-1)
            or UtilizationPattern("constant")
        )


def profile_names() -> list[str]:
    """The profiles shipped in the package, sorted."""
    root = resources.files(_PACKAGE).joinpath(_DIR)
    return sorted(
        p.name.removesuffix(".yaml")
        for p in root.iterdir()
        if p.name.endswith(".yaml") and p.name != _MIG_TABLES
    )


@cache
def load_profile(name: str) -> Profile:
    """Load and check one shipped profile; `ProfileError` names what is wrong."""
    if name not in profile_names():
        raise ProfileError(f"unknown profile {name!r}; known: {', '.join(profile_names())}")
    return parse_profile(name, _read_yaml(f"{name}.yaml"))


def _read_yaml(filename: str) -> Any:
    text = resources.files(_PACKAGE).joinpath(_DIR).joinpath(filename).read_text(encoding="utf-8")
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ProfileError(f"{filename}: not valid YAML: {exc}") from exc


@cache
def _mig_tables() -> dict[str, tuple[MigProfileSpec, ...]]:
    raw = _read_yaml(_MIG_TABLES)
    if not isinstance(raw, dict):
        raise ProfileError(f"{_MIG_TABLES}: expected a mapping of table name to profiles")
    return {
        str(k): tuple(_mig_profile(f"{_MIG_TABLES}:{k}", p) for p in _list(v, k))
        for k, v in raw.items()
    }


class _Fields:
    """Typed access to one YAML mapping, with errors that name where the bad value is."""

    def __init__(self, where: str, raw: Any) -> None:
        if not isinstance(raw, dict):
            raise ProfileError(f"{where}: expected a mapping, got {type(raw).__name__}")
        self.where, self.raw = where, raw

    def _get(self, key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        if key not in self.raw:
            if default is ...:
                raise ProfileError(f"{self.where}: missing field {key!r}")
            return default
        value = self.raw[key]
        if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
            raise ProfileError(f"{self.where}.{key}: expected {kind}, got {value!r}")
        return value

    def text(self, key: str, default: Any = ...) -> str:
        return str(self._get(key, (str, int, float), default))

    def integer(self, key: str, default: Any = ...) -> int:
        value: int = self._get(key, int, default)
        if value is not None and value < 0:
            raise ProfileError(f"{self.where}.{key}: must not be negative, got {value}")
        return value

    def number(self, key: str, default: Any = ...) -> float:
        return float(self._get(key, (int, float), default))

    def flag(self, key: str, default: Any = ...) -> bool:
        value: bool = self._get(key, bool, default)
        return value


def _list(raw: Any, where: object) -> list[Any]:
    if not isinstance(raw, list):
        raise ProfileError(f"{where}: expected a list, got {raw!r}")
    return raw


def _mig_profile(where: str, raw: Any) -> MigProfileSpec:
    f = _Fields(where, raw)
    spec = MigProfileSpec(
        name=f.text("name"),
        nvml_index=f.integer("nvmlIndex"),
        profile_id=f.integer("id"),
        size=f.integer("size"),
        multiprocessors=f.integer("multiprocessors"),
        copy_engines=f.integer("copyEngines"),
        decoders=f.integer("decoders"),
        encoders=f.integer("encoders"),
        jpeg_engines=f.integer("jpegEngines"),
        ofa_engines=f.integer("ofaEngines"),
        memory_mib=f.integer("memoryMiB"),
        placements=tuple(int(p) for p in _list(f.raw.get("placements"), f"{where}.placements")),
    )
    for start in spec.placements:
        if start + spec.size > MEMORY_SLICES:
            raise ProfileError(
                f"{where}: placement {start}+{spec.size} exceeds {MEMORY_SLICES} slices"
            )
    return spec


def _model(where: str, raw: Any) -> GpuModel:
    f = _Fields(where, raw)
    cc = _list(f.raw.get("computeCapability"), f"{where}.computeCapability")
    if len(cc) != 2 or not all(isinstance(x, int) for x in cc):
        raise ProfileError(f"{where}.computeCapability: expected [major, minor], got {cc!r}")
    table = f.text("migTable", "")
    tables = _mig_tables()
    if table and table not in tables:
        raise ProfileError(f"{where}.migTable: unknown table {table!r}; known: {sorted(tables)}")
    return GpuModel(
        name=f.text("name"),
        brand=f.text("brand"),
        architecture=f.text("architecture"),
        compute_capability=(cc[0], cc[1]),
        memory_mib=f.integer("memoryMiB"),
        multiprocessors=f.integer("multiprocessors"),
        vbios=f.text("vbios"),
        pci_device_id=f.integer("pciDeviceId"),
        mig_capable=f.flag("migCapable", True),
        mig_profiles=tables.get(table, ()),
    )


def _mig_instances(where: str, raw: Any, model: GpuModel) -> tuple[MigInstanceSpec, ...] | None:
    if raw is None:
        return None
    if not model.mig_capable or not model.mig_profiles:
        raise ProfileError(f"{where}: MIG enabled on a model without MIG profiles")
    by_name = {p.name: p for p in model.mig_profiles}
    used: set[int] = set()
    out: list[MigInstanceSpec] = []
    for item in _list(raw, where):
        name, _, start_text = str(item).partition("@")
        profile = by_name.get(name)
        if profile is None or not start_text.isdigit():
            raise ProfileError(f"{where}: {item!r} is not <profile>@<start> with a known profile")
        start = int(start_text)
        if start not in profile.placements:
            raise ProfileError(f"{where}: {name} cannot start at slice {start}")
        slices = set(range(start, start + profile.size))
        if slices & used:
            raise ProfileError(f"{where}: {item!r} overlaps another MIG instance")
        used |= slices
        out.append(MigInstanceSpec(profile, start))
    return tuple(out)


def _links(where: str, raw: Any, gpus: tuple[GpuSpec, ...]) -> dict[int, tuple[LinkSpec, ...]]:
    if raw is None:
        return {}
    f = _Fields(where, raw)
    links: dict[int, list[LinkSpec]] = {g.index: [] for g in gpus}
    for i, sw in enumerate(_list(f.raw.get("switches", []), f"{where}.switches")):
        s = _Fields(f"{where}.switches[{i}]", sw)
        bus_id, count = s.text("busId"), s.integer("linksPerGpu")
        for g in gpus:
            links[g.index].extend(LinkSpec(True, bus_id) for _ in range(count))
    for i, br in enumerate(_list(f.raw.get("bridges", []), f"{where}.bridges")):
        b = _Fields(f"{where}.bridges[{i}]", br)
        pair = _list(b.raw.get("gpus"), f"{where}.bridges[{i}].gpus")
        if len(pair) != 2 or any(p not in links for p in pair) or pair[0] == pair[1]:
            raise ProfileError(f"{where}.bridges[{i}].gpus: expected two distinct GPU indexes")
        count = b.integer("links")
        for a, z in (pair, pair[::-1]):
            links[a].extend(LinkSpec(False, gpus[z].bus_id) for _ in range(count))
    return {k: tuple(v) for k, v in links.items() if v}


def _utilization(where: str, raw: Any) -> dict[int, UtilizationPattern]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}: expected a mapping of GPU index (or 'default') to a pattern")
    out: dict[int, UtilizationPattern] = {}
    for key, value in raw.items():
        f = _Fields(f"{where}.{key}", value)
        pattern = f.text("pattern")
        if pattern not in {"constant", "sine", "idle-allocated"}:
            raise ProfileError(f"{where}.{key}.pattern: unknown pattern {pattern!r}")
        out[-1 if key == "default" else int(key)] = UtilizationPattern(
            pattern=pattern,
            gpu=f.integer("gpu", 0),
            memory=f.integer("memory", 0),
            period_s=f.number("periodS", 60.0),
            low=f.integer("min", 0),
            high=f.integer("max", 100),
            memory_used_mib=f.integer("memoryUsedMiB", 0),
        )
    return out


def parse_profile(name: str, raw: Any) -> Profile:
    """Check a profile's parsed YAML; public so tests can feed broken documents."""
    f = _Fields(name, raw)
    model = _model(f"{name}.model", f.raw.get("model"))
    gpus: list[GpuSpec] = []
    for i, g in enumerate(_list(f.raw.get("gpus"), f"{name}.gpus")):
        gf = _Fields(f"{name}.gpus[{i}]", g)
        numa = gf.raw.get("numaNode")
        gpus.append(
            GpuSpec(
                index=i,
                uuid=gf.text(
                    "uuid", "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpudra/{name}/{i}"))
                ),
                bus_id=gf.text("busId"),
                pcie_root=gf.text("pcieRoot", ""),
                numa_node=gf.integer("numaNode") if numa is not None else None,
                mig=_mig_instances(f"{name}.gpus[{i}].mig", gf.raw.get("mig"), model),
            )
        )
    if not gpus:
        raise ProfileError(f"{name}.gpus: a profile needs at least one GPU")
    bus_ids = [g.bus_id for g in gpus]
    if len(set(bus_ids)) != len(bus_ids):
        raise ProfileError(f"{name}.gpus: duplicate busId")
    fabric_raw = f.raw.get("fabric")
    fabric = None
    if fabric_raw is not None:
        ff = _Fields(f"{name}.fabric", fabric_raw)
        try:
            cluster = str(uuid.UUID(ff.text("clusterUuid")))
        except ValueError as exc:
            raise ProfileError(f"{name}.fabric.clusterUuid: not a UUID") from exc
        fabric = FabricSpec(cluster, ff.integer("cliqueId"))
    return Profile(
        name=name,
        description=f.text("description"),
        driver_version=f.text("driverVersion"),
        cuda_driver_version=f.integer("cudaDriverVersion"),
        nvml_version=f.text("nvmlVersion"),
        model=model,
        gpus=tuple(gpus),
        links=_links(f"{name}.nvlink", f.raw.get("nvlink"), tuple(gpus)),
        fabric=fabric,
        utilization=_utilization(f"{name}.utilization", f.raw.get("utilization")),
        faults=parse_faults(f"{name}.faults", f.raw.get("faults"), len(gpus)),
    )
