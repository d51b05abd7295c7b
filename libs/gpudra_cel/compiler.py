"""Checked syntax tree -> one Python closure (`Fn`) per node.

Promises: the closure computes exactly what CEL defines for the expression on a `DeviceView`
(errors as `CelEvaluationError`), touches the device's own mappings without copying them, fuses
`device.attributes["domain"].name` (and `capacity`) into a single lookup, folds calls of pure
functions on literals (`quantity("40Gi")`) at compile time, and specializes comparisons against
literals. Variables of macros and `cel.bind` live in numbered slots of the activation list.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpudra_cel.checker import Checked
from gpudra_cel.device import DeviceView
from gpudra_cel.errors import CelCompileError, CelError, CelEvaluationError
from gpudra_cel.functions import Overload
from gpudra_cel.macros import comprehension
from gpudra_cel.operators import (
    BINARY,
    FAST_INT_COMPARE,
    UNARY_NEG,
    Fn,
    logical_and,
    logical_not,
    logical_or,
    ternary,
)
from gpudra_cel.syntax import (
    Bind,
    Call,
    Comprehension,
    Has,
    Ident,
    Index,
    ListLit,
    Literal,
    MapLit,
    Node,
    Select,
)
from gpudra_cel.types import DYN, value_has_type
from gpudra_cel.values import CelUint, map_lookup, no_overload, type_name

__all__ = ["Const", "compile_tree"]

_DEVICE_FIELDS = {
    "driver": "driver",
    "attributes": "attributes",
    "capacity": "capacity",
    "allowMultipleAllocations": "allow_multiple_allocations",
}
_EMPTY: Mapping[str, object] = {}
_INTERNAL = (TypeError, ValueError, AttributeError, OverflowError, ArithmeticError, IndexError)


class Const:
    """A compile-time constant (folded literal or pure call)."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value


Compiled = Fn | Const


def compile_tree(root: Node, checked: Checked, expression: str) -> tuple[Fn, int]:
    """Return the closure and the number of activation slots it needs."""
    compiler = _Compiler(checked, expression)
    return _fn(compiler.visit(root, {})), compiler.slots + 1


def _fn(c: Compiled) -> Fn:
    if isinstance(c, Const):
        value = c.value
        return lambda act: value
    return c


def select_value(operand: object, name: str) -> object:
    if isinstance(operand, Mapping):
        found, value = map_lookup(operand, name)
        if not found:
            raise CelEvaluationError(f"no such key: {name}")
        return value
    if isinstance(operand, DeviceView):
        return getattr(operand, _DEVICE_FIELDS[name])
    raise CelEvaluationError(f"type '{type_name(operand)}' does not support field selection")


def index_value(operand: object, index: object) -> object:
    if isinstance(operand, tuple | list):
        if isinstance(index, float) and index.is_integer():
            index = int(index)
        if type(index) not in (int, CelUint):
            raise no_overload("_[_]", operand, index)
        assert isinstance(index, int)
        if not 0 <= index < len(operand):
            raise CelEvaluationError(f"index out of range: {index}")
        return operand[index]
    if isinstance(operand, Mapping):
        found, value = map_lookup(operand, index)
        if not found:
            raise CelEvaluationError(f"no such key: {index!r}")
        return value
    raise no_overload("_[_]", operand, index)


class _Compiler:
    def __init__(self, checked: Checked, expression: str) -> None:
        self.checked = checked
        self.expression = expression
        self.slots = 0

    def error(self, message: str, node: Node) -> CelCompileError:
        return CelCompileError(
            message, expression=self.expression, line=node.line, column=node.column
        )

    def visit(self, node: Node, scope: dict[str, int]) -> Compiled:
        if isinstance(node, Literal):
            return Const(node.value)
        if isinstance(node, Ident):
            if node.name in scope:
                slot = scope[node.name]
                return lambda act: act[slot]
            return lambda act: act[0]
        if isinstance(node, Select | Index):
            fused = self.device_path(node)
            return fused if fused is not None else self.access(node, scope)
        if isinstance(node, Has):
            return self.has(node, scope)
        if isinstance(node, ListLit):
            items = [self.visit(i, scope) for i in node.items]
            if all(isinstance(i, Const) for i in items):
                return Const(tuple(i.value for i in items if isinstance(i, Const)))
            fns = [_fn(i) for i in items]
            return lambda act: tuple(f(act) for f in fns)
        if isinstance(node, MapLit):
            return self.map_literal(node, scope)
        if isinstance(node, Comprehension):
            self.slots += 1
            slot = self.slots
            rng = _fn(self.visit(node.range, scope))
            inner = {**scope, node.var: slot}
            pred = _fn(self.visit(node.predicate, inner)) if node.predicate else None
            body = _fn(self.visit(node.body, inner))
            return comprehension(node.kind, rng, slot, pred, body)
        if isinstance(node, Bind):
            init = _fn(self.visit(node.init, scope))
            self.slots += 1
            slot = self.slots
            body = _fn(self.visit(node.body, {**scope, node.var: slot}))

            def bind(act: list[object]) -> object:
                act[slot] = init(act)
                return body(act)

            return bind
        if isinstance(node, Call):
            return self.call(node, scope)
        raise self.error(f"unsupported expression {type(node).__name__}", node)

    # ------------------------------------------------------------------ access
    def device_path(self, node: Select | Index) -> Fn | None:
        """`device.<field>` and `device.{attributes,capacity}[<domain>][.<name>]` with literal
        keys, as one lookup."""
        keys: list[str] = []
        current: Node = node
        while isinstance(current, Select | Index):
            if isinstance(current, Select):
                keys.append(current.field)
                current = current.operand
            elif isinstance(current.index, Literal) and isinstance(current.index.value, str):
                keys.append(current.index.value)
                current = current.operand
            else:
                return None
        if not (isinstance(current, Ident) and current.name == "device"):
            return None
        keys.reverse()
        if keys[0] not in _DEVICE_FIELDS:
            return None
        attr = _DEVICE_FIELDS[keys[0]]
        if len(keys) == 1:
            return lambda act: getattr(act[0], attr)
        if attr not in ("attributes", "capacity"):
            return None
        if len(keys) == 2:
            domain = keys[1]
            return lambda act: getattr(act[0], attr).get(domain, _EMPTY)
        if len(keys) != 3:
            return None
        domain, name = keys[1], keys[2]
        missing = f"no such key: {name}"
        if attr == "attributes":

            def attribute(act: list[object]) -> object:
                try:
                    return act[0].attributes[domain][name]  # type: ignore[attr-defined]
                except KeyError:
                    raise CelEvaluationError(missing) from None

            return attribute

        def capacity(act: list[object]) -> object:
            try:
                return act[0].capacity[domain][name]  # type: ignore[attr-defined]
            except KeyError:
                raise CelEvaluationError(missing) from None

        return capacity

    def access(self, node: Select | Index, scope: dict[str, int]) -> Compiled:
        operand = _fn(self.visit(node.operand, scope))
        device_map = self.is_device_map(node.operand)
        if isinstance(node, Select):
            name = node.field
            if device_map:
                return lambda act: _device_map_get(operand(act), name)
            return lambda act: select_value(operand(act), name)
        index = _fn(self.visit(node.index, scope))
        if device_map:
            return lambda act: _device_map_get(operand(act), index(act))
        return lambda act: index_value(operand(act), index(act))

    def is_device_map(self, node: Node) -> bool:
        # device.attributes / device.capacity: an unknown domain reads as an empty map.
        return (
            isinstance(node, Select)
            and isinstance(node.operand, Ident)
            and node.operand.name == "device"
            and node.field in ("attributes", "capacity")
        )

    def has(self, node: Has, scope: dict[str, int]) -> Fn:
        operand = _fn(self.visit(node.operand, scope))
        name = node.field

        def has(act: list[object]) -> object:
            value = operand(act)
            if isinstance(value, Mapping):
                return map_lookup(value, name)[0]
            if isinstance(value, DeviceView):
                return name in _DEVICE_FIELDS
            raise CelEvaluationError(f"has(): type '{type_name(value)}' has no fields")

        return has

    def map_literal(self, node: MapLit, scope: dict[str, int]) -> Fn:
        pairs = [(_fn(self.visit(k, scope)), _fn(self.visit(v, scope))) for k, v in node.entries]

        def build(act: list[object]) -> object:
            result: dict[object, object] = {}
            for kf, vf in pairs:
                key = kf(act)
                if type(key) not in (str, int, CelUint, bool):
                    raise CelEvaluationError(f"unsupported map key type {type_name(key)}")
                if map_lookup(result, key)[0]:
                    raise CelEvaluationError(f"Failed with repeated key: {key!r}")
                result[key] = vf(act)
            return result

        return build

    # ------------------------------------------------------------------ calls
    def call(self, node: Call, scope: dict[str, int]) -> Compiled:
        fn = node.function
        args = [self.visit(a, scope) for a in node.args]
        if fn == "_&&_":
            return logical_and(_fn(args[0]), _fn(args[1]))
        if fn == "_||_":
            return logical_or(_fn(args[0]), _fn(args[1]))
        if fn == "!_":
            return logical_not(_fn(args[0]))
        if fn == "_?_:_":
            return ternary(_fn(args[0]), _fn(args[1]), _fn(args[2]))
        if fn == "-_":
            operand = _fn(args[0])
            return lambda act: UNARY_NEG(operand(act))
        if fn in BINARY:
            return self.binary(fn, args[0], args[1])
        target = self.visit(node.target, scope) if node.target is not None else None
        return self.library(node, target, args)

    def binary(self, fn: str, left: Compiled, right: Compiled) -> Compiled:
        op = BINARY[fn]
        lf = _fn(left)
        if isinstance(right, Const):
            rv = right.value
            if fn in ("_==_", "_!=_") and isinstance(rv, str):
                # For a string literal, Python's == is CEL's: other kinds are simply unequal.
                return (lambda act: lf(act) == rv) if fn == "_==_" else (lambda act: lf(act) != rv)
            if fn in FAST_INT_COMPARE and rv.__class__ is int:
                fast = FAST_INT_COMPARE[fn]

                def int_compare(act: list[object]) -> object:
                    v = lf(act)
                    if v.__class__ is int:
                        return fast(v, rv)  # type: ignore[arg-type]
                    return op(v, rv)

                return int_compare
            if fn == "@in" and isinstance(rv, tuple) and rv and all(isinstance(x, str) for x in rv):
                strings = frozenset(rv)

                def in_strings(act: list[object]) -> object:
                    v = lf(act)
                    if isinstance(v, str):
                        return v in strings
                    return op(v, rv)

                return in_strings
        rf = _fn(right)
        return lambda act: op(lf(act), rf(act))

    def library(self, node: Call, target: Compiled | None, args: list[Compiled]) -> Compiled:
        overloads = self.checked.overloads.get(id(node), ())
        if not overloads:  # pragma: no cover - the checker guarantees candidates
            raise self.error(f"undeclared reference to '{node.function}'", node)
        operands = ([target] if target is not None else []) + args
        if overloads[0].pure and all(isinstance(o, Const) for o in operands):
            values = [o.value for o in operands if isinstance(o, Const)]
            try:
                return Const(_dispatch(node.function, overloads, values))
            except CelError as exc:
                raise self.error(f"{node.function}(): {exc}", node) from exc
        fns = [_fn(o) for o in operands]
        static = [self.checked.types.get(id(n)) for n in (node.target, *node.args) if n]
        if len(overloads) == 1 and DYN not in static and not _has_param(overloads[0]):
            impl = overloads[0].impl
            return _direct(impl, fns, node.function)
        name = node.function
        return lambda act: _dispatch(name, overloads, [f(act) for f in fns])


def _has_param(ov: Overload) -> bool:
    types = ([ov.target] if ov.target is not None else []) + list(ov.args)
    return any(t.is_param or any(p.is_param for p in t.params) for t in types)


def _device_map_get(mapping: object, key: object) -> object:
    assert isinstance(mapping, Mapping)
    if not isinstance(key, str):
        raise no_overload("_[_]", mapping, key)
    return mapping.get(key, _EMPTY)


def _direct(impl: object, fns: list[Fn], name: str) -> Fn:
    call = impl
    assert callable(call)
    if len(fns) == 1:
        (f0,) = fns

        def call1(act: list[object]) -> object:
            value = f0(act)
            try:
                return call(value)
            except _INTERNAL as exc:
                raise CelEvaluationError(f"{name}: {exc}") from exc

        return call1
    if len(fns) == 2:
        f0, f1 = fns

        def call2(act: list[object]) -> object:
            a, b = f0(act), f1(act)
            try:
                return call(a, b)
            except _INTERNAL as exc:
                raise CelEvaluationError(f"{name}: {exc}") from exc

        return call2

    def call_n(act: list[object]) -> object:
        values = [f(act) for f in fns]
        try:
            return call(*values)
        except _INTERNAL as exc:
            raise CelEvaluationError(f"{name}: {exc}") from exc

    return call_n


def _dispatch(name: str, overloads: tuple[Overload, ...], values: list[object]) -> object:
    for ov in overloads:
        declared = ([ov.target] if ov.target is not None else []) + list(ov.args)
        if all(value_has_type(v, t) for v, t in zip(values, declared, strict=True)):
            try:
                return ov.impl(*values)
            except _INTERNAL as exc:
                raise CelEvaluationError(f"{name}: {exc}") from exc
    raise no_overload(name, *values)
