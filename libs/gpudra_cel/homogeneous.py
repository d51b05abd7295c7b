"""Kubernetes' homogeneous aggregate literals: every element of a list literal, and every key and
every value of a map literal, must have the same type (`[1, "a"]`, `{"a": 1, "b": 2.0}` and
`x in [1, "1"]` are compile errors there: "expected type 'int' but found 'string'").

Kubernetes' base CEL environment, which DRA's compiler extends, enables cel-go's
`HomogeneousAggregateLiterals` validator; literals anywhere inside a `format()` call are exempt,
as cel-go's strings extension arranges. cel-go compares the checked types exactly (`dyn` is a
type of its own there). gpudra's checker types some expressions `dyn` where cel-go finds
something more precise (an empty list's element type, for one), so here `dyn` and a type
parameter match anything: the check refuses only literals that Kubernetes refuses, and may let
through a few that mix `dyn` with another type.
"""

from __future__ import annotations

from gpudra_cel.checker import Checked
from gpudra_cel.errors import CelCompileError
from gpudra_cel.syntax import Call, ListLit, MapLit, Node
from gpudra_cel.tree import children
from gpudra_cel.types import DYN, CelType

__all__ = ["check_homogeneous_literals"]

_EXEMPT = frozenset({"format"})  # cel-go's strings extension exempts its format() arguments
_OPTIONAL = "optional_type"


def check_homogeneous_literals(root: Node, checked: Checked, expression: str) -> None:
    """Raise `CelCompileError` at the first literal element whose type differs from the first
    element's (keys and values of a map literal separately)."""
    pending: list[tuple[Node, bool]] = [(root, False)]
    while pending:
        node, exempt = pending.pop()
        if isinstance(node, Call) and node.function in _EXEMPT:
            exempt = True
        if not exempt:
            if isinstance(node, ListLit):
                _same(checked, expression, list(node.items), node.optional)
            elif isinstance(node, MapLit):
                _same(checked, expression, [key for key, _ in node.entries], ())
                _same(checked, expression, [value for _, value in node.entries], node.optional)
        pending.extend((child, exempt) for child in reversed(children(node)))


def _same(checked: Checked, expression: str, items: list[Node], optional: tuple[int, ...]) -> None:
    first: CelType | None = None
    for i, item in enumerate(items):
        t = checked.types.get(id(item), DYN)
        if i in optional and t.name == _OPTIONAL and t.params:  # `?x` contributes x's value
            t = t.params[0]
        if first is None:
            first = t
        elif not _equivalent(first, t):
            raise CelCompileError(
                f"expected type '{first}' but found '{t}'",
                expression=expression,
                line=item.line,
                column=item.column,
            )


def _equivalent(a: CelType, b: CelType) -> bool:
    if a == DYN or b == DYN or a.is_param or b.is_param:
        return True
    if a.name != b.name or len(a.params) != len(b.params):
        return False
    return all(_equivalent(x, y) for x, y in zip(a.params, b.params, strict=True))
