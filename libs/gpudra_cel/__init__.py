"""gpudra_cel: the DRA CEL environment, compiled to Python closures.

`compile_selector(expression, options=CelOptions(...))` parses (cel-python's grammar),
type-checks against the DRA environment the options describe (`device.driver`, `.attributes`,
`.capacity`, `.allowMultipleAllocations` and `includes()` as the feature gates declare them,
Kubernetes' quantity/semver/list/regex/string libraries with `format()`, its URL, IP and CIDR
libraries (`url()`, `ip()`, `cidr()` and their accessors, `lib_net`), its format library
(`format.named()`, `format.dns1123Label()` ..., `<format>.validate(s)`, `lib_format_k8s`),
`cel.bind`, `optional`, CEL's `timestamp()` / `duration()` and their accessors, `lib_time`),
estimates the worst-case cost, and returns a `CompiledSelector` whose
`matches(DeviceView)` evaluates with CEL's semantics; when the estimate cannot rule out passing
the cost limit, evaluations are metered and stopped at the limit, as in Kubernetes.
"""

from __future__ import annotations

from gpudra_cel.cache import SelectorCache
from gpudra_cel.device import AttributeValue, DeviceView
from gpudra_cel.environment import ALL_FEATURES, CelOptions
from gpudra_cel.errors import CelCompileError, CelError, CelEvaluationError
from gpudra_cel.runtime_cost import COST_EXCEEDED
from gpudra_cel.selector import (
    DEFAULT_COST_LIMIT,
    CompiledSelector,
    CountingSelector,
    compile_selector,
)

__all__ = [
    "ALL_FEATURES",
    "COST_EXCEEDED",
    "DEFAULT_COST_LIMIT",
    "AttributeValue",
    "CelCompileError",
    "CelError",
    "CelEvaluationError",
    "CelOptions",
    "CompiledSelector",
    "CountingSelector",
    "DeviceView",
    "SelectorCache",
    "compile_selector",
]
