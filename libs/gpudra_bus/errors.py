"""The bus's exceptions: one root (`BusError`), permanent and retryable kept apart.

Promise: every failure our bus code reports is a `BusError`; nats-py and protobuf exceptions are
translated where we call them (`raise ... from exc`). A caller decides with one `isinstance`:
`BusRetryableError` means "the same call may succeed later" (the server is away, a request timed
out), `BusPermanentError` means "retrying the same input cannot help" (bad subject, corrupt or
mismatched message, conflicting stream configuration).
"""

from __future__ import annotations


class BusError(Exception):
    """Root of every error raised by gpudra_bus."""


class BusPermanentError(BusError):
    """Retrying the same operation with the same input will fail the same way."""


class BusRetryableError(BusError):
    """A transient condition (no connection, timeout, server unavailable); retry later."""


class NotConnectedError(BusRetryableError):
    """No NATS server could be reached (yet), or the connection is closed or reconnecting."""


class BusTimeoutError(BusRetryableError):
    """A request to the server (publish ack, stream API call) timed out."""


class InvalidSubjectError(BusPermanentError, ValueError):
    """A subject, subject token or KV key is malformed (wrong kind, bad node name, ...)."""


class StreamConfigError(BusPermanentError):
    """A stream or KV bucket exists with a configuration we cannot reconcile, or the API refused."""


class CodecError(BusPermanentError):
    """A message could not be encoded or decoded; the message itself is bad."""


class MissingSchemaError(CodecError):
    """The message carries no (or an unparseable) `Gpudra-Schema` header."""


class SchemaMismatchError(CodecError):
    """The message's schema names another message type or a version this codec does not accept."""


class OversizedMessageError(CodecError):
    """The payload is larger than the codec's size limit."""


class CorruptMessageError(CodecError):
    """The payload is not a valid encoding of the declared message type."""
