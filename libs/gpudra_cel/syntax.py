"""CEL source -> a small typed syntax tree, parsed with cel-python's Lark grammar.

The tree is ours (frozen dataclasses with source positions), so the checker, the cost estimator
and the compiler never touch Lark. Macros (`has`, `all`, `exists`, `exists_one`, `map`,
`filter`) and `cel.bind` are expanded here into dedicated nodes; namespaced functions
(`optional.of`, `sets.contains`) become plain calls of their full name; `&&`/`||` chains are
balanced (they are associative), so a long chain of conditions is not deep nesting. Anything the
grammar accepts but CEL does not give a meaning to (messages, `.ident` roots) is a
`CelCompileError` with its position; so is nesting deeper than cel-go's parser allows
(`MAX_RECURSION_DEPTH`, counted as cel-go counts it). CEL's optional
syntax, which cel-python's grammar lacks, is read with the help of `optional_syntax`: `a.?b` is
`OptSelect`, `m[?k]` is `OptIndex`, `[?x]` and `{?k: v}` are list/map literals whose `optional`
entries are dropped when their value is `optional.none()`; the `optMap`/`optFlatMap` macros are
comprehensions of that kind.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import lark
from celpy.evaluation import celbytes, celstr

from gpudra_cel.errors import CelCompileError
from gpudra_cel.grammar import GrammarError, lexer, parse_tree
from gpudra_cel.optional_syntax import Marks, blank_marks
from gpudra_cel.values import CelUint

__all__ = [
    "Bind",
    "Call",
    "Comprehension",
    "Has",
    "Ident",
    "Index",
    "ListLit",
    "Literal",
    "MapLit",
    "Node",
    "OptIndex",
    "OptSelect",
    "Select",
    "parse",
]

MAX_EXPRESSION_LENGTH = 10 * 1024
# cel-go's parser limit, as Kubernetes leaves it (the default), on each of its two counts: the
# nesting of the grammar's `expr` rule (parentheses, list / map literals, call arguments, index
# expressions, the `:` branch of a conditional) and the nesting of selections, receiver calls,
# indexing, conditionals and binary operators (`&&` / `||` chains and runs of `!` / `-` are flat)
MAX_RECURSION_DEPTH = 250
_VISITED = frozenset({"expr", "relation", "addition", "multiplication"})
_MEMBERS = frozenset({"member_dot", "member_dot_arg", "member_index"})
_VISITED |= _MEMBERS
_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
_OPTIONAL_MACROS = frozenset({"optMap", "optFlatMap", "sortBy"})  # (v, expr) on a target
# cel-go's two-variable comprehensions: name -> (kind, argument counts)
_TWO_VAR = {
    "all": ("all", (3,)),
    "exists": ("exists", (3,)),
    "exists_one": ("exists_one", (3,)),
    "existsOne": ("exists_one", (3,)),
    "transformList": ("transformList", (3, 4)),
    "transformMap": ("transformMap", (3, 4)),
}
# ip.isCanonical; format.named and format.dns1123Label() etc. (Kubernetes' format library)
_NAMESPACES = frozenset({"optional", "cel", "sets", "strings", "lists", "ip", "format"})
_QUALIFIED_TYPES = frozenset({"Timestamp", "Duration"})  # google.protobuf.<name>
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_UINT64_MAX = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class Node:
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class Literal(Node):
    value: object


@dataclass(frozen=True, slots=True)
class Ident(Node):
    name: str


@dataclass(frozen=True, slots=True)
class Select(Node):
    operand: Node
    field: str


@dataclass(frozen=True, slots=True)
class Index(Node):
    operand: Node
    index: Node


@dataclass(frozen=True, slots=True)
class OptSelect(Node):
    """`operand.?field`: `optional.of(operand.field)`, or `optional.none()` if it is absent."""

    operand: Node
    field: str


@dataclass(frozen=True, slots=True)
class OptIndex(Node):
    """`operand[?index]`: `optional.of(operand[index])`, or `optional.none()` if absent."""

    operand: Node
    index: Node


@dataclass(frozen=True, slots=True)
class Call(Node):
    """A function or operator call; operators use CEL's internal names (`_&&_`, `_+_`, `!_`)."""

    function: str
    target: Node | None
    args: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class ListLit(Node):
    items: tuple[Node, ...]
    optional: tuple[int, ...] = ()  # positions of `?x` items (dropped when x is none)


@dataclass(frozen=True, slots=True)
class MapLit(Node):
    entries: tuple[tuple[Node, Node], ...]
    optional: tuple[int, ...] = ()  # positions of `?k: v` entries (dropped when v is none)


@dataclass(frozen=True, slots=True)
class Has(Node):
    operand: Node
    field: str


@dataclass(frozen=True, slots=True)
class Comprehension(Node):
    """`range.kind(var, ...)`; `map` with three arguments has a `predicate` too. Two-variable
    forms (`m.all(k, v, ...)`, `transformList`, `transformMap`) bind `var2` to the value (and
    `var` to the index or key)."""

    kind: str
    range: Node
    var: str
    predicate: Node | None
    body: Node
    var2: str | None = None


@dataclass(frozen=True, slots=True)
class Bind(Node):
    var: str
    init: Node
    body: Node


_OPERATORS = {
    "relation_lt": "_<_",
    "relation_le": "_<=_",
    "relation_gt": "_>_",
    "relation_ge": "_>=_",
    "relation_eq": "_==_",
    "relation_ne": "_!=_",
    "relation_in": "@in",
    "addition_add": "_+_",
    "addition_sub": "_-_",
    "multiplication_mul": "_*_",
    "multiplication_div": "_/_",
    "multiplication_mod": "_%_",
}
_PASS_THROUGH = frozenset({"expr", "conditionalor", "conditionaland", "relation", "addition"})
_PASS_THROUGH |= frozenset({"multiplication", "unary", "member", "primary", "paren_expr"})


def parse(expression: str) -> Node:
    """Parse one CEL expression into our tree, or raise `CelCompileError`."""
    if len(expression.encode()) > MAX_EXPRESSION_LENGTH:
        raise CelCompileError(
            f"expression is {len(expression.encode())} bytes, the limit is {MAX_EXPRESSION_LENGTH}"
        )
    if not expression.strip():
        raise CelCompileError("expression is empty")
    text, marks = blank_marks(expression, lexer())
    try:
        tree = parse_tree(text)
    except GrammarError as exc:
        raise CelCompileError(
            exc.reason, expression=expression, line=exc.line, column=exc.column
        ) from exc
    # Within the limits the builder needs a few Python frames per level; a RecursionError
    # passes to the caller (`selector` retries with more room, see `recursion_room`).
    root = _Builder(expression, marks).build(tree)
    marks.check_all_taken(expression)
    return root


class _Builder:
    def __init__(self, expression: str, marks: Marks | None = None) -> None:
        self.expression = expression
        self.marks = marks or Marks()
        self.bound: list[str] = []  # macro / cel.bind variables in scope where building
        self.expr_depth = 0  # cel-go's two nesting counts where building (MAX_RECURSION_DEPTH)
        self.visit_depth = 0

    @contextlib.contextmanager
    def binding(self, *names: str | None) -> Iterator[None]:
        """Build inside the scope of `names`: a bound `strings` is a variable, not a namespace,
        so `strings.size()` is a call on it, as cel-go resolves it when no `strings.size` is
        declared. (cel-go would still pick a declared `sets.contains` over a bound `sets`.)"""
        added = [n for n in names if n is not None]
        self.bound.extend(added)
        try:
            yield
        finally:
            del self.bound[len(self.bound) - len(added) :]

    def marked(self, tree: lark.Tree[lark.Token] | lark.Token) -> bool:
        """Did an optional mark (`.?`, `[?`, `{?`, `, ?`) stand right before `tree`?"""
        return bool(self.marks) and self.marks.take(*_pos(tree))

    def error(self, message: str, tree: lark.Tree[lark.Token] | lark.Token) -> CelCompileError:
        line, column = _pos(tree)
        return CelCompileError(message, expression=self.expression, line=line, column=column)

    def build(self, tree: lark.Tree[lark.Token] | lark.Token) -> Node:
        """Our node for `tree`, keeping cel-go's two nesting counts (see `MAX_RECURSION_DEPTH`);
        the grammar's single-child levels are walked in a loop, so a CEL level costs one or two
        Python frames here, not a dozen."""
        entered = 0  # `expr` rules passed on the way down
        try:
            while isinstance(tree, lark.Tree):
                data = str(tree.data)
                if data == "expr":
                    entered += 1
                    self.expr_depth += 1
                    if self.expr_depth > MAX_RECURSION_DEPTH:
                        raise self.error(
                            f"expression recursion limit exceeded: {MAX_RECURSION_DEPTH}", tree
                        )
                if data not in _PASS_THROUGH or len(tree.children) != 1:
                    break
                tree = tree.children[0]
            if isinstance(tree, lark.Token):
                raise self.error(f"unexpected token {tree.value!r}", tree)
            counted = data in _VISITED and (data in _MEMBERS or len(tree.children) > 1)
            if counted:
                self.visit_depth += 1
                if self.visit_depth > MAX_RECURSION_DEPTH:
                    raise self.error("max recursion depth exceeded", tree)
            try:
                return self.build_node(tree, data)
            finally:
                self.visit_depth -= counted
        finally:
            self.expr_depth -= entered

    def build_node(self, tree: lark.Tree[lark.Token], data: str) -> Node:
        kids = tree.children
        line, column = _pos(tree)
        if data == "expr":
            cond, yes, no = (self.build(k) for k in kids)
            return Call(line, column, "_?_:_", None, (cond, yes, no))
        if data in ("conditionalor", "conditionaland"):
            return self.logical_chain(tree)
        if data in ("relation", "addition", "multiplication") and len(kids) == 2:
            op_tree, right_tree = kids
            assert isinstance(op_tree, lark.Tree)
            op = _OPERATORS[str(op_tree.data)]
            left = self.build(op_tree.children[0])
            right = self.build(right_tree)
            if op == "@in":
                return Call(line, column, "@in", None, (left, right))
            return Call(line, column, op, None, (left, right))
        if data == "unary" and len(kids) == 2:
            return self.unary(tree)
        if data == "ident":
            return Ident(line, column, str(kids[0]))
        if data == "literal":
            token = kids[0]
            assert isinstance(token, lark.Token)
            return Literal(line, column, self.literal(token))
        if data == "member_dot":
            operand_tree, field_token = kids
            operand = self.build(operand_tree)
            if self.marked(field_token):
                return OptSelect(line, column, operand, str(field_token))
            qualified = self.qualified_type(operand, str(field_token))
            if qualified is not None:
                return Ident(operand.line, operand.column, qualified)
            return Select(line, column, operand, str(field_token))
        if data == "member_index":
            operand_tree, index_tree = kids
            operand = self.build(operand_tree)
            if self.marked(index_tree):
                return OptIndex(line, column, operand, self.build(index_tree))
            return Index(line, column, operand, self.build(index_tree))
        if data == "list_lit":
            item_trees = _children(kids[0] if kids else None)
            optional = tuple(i for i, k in enumerate(item_trees) if self.marked(k))
            items = tuple(self.build(k) for k in item_trees)
            return ListLit(line, column, items, optional)
        if data == "map_lit":
            part_trees = _children(kids[0] if kids else None)
            optional = tuple(
                i // 2 for i, k in enumerate(part_trees) if i % 2 == 0 and self.marked(k)
            )
            parts = tuple(self.build(k) for k in part_trees)
            pairs = tuple(zip(parts[::2], parts[1::2], strict=True))
            return MapLit(line, column, pairs, optional)
        if data == "ident_arg":
            name = str(kids[0])
            args_tree = kids[1] if len(kids) > 1 else None
            if name == "has":
                return self.has(args_tree, tree)
            return Call(line, column, name, None, self.exprs(args_tree))
        if data == "member_dot_arg":
            return self.member_call(tree)
        if data in ("dot_ident", "dot_ident_arg"):
            raise self.error("leading '.' names are not supported in DRA selectors", tree)
        if data == "member_object":
            raise self.error("message construction is not supported in DRA selectors", tree)
        raise self.error(f"unsupported construct {data!r}", tree)

    def unary(self, tree: lark.Tree[lark.Token]) -> Node:
        """`!!!x`, `--x`: cel-go reads a run of the same operator as a flat list and applies it
        once when the count is odd, not at all when it is even (`!!x` is `x`)."""
        ops: list[str] = []
        current: lark.Tree[lark.Token] | lark.Token = tree
        while (
            isinstance(current, lark.Tree)
            and current.data == "unary"
            and len(current.children) == 2
            and (not ops or str(current.children[0].data) == ops[0])  # type: ignore[union-attr]
        ):
            ops.append(str(current.children[0].data))  # type: ignore[union-attr]
            current = current.children[1]
        operand = self.build(current)
        if len(ops) % 2 == 0:
            return operand
        line, column = _pos(tree)
        if ops[0] == "unary_not":
            return Call(line, column, "!_", None, (operand,))
        if isinstance(operand, Literal) and type(operand.value) in (int, float):
            return _negate_literal(operand, self, tree)
        return Call(line, column, "-_", None, (operand,))

    def logical_chain(self, tree: lark.Tree[lark.Token]) -> Node:
        """`a && b && ... && z` arrives as a left-leaning spine as deep as the chain is long;
        walk it iteratively and build a balanced tree (`&&`/`||` are associative in CEL, errors
        included), so long chains of conditions are not mistaken for deep nesting."""
        data = tree.data
        operands: list[lark.Tree[lark.Token] | lark.Token] = []
        current: lark.Tree[lark.Token] | lark.Token = tree
        while (
            isinstance(current, lark.Tree) and current.data == data and len(current.children) == 2
        ):
            operands.append(current.children[1])
            current = current.children[0]
        operands.append(current)
        operands.reverse()
        nodes = [self.build(o) for o in operands]
        line, column = _pos(tree)
        return _balanced("_||_" if data == "conditionalor" else "_&&_", nodes, line, column)

    def exprs(self, tree: lark.Tree[lark.Token] | lark.Token | None) -> tuple[Node, ...]:
        if tree is None:
            return ()
        assert isinstance(tree, lark.Tree)
        return tuple(self.build(k) for k in tree.children)

    def member_call(self, tree: lark.Tree[lark.Token]) -> Node:
        line, column = _pos(tree)
        target_tree, name_token = tree.children[0], str(tree.children[1])
        args_tree = tree.children[2] if len(tree.children) > 2 else None
        arg_trees: list[lark.Tree[lark.Token] | lark.Token] = (
            list(args_tree.children) if isinstance(args_tree, lark.Tree) else []
        )
        target = self.build(target_tree)
        qualified = f"{target.name}.{name_token}" if isinstance(target, Ident) else ""
        if qualified == "cel.bind":  # a macro: expanded whatever variables are in scope
            if len(arg_trees) != 3:
                raise self.error("cel.bind() takes a variable, a value and an expression", tree)
            var = self.variable(arg_trees[0])
            init = self.build(arg_trees[1])
            with self.binding(var):
                return Bind(line, column, var, init, self.build(arg_trees[2]))
        namespace = isinstance(target, Ident) and target.name in _NAMESPACES
        if namespace and qualified.partition(".")[0] not in self.bound:
            return Call(line, column, qualified, None, self.exprs(args_tree))
        two_var = _TWO_VAR.get(name_token)
        if (
            two_var is not None
            and len(arg_trees) in two_var[1]
            and name_token != "map"
            and self.is_variable(arg_trees[1])
        ):
            var, var2 = self.variable(arg_trees[0]), self.variable(arg_trees[1])
            with self.binding(var, var2):
                rest = [self.build(a) for a in arg_trees[2:]]
            predicate = rest[0] if len(rest) == 2 else None
            kind = two_var[0]
            return Comprehension(line, column, kind, target, var, predicate, rest[-1], var2)
        if name_token in _OPTIONAL_MACROS and len(arg_trees) == 2:
            if name_token == "sortBy" and isinstance(target, Literal | MapLit):
                raise self.error(
                    "sortBy can only be applied to a list, identifier, comprehension, call or "
                    "select expression",
                    tree,
                )
            var = self.variable(arg_trees[0])
            with self.binding(var):
                body = self.build(arg_trees[1])
            return Comprehension(line, column, name_token, target, var, None, body)
        if name_token in _MACROS and len(arg_trees) in (2, 3):
            if len(arg_trees) == 3 and name_token != "map":
                raise self.error(f"{name_token}() takes a variable and one expression", tree)
            var = self.variable(arg_trees[0])
            with self.binding(var):
                rest = [self.build(a) for a in arg_trees[1:]]
            predicate = rest[0] if len(rest) == 2 else None
            return Comprehension(line, column, name_token, target, var, predicate, rest[-1])
        return Call(line, column, name_token, target, self.exprs(args_tree))

    def qualified_type(self, operand: Node, name: str) -> str | None:
        """`google.protobuf.Timestamp` / `.Duration`: one identifier (a type), as cel-go resolves
        a qualified name, unless `google` is a variable in scope."""
        if (
            name in _QUALIFIED_TYPES
            and isinstance(operand, Select)
            and operand.field == "protobuf"
            and isinstance(operand.operand, Ident)
            and operand.operand.name == "google"
            and "google" not in self.bound
        ):
            return f"google.protobuf.{name}"
        return None

    def is_variable(self, tree: lark.Tree[lark.Token] | lark.Token) -> bool:
        try:
            return isinstance(self.build(tree), Ident)
        except CelCompileError:
            return False

    def variable(self, tree: lark.Tree[lark.Token] | lark.Token) -> str:
        node = self.build(tree)
        if not isinstance(node, Ident):
            raise self.error("expected a variable name", tree)
        return node.name

    def has(
        self,
        args_tree: lark.Tree[lark.Token] | lark.Token | None,
        tree: lark.Tree[lark.Token],
    ) -> Node:
        args = self.exprs(args_tree)
        if len(args) != 1 or not isinstance(args[0], Select):
            raise self.error("has() takes one field selection, e.g. has(m.field)", tree)
        line, column = _pos(tree)
        return Has(line, column, args[0].operand, args[0].field)

    def literal(self, token: lark.Token) -> object:
        text, kind = str(token.value), str(token.type)
        try:
            if kind == "INT_LIT":
                value = _int_text(text)
                if not _INT64_MIN <= value <= _INT64_MAX:
                    raise self.error(f"integer literal {text} is out of range", token)
                return value
            if kind == "UINT_LIT":
                value = _int_text(text[:-1])
                if not 0 <= value <= _UINT64_MAX:
                    raise self.error(f"unsigned literal {text} is out of range", token)
                return CelUint(value)
            if kind == "FLOAT_LIT":
                return float(text)
            if kind in ("STRING_LIT", "MLSTRING_LIT"):
                return str(celstr(token))
            if kind == "BYTES_LIT":
                return bytes(celbytes(token))
            if kind == "BOOL_LIT":
                return text == "true"
            if kind == "NULL_LIT":
                return None
        except CelCompileError:
            raise
        except (ValueError, TypeError, UnicodeError, OverflowError) as exc:
            raise self.error(f"invalid literal {text}: {exc}", token) from exc
        raise self.error(f"unsupported literal {text}", token)


def _children(
    tree: lark.Tree[lark.Token] | lark.Token | None,
) -> list[lark.Tree[lark.Token] | lark.Token]:
    return list(tree.children) if isinstance(tree, lark.Tree) else []


def _balanced(function: str, nodes: list[Node], line: int, column: int) -> Node:
    if len(nodes) == 1:
        return nodes[0]
    middle = len(nodes) // 2
    left = _balanced(function, nodes[:middle], line, column)
    right = _balanced(function, nodes[middle:], nodes[middle].line, nodes[middle].column)
    return Call(line, column, function, None, (left, right))


def _int_text(text: str) -> int:
    sign = -1 if text.startswith("-") else 1
    body = text.lstrip("-")
    return sign * (int(body, 16) if body[:2].lower() == "0x" else int(body, 10))


def _negate_literal(lit: Literal, builder: _Builder, tree: lark.Tree[lark.Token]) -> Node:
    value = lit.value
    assert isinstance(value, int | float)
    if isinstance(value, int) and not isinstance(value, CelUint):
        if -value > _INT64_MAX:
            raise builder.error("integer literal is out of range", tree)
        line, column = _pos(tree)
        return Literal(line, column, -value)
    line, column = _pos(tree)
    if isinstance(value, float):
        return Literal(line, column, -value)
    return Call(line, column, "-_", None, (lit,))


def _pos(tree: lark.Tree[lark.Token] | lark.Token) -> tuple[int, int]:
    if isinstance(tree, lark.Token):
        return tree.line or 0, tree.column or 0
    with contextlib.suppress(AttributeError):
        return tree.meta.line or 0, tree.meta.column or 0
    return 0, 0
