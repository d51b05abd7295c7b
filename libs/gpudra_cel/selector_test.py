"""Table tests of selector evaluation: the DRA environment and every library, value or error."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from gpudra_api.quantity import Quantity
from gpudra_api.semver import Semver
from gpudra_cel import CelEvaluationError, DeviceView, compile_selector

if TYPE_CHECKING:
    from gpudra_cel.conftest import Matches

GPU = DeviceView(
    driver="gpu.nvidia.com",
    attributes={
        "gpu.nvidia.com": {
            "type": "gpu",
            "index": 3,
            "productName": "NVIDIA H100 80GB HBM3",
            "architecture": "Hopper",
            "cudaComputeCapability": Semver.parse("9.0.0"),
            "driverVersion": Semver.parse("550.54.15"),
            "nvlinkDomain": "nvswitch-0",
            "uuid": "GPU-6f1e",
            "cliques": ("c1.0", "c1.1"),
            "numaNodes": (0, 1),
        },
        "resource.kubernetes.io": {"pcieRoot": "pci0000:10"},
    },
    capacity={"gpu.nvidia.com": {"memory": Quantity.parse("80Gi")}},
    allow_multiple_allocations=True,
)
D = 'device.attributes["gpu.nvidia.com"]'
C = 'device.capacity["gpu.nvidia.com"]'


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # the DRA variable
        pytest.param('device.driver == "gpu.nvidia.com"', True, id="driver"),
        pytest.param("device.allowMultipleAllocations", True, id="allow-multiple"),
        pytest.param(f'{D}.type == "gpu"', True, id="attribute"),
        pytest.param('device.attributes["gpu.nvidia.com"]["type"] == "gpu"', True, id="index-form"),
        pytest.param(
            'device.attributes["x.example.com"].size() == 0', True, id="unknown-domain-empty"
        ),
        pytest.param('device.capacity["x.example.com"].size() == 0', True, id="unknown-cap-domain"),
        pytest.param(
            'device.attributes["resource.kubernetes.io"].pcieRoot == "pci0000:10"',
            True,
            id="std-domain",
        ),
        pytest.param(f"has({D}.nvlinkDomain) && !has({D}.cliqueID)", True, id="has"),
        pytest.param(f'"index" in {D}', True, id="in-attribute-map"),
        pytest.param(
            "has(device.attributes.nope) && !('nope' in device.attributes)",
            True,
            id="has-domain-quirk",
        ),
        pytest.param(f'{D}.exists(k, k == "uuid")', True, id="iterate-attribute-names"),
        pytest.param(
            'cel.bind(d, device.attributes["gpu.nvidia.com"], d.index == 3 && d.type == "gpu")',
            True,
            id="bind",
        ),
        pytest.param("cel.bind(x, 2, cel.bind(y, x * 3, y == 6))", True, id="nested-bind"),
        # two-variable comprehensions
        pytest.param(f'{D}.all(k, v, k != "index" || v == 3)', True, id="two-var-all-map"),
        pytest.param(f'{D}.cliques.exists(i, c, i == 1 && c == "c1.1")', True, id="two-var-exists"),
        pytest.param(f'{D}.cliques.existsOne(i, c, c.startsWith("c1"))', False, id="two-var-one"),
        pytest.param("[5, 6].transformList(i, v, i > 0, v * 2) == [12]", True, id="transform-list"),
        pytest.param('{"a": 1}.transformMap(k, v, v + 1) == {"a": 2}', True, id="transform-map"),
        pytest.param("[0, 1].all(i, v, 1 / v > 0)", "error", id="two-var-error"),
        pytest.param("[0, 1].exists(i, v, 1 / v > 0)", True, id="two-var-absorbs"),
        # quantity library
        pytest.param(f'{C}.memory.isGreaterThan(quantity("40Gi"))', True, id="q-greater"),
        pytest.param(f'{C}.memory.isLessThan(quantity("100G"))', True, id="q-less"),
        pytest.param(f'{C}.memory.compareTo(quantity("80Gi")) == 0', True, id="q-compare"),
        pytest.param(f'{C}.memory == quantity("81920Mi")', True, id="q-equal-across-forms"),
        pytest.param(f'{C}.memory.add(quantity("1Gi")) == quantity("81Gi")', True, id="q-add"),
        pytest.param(f"{C}.memory.sub(1).asInteger() == 85899345919", True, id="q-sub-int"),
        pytest.param(f"{C}.memory.asApproximateFloat() > 8.5e10", True, id="q-float"),
        pytest.param('quantity("1500m").isInteger() == false', True, id="q-is-integer"),
        pytest.param('quantity("-1").sign() == -1', True, id="q-sign"),
        pytest.param('isQuantity("10Gi") && !isQuantity("10 Gi")', True, id="is-quantity"),
        # semver library
        pytest.param(
            f'{D}.cudaComputeCapability.isGreaterThan(semver("8.9.0"))', True, id="sv-greater"
        ),
        pytest.param(
            f"{D}.driverVersion.major() == 550 && {D}.driverVersion.patch() == 15",
            True,
            id="sv-parts",
        ),
        pytest.param(f'{D}.cudaComputeCapability == semver("9.0.0")', True, id="sv-equal"),
        pytest.param('semver("1.0.0-rc.1").isLessThan(semver("1.0.0"))', True, id="sv-prerelease"),
        pytest.param('semver("v1.2", true) == semver("1.2.0")', True, id="sv-normalize"),
        pytest.param(
            'isSemver("1.2.3") && !isSemver("v1.2.3") && isSemver("v1.2.3", true)',
            True,
            id="is-semver",
        ),
        # Kubernetes' normalizeAndParse: "v" and leading zeros go, missing parts become 0, but a
        # short version may not carry a pre-release or build (nor one in its major or minor)
        pytest.param(
            'semver("v01.02.003-rc.1+b", true) == semver("1.2.3-rc.1")', True, id="sv-norm-full"
        ),
        pytest.param('semver("1.0.0-01", true) == semver("1.0.0")', "error", id="sv-norm-pre-0"),
        pytest.param('semver("1.2.03-alpha", true).patch() == 3', True, id="sv-norm-patch-pre"),
        pytest.param('isSemver("1-alpha", true)', False, id="sv-norm-short-pre"),
        pytest.param('isSemver("1.2-beta", true)', False, id="sv-norm-short-minor-pre"),
        pytest.param('isSemver("1.2+build", true)', False, id="sv-norm-short-build"),
        pytest.param('isSemver("1-rc.2.3", true)', False, id="sv-norm-pre-in-major"),
        pytest.param('isSemver("1.0-rc.3", true)', False, id="sv-norm-pre-in-minor"),
        pytest.param('semver("1.2-beta", true) == semver("1.2.0-beta")', "error", id="sv-norm-err"),
        # list attributes
        pytest.param(f'{D}.cliques.includes("c1.1")', True, id="includes-list"),
        pytest.param(f"{D}.numaNodes.includes(2)", False, id="includes-missing"),
        pytest.param(f'{D}.type.includes("gpu")', True, id="includes-scalar"),
        pytest.param(f"{D}.numaNodes.sum() == 1 && {D}.numaNodes.max() == 1", True, id="lists-lib"),
        pytest.param(
            f"{D}.numaNodes.isSorted() && [3, 1].isSorted() == false", True, id="is-sorted"
        ),
        pytest.param(
            "[1, 2, 1].indexOf(1) == 0 && [1, 2, 1].lastIndexOf(1) == 2", True, id="list-index-of"
        ),
        pytest.param(f'sets.contains({D}.cliques, ["c1.0"])', True, id="sets-contains"),
        pytest.param(
            "sets.equivalent([1, 2, 2], [2, 1]) && !sets.intersects([1], [2])", True, id="sets"
        ),
        # strings
        pytest.param(f'{D}.productName.lowerAscii().contains("h100")', True, id="lower"),
        pytest.param(
            '"ÀbC".upperAscii() == "ÀBC" && "ÀbC".lowerAscii() == "Àbc"', True, id="ascii-only"
        ),
        pytest.param('"a,b,,c".split(",") == ["a", "b", "", "c"]', True, id="split"),
        pytest.param('"a,b,c".split(",", 2) == ["a", "b,c"]', True, id="split-n"),
        pytest.param('"a,b".split(",", 0) == []', True, id="split-zero"),
        pytest.param('"aXbXc".replace("X", "-") == "a-b-c"', True, id="replace"),
        pytest.param('"aXbXc".replace("X", "-", 1) == "a-bXc"', True, id="replace-n"),
        pytest.param('"  x \\t".trim() == "x"', True, id="trim"),
        pytest.param(
            '"hello".substring(1, 3) == "el" && "hello".substring(3) == "lo"', True, id="substring"
        ),
        pytest.param(
            '"hello".indexOf("l") == 2 && "hello".lastIndexOf("l") == 3', True, id="index-of"
        ),
        pytest.param(
            '"hello".indexOf("l", 3) == 3 && "hello".lastIndexOf("l", 2) == 2',
            True,
            id="index-of-offset",
        ),
        # cel-go >= 0.22 (Kubernetes >= 1.32): an offset at or past the end finds nothing (-1)
        pytest.param('"".indexOf("x") == -1', True, id="index-of-empty-text"),
        pytest.param('"abc".indexOf("x", 5) == -1', True, id="index-of-past-end"),
        pytest.param('"abc".indexOf("c", 3) == -1', True, id="index-of-at-end"),
        pytest.param('"abc".lastIndexOf("a", 7) == -1', True, id="last-index-of-past-end"),
        pytest.param('"abc".indexOf("a", -1) == 0', "error", id="index-of-negative"),
        pytest.param('"abc".lastIndexOf("a", -1) == 0', "error", id="last-index-of-negative"),
        pytest.param('"héllo".charAt(1) == "é" && "ab".charAt(2) == ""', True, id="char-at"),
        pytest.param('["a", "b"].join() == "ab" && ["a", "b"].join("-") == "a-b"', True, id="join"),
        pytest.param(f'{D}.productName.matches("H[0-9]+")', True, id="matches-search"),
        pytest.param(f'matches({D}.uuid, "^GPU-")', True, id="matches-global"),
        pytest.param('"ab12cd345".find("[0-9]+") == "12"', True, id="find"),
        pytest.param('"ab12cd345".findAll("[0-9]+") == ["12", "345"]', True, id="find-all"),
        pytest.param('"ab12cd345".findAll("[0-9]+", 1) == ["12"]', True, id="find-all-n"),
        # Go's FindAllString: an empty match right after the previous match is left out, and
        # after an empty match the search resumes one character on
        pytest.param('"baaa".findAll("a*") == ["", "aaa"]', True, id="find-all-empty-after"),
        pytest.param('"abc".findAll("b*") == ["", "b", ""]', True, id="find-all-empties"),
        pytest.param('"a".findAll("a??") == ["", ""]', True, id="find-all-lazy-empty"),
        pytest.param('"xay".findAll("|a") == ["", "", "", ""]', True, id="find-all-empty-branch"),
        pytest.param('"baaab".findAll("a*", 2) == ["", "aaa"]', True, id="find-all-empty-n"),
        # conversions
        pytest.param('int("42") == 42 && int(" 42") == 42', "error", id="int-rejects-space"),
        pytest.param(
            'string(1.5e6) == "1.5e+06" && string(0.25) == "0.25"', True, id="string-double"
        ),
        pytest.param('string(b"abc") == "abc" && bytes("abc") == b"abc"', True, id="bytes"),
        pytest.param("uint(3) == 3u && double(2) == 2.0", True, id="numeric-conversions"),
        # double(string) is Go's strconv.ParseFloat: hexadecimal with a p exponent, underscores
        # only after a base prefix, a sign on infinities but not on NaN
        pytest.param('double("0x1p4") == 16.0 && double("0x1.8p1") == 3.0', True, id="hex-float"),
        pytest.param('double("-0X.8P1") == -1.0', True, id="hex-float-upper"),
        pytest.param('double("0x_1p4") == 16.0', True, id="hex-float-underscore"),
        pytest.param('double("0x1") == 1.0', "error", id="hex-float-needs-exponent"),
        pytest.param('double("1_0") == 10.0', "error", id="decimal-underscore"),
        pytest.param('double("0x1p99999") > 0.0', "error", id="hex-float-range"),
        pytest.param('double("-Inf") < 0.0 && double("+infinity") > 0.0', True, id="signed-inf"),
        pytest.param('double("-nan") != 0.0', "error", id="signed-nan"),
        pytest.param("int(1e19) == 0", "error", id="int-double-overflow"),
        pytest.param('bool("yes")', "error", id="bool-bad-string"),
        pytest.param(
            f"({D}.index - 3 - 9223372036854775807 - 1) % -1 == 0",
            "error",
            id="int-min-mod-minus-1",
        ),
        # NaN: cel-go's Compare refuses it, so an ordering operator is an error, while the list
        # library's isSorted / min / max pass over a failed comparison
        pytest.param('double("NaN") < 1.0', "error", id="nan-less"),
        pytest.param('!(1 >= double("NaN"))', "error", id="nan-int-ordering"),
        pytest.param('dyn(2u) > double("NaN")', "error", id="nan-uint-ordering"),
        pytest.param('double("NaN") == double("NaN")', False, id="nan-equal"),
        pytest.param('[2.0, double("NaN"), 1.0].isSorted()', True, id="nan-is-sorted"),
        pytest.param('[1.0, double("NaN")].min() == 1.0', True, id="nan-min"),
        pytest.param('string([double("NaN"), 1.0].max()) == "NaN"', True, id="nan-max-first"),
        # Kubernetes' own types (Semver, Quantity, IP, ...) refuse `==` with a value of another
        # type on their right (cel-go's evalEq calls lhs.Equal): an error, not false; `!=`
        # turns any answer but true into true, and `in` / includes skip the refusal
        pytest.param(
            f'{D}.cudaComputeCapability == "9.0.0"', "no matching overload", id="sv-eq-str"
        ),
        pytest.param(
            f'!({D}.cudaComputeCapability == "9.0.0")', "no matching overload", id="sv-not-eq"
        ),
        pytest.param(
            f'{D}.type == "gpu" && {D}.cudaComputeCapability == "9.0.0"',
            "no matching overload",
            id="sv-eq-str-in-chain",
        ),
        pytest.param(
            f'cel.bind(v, {D}.cudaComputeCapability, v == "9.0.0")',
            "no matching overload",
            id="sv-eq-str-bound",
        ),
        pytest.param('dyn(quantity("1")) == 1', "no matching overload", id="quantity-eq-int"),
        pytest.param(f'{D}.cudaComputeCapability != "9.0.0"', True, id="sv-ne-str"),
        pytest.param(f'"9.0.0" == {D}.cudaComputeCapability', False, id="str-eq-sv"),
        pytest.param(f"{D}.cudaComputeCapability == dyn(null)", False, id="sv-eq-null"),
        pytest.param(f'{D}.cudaComputeCapability in ["9.0.0"]', False, id="sv-in-strs"),
        pytest.param(f'{D}.cudaComputeCapability.includes("9.0.0")', False, id="sv-includes-str"),
        pytest.param(f'{D}.cudaComputeCapability == semver("9.0.0")', True, id="sv-eq-sv"),
        # sum() of an empty list is the zero of the list's element type, as Kubernetes declares
        # one overload per summable type
        pytest.param("[1.0].filter(x, x > 5.0).sum() + 1.5 == 1.5", True, id="sum-empty-double"),
        pytest.param("[1u].filter(x, x > 5u).sum() + 1u == 1u", True, id="sum-empty-uint"),
        pytest.param("[1].filter(x, x > 5).sum() + 1 == 1", True, id="sum-empty-int"),
        pytest.param("[1.5, 2.5].sum() == 4.0 && [2u, 3u].sum() == 5u", True, id="sum-typed"),
        pytest.param("dyn([]).sum() == 0 && dyn([1.5]).sum() == 1.5", True, id="sum-dyn"),
        # int/uint against double: compared as doubles, as cel-go does
        pytest.param("9007199254740993 > 9007199254740992.0", False, id="int-double-rounds"),
        pytest.param(
            "dyn(9007199254740993) == 9007199254740992.0", True, id="int-double-equal-rounds"
        ),
        pytest.param("9223372036854775807 >= 9223372036854775808.0", True, id="int-max-double"),
        pytest.param(
            "9007199254740993 in dyn([9007199254740992.0])", True, id="int-in-doubles-rounds"
        ),
        # optional
        pytest.param(
            "optional.of(1).hasValue() && !optional.none().hasValue()", True, id="opt-has"
        ),
        pytest.param("optional.none().orValue(5) == 5", True, id="opt-or-value"),
        pytest.param("optional.ofNonZeroValue(0).hasValue()", False, id="opt-non-zero"),
        pytest.param("optional.none().value() == 1", "error", id="opt-deref-none"),
        pytest.param("optional.none().or(optional.of(2)).value() == 2", True, id="opt-or"),
        # errors
        pytest.param(f'{D}.missing == "x"', "error", id="no-such-key"),
        pytest.param(f'{D}.missing == "x" || true', True, id="or-absorbs"),
        pytest.param(f'false && {D}.missing == "x"', False, id="and-short"),
        pytest.param(f'{D}.missing == "x" && false', False, id="and-commutative"),
        pytest.param(f"{D}.index", "error", id="non-bool-result"),
        pytest.param(f"{D}.type + 1 == 2", "error", id="dyn-type-mismatch"),
        pytest.param(f'{D}.index > "2"', "error", id="dyn-compare-mismatch"),
        pytest.param("quantity(device.driver).sign() == 1", "error", id="bad-runtime-quantity"),
        pytest.param(
            f'{C}.memory.asInteger() > 0 && quantity("1.5").asInteger() == 1',
            "error",
            id="as-integer-fraction",
        ),
        pytest.param('"abc".substring(2, 1) == ""', "error", id="bad-substring"),
        pytest.param('"abc".charAt(5) == ""', "error", id="char-at-range"),
        pytest.param(f'{D}.cliques.all(c, c.startsWith("c1"))', True, id="list-all"),
        pytest.param(f'{D}.cliques[5] == "x"', "error", id="list-index-range"),
        pytest.param('{"a": 1, "a": 2}.size() == 1', "error", id="duplicate-map-key"),
    ],
)
def test_matches(expression: str, expected: bool | str) -> None:
    selector = compile_selector(expression)
    if isinstance(expected, str):  # "error", or a fragment of the message
        with pytest.raises(CelEvaluationError, match=None if expected == "error" else expected):
            selector.matches(GPU)
    else:
        assert selector.matches(GPU) is expected


def test_unknown_key_error_names_the_key() -> None:
    with pytest.raises(CelEvaluationError, match="no such key: cliqueID"):
        compile_selector(f'{D}.cliqueID == "x"').matches(GPU)


def test_list_attribute_over_limit_is_an_error() -> None:
    # the walk reaches the 49th element without a match (a match among the first 48 would be
    # true, as in DRA's includesFunc: see test_includes_stops_at_the_49th_element)
    device = DeviceView("d", {"d": {"l": tuple(range(49))}}, {})
    with pytest.raises(CelEvaluationError, match="longer than 48"):
        compile_selector('device.attributes["d"].l.includes(48)').matches(device)


def test_selector_is_reusable_and_memoized() -> None:
    first = compile_selector('device.driver == "gpu.nvidia.com"')
    assert compile_selector('device.driver == "gpu.nvidia.com"') is first
    other = DeviceView("other", {}, {})
    assert [first.matches(GPU), first.matches(other), first.matches(GPU)] == [True, False, True]


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        # cel-go checks start <= end first, then start, then end
        pytest.param(
            "'abc'.substring(-1, 2) == ''", "index out of range: -1$", id="negative-start"
        ),
        pytest.param(
            "'abc'.substring(5, 2) == ''",
            "invalid substring range. start: 5, end: 2$",
            id="start-after-end-out-of-range",
        ),
        pytest.param("'abc'.substring(4, 5) == ''", "index out of range: 4$", id="start-past-end"),
        pytest.param("'abc'.substring(2, 5) == ''", "index out of range: 5$", id="end-past-end"),
        pytest.param(
            "'abc'.substring(2, 1) == ''",
            "invalid substring range. start: 2, end: 1$",
            id="start-after-end",
        ),
        pytest.param("'abc'.substring(4) == ''", "index out of range: 4$", id="one-arg"),
        pytest.param("'abc'.substring(-1) == ''", "index out of range: -1$", id="one-arg-negative"),
    ],
)
def test_substring_errors_as_cel_go(expression: str, message: str) -> None:
    with pytest.raises(CelEvaluationError, match=message):
        compile_selector(expression).matches(GPU)


@pytest.mark.parametrize(
    ("values", "wanted", "expected"),
    [
        # DRA's includes walks the list and gives up only at the 49th element: a value among
        # the first 48 is found even in a longer list
        pytest.param(tuple(range(60)), 3, True, id="found-early-in-long-list"),
        pytest.param(tuple(range(60)), 47, True, id="found-at-48th"),
        pytest.param(tuple(range(60)), 48, "cannot be applied to lists longer than 48", id="49th"),
        pytest.param(
            tuple(range(60)), 99, "cannot be applied to lists longer than 48", id="absent"
        ),
        pytest.param(tuple(range(48)), 99, False, id="absent-48"),
    ],
)
def test_includes_stops_at_the_49th_element(
    values: tuple[int, ...], wanted: int, expected: bool | str, matches: Matches
) -> None:
    device = DeviceView("d.example.com", {"d.example.com": {"ids": values}}, {}, False)
    selector = compile_selector(f'device.attributes["d.example.com"].ids.includes({wanted})')
    matches(selector, device, expected)
