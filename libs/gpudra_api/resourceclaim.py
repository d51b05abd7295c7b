"""ResourceClaim and ResourceClaimTemplate (resource.k8s.io/v1): what a workload asks for.

A request is either `exactly` one kind of device (ExactCount or All) or `firstAvailable`: an
ordered list of alternatives (subrequests). Constraints and configuration refer to requests by
name, or to a subrequest as `<request>/<subrequest>`; references are checked here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpudra_api import limits
from gpudra_api._fields import Field, check_fully_qualified_name, check_label_name
from gpudra_api._meta import check_kind, object_name
from gpudra_api.device import TAINT_EFFECTS, parse_quantity
from gpudra_api.deviceclass import (
    DeviceConfiguration,
    DeviceSelector,
    parse_device_configuration,
    parse_selectors,
)
from gpudra_api.quantity import Quantity

ALLOCATION_MODES = frozenset({"ExactCount", "All"})


@dataclass(frozen=True)
class DeviceToleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"operator": self.operator}
        if self.key:
            out["key"] = self.key
        if self.value:
            out["value"] = self.value
        if self.effect:
            out["effect"] = self.effect
        if self.toleration_seconds is not None:
            out["tolerationSeconds"] = self.toleration_seconds
        return out


@dataclass(frozen=True)
class ExactDeviceRequest:
    """One kind of device; also the shape of a subrequest (which has no adminAccess)."""

    name: str
    device_class_name: str
    selectors: tuple[DeviceSelector, ...] = ()
    allocation_mode: str = "ExactCount"
    count: int = 1
    admin_access: bool | None = None
    tolerations: tuple[DeviceToleration, ...] = ()
    capacity: dict[str, Quantity] | None = None


@dataclass(frozen=True)
class DeviceRequest:
    name: str
    exactly: ExactDeviceRequest | None = None
    first_available: tuple[ExactDeviceRequest, ...] = ()


@dataclass(frozen=True)
class DeviceConstraint:
    requests: tuple[str, ...]
    match_attribute: str | None = None
    distinct_attribute: str | None = None


@dataclass(frozen=True)
class DeviceClaimConfiguration:
    requests: tuple[str, ...]
    config: DeviceConfiguration


@dataclass(frozen=True)
class ResourceClaim:
    name: str
    namespace: str
    uid: str
    requests: tuple[DeviceRequest, ...]
    constraints: tuple[DeviceConstraint, ...] = ()
    config: tuple[DeviceClaimConfiguration, ...] = ()

    @property
    def key(self) -> str:
        """`namespace/name` (namespace `default` when unset), how sequences refer to a claim."""
        return f"{self.namespace or 'default'}/{self.name}"

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other


@dataclass(frozen=True)
class ResourceClaimTemplate:
    name: str
    namespace: str
    spec: ResourceClaim


def parse_resource_claim(data: Any) -> ResourceClaim:
    """Parse and validate one ResourceClaim JSON object; raises `ValidationError`."""
    top = Field(f"ResourceClaim {object_name(data)}", "", data)
    check_kind(top, "ResourceClaim")
    return _claim_from(top, top.child("spec"))


def parse_resource_claim_template(data: Any) -> ResourceClaimTemplate:
    """Parse a ResourceClaimTemplate; its `spec.spec` is returned as a nameless claim."""
    top = Field(f"ResourceClaimTemplate {object_name(data)}", "", data)
    check_kind(top, "ResourceClaimTemplate")
    claim = _claim_from(top, top.child("spec").child("spec"))
    return ResourceClaimTemplate(claim.name, claim.namespace, claim)


def _claim_from(top: Field, spec: Field) -> ResourceClaim:
    meta = top.child("metadata")
    name = meta.child("name").dns_subdomain()
    namespace = meta.child("namespace").string() or ""
    uid = meta.child("uid").string() or ""
    devices = spec.child("devices")
    requests = tuple(
        _request(rf) for rf in devices.child("requests").elements(limits.DEVICE_REQUESTS_MAX_SIZE)
    )
    names = [r.name for r in requests]
    devices.child("requests").check(len(set(names)) == len(names), "request names must be unique")
    known = set(names)
    for r in requests:
        known.update(f"{r.name}/{s.name}" for s in r.first_available)
    constraints = tuple(
        _constraint(cf, known)
        for cf in devices.child("constraints").elements(limits.DEVICE_CONSTRAINTS_MAX_SIZE)
    )
    config = []
    for cf in devices.child("config").elements(limits.DEVICE_CONFIG_MAX_SIZE):
        refs = _references(cf.child("requests"), known)
        config.append(DeviceClaimConfiguration(refs, parse_device_configuration(cf)))
    return ResourceClaim(name, namespace, uid, requests, constraints, tuple(config))


def _request(f: Field) -> DeviceRequest:
    name = f.child("name").dns_label()
    exactly = f.child("exactly")
    first = f.child("firstAvailable")
    f.check(
        exactly.present() != bool(first.value),
        "exactly one of exactly and firstAvailable must be set",
    )
    if exactly.present():
        return DeviceRequest(name, exactly=_exact(exactly, name, admin_allowed=True))
    subs = tuple(
        _exact(sf, sf.child("name").dns_label(), admin_allowed=False)
        for sf in first.elements(limits.FIRST_AVAILABLE_DEVICE_REQUEST_MAX_SIZE)
    )
    sub_names = [s.name for s in subs]
    first.check(len(set(sub_names)) == len(sub_names), "subrequest names must be unique")
    return DeviceRequest(name, first_available=subs)


def _exact(f: Field, name: str, admin_allowed: bool) -> ExactDeviceRequest:
    class_name = f.child("deviceClassName").dns_subdomain()
    selectors = parse_selectors(f.child("selectors"))
    mode_field = f.child("allocationMode")
    mode = mode_field.string() or "ExactCount"
    mode_field.check(mode in ALLOCATION_MODES, f"unknown allocation mode {mode!r}")
    count_field = f.child("count")
    count = count_field.integer()
    if mode == "ExactCount":
        count = 1 if count is None else count
        count_field.check(count > 0, "must be greater than zero")
    else:
        count_field.check(not count, "must not be set when allocationMode is All")
        count = 0
    admin_field = f.child("adminAccess")
    admin = admin_field.boolean()
    if not admin_allowed:
        admin_field.check(admin is None, "not allowed in a subrequest")
    tolerations = tuple(
        _toleration(tf)
        for tf in f.child("tolerations").elements(limits.DEVICE_TOLERATIONS_MAX_LENGTH)
    )
    capacity = None
    cap_field = f.child("capacity")
    if cap_field.present():
        capacity = {key: parse_quantity(qf) for key, qf in cap_field.child("requests").items()}
    return ExactDeviceRequest(
        name=name,
        device_class_name=class_name,
        selectors=selectors,
        allocation_mode=mode,
        count=count,
        admin_access=admin,
        tolerations=tolerations,
        capacity=capacity,
    )


def _toleration(f: Field) -> DeviceToleration:
    key = f.child("key").string() or ""
    if key:
        check_label_name(f.child("key"), key)
    op_field = f.child("operator")
    operator = op_field.string() or "Equal"
    op_field.check(operator in ("Equal", "Exists"), f"unknown operator {operator!r}")
    value = f.child("value").string() or ""
    if operator == "Exists":
        f.child("value").check(not value, "must be empty when operator is Exists")
    else:
        f.child("key").check(bool(key), "required when operator is Equal")
    effect_field = f.child("effect")
    effect = effect_field.string() or ""
    effect_field.check(effect == "" or effect in TAINT_EFFECTS, f"unknown effect {effect!r}")
    seconds = f.child("tolerationSeconds").integer()
    return DeviceToleration(key, operator, value, effect, seconds)


def _constraint(f: Field, known: set[str]) -> DeviceConstraint:
    refs = _references(f.child("requests"), known)
    match = f.child("matchAttribute").string()
    distinct = f.child("distinctAttribute").string()
    f.check(
        (match is None) != (distinct is None),
        "exactly one of matchAttribute and distinctAttribute must be set",
    )
    attr = match if match is not None else distinct
    assert attr is not None
    check_fully_qualified_name(f.child("matchAttribute" if match else "distinctAttribute"), attr)
    return DeviceConstraint(refs, match, distinct)


def _references(f: Field, known: set[str]) -> tuple[str, ...]:
    refs = f.str_list(limits.DEVICE_REQUESTS_MAX_SIZE)
    for ref in refs:
        f.check(ref in known, f"{ref!r} is not a request of this claim")
    f.check(len(set(refs)) == len(refs), "must not contain duplicates")
    return refs
