"""Tests for lockstep.spec.sorts: values, membership, rendering and JSON of every sort; bad declarations."""

from __future__ import annotations

import pytest

from lockstep.spec.expressions import Constant
from lockstep.spec.sorts import (
    BOOL,
    INTEGER,
    EnumSort,
    IndexSort,
    IntSort,
    MapSort,
    RecordSort,
    SequenceSort,
    SortError,
    enum,
    integers,
    record,
    same_kind,
)
from lockstep.spec.terms import Term

Color = enum("Color", ["RED", "GREEN", "BLUE"])
Rank = IndexSort("Rank", 3)


def test_bool_sort() -> None:
    assert list(BOOL.values()) == [False, True]
    assert BOOL.size == 2 and BOOL.is_finite and BOOL.name == "Bool"
    assert BOOL.contains(True) and BOOL.contains(False)
    assert not BOOL.contains(0) and not BOOL.contains(1) and not BOOL.contains(None)
    assert BOOL.render(True) == "true" and BOOL.render(False) == "false"
    assert BOOL.to_json(True) is True


def test_bounded_int_sort() -> None:
    sort = integers(-1, 2)
    assert sort == IntSort(-1, 2) and sort.name == "Int[-1..2]"
    assert list(sort.values()) == [-1, 0, 1, 2]
    assert sort.size == 4 and sort.is_finite
    assert sort.contains(-1) and sort.contains(2)
    assert not sort.contains(-2) and not sort.contains(3)
    assert not sort.contains(True), "a bool is not an integer value"
    assert not sort.contains("1") and not sort.contains(1.0)
    assert sort.render(-1) == "-1" and sort.to_json(2) == 2


def test_single_value_int_sort() -> None:
    assert list(integers(5, 5).values()) == [5]


def test_unbounded_integer_is_not_finite() -> None:
    assert not INTEGER.is_finite and INTEGER.name == "Int"
    assert INTEGER.contains(10**30) and INTEGER.contains(-(10**30))
    assert not INTEGER.contains(False)
    with pytest.raises(SortError, match="not finite"):
        list(INTEGER.values())
    half_open = IntSort(0, None)
    assert not half_open.is_finite and half_open.contains(10**9) and not half_open.contains(-1)


def test_enum_sort() -> None:
    assert Color.members == ("RED", "GREEN", "BLUE")
    assert list(Color.values()) == [0, 1, 2] and Color.size == 3
    assert Color.contains(0) and Color.contains(2)
    assert not Color.contains(3) and not Color.contains(-1) and not Color.contains(True)
    assert not Color.contains("RED"), "enum values are positions, not names"
    assert Color.render(1) == "GREEN" and Color.to_json(2) == "BLUE"
    assert Color.index("BLUE") == 2
    with pytest.raises(SortError, match="'PURPLE' is not a member of Color; members: RED, GREEN, BLUE"):
        Color.index("PURPLE")


def test_enum_attribute_access_gives_a_constant_term() -> None:
    green = Color.GREEN
    assert isinstance(green, Term)
    assert green.expression == Constant(1, Color)
    assert green.sort is Color
    with pytest.raises(AttributeError):
        _ = Color.PURPLE
    with pytest.raises(AttributeError):
        _ = Color._hidden


def test_index_sort() -> None:
    assert list(Rank.values()) == [0, 1, 2] and Rank.size == 3 and Rank.count == 3
    assert Rank.contains(0) and Rank.contains(2)
    assert not Rank.contains(3) and not Rank.contains(-1) and not Rank.contains(False)
    assert Rank.render(2) == "2" and Rank.to_json(1) == 1


def test_map_sort() -> None:
    sort = MapSort(IndexSort("Pair", 2), BOOL)
    assert sort.name == "Map[Pair -> Bool]"
    assert sort.keys == (0, 1)
    assert list(sort.values()) == [(False, False), (False, True), (True, False), (True, True)]
    assert sort.size == 4
    assert sort.contains((True, False))
    assert not sort.contains((True,)), "a map is total: one value per key"
    assert not sort.contains((True, 1))
    assert not sort.contains([True, False]), "maps are tuples"
    assert sort.render((True, False)) == "[true, false]"
    assert sort.to_json((True, False)) == [True, False]


def test_map_sort_over_enum_keys_and_values() -> None:
    sort = MapSort(Color, Color)
    assert sort.keys == (0, 1, 2) and sort.size == 27
    assert sort.render((2, 0, 1)) == "[BLUE, RED, GREEN]"
    assert sort.to_json((2, 0, 1)) == ["BLUE", "RED", "GREEN"]
    bool_keyed = MapSort(BOOL, integers(0, 1))
    assert bool_keyed.keys == (False, True) and bool_keyed.size == 4


def test_sequence_sort() -> None:
    sort = SequenceSort(integers(0, 1), 2)
    assert sort.name == "Seq[Int[0..1]; 2]"
    assert list(sort.values()) == [(), (0,), (1,), (0, 0), (0, 1), (1, 0), (1, 1)]
    assert sort.size == 7
    assert sort.contains(()) and sort.contains((1, 0))
    assert not sort.contains((0, 0, 0)), "longer than the capacity"
    assert not sort.contains((2,)), "an element outside the element sort"
    assert sort.render((0, 1)) == "<0, 1>" and sort.render(()) == "<>"
    assert SequenceSort(Color, 2).to_json((1, 0)) == ["GREEN", "RED"]
    assert list(SequenceSort(BOOL, 0).values()) == [()]


def test_record_sort() -> None:
    pair = record("Pair", count=integers(0, 2), on=BOOL)
    assert isinstance(pair, RecordSort)
    assert pair.fields == (("count", integers(0, 2)), ("on", BOOL))
    assert list(pair.values()) == [(0, False), (0, True), (1, False), (1, True), (2, False), (2, True)]
    assert pair.contains((2, True))
    assert not pair.contains((3, True)) and not pair.contains((1,)) and not pair.contains((1, 1))
    assert pair.field_index("on") == 1
    with pytest.raises(SortError, match="record Pair has no field 'off'"):
        pair.field_index("off")
    assert pair.render((1, True)) == "{count=1, on=true}"
    assert pair.to_json((1, True)) == {"count": 1, "on": True}


def test_record_whose_first_field_is_an_enum_renders_as_a_call() -> None:
    message = record("Message", kind=Color, wave=integers(0, 3))
    assert message.render((1, 2)) == "GREEN(wave=2)"
    assert message.to_json((1, 2)) == {"kind": "GREEN", "wave": 2}


@pytest.mark.parametrize(
    ("declare", "message"),
    [
        (lambda: enum("Empty", []), "EnumSort Empty needs at least one member"),
        (lambda: enum("Twice", ["A", "B", "A"]), r"EnumSort Twice has repeated members: \('A', 'B', 'A'\)"),
        (lambda: integers(3, 2), r"IntSort\(3, 2\): the low bound exceeds the high bound"),
        (lambda: IndexSort("Nobody", 0), "IndexSort Nobody needs a size of at least 1, got 0"),
        (lambda: IndexSort("Negative", -2), "IndexSort Negative needs a size of at least 1, got -2"),
        (lambda: MapSort(integers(0, 3), BOOL), r"map keys must be an IndexSort, EnumSort or Bool, got Int\[0..3\]"),
        (lambda: MapSort(INTEGER, BOOL), "map keys must be an IndexSort, EnumSort or Bool, got Int"),
        (lambda: MapSort(SequenceSort(BOOL, 1), BOOL), "map keys must be"),
        (lambda: SequenceSort(BOOL, -1), "SequenceSort capacity must be non-negative, got -1"),
        (lambda: RecordSort("R", (("a", BOOL), ("a", BOOL))), r"RecordSort R has repeated fields: \['a', 'a'\]"),
    ],
)
def test_bad_declarations_raise_sort_error(declare: object, message: str) -> None:
    with pytest.raises(SortError, match=message):
        declare()  # type: ignore[operator]


def test_sort_error_is_a_value_error() -> None:
    assert issubclass(SortError, ValueError)


def test_same_kind() -> None:
    assert same_kind(integers(0, 1), integers(5, 9)), "integers compare across bounds"
    assert same_kind(Rank, INTEGER) and same_kind(INTEGER, Rank)
    assert same_kind(Color, enum("Color", ["RED", "GREEN", "BLUE"])), "equal declarations are one sort"
    assert not same_kind(Color, integers(0, 2))
    assert not same_kind(BOOL, integers(0, 1))
    assert not same_kind(Rank, IndexSort("Stage", 3))
    assert same_kind(MapSort(Rank, integers(0, 1)), MapSort(Rank, integers(0, 9)))
    assert not same_kind(MapSort(Rank, BOOL), MapSort(Rank, integers(0, 1)))
    assert same_kind(SequenceSort(integers(0, 1), 2), SequenceSort(integers(0, 3), 5))
    assert not same_kind(record("A", x=BOOL), record("B", x=BOOL))
    assert isinstance(Color, EnumSort)
