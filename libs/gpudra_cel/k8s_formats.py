"""The string checks behind Kubernetes' CEL format library (`format.*`, `lib_format_k8s`), with
the messages Kubernetes returns.

Names (k8s.io/apimachinery `util/validation` and `api/validation`): `dns1123Label` (≤ 63 bytes,
`[a-z0-9]([-a-z0-9]*[a-z0-9])?`; a valid subdomain that is no label gets "must not contain
dots"), `dns1123Subdomain` (≤ 253 bytes, labels joined by dots), `dns1035Label` (≤ 63, starts
with a letter), `qualifiedName` (an optional DNS-subdomain prefix and `/`, then a name part of
≤ 63 alphanumerics, `-`, `_`, `.`), `labelValue` (≤ 63, empty allowed). The `...Prefix`
variants check a `generateName` prefix: a trailing `-` is masked first as Kubernetes masks it
(the last *two* bytes become `a`, so `"ab-"` is checked as `"aa"`).

OpenAPI formats (k8s.io/kube-openapi `strfmt`): `uri` (Go's `url.ParseRequestURI`, its error
text), `uuid` (32 hex digits, dashes optional in the 8-4-4-4-12 places, any case), `byte`
(padded standard base64, at least one 4-character group), `date` (`YYYY-MM-DD`, a real
calendar day), `datetime` (a date, `T`, `hh:mm:ss`, an optional fraction, `Z` or `±hh:mm`; as
strfmt, only the text between the first and second `T` is checked after the date).

Lengths are UTF-8 bytes and patterns are matched on bytes, as Go does, so no non-ASCII text is
ever a valid name.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from gpudra_cel.neturl import request_uri_error

__all__ = ["FORMATS", "NamedFormat"]


@dataclass(frozen=True, slots=True)
class NamedFormat:
    """A value of CEL type `kubernetes.NamedFormat`: equal when the names are (as Kubernetes)."""

    name: str
    check: Callable[[str], list[str]] = field(compare=False, repr=False)
    max_regex_size: int = field(compare=False, repr=False)  # what Kubernetes prices `validate` by

    def __str__(self) -> str:
        return self.name


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", errors="surrogatepass")


def _regex_error(message: str, pattern: str, *examples: str) -> str:
    """apimachinery's `RegexError` (its double space after each example's comma included)."""
    shown = "".join(f"'{e}',  or " for e in examples[:-1])
    if examples:
        shown += f"'{examples[-1]}', "
    return f"{message} (e.g. {shown}regex used for validation is '{pattern}')"


def _max_len(n: int) -> str:
    return f"must be no more than {n} characters"


_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN_FMT = _LABEL_FMT + "(\\." + _LABEL_FMT + ")*"
_DNS1035_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
_QNAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_FMT = "(" + _QNAME_FMT + ")?"
_LABEL = re.compile(_LABEL_FMT.encode())
_SUBDOMAIN = re.compile(_SUBDOMAIN_FMT.encode())
_DNS1035 = re.compile(_DNS1035_FMT.encode())
_QNAME = re.compile(_QNAME_FMT.encode())
_LABEL_VALUE = re.compile(_LABEL_VALUE_FMT.encode())

_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character"
)
_DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character"
)
_QNAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character"
)


def _dns1123_label(data: bytes) -> list[str]:
    errors = [_max_len(63)] if len(data) > 63 else []
    if not _LABEL.fullmatch(data):
        if _SUBDOMAIN.fullmatch(data):  # a subdomain, not a label: it has dots
            errors.append("must not contain dots")
        else:
            errors.append(_regex_error(_LABEL_MSG, _LABEL_FMT, "my-name", "123-abc"))
    return errors


def _dns1123_subdomain(data: bytes) -> list[str]:
    errors = [_max_len(253)] if len(data) > 253 else []
    if not _SUBDOMAIN.fullmatch(data):
        errors.append(_regex_error(_SUBDOMAIN_MSG, _SUBDOMAIN_FMT, "example.com"))
    return errors


def _dns1035_label(data: bytes) -> list[str]:
    errors = [_max_len(63)] if len(data) > 63 else []
    if not _DNS1035.fullmatch(data):
        errors.append(_regex_error(_DNS1035_MSG, _DNS1035_FMT, "my-name", "abc-123"))
    return errors


def _mask_trailing_dash(data: bytes) -> bytes:
    """apimachinery's `maskTrailingDash`: drops the last two bytes and appends `a`."""
    if len(data) > 1 and data.endswith(b"-"):
        return data[:-2] + b"a"
    return data


def _name_check(check: Callable[[bytes], list[str]], prefix: bool) -> Callable[[str], list[str]]:
    def run(text: str) -> list[str]:
        data = _utf8(text)
        return check(_mask_trailing_dash(data) if prefix else data)

    return run


def qualified_name(text: str) -> list[str]:
    """apimachinery's `IsQualifiedName`."""
    parts = _utf8(text).split(b"/")
    errors: list[str] = []
    if len(parts) > 2:
        return [
            "a qualified name "
            + _regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    name = parts[-1]
    if len(parts) == 2:
        if not parts[0]:
            errors.append("prefix part must be non-empty")
        else:
            errors.extend("prefix part " + m for m in _dns1123_subdomain(parts[0]))
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > 63:
        errors.append("name part " + _max_len(63))
    if not _QNAME.fullmatch(name):
        errors.append(
            "name part " + _regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errors


def label_value(text: str) -> list[str]:
    """apimachinery's `IsValidLabelValue`."""
    data = _utf8(text)
    errors = [_max_len(63)] if len(data) > 63 else []
    if not _LABEL_VALUE.fullmatch(data):
        errors.append(
            _regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345")
        )
    return errors


def _uri(text: str) -> list[str]:
    error = request_uri_error(text)
    return [] if error is None else [error]


UUID_PATTERN = "(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$"
_UUID = re.compile(rb"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}", re.I)
BASE64_PATTERN = (
    "^(?:[A-Za-z0-9+\\/]{4})*(?:[A-Za-z0-9+\\/]{2}==|[A-Za-z0-9+\\/]{3}=|[A-Za-z0-9+\\/]{4})$"
)
_BASE64 = re.compile(
    rb"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})"
)
DATETIME_PATTERN = "^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$"
# `.` is one character (a rune in Go), never a newline: matched on text, not bytes
_TIME = re.compile(r"([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))")
_DATE = re.compile(rb"([0-9]{4})-([0-9]{2})-([0-9]{2})")
_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _uuid(text: str) -> list[str]:
    return [] if _UUID.fullmatch(_utf8(text)) else ["does not match the UUID format"]


def _byte(text: str) -> list[str]:
    return [] if _BASE64.fullmatch(_utf8(text)) else ["invalid base64"]


def is_date(data: bytes) -> bool:
    """Go's `time.Parse("2006-01-02", s)` succeeds (year 0 exists and is a leap year)."""
    found = _DATE.fullmatch(data)
    if found is None:
        return False
    year, month, day = (int(g) for g in found.groups())
    if not 1 <= month <= 12:
        return False
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    return 1 <= day <= _DAYS[month - 1] + (1 if month == 2 and leap else 0)


def is_datetime(text: str) -> bool:
    """strfmt's `IsDateTime`."""
    if len(_utf8(text)) < 4:
        return False
    parts = "".join(c.lower() if c < "\x80" else c for c in text).split("t")
    if len(parts) < 2 or not is_date(_utf8(parts[0])):
        return False
    found = _TIME.fullmatch(parts[1])
    if found is None:
        return False
    hour, minute, second = found.group(1), found.group(2), found.group(3)
    return hour <= "23" and minute <= "59" and second <= "59"


def _date(text: str) -> list[str]:
    return [] if is_date(_utf8(text)) else ["invalid date"]


def _datetime(text: str) -> list[str]:
    return [] if is_datetime(text) else ["invalid datetime"]


# Kubernetes estimates `validate` from these sizes: its regex's length, or a guess where the
# check is not a regex (`uri`: govalidator's URL pattern, 1,103 characters)
FORMATS: dict[str, NamedFormat] = {
    "dns1123Label": NamedFormat("DNS1123Label", _name_check(_dns1123_label, False), 30),
    "dns1123Subdomain": NamedFormat("DNS1123Subdomain", _name_check(_dns1123_subdomain, False), 60),
    "dns1035Label": NamedFormat("DNS1035Label", _name_check(_dns1035_label, False), 30),
    "qualifiedName": NamedFormat("QualifiedName", qualified_name, 60),
    "dns1123LabelPrefix": NamedFormat("DNS1123LabelPrefix", _name_check(_dns1123_label, True), 30),
    "dns1123SubdomainPrefix": NamedFormat(
        "DNS1123SubdomainPrefix", _name_check(_dns1123_subdomain, True), 60
    ),
    "dns1035LabelPrefix": NamedFormat("DNS1035LabelPrefix", _name_check(_dns1035_label, True), 30),
    "labelValue": NamedFormat("LabelValue", label_value, 40),
    "uri": NamedFormat("URI", _uri, 1103),
    "uuid": NamedFormat("uuid", _uuid, len(UUID_PATTERN)),
    "byte": NamedFormat("byte", _byte, len(BASE64_PATTERN)),
    "date": NamedFormat("date", _date, len(DATETIME_PATTERN)),
    "datetime": NamedFormat("datetime", _datetime, len(DATETIME_PATTERN)),
}
