from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudra_bus.codec import SCHEMA_HEADER, Codec, Schema
from gpudra_bus.codecs import ALLOCATION_DECISION, CLAIM_EVENT
from gpudra_bus.errors import (
    CodecError,
    CorruptMessageError,
    MissingSchemaError,
    OversizedMessageError,
    SchemaMismatchError,
)
from gpudrapb.v1 import claims_pb2


def _event() -> claims_pb2.ClaimEvent:
    return claims_pb2.ClaimEvent(
        kind=claims_pb2.ClaimEvent.KIND_PENDING,
        claim=claims_pb2.ClaimRef(namespace="default", name="c1", uid="u-1", generation=3),
        claim_json=b'{"kind":"ResourceClaim"}',
    )


def test_round_trip_with_schema_header() -> None:
    data, headers = CLAIM_EVENT.encode(_event())
    assert headers == {SCHEMA_HEADER: "gpudra.v1.ClaimEvent;v=1"}
    assert CLAIM_EVENT.decode(data, headers) == _event()


GOOD, GOOD_HEADERS = CLAIM_EVENT.encode(_event())


@pytest.mark.parametrize(
    ("codec", "data", "headers", "error"),
    [
        pytest.param(CLAIM_EVENT, GOOD, None, MissingSchemaError, id="no-headers"),
        pytest.param(CLAIM_EVENT, GOOD, {"Other": "x"}, MissingSchemaError, id="no-schema-header"),
        pytest.param(
            CLAIM_EVENT, GOOD, {SCHEMA_HEADER: "garbage"}, MissingSchemaError, id="unparseable"
        ),
        pytest.param(
            CLAIM_EVENT, GOOD, {SCHEMA_HEADER: "gpudra.v1.ClaimEvent;v="}, MissingSchemaError,
            id="empty-version",
        ),
        pytest.param(
            ALLOCATION_DECISION, GOOD, GOOD_HEADERS, SchemaMismatchError, id="other-type"
        ),
        pytest.param(
            CLAIM_EVENT, GOOD, {SCHEMA_HEADER: "gpudra.v1.ClaimEvent;v=2"}, SchemaMismatchError,
            id="newer-version",
        ),
        pytest.param(
            Codec(claims_pb2.ClaimEvent, max_bytes=8), GOOD, GOOD_HEADERS, OversizedMessageError,
            id="oversized",
        ),
        pytest.param(CLAIM_EVENT, b"\x0a\xff\xff", GOOD_HEADERS, CorruptMessageError, id="truncated"),
        pytest.param(CLAIM_EVENT, GOOD[:-3], GOOD_HEADERS, CorruptMessageError, id="cut-short"),
        pytest.param(
            CLAIM_EVENT, b"\x12\x02\x0a\xc3", GOOD_HEADERS, CorruptMessageError, id="bad-nested"
        ),
        pytest.param(CLAIM_EVENT, "text", GOOD_HEADERS, CorruptMessageError, id="not-bytes"),
    ],
)  # fmt: skip
def test_decode_rejects_bad_messages_with_typed_errors(
    codec: Codec[Any], data: Any, headers: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        codec.decode(data, headers)


def test_accepts_lists_older_versions() -> None:
    v2 = Codec(claims_pb2.ClaimEvent, version=2, accepts=frozenset({1, 2}))
    data, headers = CLAIM_EVENT.encode(_event())
    assert v2.decode(data, headers) == _event()
    assert v2.headers() == {SCHEMA_HEADER: "gpudra.v1.ClaimEvent;v=2"}


@pytest.mark.parametrize(
    ("codec", "message", "error"),
    [
        pytest.param(
            Codec(claims_pb2.ClaimEvent, max_bytes=10), _event(), OversizedMessageError,
            id="oversized",
        ),
        pytest.param(CLAIM_EVENT, claims_pb2.Released(), SchemaMismatchError, id="wrong-type"),
    ],
)  # fmt: skip
def test_encode_refuses(codec: Codec[Any], message: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        codec.encode(message)


@pytest.mark.parametrize(
    ("value", "schema"),
    [
        pytest.param(
            "gpudra.v1.NodeInventory;v=1", Schema("gpudra.v1.NodeInventory", 1), id="plain"
        ),
        pytest.param(" gpudra.v1.X ; v = 12 ", Schema("gpudra.v1.X", 12), id="spaces"),
    ],
)
def test_schema_parse(value: str, schema: Schema) -> None:
    assert Schema.parse(value) == schema


@settings(max_examples=200, deadline=None)
@given(
    data=st.binary(max_size=200),
    header=st.none() | st.text(max_size=40) | st.just("gpudra.v1.ClaimEvent;v=1"),
)
def test_decode_never_crashes(data: bytes, header: str | None) -> None:
    headers = None if header is None else {SCHEMA_HEADER: header}
    try:
        decoded = CLAIM_EVENT.decode(data, headers)
    except CodecError:
        return
    assert isinstance(decoded, claims_pb2.ClaimEvent)
