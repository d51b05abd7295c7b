"""NATS subjects of gpudra: `gpudra.<kind>.<...>`, built and parsed in one place.

Promises:
- Builders validate their arguments: node and object names must be DNS-1123 subdomains (as
  Kubernetes requires), namespaces DNS-1123 labels; anything else raises `InvalidSubjectError`, so a
  malformed name never becomes a wildcard or an extra subject token.
- A name's dots (legal in node and claim names, e.g. `ip-10-0-0-1.ec2.internal`) would split it
  into several NATS tokens; they are written as `_`, which DNS names cannot contain, so
  `parse(build(x)) == x` for every valid input.
- `parse()` accepts exactly what the builders produce and rejects everything else.

Subjects (the owner in brackets publishes them):
  gpudra.inventory.<node>          NodeInventory snapshots and heartbeats [node-agent]
  gpudra.health.<node>             health events [node-agent]
  gpudra.utilization.<node>        utilisation samples [node-agent]
  gpudra.claims.<ns>.<name>        ClaimEvent [claim-writer]
  gpudra.allocations.<ns>.<name>   AllocationDecision / Released [allocator]
  gpudra.prepared.<node>           prepare results [kubelet-plugin]
  gpudra.drift                     fleet version-drift summary [inventory]
  gpudra.deadletter.<kind>         malformed events of <kind> [whoever received them]
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from gpudra_bus.errors import InvalidSubjectError

ROOT = "gpudra"

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_TOKEN = re.compile(r"[a-z0-9]([-_a-z0-9]*[a-z0-9])?")


class Kind(StrEnum):
    """The second token of every gpudra subject."""

    INVENTORY = "inventory"
    HEALTH = "health"
    UTILIZATION = "utilization"
    CLAIMS = "claims"
    ALLOCATIONS = "allocations"
    PREPARED = "prepared"
    DRIFT = "drift"
    DEADLETTER = "deadletter"


_NODE_KINDS = frozenset({Kind.INVENTORY, Kind.HEALTH, Kind.UTILIZATION, Kind.PREPARED})
_CLAIM_KINDS = frozenset({Kind.CLAIMS, Kind.ALLOCATIONS})


@dataclass(frozen=True)
class Subject:
    """A parsed gpudra subject. Which fields are set depends on `kind`."""

    kind: Kind
    node: str = ""
    namespace: str = ""
    name: str = ""
    dead_kind: Kind | None = None

    def __str__(self) -> str:
        if self.kind in _NODE_KINDS:
            return _node_subject(self.kind, self.node)
        if self.kind in _CLAIM_KINDS:
            return _claim_subject(self.kind, self.namespace, self.name)
        if self.kind is Kind.DEADLETTER:
            assert self.dead_kind is not None
            return deadletter(self.dead_kind)
        return DRIFT


def validate_node_name(node: str) -> str:
    """Return `node` if it is a valid Kubernetes node name (DNS-1123 subdomain)."""
    return _check_subdomain(node, "node name")


def validate_namespace(namespace: str) -> str:
    """Return `namespace` if it is a valid Kubernetes namespace (DNS-1123 label)."""
    if not isinstance(namespace, str) or len(namespace) > 63 or not _DNS_LABEL.fullmatch(namespace):
        raise InvalidSubjectError(f"invalid namespace {namespace!r}: must be a DNS-1123 label")
    return namespace


def validate_object_name(name: str) -> str:
    """Return `name` if it is a valid Kubernetes object name (DNS-1123 subdomain)."""
    return _check_subdomain(name, "object name")


def _check_subdomain(value: str, what: str) -> str:
    if not isinstance(value, str) or len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
        raise InvalidSubjectError(f"invalid {what} {value!r}: must be a DNS-1123 subdomain")
    return value


def encode_token(name: str) -> str:
    """A valid DNS name as one NATS subject token (dots become underscores)."""
    return name.replace(".", "_")


def decode_token(token: str) -> str:
    """The inverse of `encode_token`."""
    return token.replace("_", ".")


def _node_subject(kind: Kind, node: str) -> str:
    return f"{ROOT}.{kind.value}.{encode_token(validate_node_name(node))}"


def _claim_subject(kind: Kind, namespace: str, name: str) -> str:
    validate_namespace(namespace)
    return f"{ROOT}.{kind.value}.{namespace}.{encode_token(validate_object_name(name))}"


def inventory(node: str) -> str:
    """`gpudra.inventory.<node>`: the node's NodeInventory (last value per node is kept)."""
    return _node_subject(Kind.INVENTORY, node)


def health(node: str) -> str:
    """`gpudra.health.<node>`: health events of the node's devices."""
    return _node_subject(Kind.HEALTH, node)


def utilization(node: str) -> str:
    """`gpudra.utilization.<node>`: utilisation samples of the node's devices."""
    return _node_subject(Kind.UTILIZATION, node)


def prepared(node: str) -> str:
    """`gpudra.prepared.<node>`: prepare/unprepare results of the node's kubelet plugin."""
    return _node_subject(Kind.PREPARED, node)


def claims(namespace: str, name: str) -> str:
    """`gpudra.claims.<ns>.<name>`: ClaimEvents of one ResourceClaim."""
    return _claim_subject(Kind.CLAIMS, namespace, name)


def allocations(namespace: str, name: str) -> str:
    """`gpudra.allocations.<ns>.<name>`: allocation decisions for one ResourceClaim."""
    return _claim_subject(Kind.ALLOCATIONS, namespace, name)


def deadletter(kind: Kind | str) -> str:
    """`gpudra.deadletter.<kind>`: malformed messages that arrived on a `<kind>` subject."""
    try:
        k = Kind(kind)
    except ValueError as exc:
        raise InvalidSubjectError(f"unknown subject kind {kind!r}") from exc
    if k is Kind.DEADLETTER:
        raise InvalidSubjectError("dead letters of dead letters are not kept")
    return f"{ROOT}.{Kind.DEADLETTER.value}.{k.value}"


DRIFT = f"{ROOT}.{Kind.DRIFT.value}"


def all_of(kind: Kind) -> str:
    """The wildcard subject matching every subject of `kind`."""
    if kind is Kind.DRIFT:
        return DRIFT
    return f"{ROOT}.{kind.value}.>" if kind in _CLAIM_KINDS else f"{ROOT}.{kind.value}.*"


def kind_of(subject: str) -> Kind:
    """The kind of a gpudra subject, without validating the rest (for dead-lettering)."""
    parts = subject.split(".")
    if len(parts) < 2 or parts[0] != ROOT:
        raise InvalidSubjectError(f"not a gpudra subject: {subject!r}")
    try:
        return Kind(parts[1])
    except ValueError as exc:
        raise InvalidSubjectError(f"unknown subject kind in {subject!r}") from exc


def parse(subject: str) -> Subject:
    """Parse a subject the builders produced; anything else raises `InvalidSubjectError`."""
    if not isinstance(subject, str):
        raise InvalidSubjectError(f"subject must be a string, not {type(subject).__name__}")
    kind = kind_of(subject)
    rest = subject.split(".")[2:]
    if not all(_TOKEN.fullmatch(t) for t in rest):
        raise InvalidSubjectError(f"malformed token in subject {subject!r}")
    if kind in _NODE_KINDS and len(rest) == 1:
        return Subject(kind, node=validate_node_name(decode_token(rest[0])))
    if kind in _CLAIM_KINDS and len(rest) == 2:
        return Subject(
            kind,
            namespace=validate_namespace(rest[0]),
            name=validate_object_name(decode_token(rest[1])),
        )
    if kind is Kind.DRIFT and not rest:
        return Subject(kind)
    if kind is Kind.DEADLETTER and len(rest) == 1:
        try:
            dead = Kind(rest[0])
        except ValueError as exc:
            raise InvalidSubjectError(f"unknown dead-letter kind in {subject!r}") from exc
        if dead is not Kind.DEADLETTER:
            return Subject(kind, dead_kind=dead)
    raise InvalidSubjectError(f"wrong number of tokens for kind {kind.value!r}: {subject!r}")


def claim_key(namespace: str, name: str) -> str:
    """KV key `<namespace>.<name>` of a claim (bucket `gpudra-claims`); names keep their dots."""
    return f"{validate_namespace(namespace)}.{validate_object_name(name)}"


def parse_claim_key(key: str) -> tuple[str, str]:
    """(namespace, name) of a `claim_key`; namespaces have no dots, so the first dot splits."""
    namespace, sep, name = key.partition(".")
    if not sep:
        raise InvalidSubjectError(f"claim key {key!r} is not <namespace>.<name>")
    return validate_namespace(namespace), validate_object_name(name)
