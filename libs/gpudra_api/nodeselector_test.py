from __future__ import annotations

from typing import Any

import pytest

from gpudra_api import Node, ValidationError
from gpudra_api._fields import Field
from gpudra_api.nodeselector import parse_node_selector

NODE = Node("node-1", {"region": "eu", "gpus": "8"})


def _sel(*terms: dict[str, Any]) -> Any:
    return parse_node_selector(Field("test", "sel", {"nodeSelectorTerms": list(terms)}))


def _expr(key: str, op: str, *values: str) -> dict[str, Any]:
    req: dict[str, Any] = {"key": key, "operator": op}
    if values:
        req["values"] = list(values)
    return {"matchExpressions": [req]}


@pytest.mark.parametrize(
    ("terms", "matches"),
    [
        pytest.param([_expr("region", "In", "eu", "us")], True, id="in"),
        pytest.param([_expr("region", "NotIn", "eu")], False, id="not-in"),
        pytest.param([_expr("zone", "NotIn", "a")], True, id="not-in-absent"),
        pytest.param([_expr("region", "Exists")], True, id="exists"),
        pytest.param([_expr("zone", "DoesNotExist")], True, id="does-not-exist"),
        pytest.param([_expr("gpus", "Gt", "4")], True, id="gt"),
        pytest.param([_expr("gpus", "Lt", "4")], False, id="lt"),
        pytest.param([_expr("region", "Gt", "4")], False, id="gt-not-a-number"),
        pytest.param(
            [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}],
            True,
            id="field",
        ),
        pytest.param([_expr("region", "In", "us"), _expr("gpus", "Exists")], True, id="terms-or"),
        pytest.param(
            [
                {
                    **_expr("region", "In", "eu"),
                    **{
                        "matchFields": [
                            {"key": "metadata.name", "operator": "NotIn", "values": ["node-1"]}
                        ]
                    },
                }
            ],
            False,
            id="term-and",
        ),
        pytest.param([{}], False, id="empty-term-matches-nothing"),
    ],
)
def test_matching_follows_node_affinity(terms: list[dict[str, Any]], matches: bool) -> None:
    assert _sel(*terms).matches(NODE) is matches


@pytest.mark.parametrize(
    "terms",
    [
        pytest.param([_expr("region", "Near", "eu")], id="unknown-operator"),
        pytest.param([_expr("region", "In")], id="in-without-values"),
        pytest.param([_expr("region", "Exists", "x")], id="exists-with-values"),
        pytest.param([_expr("gpus", "Gt", "many")], id="gt-not-integer"),
        # Go's strconv.ParseInt(v, 10, 64), not Python's int(): no separators, blanks, other
        # scripts' digits, nothing beyond int64.
        pytest.param([_expr("gpus", "Gt", "1_0")], id="gt-underscore"),
        pytest.param([_expr("gpus", "Lt", " 4")], id="lt-blank"),
        pytest.param([_expr("gpus", "Gt", "\u0664")], id="gt-arabic-indic-digit"),
        pytest.param([_expr("gpus", "Gt", str(2**63))], id="gt-beyond-int64"),
        pytest.param(
            [{"matchFields": [{"key": "metadata.uid", "operator": "In", "values": ["x"]}]}],
            id="unknown-field",
        ),
        pytest.param([], id="no-terms"),
    ],
)
def test_invalid_selectors_are_rejected(terms: list[dict[str, Any]]) -> None:
    with pytest.raises(ValidationError):
        _sel(*terms)


@pytest.mark.parametrize(
    ("label", "op", "value", "matches"),
    [
        pytest.param("1_0", "Gt", "4", False, id="label-with-underscore-is-no-number"),
        pytest.param("+8", "Gt", "4", True, id="label-with-sign"),
        pytest.param("-8", "Lt", "-4", True, id="negative"),
        pytest.param(str(2**63), "Gt", "4", False, id="label-beyond-int64"),
        pytest.param(str(2**63 - 1), "Gt", "4", True, id="label-int64-max"),
    ],
)
def test_gt_lt_read_numbers_as_kubernetes(label: str, op: str, value: str, matches: bool) -> None:
    assert _sel(_expr("n", op, value)).matches(Node("x", {"n": label})) is matches


def test_for_node_round_trips_to_json() -> None:
    assert Node.from_json({"metadata": {"name": "n", "labels": {"a": "b"}}}) == Node(
        "n", {"a": "b"}
    )
    assert _sel(
        *[{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}]
    ).to_json() == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}
        ]
    }
