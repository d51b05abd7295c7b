"""Typed reading of decoded JSON with errors that name the object and the field path.

A `Field` wraps one JSON value and knows where it sits; every accessor checks the JSON type and
raises `ValidationError` instead of letting a `KeyError`/`TypeError` escape.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from gpudra_api.errors import ValidationError
from gpudra_api.names import qualified_name_errors

T = TypeVar("T")

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


class Field:
    """One JSON value at `path` inside the object `obj`."""

    __slots__ = ("obj", "path", "value")

    def __init__(self, obj: str, path: str, value: Any) -> None:
        self.obj = obj
        self.path = path
        self.value = value

    def fail(self, reason: str) -> ValidationError:
        return ValidationError(self.obj, self.path, reason)

    def child(self, key: str) -> Field:
        mapping = self.mapping()
        path = f"{self.path}.{key}" if self.path else key
        return Field(self.obj, path, mapping.get(key))

    def present(self) -> bool:
        return self.value is not None

    def mapping(self) -> dict[str, Any]:
        if self.value is None:
            return {}
        if not isinstance(self.value, dict):
            raise self.fail(f"must be an object, not {_json_type(self.value)}")
        return self.value

    def items(self) -> Iterator[tuple[str, Field]]:
        """Entries of a JSON object (a map field), in document order."""
        for key, value in self.mapping().items():
            yield key, Field(self.obj, f"{self.path}[{key}]", value)

    def elements(self, max_items: int | None = None) -> list[Field]:
        if self.value is None:
            return []
        if not isinstance(self.value, list):
            raise self.fail(f"must be a list, not {_json_type(self.value)}")
        if max_items is not None and len(self.value) > max_items:
            raise self.fail(f"must have at most {max_items} items, has {len(self.value)}")
        return [Field(self.obj, f"{self.path}[{i}]", v) for i, v in enumerate(self.value)]

    def string(self, required: bool = False, max_len: int | None = None) -> str | None:
        if self.value is None:
            if required:
                raise self.fail("required")
            return None
        if not isinstance(self.value, str):
            raise self.fail(f"must be a string, not {_json_type(self.value)}")
        if required and self.value == "":
            raise self.fail("required")
        if max_len is not None and len(self.value) > max_len:
            raise self.fail(f"must be at most {max_len} characters")
        return self.value

    def req_str(self, max_len: int | None = None) -> str:
        value = self.string(required=True, max_len=max_len)
        assert value is not None
        return value

    def boolean(self) -> bool | None:
        if self.value is None:
            return None
        if not isinstance(self.value, bool):
            raise self.fail(f"must be a boolean, not {_json_type(self.value)}")
        return self.value

    def integer(self, required: bool = False) -> int | None:
        if self.value is None:
            if required:
                raise self.fail("required")
            return None
        if isinstance(self.value, bool) or not isinstance(self.value, int):
            if isinstance(self.value, float) and self.value.is_integer():
                return self._range(int(self.value))
            raise self.fail(f"must be an integer, not {_json_type(self.value)}")
        return self._range(self.value)

    def _range(self, value: int) -> int:
        if not INT64_MIN <= value <= INT64_MAX:
            raise self.fail("must fit into a 64-bit integer")
        return value

    def str_list(self, max_items: int | None = None) -> tuple[str, ...]:
        return tuple(f.req_str() for f in self.elements(max_items))

    def parsed(self, parse: Callable[[str], T]) -> T:
        """Parse a required string with `parse`; its ValueError/ApiError becomes a field error."""
        text = self.req_str()
        try:
            return parse(text)
        except ValidationError:
            raise
        except Exception as exc:  # - any parse failure is a field error
            raise self.fail(f"invalid value {text!r}: {exc}") from exc

    def check(self, ok: bool, reason: str) -> None:
        if not ok:
            raise self.fail(reason)

    def dns_label(self) -> str:
        text = self.req_str(max_len=63)
        self.check(bool(_DNS_LABEL.match(text)), f"{text!r} is not a DNS label")
        return text

    def dns_subdomain(self, max_len: int = 253) -> str:
        text = self.req_str(max_len=max_len)
        self.check(bool(_DNS_SUBDOMAIN.match(text)), f"{text!r} is not a DNS subdomain")
        return text


@functools.lru_cache(maxsize=4096)
def _qualified_name_problem(name: str) -> str:
    # Names repeat on every device of a fleet; check each spelling once.
    return "; ".join(qualified_name_errors(name))


def check_qualified_name(field: Field, name: str) -> None:
    """An attribute/capacity name: a C identifier, optionally `<dns-subdomain>/` in front."""
    problem = _qualified_name_problem(name)
    if problem:
        raise field.fail(f"{name!r}: {problem}")


def check_fully_qualified_name(field: Field, name: str) -> None:
    """A name that must carry its domain, as constraints' attribute names do."""
    if "/" not in name:
        raise field.fail(f"{name!r} must be fully qualified (<domain>/<name>)")
    check_qualified_name(field, name)


def check_label_name(field: Field, key: str) -> None:
    """A Kubernetes label key: optional DNS-subdomain prefix, a name of at most 63 characters."""
    prefix, sep, name = key.rpartition("/")
    if sep and not (len(prefix) <= 253 and _DNS_SUBDOMAIN.match(prefix)):
        raise field.fail(f"prefix of {key!r} is not a DNS subdomain")
    if not (len(name) <= 63 and _LABEL_NAME.match(name)):
        raise field.fail(f"{key!r} is not a valid label name")


def check_label_value(field: Field, value: str) -> None:
    if not (len(value) <= 63 and _LABEL_VALUE.match(value)):
        raise field.fail(f"{value!r} is not a valid label value")


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return "null"
