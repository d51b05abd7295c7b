"""Positions in the claims stream across its incarnations (`StreamPos.after`), their keeping in
claim records and gang members, and `Incarnations.tag`'s classification of messages by their
store time (the stream's info answered by a stand-in here; against a real server in
`recreated_stream_test`)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, cast

import pytest

from gpudra_allocator.events import stream_pos
from gpudra_allocator.gangs import Members
from gpudra_allocator.holdings import ClaimRecord
from gpudra_allocator.incarnations import Incarnations, StreamPos, micros
from gpudra_bus import BusRetryableError

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("a", "b", "after"),
    [
        pytest.param(StreamPos(5, 3), StreamPos(5, 2), True, id="same-incarnation-later"),
        pytest.param(StreamPos(5, 2), StreamPos(5, 2), False, id="same-position"),
        pytest.param(StreamPos(9, 1), StreamPos(5, 7), True, id="newer-incarnation-lower-seq"),
        pytest.param(StreamPos(5, 7), StreamPos(9, 1), False, id="older-incarnation-higher-seq"),
        pytest.param(StreamPos(9, 1), StreamPos(0, 7), False, id="unknown-compares-by-seq"),
        pytest.param(StreamPos(0, 8), StreamPos(9, 7), True, id="unknown-event-by-seq"),
    ],
)
def test_positions_compare_by_incarnation_then_sequence(
    a: StreamPos, b: StreamPos, after: bool
) -> None:
    assert a.after(b) == after


def test_records_and_members_keep_the_incarnation() -> None:
    record = ClaimRecord("cleared", claim="d/x", seq=4, epoch=77)
    assert ClaimRecord.decode(record.encode()) == record
    assert record.pos == StreamPos(77, 4)
    assert b"epoch" not in ClaimRecord("cleared", claim="d/x", seq=4).encode()
    members = Members("g", 1, {"u": cast(Any, None)}, {"u": 3}, {"u": 77})
    assert members.pos("u") == StreamPos(77, 3)
    assert members.pos("other") == StreamPos(0, 0)


@dataclass
class Stored:
    """A delivered JetStream message: its stream sequence and store time."""

    seq: int
    when: datetime.datetime

    @property
    def metadata(self) -> Any:
        return SimpleNamespace(sequence=SimpleNamespace(stream=self.seq), timestamp=self.when)


class Info:
    """`stream_info` answering the stream's creation time, counting the requests."""

    def __init__(self, created: datetime.datetime | None) -> None:
        self.created = created
        self.asked = 0

    async def stream_info(self, name: str) -> Any:
        self.asked += 1
        return SimpleNamespace(created=self.created)


async def test_messages_are_tagged_with_the_incarnation_alive_when_they_were_stored() -> None:
    js = Info(at(0))
    incarnations = Incarnations(cast(Any, js), "S")
    first = [Stored(1, at(1)), Stored(2, at(2))]
    await incarnations.tag(first)
    assert [stream_pos(m) for m in first] == [
        StreamPos(micros(at(0)), 1),
        StreamPos(micros(at(0)), 2),
    ]
    assert js.asked == 1

    await incarnations.tag([Stored(1, at(1))])  # a redelivery: known already
    assert js.asked == 1, "no message newer than those confirmed: no request"

    js.created = at(10)  # deleted and created again; one batch spans both
    mixed = [Stored(3, at(3)), Stored(1, at(11))]
    await incarnations.tag(mixed)
    assert [stream_pos(m) for m in mixed] == [
        StreamPos(micros(at(0)), 3),
        StreamPos(micros(at(10)), 1),
    ]
    assert list(incarnations.known) == [micros(at(0)), micros(at(10))]


async def test_a_batch_whose_incarnation_cannot_be_read_is_not_tagged() -> None:
    incarnations = Incarnations(cast(Any, Info(None)), "S")
    msg = Stored(1, at(1))
    with pytest.raises(BusRetryableError):
        await incarnations.tag([msg])
    assert stream_pos(msg) == StreamPos(0, 1)
