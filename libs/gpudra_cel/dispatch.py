"""Run-time overload resolution for calls whose receiver is only known at run time (`dyn`
attribute values: `device.attributes["d"].version.isGreaterThan(semver("1.0.0"))`).

Overloads are grouped by the exact Python class of the receiver once, at compile time, so a call
costs one dict lookup; argument kinds are still checked, and a receiver of an unexpected kind is
CEL's "no matching overload" error.
"""

from __future__ import annotations

from gpudra_api.quantity import Quantity
from gpudra_api.semver import Semver
from gpudra_cel.celtime import Duration, Timestamp
from gpudra_cel.errors import CelEvaluationError
from gpudra_cel.functions import Overload
from gpudra_cel.k8s_formats import NamedFormat
from gpudra_cel.netaddr import IPAddr, IPPrefix
from gpudra_cel.neturl import ParsedURL
from gpudra_cel.operators import Fn
from gpudra_cel.types import CelType, value_has_type
from gpudra_cel.values import CelOptional, CelTypeValue, CelUint, no_overload

__all__ = ["INTERNAL_ERRORS", "Constant", "dispatch", "receiver_dispatch"]

INTERNAL_ERRORS = (
    TypeError,
    ValueError,
    AttributeError,
    OverflowError,
    ArithmeticError,
    IndexError,
)
_CLASSES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "uint": (CelUint,),
    "double": (float,),
    "string": (str,),
    "bool": (bool,),
    "bytes": (bytes,),
    "Quantity": (Quantity,),
    "Semver": (Semver,),
    "list": (tuple, list),
    "map": (dict,),
    "optional_type": (CelOptional,),
    "net.IP": (IPAddr,),
    "net.CIDR": (IPPrefix,),
    "kubernetes.URL": (ParsedURL,),
    "kubernetes.NamedFormat": (NamedFormat,),
    "google.protobuf.Timestamp": (Timestamp,),
    "google.protobuf.Duration": (Duration,),
    "type": (CelTypeValue,),
}


def dispatch(name: str, overloads: tuple[Overload, ...], values: list[object]) -> object:
    """Call the first overload whose declared kinds match `values` (receiver first)."""
    for ov in overloads:
        declared = ([ov.target] if ov.target is not None else []) + list(ov.args)
        if all(value_has_type(v, t) for v, t in zip(values, declared, strict=True)):
            try:
                return ov.impl(*values)
            except INTERNAL_ERRORS as exc:
                raise CelEvaluationError(f"{name}: {exc}") from exc
    raise no_overload(name, *values)


def _classes(t: CelType) -> tuple[type, ...] | None:
    """Exact classes a declared type admits on the fast path (None: anything)."""
    if t.name == "dyn" or t.is_param:
        return None
    return _CLASSES.get(t.name, ())


def receiver_dispatch(
    name: str, overloads: tuple[Overload, ...], receiver: Fn, args: list[Fn | Constant]
) -> Fn:
    """A closure choosing the overload by the receiver's class (member calls only); literal
    arguments are passed as values and their kinds checked once, here."""
    table: dict[type, Overload] = {}
    for ov in overloads:
        assert ov.target is not None
        for cls in _CLASSES.get(ov.target.name, ()):
            table.setdefault(cls, ov)
    if len(args) == 1 and isinstance(args[0], Constant):
        constant = args[0].value
        # Keep only receivers whose overload takes this literal's kind.
        fast = {
            cls: ov.impl
            for cls, ov in table.items()
            if (kinds := _classes(ov.args[0])) is None or constant.__class__ in kinds
        }

        def call_constant(act: list[object]) -> object:
            recv = receiver(act)
            impl = fast.get(recv.__class__)
            if impl is None:
                return dispatch(name, overloads, [recv, constant])
            try:
                return impl(recv, constant)
            except INTERNAL_ERRORS as exc:
                raise CelEvaluationError(f"{name}: {exc}") from exc

        return call_constant
    arg_fns = [a if not isinstance(a, Constant) else _const_fn(a.value) for a in args]
    checks = {cls: (ov.impl, tuple(_classes(t) for t in ov.args)) for cls, ov in table.items()}

    def call(act: list[object]) -> object:
        recv = receiver(act)
        values = [f(act) for f in arg_fns]
        found = checks.get(recv.__class__)
        if found is not None:
            impl, kinds = found
            if all(k is None or v.__class__ in k for v, k in zip(values, kinds, strict=True)):
                try:
                    return impl(recv, *values)
                except INTERNAL_ERRORS as exc:
                    raise CelEvaluationError(f"{name}: {exc}") from exc
        return dispatch(name, overloads, [recv, *values])

    return call


class Constant:
    """A literal argument known at compile time."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value


def _const_fn(value: object) -> Fn:
    return lambda act: value
