"""A topology chooser for a rebuilt allocator, carrying over what the slice change left valid.

`gpudra_alloc.rebuild` makes an allocator for new slices that keeps the pools objects of every
node the change did not touch. For those nodes the chooser's per-node state stays valid: their
node keys (`groups.NodeKeys.carried`), their `NodeView`s (built from those pools) and the free
state remembered per view and in-use id. The score memo (`memo.py`) is kept whole: it is keyed by
node key and claim shape, and the carried keys intern parts in the same tables, so a key means
the same pools content, selector outcomes and in-use state before and after. Settings (reserve,
MIG rules, ...) are copied. The old chooser's keys give up their node lists and kept keys to
the new one (`NodeKeys.carried`): use only the new chooser afterwards. Nothing is carried when
every node was touched (`touched` None) or the allocator has other classes or features.
"""

from __future__ import annotations

from dataclasses import fields

from gpudra_alloc.allocator import Allocator
from gpudra_alloc.placement.choose import Chooser

# Per-node state and memos, carried (or not) by `carried_chooser`; every other field that
# `Chooser` takes is a setting, copied.
_STATE = frozenset({"allocator", "views", "memo", "free_cache"})


def carried_chooser(
    old: Chooser, allocator: Allocator, touched: frozenset[str] | None
) -> tuple[Chooser, bool]:
    """A chooser for `allocator` with `old`'s settings and, unless `touched` is None, its state
    of the nodes not in `touched` (see the module docstring); and whether that state carried
    over (False: the chooser starts afresh)."""
    settings = {
        f.name: getattr(old, f.name) for f in fields(old) if f.init and f.name not in _STATE
    }
    new = Chooser(allocator, **settings)
    if touched is None:  # every node touched: nothing carries over
        return new, False
    keys = old.node_keys.carried(allocator, touched)
    if keys is None:  # other classes, features or CEL programs; too many live parts
        return new, False
    new.node_keys = keys
    new.memo = old.memo  # its keys are the carried keys' ids
    # moved over, the touched nodes' entries dropped: a carry costs what it touched
    new.views, old.views = old.views, {}
    new.free_cache, old.free_cache = old.free_cache, {}
    for name in touched:
        new.views.pop(name, None)
        new.free_cache.pop(name, None)
    return new, True
