"""Generated Python for chains of `&&` / `||`, the backbone of nearly every selector.

`a && b && c` becomes one Python function (built with `exec` from trusted, generated text only:
literals are embedded with `repr` of str/int values, everything else is passed in a namespace).
Comparisons of a device attribute with a literal (`device.attributes["d"].type == "gpu"`,
`... .index < 4`, `... in ["a", "b"]`, `device.driver == "x"`) are inlined; other operands are
calls of their compiled closures. Semantics are CEL's, for the whole chain at once: `&&` is false
if any operand is false, else the first error if any, else true (`||` mirrors it), and an
operand that is not a bool is an error.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudra_cel.access import has_field, select_value
from gpudra_cel.errors import CelEvaluationError
from gpudra_cel.operators import BINARY, Fn
from gpudra_cel.paths import DevicePath
from gpudra_cel.values import Failed, no_overload

__all__ = ["InlineCompare", "SlotField", "chain"]

_PY_OPS = {"_==_": "==", "_!=_": "!=", "_<_": "<", "_<=_": "<=", "_>_": ">", "_>=_": ">="}


@dataclass(frozen=True, slots=True)
class SlotField:
    """`v.name` where `v` is a macro or `cel.bind` variable (activation slot `slot`)."""

    slot: int
    name: str


@dataclass(frozen=True, slots=True)
class InlineCompare:
    """`<path> <op> <literal>` (or `has(<path>)` with op "has"), inlined into the chain."""

    path: DevicePath | SlotField
    op: str
    constant: object

    @staticmethod
    def accepts(path: DevicePath | SlotField, op: str, constant: object) -> bool:
        if op == "has":
            return isinstance(path, SlotField)
        if isinstance(path, SlotField):
            return InlineCompare._accepts_value(op, constant)
        if path.field == "driver" and path.domain is None:
            return op in ("_==_", "_!=_") and isinstance(constant, str)
        if path.field != "attributes" or path.name is None:
            return False
        return InlineCompare._accepts_value(op, constant)

    @staticmethod
    def _accepts_value(op: str, constant: object) -> bool:
        if op in ("_==_", "_!=_") and isinstance(constant, str):
            return True
        if op in _PY_OPS and constant.__class__ is int:
            return True
        return (
            op == "@in"
            and isinstance(constant, tuple)
            and bool(constant)
            and all(isinstance(x, str) for x in constant)
        )


def chain(kind: str, operands: list[Fn | InlineCompare], bind: tuple[int, Fn] | None = None) -> Fn:
    """One function evaluating `operands` joined by `&&` (kind "and") or `||` ("or"); with
    `bind` = (slot, init), it first stores the `cel.bind` variable (or its error) in `slot`."""
    decisive = kind == "or"  # the value that decides the chain
    symbol = "_||_" if decisive else "_&&_"
    ns: dict[str, object] = {
        "_E": CelEvaluationError,
        "_nov": no_overload,
        "_sym": symbol,
        "_sel": select_value,
        "_has": has_field,
    }
    lines = ["def _chain(act):", "    _err = None"]
    if bind is not None:
        ns["_init"], ns["_Failed"] = bind[1], Failed
        lines += [
            "    try:",
            f"        act[{bind[0]}] = _init(act)",
            "    except _E as _e:",
            f"        act[{bind[0]}] = _Failed(_e)",
        ]
    for i, operand in enumerate(operands):
        body, missing = _operand(operand, i, ns)
        lines.append("    try:")
        lines += ["        " + line for line in body]
        if missing is not None:
            ns[f"_m{i}"] = missing
            lines += [
                "    except KeyError:",
                "        if _err is None:",
                f"            _err = _E(_m{i})",
            ]
        lines += [
            "    except _E as _e:",
            "        if _err is None:",
            "            _err = _e",
            "    else:",
            f"        if _v is {decisive}:",
            f"            return {decisive}",
            f"        if _v is not {not decisive} and _err is None:",
            "            _err = _nov(_sym, _v)",
        ]
    lines += ["    if _err is not None:", "        raise _err", f"    return {not decisive}"]
    exec("\n".join(lines), ns)  # text generated from the fixed templates above only
    fn = ns["_chain"]
    assert callable(fn)
    return fn


def _operand(
    operand: Fn | InlineCompare, i: int, ns: dict[str, object]
) -> tuple[list[str], str | None]:
    """Statements assigning the operand's value to `_v`, and the message for a missing key."""
    if not isinstance(operand, InlineCompare):
        ns[f"_f{i}"] = operand
        return [f"_v = _f{i}(act)"], None
    path, op, constant = operand.path, operand.op, operand.constant
    prelude: list[str] = []
    if isinstance(path, SlotField):
        name = repr(path.name)
        if op == "has":
            return [
                f"_x = act[{path.slot}]",
                f"_v = ({name} in _x) if _x.__class__ is dict else _has(_x, {name})",
            ], None
        prelude = [
            f"_x = act[{path.slot}]",
            f"_x = _x[{name}] if _x.__class__ is dict else _sel(_x, {name})",
        ]
        lookup = "_x"
    elif path.field == "driver":
        return [f"_v = act[0].driver {_PY_OPS[op]} {constant!r}"], None
    else:
        lookup = f"act[0].attributes[{path.domain!r}][{path.name!r}]"
    missing = f"no such key: {path.name}"
    if op in ("_==_", "_!=_") and isinstance(constant, str):
        # For a string literal Python's == is CEL's, except that a Kubernetes value (a Semver
        # attribute) refuses `==` with a string: the generic operator raises for it.
        if op == "_!=_":
            return [*prelude, f"_v = {lookup} != {constant!r}"], missing
        ns[f"_g{i}"] = BINARY[op]
        return [
            *prelude,
            f"_x = {lookup}",
            f"_v = _x == {constant!r} or (_x.__class__ is not str and _g{i}(_x, {constant!r}))",
        ], missing
    ns[f"_g{i}"] = BINARY[op]
    if op == "@in":
        assert isinstance(constant, tuple)
        ns[f"_s{i}"] = frozenset(constant)
        ns[f"_t{i}"] = constant
        return [
            *prelude,
            f"_x = {lookup}",
            f"_v = (_x in _s{i}) if _x.__class__ is str else _g{i}(_x, _t{i})",
        ], missing
    assert isinstance(constant, int)
    return [
        *prelude,
        f"_x = {lookup}",
        f"_v = (_x {_PY_OPS[op]} {int(constant)!r}) if _x.__class__ is int else _g{i}(_x, {int(constant)!r})",
    ], missing
