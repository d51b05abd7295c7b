"""Protobuf payloads with a schema header: what goes on the wire, and what comes off it.

Every gpudra message carries `Gpudra-Schema: <full message name>;v=<version>` (for example
`gpudra.v1.NodeInventory;v=1`). Promises of `Codec.decode`:
- it returns a message of the codec's type, or raises a `CodecError` subclass — never another
  exception, whatever bytes and headers arrive: no/unparseable header → `MissingSchemaError`,
  another type or unaccepted version → `SchemaMismatchError`, payload over the limit →
  `OversizedMessageError` (checked before parsing), undecodable bytes → `CorruptMessageError`;
- `encode` refuses messages of another type and payloads over the limit, so a sender learns about an
  oversized message instead of the server silently dropping it.
The default limit is NATS' default `max_payload` (1 MiB).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from google.protobuf.message import DecodeError, Message

from gpudra_bus.errors import (
    CodecError,
    CorruptMessageError,
    MissingSchemaError,
    OversizedMessageError,
    SchemaMismatchError,
)

SCHEMA_HEADER = "Gpudra-Schema"
DEFAULT_MAX_BYTES = 1024 * 1024

M = TypeVar("M", bound=Message)

_SCHEMA = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.]*)\s*;\s*v\s*=\s*([0-9]{1,9})\s*")


@dataclass(frozen=True)
class Schema:
    """A parsed `Gpudra-Schema` header value."""

    name: str
    version: int

    def __str__(self) -> str:
        return f"{self.name};v={self.version}"

    @classmethod
    def parse(cls, value: str) -> Schema:
        m = _SCHEMA.fullmatch(value) if isinstance(value, str) else None
        if m is None:
            raise MissingSchemaError(f"unparseable {SCHEMA_HEADER} header {value!r}")
        return cls(m.group(1), int(m.group(2)))


def schema_of(headers: Mapping[str, str] | None) -> Schema:
    """The schema a message declares; `MissingSchemaError` when it declares none."""
    value = (headers or {}).get(SCHEMA_HEADER)
    if value is None:
        raise MissingSchemaError(f"message has no {SCHEMA_HEADER} header")
    return Schema.parse(value)


@dataclass(frozen=True)
class Codec(Generic[M]):
    """Encoder/decoder for one protobuf message type at one schema version.

    `accepts` lists the versions `decode` takes (default: only `version`); a version bump is how a
    producer announces an incompatible change, compatible additions keep the version.
    """

    message_type: type[M]
    version: int = 1
    max_bytes: int = DEFAULT_MAX_BYTES
    accepts: frozenset[int] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if self.version < 1:
            raise CodecError(f"schema version must be >= 1, got {self.version}")
        if self.max_bytes < 1:
            raise CodecError(f"max_bytes must be >= 1, got {self.max_bytes}")
        if not self.accepts:
            object.__setattr__(self, "accepts", frozenset({self.version}))

    @property
    def schema(self) -> Schema:
        return Schema(self.message_type.DESCRIPTOR.full_name, self.version)

    def headers(self) -> dict[str, str]:
        """The headers a message of this codec carries (add trace context beside them)."""
        return {SCHEMA_HEADER: str(self.schema)}

    def encode(self, message: M) -> tuple[bytes, dict[str, str]]:
        """(payload, headers) for `message`."""
        if not isinstance(message, self.message_type):
            raise SchemaMismatchError(
                f"codec for {self.schema.name} cannot encode {type(message).__name__}"
            )
        data = message.SerializeToString()
        if len(data) > self.max_bytes:
            raise OversizedMessageError(
                f"{self.schema.name} is {len(data)} bytes, over the {self.max_bytes}-byte limit"
            )
        return data, self.headers()

    def decode(self, data: bytes, headers: Mapping[str, str] | None) -> M:
        """The message in `data`; a `CodecError` subclass when it is not one we accept."""
        declared = schema_of(headers)
        expected = self.schema
        if declared.name != expected.name:
            raise SchemaMismatchError(f"expected {expected.name}, message declares {declared}")
        if declared.version not in self.accepts:
            raise SchemaMismatchError(
                f"{declared.name} version {declared.version} not accepted "
                f"(accepted: {sorted(self.accepts)})"
            )
        if not isinstance(data, bytes | bytearray | memoryview):
            raise CorruptMessageError(f"payload must be bytes, not {type(data).__name__}")
        if len(data) > self.max_bytes:
            raise OversizedMessageError(
                f"{declared.name} payload is {len(data)} bytes, over the {self.max_bytes}-byte limit"
            )
        message = self.message_type()
        try:
            message.ParseFromString(bytes(data))
        except (DecodeError, ValueError, RuntimeError) as exc:
            raise CorruptMessageError(f"{declared.name} payload does not decode: {exc}") from exc
        return message
