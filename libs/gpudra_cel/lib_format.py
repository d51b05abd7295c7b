"""`<string>.format(<list>)` and `strings.quote(<string>)`: the cel-go strings extension at the
version Kubernetes enables (`ext.Strings(ext.StringsVersion(2))`, i.e. the formatter before
cel-go's version-4 rewrite), with its output and its error messages.

Clauses: `%s` (strings, bools, bytes, ints, uints, doubles, null, lists, maps), `%d` (ints),
`%f` and `%e` (doubles, and the strings "NaN", "Infinity", "-Infinity"; optional precision
`%.3f`), `%b` (ints, bools), `%x`/`%X` (ints, strings, bytes), `%o` (ints); `%%` is a percent
sign. As in Kubernetes (en_US locale, golang.org/x/text printing): `%f` groups thousands
(`1,234.500000`) and prints infinities as `∞`; `%e` always prints six fraction digits (cel-go
passes the precision as a width) as x/text writes scientific notation: mantissa, narrow
spaces around a multiplication sign, and a power of ten with superscript digits (`10⁰³`); a double inside a list or map
prints as `%.6f`; map entries are sorted by their printed key. A wrong argument kind, a missing
argument or a malformed clause is a run-time `CelEvaluationError`; when the format string is a
literal and the arguments a list literal, the same mistakes (and unused arguments) are compile
errors (`check_format_literals`), as cel-go's format validator makes them. Precision is capped
at 10,000 digits (cel-go has no cap before version 5) so a typo cannot exhaust memory.
`strings.quote(s)` is a namespaced call (the parser treats `strings` as a namespace, as it does
`optional`, `cel` and `sets`, unless a macro or `cel.bind` binds a variable of that name).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from gpudra_cel.celtime import Duration, Timestamp
from gpudra_cel.errors import CelCompileError, CelEvaluationError
from gpudra_cel.goquote import GO_ESCAPES, go_quote
from gpudra_cel.lib_core import go_format_double
from gpudra_cel.syntax import Call, ListLit, Literal, MapLit, Node
from gpudra_cel.tree import walk
from gpudra_cel.types import CelType
from gpudra_cel.values import CelTypeValue, type_name

if TYPE_CHECKING:  # the checker imports the function table, which imports this module
    from gpudra_cel.checker import Checked

__all__ = ["check_format_literals", "format_string", "quote"]

MAX_PRECISION = 10_000
_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")
_SPECIAL_DOUBLES = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


_KUBERNETES_TYPES = {"Quantity": "kubernetes.Quantity", "Semver": "kubernetes.Semver"}


def _type_name(value: object) -> str:
    """The type name cel-go's messages use (Kubernetes' own types carry their package)."""
    name = type_name(value)
    return _KUBERNETES_TYPES.get(name, name)


class _FormatError(Exception):
    """A formatting failure; `arg` is the index of the argument at fault (-1: none)."""

    def __init__(self, message: str, arg: int = -1) -> None:
        super().__init__(message)
        self.arg = arg


# ---------------------------------------------------------------------------- values
def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _as_string(v: object) -> str:
    """cel-go's `string(v)` for the kinds `%s` accepts."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return v
    if _is_int(v):
        return str(int(v))  # type: ignore[call-overload]
    if isinstance(v, float):
        return go_format_double(v)
    if isinstance(v, bytes):
        try:
            return v.decode("utf-8")
        except UnicodeDecodeError:
            raise _FormatError("invalid UTF-8 in bytes, cannot convert to string") from None
    if v is None:
        return "null"
    if isinstance(v, Timestamp | Duration):  # `string(v)`: RFC 3339 / seconds
        return str(v)
    if isinstance(v, CelTypeValue):  # its name
        return v.name
    if isinstance(v, tuple | list):
        return _format_list(v)
    if isinstance(v, Mapping):
        return _format_map(v)
    raise _FormatError(
        "string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, "
        f"types, durations, and timestamps, was given {_type_name(v)}"
    )


def _element(v: object) -> str:
    """One list element or map value, as cel-go prints it inside `%s` of a list or map."""
    if isinstance(v, str):
        return go_quote(v)
    if isinstance(v, bytes):
        return "b" + go_quote(_as_string(v))
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return go_quote("NaN" if math.isnan(v) else ("+Inf" if v > 0 else "-Inf"))
        return f"{v:.6f}"
    if isinstance(v, bool) or _is_int(v) or v is None or isinstance(v, tuple | list | Mapping):
        return _as_string(v)
    if isinstance(v, Timestamp):  # as CEL literals
        return f"timestamp({go_quote(str(v))})"
    if isinstance(v, Duration):
        return f"duration({go_quote(str(v))})"
    if isinstance(v, CelTypeValue):  # its name, unquoted
        return v.name
    raise _FormatError(f"no formatting function for {_type_name(v)}")


def _format_list(items: tuple[object, ...] | list[object]) -> str:
    return "[" + ", ".join(_element(v) for v in items) + "]"


def _format_map(mapping: Mapping[object, object]) -> str:
    pairs = []
    for key, value in mapping.items():
        if isinstance(key, str):
            shown = go_quote(key)
        elif isinstance(key, bool) or _is_int(key):
            shown = _as_string(key)
        else:
            raise _FormatError(f"no formatting function for map key of type {_type_name(key)}")
        pairs.append((shown, _element(value)))
    pairs.sort(key=lambda pair: pair[0])
    return "{" + ", ".join(f"{k}:{v}" for k, v in pairs) + "}"


# ---------------------------------------------------------------------------- clauses
def _decimal(v: object) -> str:
    if _is_int(v):
        return str(int(v))  # type: ignore[call-overload]
    raise _FormatError(f"decimal clause can only be used on integers, was given {_type_name(v)}")


def _double_arg(v: object, clause: str) -> float:
    if isinstance(v, float):
        return v if v != 0 else 0.0  # x/text prints zero unsigned, -0.0 included
    if isinstance(v, str) and v in _SPECIAL_DOUBLES:
        return _SPECIAL_DOUBLES[v]
    raise _FormatError(f"{clause} clause can only be used on doubles, was given {_type_name(v)}")


def _special(value: float) -> str | None:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    return None


def _fixed(precision: int | None) -> Callable[[object], str]:
    digits = 6 if precision is None else precision

    def fixed(v: object) -> str:
        value = _double_arg(v, "fixed-point")
        return _special(value) or f"{value:,.{digits}f}"  # en_US: grouped thousands

    return fixed


def _scientific(precision: int | None) -> Callable[[object], str]:
    # cel-go builds "%<precision>e" (a width, not a precision), so six digits always show.
    width = 6 if precision is None else precision

    def scientific(v: object) -> str:
        value = _double_arg(v, "scientific")
        text = _special(value)
        if text is None:
            mantissa, exponent = f"{value:.6e}".split("e")
            power = int(exponent)
            sign = "-" if power < 0 else ""
            text = f"{mantissa}\u202f\u00d7\u202f10" + f"{sign}{abs(power):02d}".translate(
                _SUPERSCRIPT
            )
        return text.rjust(width)

    return scientific


def _binary(v: object) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if _is_int(v):
        return format(int(v), "b")  # type: ignore[call-overload]
    raise _FormatError(
        f"only integers and bools can be formatted as binary, was given {_type_name(v)}"
    )


def _hex(upper: bool) -> Callable[[object], str]:
    def hexadecimal(v: object) -> str:
        if isinstance(v, str | bytes):
            data = v.encode("utf-8") if isinstance(v, str) else v
            text = data.hex()
        elif _is_int(v):
            text = format(int(v), "x")  # type: ignore[call-overload]
        else:
            raise _FormatError(
                "only integers, byte buffers, and strings can be formatted as hex, "
                f"was given {_type_name(v)}"
            )
        return text.upper() if upper else text

    return hexadecimal


def _octal(v: object) -> str:
    if _is_int(v):
        return format(int(v), "o")  # type: ignore[call-overload]
    raise _FormatError(f"octal clause can only be used on integers, was given {_type_name(v)}")


def _clause(text: str, start: int) -> tuple[int, Callable[[object], str], str]:
    """Parse the clause after the `%` at `start - 1`: (its end, its formatter, its verb)."""
    i = start
    precision: int | None = None
    if text[i] == ".":
        i += 1
        digits_start = i
        while True:
            if i >= len(text):
                raise _FormatError(
                    "could not parse formatting clause: error while parsing precision: "
                    "could not find end of precision specifier"
                )
            if not ("0" <= text[i] <= "9"):
                break
            i += 1
        digits = text[digits_start:i]
        if not digits:
            raise _FormatError(
                "could not parse formatting clause: error while parsing precision: error while "
                'converting precision to integer: strconv.Atoi: parsing "": invalid syntax'
            )
        precision = int(digits)
        if precision > MAX_PRECISION:
            raise _FormatError(
                "could not parse formatting clause: error while parsing precision: "
                f"precision {precision} exceeds maximum allowed precision {MAX_PRECISION}"
            )
    verb = text[i]
    formatters: dict[str, Callable[[object], str]] = {
        "s": _as_string,
        "d": _decimal,
        "b": _binary,
        "o": _octal,
        "x": _hex(False),
        "X": _hex(True),
    }
    if verb == "f":
        return i + 1, _fixed(precision), verb
    if verb == "e":
        return i + 1, _scientific(precision), verb
    if verb in formatters:
        return i + 1, formatters[verb], verb
    raise _FormatError(
        f'could not parse formatting clause: unrecognized formatting clause "{verb}"'
    )


def _interpolate(
    text: str,
    count: int,
    apply: Callable[[int, str, Callable[[object], str]], str],
    end_first: bool = False,
) -> tuple[str, int]:
    """Walk `text`, calling `apply(argument index, verb, formatter)` per clause; returns the
    result and the number of clauses. `end_first`: a `%` at the very end is reported before a
    missing argument (the order of cel-go's compile-time check; at run time it is the other)."""
    out: list[str] = []
    i = arg = 0
    while i < len(text):
        ch = text[i]
        if ch != "%":
            out.append(ch)
            i += 1
            continue
        if i + 1 < len(text) and text[i + 1] == "%":
            out.append("%")
            i += 2
            continue
        if i + 1 >= len(text) and (end_first or arg < count):
            raise _FormatError("unexpected end of string")
        if arg >= count:
            raise _FormatError(f"index {arg} out of range")
        end, formatter, verb = _clause(text, i + 1)
        out.append(apply(arg, verb, formatter))
        i = end
        arg += 1
    return "".join(out), arg


def format_string(text: str, args: tuple[object, ...] | list[object]) -> str:
    """`text.format(args)`, or `CelEvaluationError` with cel-go's message."""

    def apply(index: int, verb: str, formatter: Callable[[object], str]) -> str:
        try:
            return formatter(args[index])
        except _FormatError as exc:
            raise _FormatError(f"error during formatting: {exc}", index) from None

    try:
        return _interpolate(text, len(args), apply)[0]
    except _FormatError as exc:
        raise CelEvaluationError(str(exc)) from None


def quote(text: str) -> str:
    """`strings.quote(text)`: double-quoted, with CEL escapes for quotes, backslashes and the
    control characters that have one; everything else is kept as it is."""
    return '"' + "".join(GO_ESCAPES.get(ch, ch) for ch in text) + '"'


# ---------------------------------------------------------------------------- compile time
_STATIC_KINDS = {
    "s": frozenset(
        {
            "list",
            "map",
            "int",
            "uint",
            "double",
            "bool",
            "string",
            "bytes",
            "null_type",
            "google.protobuf.Timestamp",
            "google.protobuf.Duration",
            "type",
        }
    ),
    "d": frozenset({"int", "uint"}),
    "f": frozenset({"double", "string"}),
    "e": frozenset({"double", "string"}),
    "b": frozenset({"int", "uint", "bool"}),
    "x": frozenset({"int", "uint", "string", "bytes"}),
    "X": frozenset({"int", "uint", "string", "bytes"}),
    "o": frozenset({"int", "uint"}),
}
_STATIC_MESSAGES = {
    "d": "decimal clause can only be used on integers",
    "f": "fixed-point clause can only be used on doubles",
    "e": "scientific clause can only be used on doubles",
    "b": "only integers and bools can be formatted as binary",
    "x": "only integers, byte buffers, and strings can be formatted as hex",
    "X": "only integers, byte buffers, and strings can be formatted as hex",
    "o": "octal clause can only be used on integers",
    "s": (
        "string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, "
        "types, durations, and timestamps"
    ),
}


def check_format_literals(root: Node, checked: Checked, expression: str) -> None:
    """Reject `"<literal>".format([<list literal>])` whose clauses do not fit the arguments'
    static types or count, as cel-go's format validator does."""
    for node in walk(root):
        if not (
            isinstance(node, Call)
            and node.function == "format"
            and isinstance(node.target, Literal)
            and isinstance(node.target.value, str)
            and len(node.args) == 1
            and isinstance(node.args[0], ListLit)
            and not getattr(node.args[0], "optional", ())
        ):
            continue
        _check_call(node.target.value, node.args[0], checked, expression, node)


def _check_call(text: str, args: ListLit, checked: Checked, expression: str, call: Node) -> None:
    items = args.items

    def apply(index: int, verb: str, formatter: Callable[[object], str]) -> str:
        bad = _bad_static(items[index], verb, checked)
        if bad is not None:
            found = checked.types.get(id(bad))
            raise _FormatError(
                f"error during formatting: {_STATIC_MESSAGES[verb]}, was given {_name(found)}",
                items.index(bad) if bad in items else index,
            )
        return ""

    try:
        _, used = _interpolate(text, len(items), apply, end_first=True)
    except _FormatError as exc:
        where = items[exc.arg] if 0 <= exc.arg < len(items) else call
        raise CelCompileError(
            str(exc), expression=expression, line=where.line, column=where.column
        ) from None
    if used < len(items):
        raise CelCompileError(
            f"too many arguments supplied to string.format (expected {used}, got {len(items)})",
            expression=expression,
            line=call.line,
            column=call.column,
        )


def _bad_static(node: Node, verb: str, checked: Checked) -> Node | None:
    """The (sub)expression whose static type the clause cannot print, if any."""
    found = checked.types.get(id(node))
    if found is None or found.name == "dyn" or found.is_param:
        return None
    if found.name not in _STATIC_KINDS[verb]:
        return node
    if verb == "s" and isinstance(node, ListLit | MapLit):
        parts = node.items if isinstance(node, ListLit) else [x for kv in node.entries for x in kv]
        for part in parts:
            bad = _bad_static(part, verb, checked)
            if bad is not None:
                return bad
    return None


def _name(t: CelType | None) -> str:
    return "dyn" if t is None else _KUBERNETES_TYPES.get(t.name, t.name)
