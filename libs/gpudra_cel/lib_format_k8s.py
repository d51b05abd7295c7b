"""Kubernetes' CEL format library (`k8s.io/apiserver/pkg/cel/library` format.go), part of the
base environment Kubernetes gives DRA selectors.

- `format.named(name)`: `optional_type(kubernetes.NamedFormat)`, none for an unknown name;
- `format.dns1123Label()`, `format.dns1123Subdomain()`, `format.dns1035Label()`,
  `format.qualifiedName()`, `format.dns1123LabelPrefix()`, `format.dns1123SubdomainPrefix()`,
  `format.dns1035LabelPrefix()`, `format.labelValue()`, `format.uri()`, `format.uuid()`,
  `format.byte()`, `format.date()`, `format.datetime()`: the formats themselves;
- `<format>.validate(s)`: `optional_type(list(string))`, none when `s` is valid, else
  Kubernetes' messages (see `k8s_formats`);
- `==` between formats compares their names.

`format` is a namespace only where it is not a variable (`cel.bind(format, ...)` and macro
variables win, see `syntax`), and `"%s".format([x])` (strings v2) is another function.

Costs (Kubernetes' cost.go): `format.named` 1; `validate` is priced as a regex match,
`ceil((1 + len(s)) / 10) * ceil(regexSize / 4)` with the format's regex size. Kubernetes
estimates it with a regex size of 128 for every format, which its `uri` (1,103) and a long
string can pass at run time; gpudra's estimate uses the format's own size where the receiver is
a `format.<name>()` call and the largest (1,103) otherwise, so the estimate stays an upper bound.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from gpudra_cel.functions import Overload, overload
from gpudra_cel.k8s_formats import FORMATS, NamedFormat
from gpudra_cel.types import FORMAT, STRING, list_of, optional_of
from gpudra_cel.values import CelOptional

__all__ = [
    "FORMAT_OVERLOADS",
    "FORMAT_RUNTIME_PRICES",
    "MAX_MESSAGE_LENGTH",
    "MAX_MESSAGES",
    "format_estimate",
    "named",
    "validate",
]

MAX_MESSAGES = 3  # qualifiedName: a prefix error, the name's length and its pattern
MAX_MESSAGE_LENGTH = 512  # the longest fixed message is ~300 characters
_MAX_REGEX_SIZE = max(f.max_regex_size for f in FORMATS.values())


def named(name: str) -> CelOptional:
    """Kubernetes' `format.named(name)`."""
    found = FORMATS.get(name)
    return CelOptional.NONE if found is None else CelOptional(found)


def validate(fmt: NamedFormat, text: str) -> CelOptional:
    """Kubernetes' `<format>.validate(text)`."""
    messages = fmt.check(text)
    return CelOptional(tuple(messages)) if messages else CelOptional.NONE


def _constant(fmt: NamedFormat) -> Callable[[], NamedFormat]:
    return lambda: fmt


FORMAT_OVERLOADS: tuple[Overload, ...] = (
    overload("format.named", None, (STRING,), optional_of(FORMAT), named),
    overload("validate", FORMAT, (STRING,), optional_of(list_of(STRING)), validate),
    *(overload(f"format.{key}", None, (), FORMAT, _constant(f)) for key, f in FORMATS.items()),
)


def _regex_price(text_size: int, regex_size: int) -> int:
    return math.ceil((1 + text_size) * 0.1) * math.ceil(regex_size * 0.25)


def format_estimate(
    fn: str, receiver: str | None, arg_sizes: Sequence[int]
) -> tuple[int, int, int] | None:
    """(cost beyond gpudra's unit per call, result size, element size) of a format-library
    call; `receiver` is the name of the `format.<name>()` call the receiver is, if it is one.
    None: not a format-library call."""
    if fn == "validate" and len(arg_sizes) == 1:
        known = FORMATS.get(receiver or "")
        regex = known.max_regex_size if known is not None else _MAX_REGEX_SIZE
        longest = MAX_MESSAGE_LENGTH + 10 * arg_sizes[0]  # a URI error quotes (escapes) s
        return _regex_price(arg_sizes[0], regex), MAX_MESSAGES, longest
    if fn == "format.named" or (fn.startswith("format.") and fn[7:] in FORMATS):
        return 0, 1, 1
    return None


def _validate_price(values: Sequence[object], result: object) -> int:
    fmt, text = values[0], values[1]
    if not isinstance(fmt, NamedFormat) or not isinstance(text, str):
        return 1
    return _regex_price(len(text), fmt.max_regex_size)  # cel-go: a string's size is its runes


# function -> run-time price from the operand values (receiver first) and the result; the
# other format functions cost the one unit every call costs
FORMAT_RUNTIME_PRICES: dict[str, Callable[[Sequence[object], object], int]] = {
    "validate": _validate_price,
}
