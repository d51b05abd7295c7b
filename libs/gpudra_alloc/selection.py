"""Selector evaluation with caches: compiled CEL per expression, results per device entry.

A device entry lives as long as its slice object (one pool generation), so a cached result is
never stale: a new generation brings new slice objects and empty caches. A run-time CEL error is
cached too and raised again, so the same input always fails the same way.

`Selectors(features)` compiles in the CEL environment the feature gates declare: with
ConsumableCapacity or ListTypeAttributes off, a selector using what the gate adds is a compile
error, which the allocator reports as an `error` result naming the owner, the expression and the
feature ("... requires feature ListTypeAttributes"), as Kubernetes' API server refuses such an
object when it is written. An `Allocator` passes its own features (Kubernetes 1.37's defaults,
ListTypeAttributes off, when it is given none). `Selectors()` without features declares
everything, as in the stored expressions Kubernetes' allocator compiles. Device entries (and their cached results) are shared
by every allocator; a gated environment only rejects expressions, never changes a result, so a
gated `Selectors` re-checks that an expression compiles before it trusts a cached result.

A selector that fails on a device raises `CelRuntimeError` (an `AllocationInputError`, the
message Kubernetes gives: owner, selector, device, "CEL runtime error: ..." and its hint), the
cached failure included; an expression that does not compile raises a plain
`AllocationInputError`: no slice can make it pass.
"""

from __future__ import annotations

from typing import Any

from gpudra_alloc.errors import AllocationInputError, CelRuntimeError
from gpudra_alloc.features import FEATURE_NAMES, Features
from gpudra_alloc.pools import DeviceEntry
from gpudra_api import DeviceAttribute, DeviceSelector, Semver
from gpudra_api.names import split_qualified_name
from gpudra_cel import (
    ALL_FEATURES,
    CelCompileError,
    CelEvaluationError,
    DeviceView,
    compile_selector,
)


def _value(attr: DeviceAttribute) -> Any:
    if attr.kind == "version":
        values: list[Any] = [Semver.parse(str(v)) for v in attr.values]
    else:
        values = list(attr.values)
    return tuple(values) if attr.is_list else values[0]


def device_view(entry: DeviceEntry) -> Any:
    """The CEL `device` of an entry (built once per entry)."""
    if entry.view is None:
        device = entry.device
        driver = entry.id.driver
        attributes: dict[str, dict[str, Any]] = {}
        for name, attr in device.attributes.items():
            domain, ident = split_qualified_name(name, driver)
            attributes.setdefault(domain, {})[ident] = _value(attr)
        capacity: dict[str, dict[str, Any]] = {}
        for name, cap in device.capacity.items():
            domain, ident = split_qualified_name(name, driver)
            capacity.setdefault(domain, {})[ident] = cap.value
        entry.view = DeviceView(
            driver=driver,
            attributes=attributes,
            capacity=capacity,
            allow_multiple_allocations=bool(device.allow_multiple_allocations),
        )
    return entry.view


_MAX_PROGRAMS = 4096
_NO_SUCH_KEY_HINT = (
    "consider using CEL optional chaining (.? followed by orValue()) or guarding the check "
    "with has() for optional fields"
)
# CelOptions field -> the feature that declares it (a compile error's `gate`)
_FEATURE_OF_GATE = {attr: name for name, attr in FEATURE_NAMES.items()}


class Selectors:
    """Compiles each expression once and evaluates selectors against device entries."""

    def __init__(self, features: Features | None = None) -> None:
        self._compiled: dict[str, Any] = {}
        self.options = ALL_FEATURES if features is None else features.cel_options()
        self._gated = not self.options.all_declared
        self._compiles: set[str] = set()  # expressions known to compile in this environment

    def compiled(self, expression: str) -> Any:
        program = self._compiled.get(expression)
        if program is None:
            try:
                program = compile_selector(expression, options=self.options)
            except CelCompileError as exc:
                program = exc
            if len(self._compiled) >= _MAX_PROGRAMS:
                self._compiled.clear()  # expressions come from users; keep memory bounded
                self._compiles.clear()
            self._compiled[expression] = program
            if not isinstance(program, CelCompileError):
                self._compiles.add(expression)
        return program

    def all_match(
        self, selectors: tuple[DeviceSelector, ...], entry: DeviceEntry, owner: str
    ) -> bool:
        """True when every selector matches; `owner` prefixes errors (`class x`, `claim y`)."""
        for index, selector in enumerate(selectors):
            expression = selector.expression
            if expression is None:
                raise AllocationInputError(
                    f"{owner}: selector #{index}: CEL expression empty (unsupported selector type?)"
                )
            cached = entry.matches.get(expression)
            if cached is not None and self._gated and expression not in self._compiles:
                cached = None  # maybe computed under another environment: compile here first
            if cached is None:
                cached = self._evaluate(expression, entry, owner, index)
                entry.matches[expression] = cached
            if isinstance(cached, Exception):
                raise CelRuntimeError(
                    f"{owner}: selector #{index} on device {entry.id}: {cached}"
                ) from cached
            if not cached:
                return False
        return True

    def _evaluate(
        self, expression: str, entry: DeviceEntry, owner: str, index: int
    ) -> bool | Exception:
        program = self.compiled(expression)
        if isinstance(program, CelCompileError):
            feature = _FEATURE_OF_GATE.get(program.gate)
            if feature is not None:
                raise AllocationInputError(
                    f"{owner}: selector #{index} {expression!r} requires feature {feature}"
                    f" (CEL compile error: {program})"
                ) from program
            raise AllocationInputError(
                f"{owner}: selector #{index}: CEL compile error: {program}"
            ) from program
        try:
            return bool(program.matches(device_view(entry)))
        except CelEvaluationError as exc:
            message = str(exc)
            if "no such key:" in message:  # the hint Kubernetes adds (cel.EnhanceRuntimeError)
                message += f". {_NO_SUCH_KEY_HINT}"
            return _RuntimeFailure(f"CEL runtime error: {message}")


class _RuntimeFailure(Exception):
    """A cached CEL run-time failure on one device."""
