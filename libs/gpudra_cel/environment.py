"""Which DRA CEL environment an expression is compiled in: `CelOptions`, and the check that an
expression uses only what that environment declares.

Kubernetes declares the `device` variable and DRA's functions per feature gate
(k8s.io/dynamic-resource-allocation `cel/compile.go`, applied to new expressions):

- `DRAConsumableCapacity` adds the field `device.allowMultipleAllocations`; without it the field
  is unknown (`undefined field 'allowMultipleAllocations'`).
- `DRAListTypeAttributes` declares attribute values as `dyn` (so a list-typed attribute can be
  iterated by `all`/`exists`/...) and adds `includes()`; without it attribute values are typed
  `google.protobuf.Any`, which a comprehension may not range over, and `includes` is undeclared.

Kubernetes' allocator itself compiles stored expressions, where every declaration is present
whatever the gates say; the default `CelOptions()` is that environment. With a gate off, gpudra
rejects what Kubernetes' API validation would have rejected when the object was written.

The check runs on the type-checked tree and only ever rejects: an expression it accepts means
the same in every environment. The `Any` typing is followed through the shapes selectors use
(`device.attributes[d].name`, `[d][name]`, `cel.bind` variables holding a domain or a value,
a conditional whose branches are both attribute values, a list literal of attribute values, the
value variable of a two-variable comprehension over a domain, and the optional forms: `.?name`,
`[?key]`, `optional.of(x)` and `[?x]` items, unwrapped by `value()` / `orValue()` or kept by
`or()`); a value passed through `dyn()` or any other function is `dyn`, as in cel-go. (That
`orValue([])` keeps the attribute's `Any` type is this check's reading: cel-go binds the type
parameter to the optional's value type first; either way such a selector is rejected.)
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudra_cel.errors import CelCompileError
from gpudra_cel.syntax import (
    Bind,
    Call,
    Comprehension,
    Has,
    Ident,
    Index,
    ListLit,
    Node,
    OptIndex,
    OptSelect,
    Select,
)
from gpudra_cel.tree import children

__all__ = ["ALL_FEATURES", "CelOptions", "check_environment"]

_ATTRIBUTE = "any"  # an attribute value: google.protobuf.Any without list-type attributes
_DOMAIN = "domain"  # device.attributes[<domain>]: a map of attribute values
_DEVICE = "device"
_DOMAIN_MAP = "attributes"  # device.attributes: domain -> attribute map
_ATTRIBUTE_LIST = "list"  # a list literal of attribute values
# what a comprehension's value variable holds, by the kind of its range
_ELEMENTS = {_DOMAIN_MAP: _DOMAIN, _DOMAIN: _ATTRIBUTE, _ATTRIBUTE_LIST: _ATTRIBUTE}
_OTHER = ""
_OPTIONAL = "?"  # prefix: an optional of that kind (`d.?name`, `d[?name]`, `optional.of(x)`)
# methods of an optional and what they return: its value, or an optional of the same kind
_UNWRAP = frozenset({"value", "orValue"})
_KEEP = frozenset({"or"})
_WRAP = frozenset({"optional.of", "optional.ofNonZeroValue"})


@dataclass(frozen=True, slots=True)
class CelOptions:
    """The environment a selector is compiled in (hashable: compiled selectors are cached per
    expression and options).

    `consumable_capacity` / `list_type_attributes`: Kubernetes' DRAConsumableCapacity and
    DRAListTypeAttributes gates, as they shape the declarations (see the module docstring).
    `reject_costly`: refuse at compile time an expression whose worst-case cost estimate exceeds
    the limit, as Kubernetes' API validation does for new expressions. Off (the default, as in
    Kubernetes' allocator), such an expression compiles with run-time cost accounting and an
    evaluation that goes over the limit fails.
    """

    consumable_capacity: bool = True
    list_type_attributes: bool = True
    reject_costly: bool = False

    @property
    def all_declared(self) -> bool:
        """Every gated declaration is present (nothing for `check_environment` to reject)."""
        return self.consumable_capacity and self.list_type_attributes


ALL_FEATURES = CelOptions()


def check_environment(root: Node, options: CelOptions, expression: str) -> None:
    """Raise `CelCompileError` at the first use of something `options` does not declare."""
    if options.all_declared:
        return
    _Gate(options, expression).visit(root, {})


class _Gate:
    def __init__(self, options: CelOptions, expression: str) -> None:
        self.options = options
        self.expression = expression

    def error(self, message: str, node: Node, gate: str) -> CelCompileError:
        return CelCompileError(
            message, expression=self.expression, line=node.line, column=node.column, gate=gate
        )

    def visit(self, node: Node, scope: dict[str, str]) -> str:
        """Check `node` and its children; return what kind of value it is (see `_ATTRIBUTE`)."""
        if isinstance(node, Ident):
            return scope.get(node.name, _DEVICE if node.name == "device" else _OTHER)
        if isinstance(node, Select | Has | OptSelect):
            operand = self.visit(node.operand, scope)
            gated = (
                node.field == "allowMultipleAllocations" and not self.options.consumable_capacity
            )
            if operand.lstrip(_OPTIONAL) == _DEVICE and gated:
                raise self.error(
                    "undefined field 'allowMultipleAllocations' "
                    "(requires feature gate DRAConsumableCapacity)",
                    node,
                    "consumable_capacity",
                )
            if isinstance(node, Has):
                return _OTHER
            return self.member(operand, node.field, optional=isinstance(node, OptSelect))
        if isinstance(node, Index | OptIndex):
            operand = self.visit(node.operand, scope)
            self.visit(node.index, scope)
            return self.member(operand, None, optional=isinstance(node, OptIndex))
        if isinstance(node, Comprehension):
            kind = self.visit(node.range, scope)
            if kind == _ATTRIBUTE and not self.options.list_type_attributes:
                raise self.error(
                    "expression of type 'google.protobuf.Any' cannot be range of a comprehension "
                    "(must be list, map, or dynamic); iterating an attribute value requires "
                    "feature gate DRAListTypeAttributes",
                    node.range,
                    "list_type_attributes",
                )
            element = _ELEMENTS.get(kind, _OTHER)
            if node.var2 is None:
                inner = {**scope, node.var: element if kind == _ATTRIBUTE_LIST else _OTHER}
            else:  # (index or key, value)
                inner = {**scope, node.var: _OTHER, node.var2: element}
            if node.predicate is not None:
                self.visit(node.predicate, inner)
            self.visit(node.body, inner)
            return _OTHER
        if isinstance(node, Bind):
            kind = self.visit(node.init, scope)
            return self.visit(node.body, {**scope, node.var: kind})
        if isinstance(node, Call):
            return self.call(node, scope)
        kinds = [self.visit(child, scope) for child in children(node)]
        if isinstance(node, ListLit):  # `?x` items add x's value
            kinds = [k[1:] if i in node.optional else k for i, k in enumerate(kinds)]
        if isinstance(node, ListLit) and kinds and all(k == _ATTRIBUTE for k in kinds):
            return _ATTRIBUTE_LIST  # list(google.protobuf.Any)
        return _OTHER

    def member(self, operand: str, field: str | None, optional: bool = False) -> str:
        """The kind of `operand.field` (`operand[...]` when `field` is None); selecting through
        an optional, or with `.?` / `[?]`, gives an optional (cel-go's optional chaining)."""
        if operand.startswith(_OPTIONAL):
            operand, optional = operand[1:], True
        if operand == _DEVICE:
            kind = _DOMAIN_MAP if field == "attributes" else _OTHER
        elif operand == _DOMAIN_MAP:
            kind = _DOMAIN
        elif operand == _DOMAIN:
            kind = _ATTRIBUTE
        else:
            return _OTHER
        return _OPTIONAL + kind if optional else kind

    def call(self, node: Call, scope: dict[str, str]) -> str:
        if node.function == "includes" and not self.options.list_type_attributes:
            raise self.error(
                "undeclared reference to 'includes' (requires feature gate DRAListTypeAttributes)",
                node,
                "list_type_attributes",
            )
        target = _OTHER if node.target is None else self.visit(node.target, scope)
        kinds = [self.visit(a, scope) for a in node.args]
        if node.function == "_?_:_" and kinds[1] == kinds[2] and kinds[1] != _OTHER:
            return kinds[1]
        if target.startswith(_OPTIONAL) and not node.args[1:]:
            # o.value() / o.orValue(d): the value's kind (Any stays Any: T is bound to it first)
            if node.function in _UNWRAP:
                return target[1:]
            if node.function in _KEEP:
                return target
        if node.function in _WRAP and kinds and kinds[0] != _OTHER:
            return _OPTIONAL + kinds[0]
        return _OTHER
