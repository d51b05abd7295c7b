"""DeviceClass (resource.k8s.io/v1): selectors and configuration shared by many claims."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gpudra_api import limits
from gpudra_api._fields import Field
from gpudra_api._meta import check_kind, object_name


@dataclass(frozen=True)
class DeviceSelector:
    """A CEL selector; `expression` is None for a selector of a kind this model does not know."""

    expression: str | None


@dataclass(frozen=True)
class DeviceConfiguration:
    """Opaque driver configuration; `parameters` is the JSON value as given."""

    driver: str
    parameters: Any

    def to_json(self) -> dict[str, Any]:
        return {"opaque": {"driver": self.driver, "parameters": self.parameters}}


@dataclass(frozen=True)
class DeviceClass:
    name: str
    selectors: tuple[DeviceSelector, ...]
    config: tuple[DeviceConfiguration, ...] = ()
    extended_resource_name: str | None = None

    def __hash__(self) -> int:
        return hash(self.name)


def parse_selectors(f: Field) -> tuple[DeviceSelector, ...]:
    out = []
    for sf in f.elements(limits.DEVICE_SELECTORS_MAX_SIZE):
        cel = sf.child("cel")
        if not cel.present():
            sf.check(bool(sf.mapping()), "exactly one selector type (cel) must be set")
            out.append(DeviceSelector(None))
            continue
        expr = cel.child("expression").req_str(max_len=limits.CEL_SELECTOR_EXPRESSION_MAX_LENGTH)
        out.append(DeviceSelector(expr))
    return tuple(out)


def parse_device_configuration(f: Field) -> DeviceConfiguration:
    opaque = f.child("opaque")
    f.check(opaque.present(), "exactly one configuration type (opaque) must be set")
    driver = opaque.child("driver").dns_subdomain(limits.DRIVER_NAME_MAX_LENGTH)
    params = opaque.child("parameters")
    params.check(params.present(), "required")
    params.check(isinstance(params.value, dict), "must be a JSON object")
    size = len(json.dumps(params.value, separators=(",", ":")))
    params.check(
        size <= limits.OPAQUE_PARAMETERS_MAX_LENGTH,
        f"must be at most {limits.OPAQUE_PARAMETERS_MAX_LENGTH} bytes of JSON",
    )
    return DeviceConfiguration(driver, params.value)


def parse_device_class(data: Any) -> DeviceClass:
    """Parse and validate one DeviceClass JSON object; raises `ValidationError`."""
    name = object_name(data)
    top = Field(f"DeviceClass {name}", "", data)
    check_kind(top, "DeviceClass")
    top.child("metadata").child("name").dns_subdomain()
    spec = top.child("spec")
    selectors = parse_selectors(spec.child("selectors"))
    config = tuple(
        parse_device_configuration(cf)
        for cf in spec.child("config").elements(limits.DEVICE_CONFIG_MAX_SIZE)
    )
    return DeviceClass(
        name=name,
        selectors=selectors,
        config=config,
        extended_resource_name=spec.child("extendedResourceName").string(),
    )
