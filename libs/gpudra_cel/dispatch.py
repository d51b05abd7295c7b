"""Run-time overload resolution for calls whose receiver is only known at run time (`dyn`
attribute values: `device.attributes["d"].version.isGreaterThan(semver("1.0.0"))`).

Overloads are grouped by the exact Python class of the receiver once, at compile time, so a call
costs one dict lookup; argument kinds are still checked, and a receiver of an unexpected kind is
CEL's "no matching overload" error.
"""

from __future__ import annotations

from gpudra_api.quantity import Quantity
from gpudra_api.semver import Semver
from gpudra_cel.errors import CelEvaluationError
from gpudra_cel.functions import Overload
from gpudra_cel.operators import Fn
from gpudra_cel.types import CelType, value_has_type
from gpudra_cel.values import CelOptional, CelUint, no_overload

__all__ = ["INTERNAL_ERRORS", "dispatch", "receiver_dispatch"]

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


def receiver_dispatch(name: str, overloads: tuple[Overload, ...], fns: list[Fn]) -> Fn:
    """A closure choosing the overload by the receiver's class (member calls only)."""
    table: dict[type, tuple[Overload, tuple[CelType, ...]]] = {}
    for ov in overloads:
        assert ov.target is not None
        for cls in _CLASSES.get(ov.target.name, ()):
            table.setdefault(cls, (ov, ov.args))
    receiver, *arg_fns = fns

    def call(act: list[object]) -> object:
        recv = receiver(act)
        args = [f(act) for f in arg_fns]
        found = table.get(recv.__class__)
        if found is None:
            return dispatch(name, overloads, [recv, *args])
        ov, declared = found
        for value, t in zip(args, declared, strict=True):
            if not value_has_type(value, t):
                return dispatch(name, overloads, [recv, *args])
        try:
            return ov.impl(recv, *args)
        except INTERNAL_ERRORS as exc:
            raise CelEvaluationError(f"{name}: {exc}") from exc

    return call
