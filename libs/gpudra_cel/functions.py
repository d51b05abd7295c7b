"""The function table of the DRA CEL environment: overloads with static signatures and the
Python implementation of each.

An implementation receives plain values (see `values`) already known to match the overload's
declared kinds and raises `CelEvaluationError` for bad input; it never raises anything else.
`cost` says how the estimator prices a call: `const` (1), or linear in the size of the
receiver / first argument / both (`linear`), as cel-go's cost model does for string functions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from gpudra_cel.types import CelType

__all__ = ["Cost", "Overload", "overload"]

Cost = Literal["const", "linear", "regex"]


@dataclass(frozen=True, slots=True)
class Overload:
    name: str
    target: CelType | None
    args: tuple[CelType, ...]
    result: CelType
    impl: Callable[..., object]
    cost: Cost = "const"
    pure: bool = True  # same inputs, same output: may be folded at compile time


def overload(
    name: str,
    target: CelType | None,
    args: tuple[CelType, ...],
    result: CelType,
    impl: Callable[..., object],
    cost: Cost = "const",
) -> Overload:
    return Overload(name, target, args, result, impl, cost)
