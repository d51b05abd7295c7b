"""Generic walking of the syntax tree: the children of any node kind, so passes that only look
for a few node kinds (environment gates, format literals) need not know every kind."""

from __future__ import annotations

from collections.abc import Iterator

from gpudra_cel.syntax import Node

__all__ = ["children", "walk"]


def children(node: Node) -> list[Node]:
    """The direct child nodes of `node`, in field order."""
    found: list[Node] = []
    for name in getattr(node, "__slots__", ()):
        value = getattr(node, name, None)
        if isinstance(value, Node):
            found.append(value)
        elif isinstance(value, tuple):
            for item in value:
                if isinstance(item, Node):
                    found.append(item)
                elif isinstance(item, tuple):  # map entries: (key, value)
                    found.extend(x for x in item if isinstance(x, Node))
    return found


def walk(root: Node) -> Iterator[Node]:
    """Every node below and including `root` (depth first)."""
    pending = [root]
    while pending:
        node = pending.pop()
        yield node
        pending.extend(reversed(children(node)))
