"""Checked syntax tree -> one Python closure (`Fn`) per node.

Promises: the closure computes exactly what CEL defines for the expression on a `DeviceView`
(errors as `CelEvaluationError`), touches the device's own mappings without copying them, fuses
`device.attributes["domain"].name` (and `capacity`) into a single lookup, folds calls of pure
functions on literals (`quantity("40Gi")`) at compile time (a folding error is raised per
evaluation, where Kubernetes reports it), generates `&&`/`||` chains as single functions (see
`codegen`), and specializes comparisons against literals. Variables of macros and `cel.bind`
live in numbered slots of the activation list; a bound value that failed is kept as `Failed`
and raised where the variable is read. Optional chaining (`a.?b`, `m[?k]`, `[?x]`, `{?k: v}`,
selection and indexing on optionals, `optMap`/`optFlatMap`) uses `lib_optional`; the optional-aware
run-time checks are compiled in only where the checker saw an `optional_type` or `dyn` operand, so
selectors without optionals run exactly the closures they ran before.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpudra_cel.access import has_field, index_value, select_value
from gpudra_cel.calls import direct_call, has_param, matches_constant, raiser
from gpudra_cel.checker import Checked
from gpudra_cel.codegen import InlineCompare, SlotField, chain
from gpudra_cel.dispatch import Constant, dispatch, receiver_dispatch
from gpudra_cel.errors import CelCompileError, CelError, CelEvaluationError
from gpudra_cel.lib_optional import (
    OPTIONAL_METHODS,
    device_optional_method,
    entry_value,
    has_any,
    index_any,
    index_optional,
    optional_device_path,
    optional_list,
    optional_macro,
    optional_method,
    select_any,
    select_optional,
)
from gpudra_cel.macros import comprehension, comprehension2, sort_by_macro
from gpudra_cel.operators import (
    BINARY,
    FAST_INT_COMPARE,
    UNARY_NEG,
    Fn,
    logical_not,
    ternary,
)
from gpudra_cel.paths import DEVICE_FIELDS, DevicePath
from gpudra_cel.regex import compile_regex
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
    OptIndex,
    OptSelect,
    Select,
)
from gpudra_cel.types import DEVICE, DYN, TYPE_IDENTIFIERS
from gpudra_cel.values import (
    CelOptional,
    CelTypeValue,
    CelUint,
    Failed,
    equal_operator,
    map_lookup,
    type_name,
)

__all__ = ["Const", "compile_tree"]

_EMPTY: Mapping[str, object] = {}
_REGEX_FUNCTIONS = frozenset({"matches", "find", "findAll"})


class Const:
    """A compile-time constant (folded literal or pure call)."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value


Compiled = Fn | Const | DevicePath


def compile_tree(root: Node, checked: Checked, expression: str) -> tuple[Fn, int]:
    """Return the closure and the number of activation slots it needs."""
    compiler = _Compiler(checked, expression)
    return _fn(compiler.visit(root, {})), compiler.slots + 1


def _fn(c: Compiled) -> Fn:
    if isinstance(c, DevicePath):
        return c.fn()
    if isinstance(c, Const):
        value = c.value
        return lambda act: value
    return c


class _Compiler:
    # Calls of pure functions on constants are evaluated once, here. The metered variant
    # (`runtime_cost`) turns this off: cel-go folds no calls, so they cost at every evaluation,
    # and a constant chain past the cost limit must be cancelled, not computed while compiling.
    fold_calls = True

    def __init__(self, checked: Checked, expression: str) -> None:
        self.checked = checked
        self.expression = expression
        self.slots = 0
        self.bind_slots: set[int] = set()

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
                if slot in self.bind_slots:
                    return _bound_variable(slot)
                return lambda act: act[slot]
            if node.name in TYPE_IDENTIFIERS:  # `int`, `google.protobuf.Timestamp`: a constant
                return Const(CelTypeValue(node.name))
            return lambda act: act[0]
        if isinstance(node, Select | Index):
            fused = self.device_path(node)
            return fused if fused is not None else self.access(node, scope)
        if isinstance(node, OptSelect | OptIndex):
            return self.optional_access(node, scope)
        if isinstance(node, Has):
            return self.has(node, scope)
        if isinstance(node, ListLit) and node.optional:
            return optional_list(node.optional, [_fn(self.visit(i, scope)) for i in node.items])
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
            if node.kind in ("optMap", "optFlatMap"):
                return optional_macro(node.kind, rng, slot, _fn(self.visit(node.body, inner)))
            if node.kind == "sortBy":
                return sort_by_macro(rng, slot, _fn(self.visit(node.body, inner)))
            if node.var2 is not None:
                self.slots += 1
                inner[node.var2] = self.slots
            pred = _fn(self.visit(node.predicate, inner)) if node.predicate else None
            body = _fn(self.visit(node.body, inner))
            if node.var2 is not None:
                return comprehension2(node.kind, rng, slot, inner[node.var2], pred, body)
            return comprehension(node.kind, rng, slot, pred, body)
        if isinstance(node, Bind):
            init = _fn(self.visit(node.init, scope))
            self.slots += 1
            slot = self.slots
            self.bind_slots.add(slot)
            inner = {**scope, node.var: slot}
            if isinstance(node.body, Call) and node.body.function in ("_&&_", "_||_"):
                return self.logical_chain(node.body, inner, bind=(slot, init))
            body = _fn(self.visit(node.body, inner))

            def bind(act: list[object]) -> object:
                try:
                    act[slot] = init(act)
                except CelEvaluationError as exc:
                    act[slot] = Failed(exc)
                return body(act)

            return bind
        if isinstance(node, Call):
            return self.call(node, scope)
        raise self.error(f"unsupported expression {type(node).__name__}", node)

    # ------------------------------------------------------------------ access
    def device_path(self, node: Select | Index) -> DevicePath | None:
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
        if not self.is_device(current):
            return None
        keys.reverse()
        if keys[0] not in DEVICE_FIELDS or len(keys) > 3:
            return None
        field = DEVICE_FIELDS[keys[0]]
        if len(keys) > 1 and field not in ("attributes", "capacity"):
            return None
        return DevicePath(field, *keys[1:])

    def may_be_optional(self, node: Node) -> bool:
        """Could `node`'s value be an optional at run time? (static type optional or dyn)"""
        t = self.checked.types.get(id(node), DYN)
        return t == DYN or t.name == "optional_type"

    def access(self, node: Select | Index, scope: dict[str, int]) -> Compiled:
        device_map = self.is_device_map(node.operand)
        if device_map:
            self.visit(node.operand, scope)  # (passes that follow visits see it)
        operand = (
            self.device_map(node.operand) if device_map else _fn(self.visit(node.operand, scope))
        )
        optional = self.may_be_optional(node.operand)
        if isinstance(node, Select):
            name = node.field
            if device_map:
                return lambda act: _device_map_get(operand(act), name)
            missing = f"no such key: {name}"
            general = select_any if optional else select_value

            def select(act: list[object]) -> object:
                value = operand(act)
                if value.__class__ is dict:  # the common case: an attribute map
                    try:
                        return value[name]  # type: ignore[index]
                    except KeyError:
                        raise CelEvaluationError(missing) from None
                return general(value, name)

            return select
        index = _fn(self.visit(node.index, scope))
        if device_map:
            return lambda act: _device_map_get(operand(act), index(act))
        if optional:
            return lambda act: index_any(operand(act), index(act))
        return lambda act: index_value(operand(act), index(act))

    def optional_device_path(self, node: Node) -> DevicePath | None:
        """`device.{attributes,capacity}[<domain>].?<name>` (or `[?"<name>"]`) with literals."""
        if not isinstance(node, OptSelect | OptIndex):
            return None
        operand = node.operand
        if isinstance(operand, OptIndex) and self.is_device_map(operand.operand):
            # device.attributes[?"d"] is always present (Kubernetes' default map): a plain index
            operand = Index(operand.line, operand.column, operand.operand, operand.index)
        plain: Select | Index = (
            Select(node.line, node.column, operand, node.field)
            if isinstance(node, OptSelect)
            else Index(node.line, node.column, operand, node.index)
        )
        path = self.device_path(plain)
        return path if path is not None and path.name is not None else None

    def optional_access(self, node: OptSelect | OptIndex, scope: dict[str, int]) -> Fn:
        """`x.?f` / `x[?k]`; on DRA's attribute/capacity maps one fused lookup."""
        fused = self.optional_device_path(node)
        if fused is not None and fused.name is not None:
            return optional_device_path(fused.field, fused.domain, fused.name)
        device_map = self.is_device_map(node.operand)
        if device_map:
            self.visit(node.operand, scope)
        operand = (
            self.device_map(node.operand) if device_map else _fn(self.visit(node.operand, scope))
        )
        key: Fn
        if isinstance(node, OptSelect):
            name = node.field
            key = lambda act: name  # noqa: E731
        else:
            key = _fn(self.visit(node.index, scope))
        if device_map:  # every domain is found (unknown: empty)
            return lambda act: CelOptional(_device_map_get(operand(act), key(act)))
        if isinstance(node, OptSelect):
            return lambda act: select_optional(operand(act), name)
        return lambda act: index_optional(operand(act), key(act))

    def is_device(self, node: Node) -> bool:
        """The `device` variable itself (not a macro or cel.bind variable of that name)."""
        return (
            isinstance(node, Ident)
            and node.name == "device"
            and self.checked.types.get(id(node)) == DEVICE
        )

    def is_device_map(self, node: Node) -> bool:
        # device.attributes / device.capacity: an unknown domain reads as an empty map.
        return (
            isinstance(node, Select)
            and self.is_device(node.operand)
            and node.field in ("attributes", "capacity")
        )

    def device_map(self, node: Node) -> Fn:
        """`device.attributes` / `device.capacity` as the plain table (no per-call wrapper)."""
        assert isinstance(node, Select)
        if node.field == "attributes":
            return lambda act: act[0].attributes  # type: ignore[attr-defined]
        return lambda act: act[0].capacity  # type: ignore[attr-defined]

    def has(self, node: Has, scope: dict[str, int]) -> Fn:
        if self.is_device_map(node.operand):
            # Kubernetes wraps device.attributes/capacity so that every domain is found (an
            # unknown one as an empty map); has() asks that same lookup, so it is always true.
            # `"domain" in device.attributes` is the real membership test.
            return lambda act: True
        operand = _fn(self.visit(node.operand, scope))
        name = node.field
        general = has_any if self.may_be_optional(node.operand) else has_field

        def has(act: list[object]) -> object:
            value = operand(act)
            if value.__class__ is dict:
                return name in value  # type: ignore[operator]
            return general(value, name)

        return has

    def map_literal(self, node: MapLit, scope: dict[str, int]) -> Fn:
        pairs = [(_fn(self.visit(k, scope)), _fn(self.visit(v, scope))) for k, v in node.entries]
        optional = frozenset(node.optional)

        def build(act: list[object]) -> object:
            result: dict[object, object] = {}
            for i, (kf, vf) in enumerate(pairs):
                key = kf(act)
                if type(key) not in (str, int, CelUint, bool):
                    raise CelEvaluationError(f"unsupported map key type {type_name(key)}")
                if map_lookup(result, key)[0]:
                    raise CelEvaluationError(f"Failed with repeated key: {key!r}")
                value = vf(act)
                if i in optional:  # `?k: v`: the entry only when v has a value
                    present, value = entry_value(value)
                    if not present:
                        continue
                result[key] = value
            return result

        return build

    # ------------------------------------------------------------------ calls
    def call(self, node: Call, scope: dict[str, int]) -> Compiled:
        fn = node.function
        if fn in ("_&&_", "_||_"):
            return self.logical_chain(node, scope)
        args = [self.visit(a, scope) for a in node.args]
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

    def logical_chain(
        self, node: Call, scope: dict[str, int], bind: tuple[int, Fn] | None = None
    ) -> Fn:
        """`a && b && c` (or `||`) flattened into one generated function; `bind` (slot, init)
        evaluates a `cel.bind` variable first, in the same function."""
        operands: list[Node] = []
        pending: list[Node] = [node]
        while pending:  # left-to-right flattening of the same operator
            current = pending.pop()
            if isinstance(current, Call) and current.function == node.function:
                pending += reversed(current.args)
            else:
                operands.append(current)
        parts: list[Fn | InlineCompare] = []
        for operand in operands:
            inline = self.inline_compare(operand, scope)
            parts.append(inline if inline is not None else _fn(self.visit(operand, scope)))
        return chain("or" if node.function == "_||_" else "and", parts, bind)

    def inline_compare(self, node: Node, scope: dict[str, int]) -> InlineCompare | None:
        if isinstance(node, Has):
            slot_path = self.slot_field(node.operand, node.field, scope)
            return InlineCompare(slot_path, "has", None) if slot_path is not None else None
        if not (isinstance(node, Call) and node.function in BINARY and len(node.args) == 2):
            return None
        left_node, right_node = node.args
        if not isinstance(left_node, Select | Index):
            return None
        if not isinstance(right_node, Literal | ListLit):
            return None
        path: DevicePath | SlotField | None = self.device_path(left_node)
        if path is None and isinstance(left_node, Select):
            path = self.slot_field(left_node.operand, left_node.field, scope)
        right = self.visit(right_node, scope)
        if path is None or not isinstance(right, Const):
            return None
        if not InlineCompare.accepts(path, node.function, right.value):
            return None
        return InlineCompare(path, node.function, right.value)

    def slot_field(self, operand: Node, name: str, scope: dict[str, int]) -> SlotField | None:
        if self.checked.types.get(id(operand), DYN).name == "optional_type":
            return None  # o.f on an optional stays optional: not a plain inlined lookup
        if isinstance(operand, Ident) and operand.name in scope:
            return SlotField(scope[operand.name], name)
        return None

    def binary(self, fn: str, left: Compiled, right: Compiled) -> Compiled:
        op = BINARY[fn]
        if isinstance(left, DevicePath) and isinstance(right, Const):
            fused = left.compare(fn, right.value)
            if fused is not None:
                return fused
        lf = _fn(left)
        if isinstance(right, Const):
            rv = right.value
            if fn in ("_==_", "_!=_") and isinstance(rv, str):
                # For a string literal, Python's == is CEL's: other kinds are simply unequal.
                if fn == "_!=_":
                    return lambda act: lf(act) != rv

                def str_equal(act: list[object]) -> object:
                    v = lf(act)
                    # a Kubernetes value (a Semver attribute) refuses a string: an error
                    return v == rv or (v.__class__ is not str and equal_operator(v, rv))

                return str_equal
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
        if self.fold_calls and overloads[0].pure and all(isinstance(o, Const) for o in operands):
            values = [o.value for o in operands if isinstance(o, Const)]
            try:
                return Const(dispatch(node.function, overloads, values))
            except CelEvaluationError as exc:
                # Kubernetes reports this per device at run time (`false && quantity("x")...`
                # is simply false), so the folded error is raised when evaluated, not now.
                return raiser(exc)
        if node.function in OPTIONAL_METHODS and target is not None:
            special = self.optional_method(node, target, args)
            if special is not None:
                return special
        if node.function in _REGEX_FUNCTIONS and len(operands) >= 2:
            pattern = operands[1]  # s.matches(p), matches(s, p), s.findAll(p, n)
            if isinstance(pattern, Const) and isinstance(pattern.value, str):
                try:  # Kubernetes rejects a bad literal pattern when compiling, so do we
                    compile_regex(pattern.value)
                except CelError as exc:
                    raise self.error(str(exc), node) from exc
                if node.function == "matches":
                    return matches_constant(_fn(operands[0]), pattern.value)
        fns = [_fn(o) for o in operands]
        static = [self.checked.types.get(id(n)) for n in (node.target, *node.args) if n]
        if len(overloads) == 1 and DYN not in static and not has_param(overloads[0]):
            impl = overloads[0].impl
            return direct_call(impl, fns, node.function)
        name = node.function
        if node.target is not None and all(ov.target is not None for ov in overloads):
            distinct = {ov.target.name for ov in overloads if ov.target is not None}
            if len(distinct) == len(overloads) and "dyn" not in distinct:
                call_args: list[Fn | Constant] = [
                    Constant(a.value) if isinstance(a, Const) else _fn(a) for a in operands[1:]
                ]
                return receiver_dispatch(name, overloads, fns[0], call_args)
        return lambda act: dispatch(name, overloads, [f(act) for f in fns])

    def optional_method(self, node: Call, target: Compiled, args: list[Compiled]) -> Fn | None:
        """`hasValue`/`value`/`orValue`/`or` on a statically optional target, without dispatch;
        on `device.attributes["d"].?name` one map lookup (`hasValue` a membership test)."""
        assert node.target is not None
        if self.checked.types.get(id(node.target), DYN).name != "optional_type":
            return None
        arg = args[0] if args else None
        path = self.optional_device_path(node.target)
        if path is not None and path.domain is not None and path.name is not None:
            literal = isinstance(arg, Const)
            fused = device_optional_method(
                node.function,
                path.field,
                path.domain,
                path.name,
                None if literal or arg is None else _fn(arg),
                arg.value if isinstance(arg, Const) else None,
            )
            if fused is not None:
                return fused
        return optional_method(node.function, _fn(target), _fn(arg) if arg is not None else None)


def _bound_variable(slot: int) -> Fn:
    def read(act: list[object]) -> object:
        value = act[slot]
        if value.__class__ is Failed:
            raise value.error  # type: ignore[attr-defined]
        return value

    return read


def _device_map_get(mapping: object, key: object) -> object:
    """Kubernetes' lookup in device.attributes/capacity: any key not there (an int through
    `dyn`, too) finds the empty map."""
    assert isinstance(mapping, Mapping)
    return mapping.get(key, _EMPTY) if key.__class__ is str else _EMPTY
