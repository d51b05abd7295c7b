"""gpudra_cel: the DRA CEL environment, compiled to Python closures.

`compile_selector(expression)` parses (cel-python's grammar), type-checks against the DRA
environment (`device.driver`, `.attributes`, `.capacity`, `.allowMultipleAllocations`, Kubernetes'
quantity/semver/list/regex/string libraries, `cel.bind`, `optional`), bounds the worst-case cost,
and returns a `CompiledSelector` whose `matches(DeviceView)` evaluates with CEL's semantics.
"""

from __future__ import annotations

from gpudra_cel.cache import SelectorCache
from gpudra_cel.device import AttributeValue, DeviceView
from gpudra_cel.errors import CelCompileError, CelError, CelEvaluationError
from gpudra_cel.selector import DEFAULT_COST_LIMIT, CompiledSelector, compile_selector

__all__ = [
    "DEFAULT_COST_LIMIT",
    "AttributeValue",
    "CelCompileError",
    "CelError",
    "CelEvaluationError",
    "CompiledSelector",
    "DeviceView",
    "SelectorCache",
    "compile_selector",
]
