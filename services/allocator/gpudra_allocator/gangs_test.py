from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from nats.js.kv import KeyValue

from gpudra_alloc import AllocatedState
from gpudra_allocator.conftest import gpu_claim, tray
from gpudra_allocator.engine import Engine, load_classes
from gpudra_allocator.gangs import GangBook, GangRecord, Members, decision_key, members_key
from gpudra_allocator.holdings import BadReservationError
from gpudrapb.v1 import claims_pb2


def event(name: str, gang: str = "default/g", size: int = 2, generation: int = 1) -> Any:
    return claims_pb2.ClaimEvent(
        kind=claims_pb2.ClaimEvent.KIND_PENDING,
        claim=claims_pb2.ClaimRef(
            namespace="default", name=name, uid=f"uid-{name}", generation=generation
        ),
        gang_id=gang,
        gang_size=size,
    )


def test_keys_are_valid_whatever_the_gang_name() -> None:
    for key in (members_key("ns/a gang: with*odd>chars"), decision_key("ns/x")):
        assert all(c.isalnum() or c == "." for c in key), key


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"not json", id="not-json"),
        pytest.param(b'{"gang": "g", "size": 2}', id="no-members"),
        pytest.param(b'{"gang": "g", "size": 2, "members": {"u": "%%%"}}', id="not-base64"),
        pytest.param(
            b'{"gang": "g", "size": 2, "members": {}, "seqs": {"u": "7"}}', id="seq-not-a-number"
        ),
    ],
)
def test_members_decode_rejects_garbage(data: bytes) -> None:
    with pytest.raises(BadReservationError):
        Members.decode(data)


async def test_members_keep_each_members_newest_sequence(kv: KeyValue) -> None:
    """The sequence a member's record is fenced with: its newest event's, whichever replica
    joined it; a redelivered older event changes nothing; a key written before sequences were
    kept reads as unknown (0); a member that leaves takes its sequence along."""
    book = GangBook(kv)
    await book.join(event("m0"), 10)
    await book.join(event("m1"), 11)
    await book.join(event("m0"), 9)  # redelivered older event
    joined = await book.join(event("m0"), 14)  # the claim offered again, same generation
    assert joined.seqs == {"uid-m0": 14, "uid-m1": 11}
    stored = await book.members("default/g")
    assert stored is not None
    assert stored.seqs == joined.seqs
    await book.leave("default/g", "uid-m1")
    left = await book.members("default/g")
    assert left is not None
    assert left.seqs == {"uid-m0": 14}

    older = Members("default/g", 2, {"uid-m0": event("m0")})
    assert b'"seqs"' not in older.encode(), "no sequences: encoded as before"
    assert Members.decode(older.encode()).seqs == {}


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"[]", id="not-an-object"),
        pytest.param(
            b'{"gang": "g", "token": "t", "members": {"u": {"node": "n"}}}', id="no-alloc"
        ),
        pytest.param(
            b'{"gang": "g", "token": "t", "members": {"u": {"node": "n", "allocation": 1}}}',
            id="alloc-not-object",
        ),
    ],
)
def test_gang_record_decode_rejects_garbage(data: bytes) -> None:
    with pytest.raises(BadReservationError):
        GangRecord.decode(data)


@pytest.mark.parametrize(
    ("record", "has_attribute"),
    [
        pytest.param(GangRecord("default/g", "t", None, {}), False, id="no-group"),
        pytest.param(
            GangRecord("default/g", "t", "c1", {"u": ("n", {})}, "gpu.nvidia.com/cliqueID"),
            True,
            id="group-and-attribute",
        ),
        pytest.param(GangRecord("default/g", "t", "c1", {}), False, id="group-of-an-older-record"),
    ],
)
def test_gang_record_round_trips(record: GangRecord, has_attribute: bool) -> None:
    data = record.encode()
    assert GangRecord.decode(data) == record
    assert (b'"attribute"' in data) is has_attribute, "no attribute: encoded as before"


async def test_a_member_leaving_keeps_the_decisions_group(kv: KeyValue) -> None:
    book = GangBook(kv)
    placed: dict[str, tuple[str, dict[str, Any]]] = {
        f"uid-m{i}": ("n", {"devices": {}}) for i in range(2)
    }
    await book.decide(GangRecord("default/g", "tok", "c1", placed, "gpu.nvidia.com/cliqueID"))
    await book.leave("default/g", "uid-m0")
    left = await book.decision("default/g")
    assert left is not None
    assert (left.group, left.attribute, list(left.placed)) == (
        "c1",
        "gpu.nvidia.com/cliqueID",
        ["uid-m1"],
    )


async def test_members_join_from_several_replicas_and_leave(kv: KeyValue) -> None:
    books = [GangBook(kv) for _ in range(3)]
    joined = await asyncio.gather(
        *(book.join(event(f"m{i}", size=3)) for i, book in enumerate(books))
    )
    final = await books[0].members("default/g")
    assert final is not None
    assert sorted(final.events) == ["uid-m0", "uid-m1", "uid-m2"]
    assert max(len(m.events) for m in joined) == 3
    assert [e.claim.name for e in final.ordered()] == ["m0", "m1", "m2"]
    again = await books[1].join(event("m1", size=3))
    assert again.events.keys() == final.events.keys(), "a repeat joins once"

    record = GangRecord("default/g", "tok", None, {"uid-m0": ("n", {"devices": {}})})
    assert await books[0].decide(record) == record
    other = GangRecord("default/g", "other", None, {})
    assert await books[1].decide(other) == record, "the first decision stands"
    await books[2].leave("default/g", "uid-m0")
    left = await books[0].decision("default/g")
    assert left is not None
    assert left.placed == {}, "a member that left is out of the decision too"
    for name in ("m1", "m2"):
        await books[2].leave("default/g", f"uid-{name}")
    assert await books[0].members("default/g") is None
    assert await books[0].decision("default/g") is None, "the last to leave clears the gang"
    fresh = await books[0].join(event("n0", size=1))
    assert list(fresh.events) == ["uid-n0"]


@pytest.mark.parametrize("policy", ["first-fit", "topology"])
@pytest.mark.parametrize(
    ("members", "allocated"),
    [
        pytest.param(4, True, id="fits-only-in-the-large-clique"),
        pytest.param(5, False, id="fits-in-no-clique"),
    ],
)
def test_decide_gang(policy: str, members: int, allocated: bool) -> None:
    slices = [tray(f"small-{i}", "small") for i in range(3)]
    slices += [tray(f"large-{i}", "large") for i in range(4)]
    engine = Engine(load_classes(), policy)
    claims = [gpu_claim(f"m{i}", 4) for i in range(members)]
    decision = engine.decide_gang(
        "default/g", claims, "gpu.nvidia.com/cliqueID", slices, 1, AllocatedState()
    )
    assert decision.allocated is allocated
    if allocated:
        assert decision.group == "large"
        assert sorted(node for node, _ in decision.placed) == [f"large-{i}" for i in range(4)]
    else:
        assert decision.placed == ()
        assert "do not fit together in one gpu.nvidia.com/cliqueID" in decision.reason


@pytest.mark.parametrize(
    ("changed", "voided"),
    [
        pytest.param(False, True, id="unchanged-decision-removed"),
        pytest.param(True, False, id="changed-decision-stays"),
    ],
)
async def test_void_removes_only_the_decision_it_read(
    kv: KeyValue, changed: bool, voided: bool
) -> None:
    book = GangBook(kv)
    for name in ("m0", "m1"):
        await book.join(event(name))
    placed: dict[str, tuple[str, dict[str, Any]]] = {
        f"uid-m{i}": ("n", {"devices": {}}) for i in range(2)
    }
    record = await book.decide(GangRecord("default/g", "tok", None, placed))
    if changed:
        await book.leave("default/g", "uid-m1")  # the decision changed since it was read
    assert await book.void(record) is voided
    assert (await book.decision("default/g") is None) is voided
    assert await book.void(record) is False, "nothing left to void"


class _LosingDeletes:
    """A bucket in which every revision-checked delete loses: another replica rewrites the key
    just before it. nats-py answers such a delete with a plain APIError, not the KV's
    KeyWrongLastSequenceError."""

    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kv, name)

    async def delete(self, key: str, last: int | None = None) -> bool:
        if last:
            entry = await self._kv.get(key)
            await self._kv.put(key, entry.value or b"")
        return await self._kv.delete(key, last=last)


async def test_a_lost_revision_checked_delete_is_a_lost_race_not_an_error(kv: KeyValue) -> None:
    book = GangBook(cast(KeyValue, _LosingDeletes(kv)))
    await book.join(event("m0", size=1))
    record = await book.decide(GangRecord("default/g", "tok", None, {}))
    assert await book.void(record) is False, "another replica rewrote the decision first"
    assert await book.decision("default/g") == record
