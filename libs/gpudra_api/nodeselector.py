"""core/v1 NodeSelector as DRA uses it (slices, devices, allocation results), and a Node.

Matching follows Kubernetes' node affinity rules: terms are ORed, requirements inside a term are
ANDed, a term without requirements matches nothing, and `matchFields` knows only `metadata.name`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gpudra_api._fields import Field, check_label_name

_LABEL_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
_FIELD_OPERATORS = frozenset({"In", "NotIn"})
NODE_NAME_FIELD = "metadata.name"
_INT = re.compile(r"[+-]?[0-9]+")


def parse_int64(text: str) -> int | None:
    """`text` as Go's `strconv.ParseInt(text, 10, 64)` reads it (what Kubernetes compares Gt/Lt
    labels with): ASCII digits with an optional sign, within int64; else None. Python's `int()`
    also takes `1_0`, spaces, other scripts' digits and any size."""
    if not _INT.fullmatch(text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


@dataclass(frozen=True)
class Node:
    """What allocation needs to know about a node: its name and labels."""

    name: str
    labels: dict[str, str] = field(default_factory=dict, hash=False, compare=True)

    @staticmethod
    def from_json(data: Any, where: str = "node") -> Node:
        top = Field(where, "", data)
        meta = top.child("metadata")
        source = top if top.child("name").present() else meta
        name = source.child("name").req_str()
        labels_field = source.child("labels")
        labels = {key: value.string() or "" for key, value in labels_field.items()}
        return Node(name=name, labels=labels)


@dataclass(frozen=True)
class NodeSelectorRequirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches_labels(self, labels: dict[str, str]) -> bool:
        op = self.operator
        if op == "Exists":
            return self.key in labels
        if op == "DoesNotExist":
            return self.key not in labels
        value = labels.get(self.key)
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if value is None:
            return False
        have, want = parse_int64(value), parse_int64(self.values[0])
        if have is None or want is None:
            return False
        return have > want if op == "Gt" else have < want

    def matches_name(self, name: str) -> bool:
        inside = name in self.values
        return inside if self.operator == "In" else not inside

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "operator": self.operator}
        if self.values:
            out["values"] = list(self.values)
        return out


@dataclass(frozen=True)
class NodeSelectorTerm:
    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()

    def matches(self, node: Node) -> bool:
        if not self.match_expressions and not self.match_fields:
            return False
        return all(r.matches_labels(node.labels) for r in self.match_expressions) and all(
            r.matches_name(node.name) for r in self.match_fields
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.match_expressions:
            out["matchExpressions"] = [r.to_json() for r in self.match_expressions]
        if self.match_fields:
            out["matchFields"] = [r.to_json() for r in self.match_fields]
        return out


@dataclass(frozen=True)
class NodeSelector:
    terms: tuple[NodeSelectorTerm, ...]

    def matches(self, node: Node) -> bool:
        return any(term.matches(node) for term in self.terms)

    def to_json(self) -> dict[str, Any]:
        return {"nodeSelectorTerms": [t.to_json() for t in self.terms]}

    @staticmethod
    def for_node(name: str) -> NodeSelector:
        """The selector kube-scheduler writes for an allocation bound to one node."""
        req = NodeSelectorRequirement(NODE_NAME_FIELD, "In", (name,))
        return NodeSelector((NodeSelectorTerm(match_fields=(req,)),))


def parse_node_selector(f: Field) -> NodeSelector:
    terms = []
    term_fields = f.child("nodeSelectorTerms").elements()
    f.check(bool(term_fields), "nodeSelectorTerms must not be empty")
    for tf in term_fields:
        exprs = tuple(
            _requirement(rf, fields=False) for rf in tf.child("matchExpressions").elements()
        )
        fields = tuple(_requirement(rf, fields=True) for rf in tf.child("matchFields").elements())
        terms.append(NodeSelectorTerm(exprs, fields))
    return NodeSelector(tuple(terms))


def _requirement(f: Field, fields: bool) -> NodeSelectorRequirement:
    key_field = f.child("key")
    key = key_field.req_str()
    op_field = f.child("operator")
    op = op_field.req_str()
    values_field = f.child("values")
    values = values_field.str_list()
    if fields:
        key_field.check(key == NODE_NAME_FIELD, f"field selector key {key!r} is not supported")
        op_field.check(op in _FIELD_OPERATORS, f"operator {op!r} is not supported for fields")
        values_field.check(len(values) == 1, "must have exactly one value for a field selector")
        return NodeSelectorRequirement(key, op, values)
    check_label_name(key_field, key)
    op_field.check(op in _LABEL_OPERATORS, f"unknown operator {op!r}")
    if op in ("In", "NotIn"):
        values_field.check(bool(values), f"must not be empty for operator {op}")
    elif op in ("Exists", "DoesNotExist"):
        values_field.check(not values, f"must be empty for operator {op}")
    else:
        values_field.check(len(values) == 1, f"must have exactly one value for operator {op}")
        if parse_int64(values[0]) is None:
            raise values_field.fail(f"{values[0]!r} is not an integer")
    return NodeSelectorRequirement(key, op, values)
