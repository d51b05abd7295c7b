"""Static type check of a parsed selector against the DRA environment.

Promises: every identifier resolves (`device`, a macro/`cel.bind` variable, or one of cel-go's
type identifiers such as `int` or `google.protobuf.Timestamp`, typed `type(T)`), every function
has at least one overload that the argument types could match, field selection happens only on
`device` and maps, and the whole expression can yield a bool. Attribute values are `dyn`, so
mistakes involving them surface at run time, exactly as in Kubernetes. Optionals are typed as
cel-go types them: `x.?f` and `x[?k]` are `optional_type(T)`, selecting or indexing into an
`optional_type(T)` stays optional, `[?e]` / `{?k: e}` need `e` to be optional. The result records
each node's type and each call's candidate overloads for the compiler.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpudra_cel.errors import CelCompileError
from gpudra_cel.functions import Overload
from gpudra_cel.library import FUNCTIONS
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
from gpudra_cel.types import (
    BOOL,
    BYTES,
    DEVICE,
    DEVICE_FIELDS,
    DOUBLE,
    DURATION,
    DYN,
    INT,
    NULL,
    NUMERIC,
    STRING,
    TIMESTAMP,
    TYPE_IDENTIFIERS,
    UINT,
    CelType,
    assignable,
    join,
    list_of,
    map_of,
    optional_of,
    substitute,
)
from gpudra_cel.values import CelUint

__all__ = ["Checked", "check"]

_LOGICAL = frozenset({"_&&_", "_||_"})
_EQUALITY = frozenset({"_==_", "_!=_"})
_ORDERING = frozenset({"_<_", "_<=_", "_>_", "_>=_"})
_ARITH = frozenset({"_-_", "_*_", "_/_", "_%_"})
_ORDERED_KINDS = frozenset({"string", "bool", "bytes", TIMESTAMP.name, DURATION.name})
_MAP_KEYS = frozenset({INT, UINT, STRING, BOOL, DYN})
_OPTIONAL = "optional_type"
# cel-go's timestamp / duration arithmetic: (operator, left, right) -> result
_TIME_ARITHMETIC = {
    ("_+_", TIMESTAMP, DURATION): TIMESTAMP,
    ("_+_", DURATION, TIMESTAMP): TIMESTAMP,
    ("_+_", DURATION, DURATION): DURATION,
    ("_-_", TIMESTAMP, DURATION): TIMESTAMP,
    ("_-_", TIMESTAMP, TIMESTAMP): DURATION,
    ("_-_", DURATION, DURATION): DURATION,
}
# cel-go's checker lets null meet these in `==` (its "legacy nullable" kinds)
_NULLABLE = frozenset({TIMESTAMP, DURATION})


@dataclass
class Checked:
    types: dict[int, CelType] = field(default_factory=dict)
    overloads: dict[int, tuple[Overload, ...]] = field(default_factory=dict)


def check(root: Node, expression: str) -> Checked:
    checker = _Checker(expression)
    result = checker.visit(root, {})
    if result not in (BOOL, DYN):
        raise checker.error(f"must evaluate to bool, not {result}", root)
    return checker.checked


def _literal_type(value: object) -> CelType:
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, CelUint):
        return UINT
    if isinstance(value, int):
        return INT
    if isinstance(value, float):
        return DOUBLE
    if isinstance(value, str):
        return STRING
    if isinstance(value, bytes):
        return BYTES
    return NULL


class _Checker:
    def __init__(self, expression: str) -> None:
        self.expression = expression
        self.checked = Checked()

    def error(self, message: str, node: Node) -> CelCompileError:
        return CelCompileError(
            message, expression=self.expression, line=node.line, column=node.column
        )

    def visit(self, node: Node, scope: dict[str, CelType]) -> CelType:
        t = self._visit(node, scope)
        self.checked.types[id(node)] = t
        return t

    def _visit(self, node: Node, scope: dict[str, CelType]) -> CelType:
        if isinstance(node, Literal):
            return _literal_type(node.value)
        if isinstance(node, Ident):
            if node.name in scope:
                return scope[node.name]
            if node.name == "device":
                return DEVICE
            if node.name in TYPE_IDENTIFIERS:
                return TYPE_IDENTIFIERS[node.name]
            raise self.error(f"undeclared reference to '{node.name}'", node)
        if isinstance(node, Select):
            return self.select(self.visit(node.operand, scope), node.field, node)
        if isinstance(node, Has):
            operand = self.visit(node.operand, scope)
            self.select(operand, node.field, node)
            return BOOL
        if isinstance(node, Index):
            return self.index(self.visit(node.operand, scope), self.visit(node.index, scope), node)
        if isinstance(node, OptSelect):
            return optional_of(
                _unwrap(self.select(self.visit(node.operand, scope), node.field, node))
            )
        if isinstance(node, OptIndex):
            operand, index = self.visit(node.operand, scope), self.visit(node.index, scope)
            return optional_of(_unwrap(self.index(operand, index, node)))
        if isinstance(node, ListLit):
            elem: CelType | None = None
            for i, item in enumerate(node.items):
                t = self.visit(item, scope)
                if i in node.optional:
                    t = self.optional_entry(t, item)
                elem = t if elem is None else join(elem, t)
            return list_of(elem or DYN)
        if isinstance(node, MapLit):
            key_t: CelType | None = None
            value_t: CelType | None = None
            for i, (key, value) in enumerate(node.entries):
                kt, vt = self.visit(key, scope), self.visit(value, scope)
                if i in node.optional:
                    vt = self.optional_entry(vt, value)
                if kt not in _MAP_KEYS:
                    raise self.error(f"unsupported map key type {kt}", key)
                key_t = kt if key_t is None else join(key_t, kt)
                value_t = vt if value_t is None else join(value_t, vt)
            return map_of(key_t or DYN, value_t or DYN)
        if isinstance(node, Comprehension):
            return self.comprehension(node, scope)
        if isinstance(node, Bind):
            init = self.visit(node.init, scope)
            return self.visit(node.body, {**scope, node.var: init})
        if isinstance(node, Call):
            return self.call(node, scope)
        raise self.error(f"unsupported expression {type(node).__name__}", node)

    def optional_entry(self, t: CelType, node: Node) -> CelType:
        """The element type of an optional list element / map entry `?e`."""
        if t.name == _OPTIONAL:
            return t.params[0]
        if t == DYN:
            return DYN
        raise self.error(f"an optional entry '?e' needs an optional value, found {t}", node)

    def select(self, operand: CelType, name: str, node: Node) -> CelType:
        if operand.name == _OPTIONAL:  # o.f on optional(T): optional(T.f)
            return optional_of(_unwrap(self.select(operand.params[0], name, node)))
        if operand == DEVICE:
            if name not in DEVICE_FIELDS:
                raise self.error(f"undefined field '{name}' of device", node)
            return DEVICE_FIELDS[name]
        if operand == DYN:
            return DYN
        if operand.name == "map":
            if operand.params[0] not in (STRING, DYN):
                raise self.error(f"cannot select field '{name}' from {operand}", node)
            return operand.params[1]
        raise self.error(f"type '{operand}' does not support field selection", node)

    def index(self, operand: CelType, index: CelType, node: Node) -> CelType:
        if operand.name == _OPTIONAL:  # o[k] on optional(T): optional(T[k])
            return optional_of(_unwrap(self.index(operand.params[0], index, node)))
        if operand == DYN:
            return DYN
        if operand.name == "list" and index in (INT, UINT, DYN):
            return operand.params[0]
        if operand.name == "map" and (assignable(operand.params[0], index) or index in NUMERIC):
            return operand.params[1]
        if operand == DEVICE and index in (STRING, DYN):
            return DYN
        raise self.error(
            f"found no matching overload for '_[_]' applied to ({operand}, {index})", node
        )

    def comprehension(self, node: Comprehension, scope: dict[str, CelType]) -> CelType:
        range_t = self.visit(node.range, scope)
        if node.kind in ("optMap", "optFlatMap"):
            return self.optional_macro(node, range_t, scope)
        if node.kind == "sortBy":
            return self.sort_by(node, range_t, scope)
        if range_t.name == "list":
            elem, key, value = range_t.params[0], INT, range_t.params[0]
        elif range_t.name == "map":
            elem, key, value = range_t.params[0], range_t.params[0], range_t.params[1]
        elif range_t == DYN:
            elem, key, value = DYN, DYN, DYN
        else:
            raise self.error(f"{node.kind}() cannot iterate over {range_t}", node)
        if node.var2 is not None:
            return self.two_var(node, scope, key, value)
        inner = {**scope, node.var: elem}
        if node.predicate is not None:
            self.expect_bool(self.visit(node.predicate, inner), node.predicate, node.kind)
        body = self.visit(node.body, inner)
        if node.kind == "map":
            return list_of(body)
        self.expect_bool(body, node.body, node.kind)
        if node.kind == "filter":
            return list_of(elem)
        return BOOL

    def two_var(
        self, node: Comprehension, scope: dict[str, CelType], key: CelType, value: CelType
    ) -> CelType:
        assert node.var2 is not None
        inner = {**scope, node.var: key, node.var2: value}
        if node.predicate is not None:
            self.expect_bool(self.visit(node.predicate, inner), node.predicate, node.kind)
        body = self.visit(node.body, inner)
        if node.kind == "transformList":
            return list_of(body)
        if node.kind == "transformMap":
            return map_of(key, body)
        self.expect_bool(body, node.body, node.kind)
        return BOOL

    def sort_by(self, node: Comprehension, range_t: CelType, scope: dict[str, CelType]) -> CelType:
        """`l.sortBy(v, key)`: cel-go's lists extension; the keys must be of a comparable type."""
        if range_t.name != "list" and range_t != DYN:
            raise self.error(f"sortBy() needs a list, found {range_t}", node)
        elem = range_t.params[0] if range_t.params else DYN
        key = self.visit(node.body, {**scope, node.var: elem})
        if key not in (INT, UINT, DOUBLE, BOOL, STRING, BYTES, DURATION, TIMESTAMP, DYN):
            raise self.error(
                f"found no matching overload for '@sortByAssociatedKeys' applied to "
                f"'{list_of(elem)}.({list_of(key)})'",
                node,
            )
        return list_of(elem)

    def optional_macro(
        self, node: Comprehension, range_t: CelType, scope: dict[str, CelType]
    ) -> CelType:
        if range_t.name != _OPTIONAL and range_t != DYN:
            raise self.error(f"{node.kind}() needs an optional target, found {range_t}", node)
        value_t = range_t.params[0] if range_t.params else DYN
        body = self.visit(node.body, {**scope, node.var: value_t})
        if node.kind == "optMap":
            return optional_of(body)
        if body.name != _OPTIONAL and body != DYN:
            raise self.error(f"optFlatMap() must yield an optional, found {body}", node.body)
        return body if body != DYN else optional_of(DYN)

    def expect_bool(self, t: CelType, node: Node, what: str) -> None:
        if t not in (BOOL, DYN):
            raise self.error(f"{what}: expected bool, found {t}", node)

    def call(self, node: Call, scope: dict[str, CelType]) -> CelType:
        fn = node.function
        target = self.visit(node.target, scope) if node.target is not None else None
        args = [self.visit(a, scope) for a in node.args]
        if fn in _LOGICAL or fn == "!_":
            for arg, arg_node in zip(args, node.args, strict=True):
                self.expect_bool(arg, arg_node, fn)
            return BOOL
        if fn == "_?_:_":
            self.expect_bool(args[0], node.args[0], "?:")
            return join(args[1], args[2])
        if fn in _EQUALITY:
            # cel-go declares `==` as (A, A): `1 == 1.0` is a type error, `dyn(1) == 1.0` is
            # true at run time (heterogeneous equality).
            if not assignable(args[0], args[1]) and not (
                NULL in args and (args[0] in _NULLABLE or args[1] in _NULLABLE)
            ):
                raise self.no_overload(fn, None, args, node)
            return BOOL
        if fn in _ORDERING:
            a, b = args
            if DYN in (a, b) or (a in NUMERIC and b in NUMERIC):
                return BOOL
            if a == b and a.name in _ORDERED_KINDS:
                return BOOL
            raise self.no_overload(fn, None, args, node)
        if fn == "@in":
            item, container = args
            if container == DYN:
                return BOOL
            if container.name in ("list", "map") and assignable(container.params[0], item):
                return BOOL
            raise self.no_overload("@in", None, args, node)
        if fn in ("_+_", "-_") or fn in _ARITH:
            return self.arithmetic(fn, args, node)
        return self.library_call(node, target, args)

    def arithmetic(self, fn: str, args: list[CelType], node: Call) -> CelType:
        if fn == "-_":
            (a,) = args
            if a in (INT, DOUBLE, DYN):
                return a
            raise self.no_overload(fn, None, args, node)
        a, b = args
        if a == DYN or b == DYN:
            known = b if a == DYN else a
            return known if known in NUMERIC else DYN
        if fn == "_+_" and a.name == "list" and b.name == "list":
            return join(a, b)
        if (fn, a, b) in _TIME_ARITHMETIC:
            return _TIME_ARITHMETIC[fn, a, b]
        allowed = NUMERIC | {STRING, BYTES} if fn == "_+_" else NUMERIC
        if fn == "_%_":
            allowed = frozenset({INT, UINT})
        if a == b and a in allowed:
            return a
        raise self.no_overload(fn, None, args, node)

    def library_call(self, node: Call, target: CelType | None, args: list[CelType]) -> CelType:
        overloads = FUNCTIONS.get(node.function)
        if not overloads:
            raise self.error(f"undeclared reference to '{node.function}'", node)
        candidates: list[tuple[Overload, CelType]] = []
        for ov in overloads:
            if (ov.target is None) != (target is None) or len(ov.args) != len(args):
                continue
            bindings: dict[str, CelType] = {}
            if (
                target is not None
                and ov.target is not None
                and not assignable(ov.target, target, bindings)
            ):
                continue
            if all(assignable(p, a, bindings) for p, a in zip(ov.args, args, strict=True)):
                candidates.append((ov, substitute(ov.result, bindings)))
        if not candidates:
            raise self.no_overload(node.function, target, args, node)
        self.checked.overloads[id(node)] = tuple(ov for ov, _ in candidates)
        result = candidates[0][1]
        for _, t in candidates[1:]:
            result = join(result, t)
        return result

    def no_overload(
        self, fn: str, target: CelType | None, args: list[CelType], node: Node
    ) -> CelCompileError:
        shown = ", ".join(str(a) for a in args)
        where = f"{target}.({shown})" if target is not None else f"({shown})"
        return self.error(f"found no matching overload for '{fn}' applied to {where}", node)


def _unwrap(t: CelType) -> CelType:
    """`T` for `optional_type(T)`: chained optionals do not nest."""
    return t.params[0] if t.name == _OPTIONAL else t
