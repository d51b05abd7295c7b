"""Name validators of resource.k8s.io/v1: DNS-1123 labels and subdomains, C identifiers, and the
qualified names of device attributes and capacities.

Each validator returns a list of human-readable problems (empty when the name is valid), as
apimachinery's `validation.Is*` helpers do, so a caller can attach them to the object and field it
is validating. Limits are the API's: label 63, subdomain 253, driver name 63, attribute/capacity
domain 63, attribute/capacity identifier 32.
"""

from __future__ import annotations

import re

__all__ = [
    "DEVICE_MAX_DOMAIN_LENGTH",
    "DEVICE_MAX_ID_LENGTH",
    "DNS1123_LABEL_MAX_LENGTH",
    "DNS1123_SUBDOMAIN_MAX_LENGTH",
    "DRIVER_NAME_MAX_LENGTH",
    "c_identifier_errors",
    "dns1123_label_errors",
    "dns1123_subdomain_errors",
    "driver_name_errors",
    "qualified_name_errors",
    "split_qualified_name",
]

DNS1123_LABEL_MAX_LENGTH = 63
DNS1123_SUBDOMAIN_MAX_LENGTH = 253
DRIVER_NAME_MAX_LENGTH = 63
DEVICE_MAX_DOMAIN_LENGTH = 63
DEVICE_MAX_ID_LENGTH = 32

_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_LABEL_RE = re.compile(_LABEL)
_SUBDOMAIN_RE = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_C_IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _too_long(name: str, limit: int) -> list[str]:
    if len(name) > limit:
        return [f"must be no more than {limit} characters (is {len(name)})"]
    return []


def dns1123_label_errors(name: str) -> list[str]:
    """A DNS-1123 label: lower-case alphanumerics and '-', alphanumeric at both ends, <= 63."""
    errors = _too_long(name, DNS1123_LABEL_MAX_LENGTH)
    if not _LABEL_RE.fullmatch(name):
        errors.append(
            f"{name!r} must consist of lower case alphanumeric characters or '-', and must start "
            "and end with an alphanumeric character (e.g. 'my-name' or '123-abc')"
        )
    return errors


def dns1123_subdomain_errors(name: str) -> list[str]:
    """A DNS-1123 subdomain: dot-separated labels, <= 253 characters."""
    errors = _too_long(name, DNS1123_SUBDOMAIN_MAX_LENGTH)
    if not _SUBDOMAIN_RE.fullmatch(name):
        errors.append(
            f"{name!r} must consist of lower case alphanumeric characters, '-' or '.', and must "
            "start and end with an alphanumeric character (e.g. 'example.com')"
        )
    return errors


def c_identifier_errors(name: str) -> list[str]:
    """A C identifier: a letter or '_' followed by letters, digits or '_'."""
    if _C_IDENTIFIER_RE.fullmatch(name):
        return []
    return [
        f"{name!r} must be a C identifier: a letter or '_' followed by letters, digits or '_' "
        "(e.g. 'productName')"
    ]


def driver_name_errors(name: str) -> list[str]:
    """A DRA driver name: a DNS subdomain of at most 63 characters."""
    if not name:
        return ["driver name is required"]
    return _too_long(name, DRIVER_NAME_MAX_LENGTH) + [
        e for e in dns1123_subdomain_errors(name) if not e.startswith("must be no more")
    ]


def qualified_name_errors(name: str) -> list[str]:
    """An attribute or capacity name: `identifier` or `domain/identifier`, where the domain is a
    DNS subdomain of at most 63 characters and the identifier a C identifier of at most 32."""
    if not name:
        return ["name is required"]
    parts = name.split("/")
    if len(parts) > 2:
        return [
            f"{name!r} must be either a C identifier or a DNS subdomain followed by a slash and a "
            "C identifier"
        ]
    errors: list[str] = []
    if len(parts) == 2:
        domain = parts[0]
        if not domain:
            errors.append("the domain must not be empty")
        else:
            errors += _too_long(domain, DEVICE_MAX_DOMAIN_LENGTH)
            errors += [e for e in dns1123_subdomain_errors(domain) if "no more than" not in e]
    ident = parts[-1]
    if not ident:
        errors.append("the name must not be empty")
    else:
        errors += _too_long(ident, DEVICE_MAX_ID_LENGTH)
        errors += c_identifier_errors(ident)
    return errors


def split_qualified_name(name: str, default_domain: str) -> tuple[str, str]:
    """(domain, identifier) of a qualified name; names without a domain get `default_domain`
    (the device's driver), as the DRA CEL environment does."""
    domain, sep, ident = name.partition("/")
    if not sep:
        return default_domain, name
    return domain, ident
