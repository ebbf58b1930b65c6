"""Tests for lockstep.spec.terms: operators build the right IR; definition mistakes fail at once."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from example_sorts import Color, Pair, Queue, Rank, Small, Table

from lockstep.spec.expressions import Bound, Comprehension, Constant, Operation, Operator, Quantifier, Variable, render
from lockstep.spec.sorts import (
    BOOL,
    INTEGER,
    integers,
)
from lockstep.spec.terms import (
    DefinitionError,
    Term,
    all_of,
    any_of,
    conjunction,
    constant,
    count_of,
    disjunction,
    if_then_else,
    lift,
    map_of,
    max_of,
    maximum,
    min_of,
    minimum,
    record_of,
    sequence_of,
    sum_of,
)

X, Y = Variable("x", Small), Variable("y", Small)
FLAG, OTHER = Variable("flag", BOOL), Variable("other", BOOL)
MODE, RANK = Variable("mode", Color), Variable("rank", Rank)
TABLE, QUEUE, PAIR = Variable("table", Table), Variable("queue", Queue), Variable("pair", Pair)

x, y, flag, other = Term(X), Term(Y), Term(FLAG), Term(OTHER)
mode, rank, table, queue, pair = Term(MODE), Term(RANK), Term(TABLE), Term(QUEUE), Term(PAIR)


def operation(operator: Operator, *arguments: object, sort: object) -> Operation:
    return Operation(operator, tuple(arguments), sort)  # type: ignore[arg-type]


BUILT: list[tuple[str, Callable[[], Term], Operation]] = [
    ("and", lambda: flag & other, operation(Operator.AND, FLAG, OTHER, sort=BOOL)),
    ("or", lambda: flag | other, operation(Operator.OR, FLAG, OTHER, sort=BOOL)),
    ("not", lambda: ~flag, operation(Operator.NOT, FLAG, sort=BOOL)),
    ("implies", lambda: flag.implies(other), operation(Operator.IMPLIES, FLAG, OTHER, sort=BOOL)),
    ("equal", lambda: x == y, operation(Operator.EQUAL, X, Y, sort=BOOL)),
    ("not equal", lambda: x != y, operation(Operator.NOT_EQUAL, X, Y, sort=BOOL)),
    ("less", lambda: x < y, operation(Operator.LESS, X, Y, sort=BOOL)),
    ("less equal", lambda: x <= y, operation(Operator.LESS_EQUAL, X, Y, sort=BOOL)),
    ("greater", lambda: x > y, operation(Operator.GREATER, X, Y, sort=BOOL)),
    ("greater equal", lambda: x >= y, operation(Operator.GREATER_EQUAL, X, Y, sort=BOOL)),
    ("add", lambda: x + y, operation(Operator.ADD, X, Y, sort=INTEGER)),
    ("subtract", lambda: x - y, operation(Operator.SUBTRACT, X, Y, sort=INTEGER)),
    ("multiply", lambda: x * y, operation(Operator.MULTIPLY, X, Y, sort=INTEGER)),
    ("floor divide", lambda: x // y, operation(Operator.FLOOR_DIVIDE, X, Y, sort=INTEGER)),
    ("modulo", lambda: x % y, operation(Operator.MODULO, X, Y, sort=INTEGER)),
    ("negate", lambda: -x, operation(Operator.NEGATE, X, sort=INTEGER)),
    ("reflected add", lambda: 1 + x, operation(Operator.ADD, Constant(1, INTEGER), X, sort=INTEGER)),
    ("reflected subtract", lambda: 5 - x, operation(Operator.SUBTRACT, Constant(5, INTEGER), X, sort=INTEGER)),
    ("reflected multiply", lambda: 2 * x, operation(Operator.MULTIPLY, X, Constant(2, INTEGER), sort=INTEGER)),
    ("minimum", lambda: minimum(x, y, 1), operation(Operator.MINIMUM, X, Y, Constant(1, INTEGER), sort=INTEGER)),
    ("maximum", lambda: maximum(x, y), operation(Operator.MAXIMUM, X, Y, sort=INTEGER)),
    ("if then else", lambda: if_then_else(flag, x, y), operation(Operator.IF_THEN_ELSE, FLAG, X, Y, sort=Small)),
    ("select", lambda: table[rank], operation(Operator.SELECT, TABLE, RANK, sort=Small)),
    ("store", lambda: table.set(rank, 2), operation(Operator.STORE, TABLE, RANK, Constant(2, Small), sort=Table)),
    ("length", lambda: queue.length(), operation(Operator.LENGTH, QUEUE, sort=INTEGER)),
    ("at", lambda: queue[1], operation(Operator.AT, QUEUE, Constant(1, INTEGER), sort=Small)),
    ("head", lambda: queue.head(), operation(Operator.AT, QUEUE, Constant(0, INTEGER), sort=Small)),
    ("append", lambda: queue.append(x), operation(Operator.APPEND, QUEUE, X, sort=Queue)),
    ("tail", lambda: queue.tail(), operation(Operator.TAIL, QUEUE, sort=Queue)),
    ("field", lambda: pair.field("on"), operation(Operator.FIELD, PAIR, Constant(1, INTEGER), sort=BOOL)),
    (
        "with field",
        lambda: pair.with_field("count", x),
        operation(Operator.WITH_FIELD, PAIR, Constant(0, INTEGER), X, sort=Pair),
    ),
    (
        "record",
        lambda: record_of(Pair, on=flag, count=3),
        operation(Operator.RECORD, Constant(3, Small), FLAG, sort=Pair),
    ),
    ("sequence", lambda: sequence_of(Queue, x, 0), operation(Operator.SEQUENCE, X, Constant(0, Small), sort=Queue)),
    ("enum literal", lambda: mode == "GREEN", operation(Operator.EQUAL, MODE, Constant(1, Color), sort=BOOL)),
    ("enum attribute", lambda: mode != Color.BLUE, operation(Operator.NOT_EQUAL, MODE, Constant(2, Color), sort=BOOL)),
    ("index literal", lambda: rank == 1, operation(Operator.EQUAL, RANK, Constant(1, Rank), sort=BOOL)),
    ("literal outside sort", lambda: x == 7, operation(Operator.EQUAL, X, Constant(7, INTEGER), sort=BOOL)),
    (
        "is empty",
        lambda: queue.is_empty(),
        operation(Operator.EQUAL, operation(Operator.LENGTH, QUEUE, sort=INTEGER), Constant(0, INTEGER), sort=BOOL),
    ),
]


@pytest.mark.parametrize(("label", "build", "expected"), BUILT, ids=[label for label, _, _ in BUILT])
def test_operators_build_the_expected_ir(label: str, build: Callable[[], Term], expected: Operation) -> None:
    term = build()
    assert isinstance(term, Term)
    assert term.expression == expected


def test_every_operator_but_map_has_a_builder() -> None:
    built = {expected.operator for _, _, expected in BUILT}
    assert set(Operator) - built == {Operator.MAP}, "Operator.MAP is only built as IR (map_of is a comprehension)"


def test_connectives_flatten_and_have_units() -> None:
    assert (flag & other & ~flag).expression == operation(
        Operator.AND, FLAG, OTHER, operation(Operator.NOT, FLAG, sort=BOOL), sort=BOOL
    )
    assert (flag | (other | flag)).expression == operation(Operator.OR, FLAG, OTHER, FLAG, sort=BOOL)
    assert conjunction().expression == Constant(True, BOOL)
    assert disjunction().expression == Constant(False, BOOL)
    assert conjunction(flag).expression == FLAG
    assert (True & flag).expression == operation(Operator.AND, FLAG, Constant(True, BOOL), sort=BOOL)


@pytest.mark.parametrize(
    ("build", "quantifier", "sort"),
    [
        (lambda: all_of(Rank, lambda r: table[r] > 0), Quantifier.ALL, BOOL),
        (lambda: any_of(Rank, lambda r: table[r] > 0), Quantifier.ANY, BOOL),
        (lambda: count_of(Rank, lambda r: table[r] > 0), Quantifier.COUNT, INTEGER),
        (lambda: sum_of(Rank, lambda r: table[r]), Quantifier.SUM, INTEGER),
        (lambda: max_of(Rank, lambda r: table[r]), Quantifier.MAXIMUM, INTEGER),
        (lambda: min_of(Rank, lambda r: table[r]), Quantifier.MINIMUM, INTEGER),
        (lambda: map_of(Rank, lambda r: table[r], Small), Quantifier.MAP, Table),
    ],
)
def test_comprehensions_bind_a_fresh_variable(build: Callable[[], Term], quantifier: Quantifier, sort: object) -> None:
    first, second = build().expression, build().expression
    assert isinstance(first, Comprehension) and isinstance(second, Comprehension)
    assert first.quantifier is quantifier and first.sort == sort
    assert isinstance(first.variable, Bound) and first.variable.sort == Rank
    assert first.variable.name != second.variable.name, "each comprehension binds its own name"
    assert any(node == first.variable for node in _nodes(first.body))


def _nodes(expression: object) -> list[object]:
    from lockstep.spec.expressions import walk

    return list(walk(expression))  # type: ignore[arg-type]


def test_if_then_else_sorts() -> None:
    assert if_then_else(flag, x, y).sort == Small
    assert if_then_else(flag, x, Term(Variable("wide", integers(0, 9)))).sort == INTEGER
    assert if_then_else(flag, rank, 1).sort == Rank
    assert if_then_else(flag, rank, rank + 1).sort == INTEGER, "an index sort mixed with arithmetic widens"
    assert if_then_else(flag, "RED", mode).sort == Color
    assert if_then_else(flag, True, other).sort == BOOL


def test_render() -> None:
    assert render(((x + 1) == y).expression) == "((x + 1) == y)"
    assert render((flag & ~other).expression) == "(flag & ~other)"
    assert render(table.set(rank, 2)[rank].expression) == "store(table, rank, 2)[rank]"
    assert render(pair.field("on").expression) == "pair.on"
    assert render(if_then_else(flag, x, 0).expression) == "(x if flag else 0)"
    assert repr(mode == "BLUE") == "Term((mode == BLUE))"


@pytest.mark.parametrize(
    "use",
    [lambda: bool(flag), lambda: 1 if flag else 0, lambda: flag and other, lambda: not flag, lambda: x in [y]],
    ids=["bool", "if", "and", "not", "in"],
)
def test_truth_value_is_refused(use: Callable[[], object]) -> None:
    with pytest.raises(DefinitionError, match=r"has no truth value.*use & \| ~ instead of and/or/not"):
        use()


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: mode == 1, r"the right side of == has sort Int where sort Color is needed"),
        (lambda: mode != x, r"the right side of != has sort Int\[0..3\] where sort Color is needed"),
        (lambda: mode < "GREEN", r"< needs an integer operand, Term\(mode\) has sort Color"),
        (lambda: flag + 1, r"\+ needs an integer operand, Term\(flag\) has sort Bool"),
        (lambda: flag * flag, r"\* needs an integer operand"),
        (lambda: -flag, r"- needs an integer operand"),
        (lambda: ~x, r"~ needs a Bool operand, Term\(x\) has sort Int\[0..3\]"),
        (lambda: x & flag, r"and needs a Bool operand, Term\(x\)"),
        (lambda: flag.implies(x), r"implies needs a Bool operand"),
        (lambda: flag == x, r"the right side of == has sort Int\[0..3\] where sort Bool is needed"),
        (lambda: flag[0], r"Term\(flag\) of sort Bool cannot be indexed; only maps and sequences can"),
        (lambda: x[0], r"of sort Int\[0..3\] cannot be indexed"),
        (lambda: table[flag], r"map key has sort Bool where sort Rank is needed"),
        (lambda: queue[flag], r"sequence position needs an integer operand"),
        (lambda: flag.set(0, True), r"\.set\(\) needs a map, Term\(flag\) has sort Bool"),
        (lambda: table.set(rank, flag), r"map value has sort Bool where sort Int\[0..3\] is needed"),
        (lambda: table.set(mode, 1), r"map key has sort Color where sort Rank is needed"),
        (lambda: queue.append(flag), r"sequence element has sort Bool where sort Int\[0..3\] is needed"),
        (lambda: queue.append(mode), r"sequence element has sort Color"),
        (lambda: flag.length(), r"length\(\) needs a sequence, Term\(flag\) has sort Bool"),
        (lambda: table.tail(), r"tail\(\) needs a sequence"),
        (lambda: mode == "PURPLE", r"'PURPLE' is not a member of Color; members: RED, GREEN, BLUE"),
        (lambda: constant("PURPLE", Color), r"'PURPLE' is not a member of Color"),
        (lambda: constant(3, Color), r"3 is not a value of sort Color"),
        (lambda: constant(4, Small), r"4 is not a value of sort Int\[0..3\]"),
        (lambda: lift(1.5), r"cannot use 1.5 in an expression"),  # type: ignore[arg-type]
        (lambda: lift("RED", Small), r"cannot use 'RED' in an expression \(expected sort Int\[0..3\]\)"),
        (lambda: x.field("count"), r"\.field\('count'\) needs a record, Term\(x\) has sort Int\[0..3\]"),
        (lambda: pair.field("size"), r"record Pair has no field 'size'"),
        (lambda: pair.with_field("size", 1), r"record Pair has no field 'size'"),
        (lambda: pair.with_field("on", x), r"field 'on' has sort Int\[0..3\] where sort Bool is needed"),
        (lambda: record_of(Pair, count=1), r"record Pair: missing fields \['on'\], unknown fields \[\]"),
        (lambda: record_of(Pair, count=1, on=True, size=2), r"unknown fields \['size'\]"),
        (lambda: record_of(Pair, count=flag, on=True), r"field 'count' of record Pair has sort Bool"),
        (lambda: record_of(Pair, count=1, on=3), r"field 'on' of record Pair has sort Int where sort Bool is needed"),
        (lambda: sequence_of(Queue, 1, 2, 3), r"3 elements exceed the capacity of Seq\[Int\[0..3\]; 2\]"),
        (lambda: sequence_of(Queue, flag), r"sequence element has sort Bool"),
        (lambda: if_then_else(x, 1, 2), r"if_then_else condition needs a Bool operand"),
        (lambda: if_then_else(flag, x, other), r"the else branch of if_then_else has sort Bool"),
        (lambda: all_of(INTEGER, lambda value: value > 0), r"all_of needs a finite sort, Int is not"),
        (lambda: all_of(Rank, lambda r: table[r]), r"all_of body needs a Bool operand"),
        (lambda: any_of(Rank, lambda r: table[r]), r"any_of body needs a Bool operand"),
        (lambda: count_of(Rank, lambda r: table[r]), r"count_of body needs a Bool operand"),
        (lambda: sum_of(Rank, lambda r: table[r] > 0), r"sum_of body needs an integer operand"),
        (lambda: max_of(Rank, lambda r: mode), r"max_of body needs an integer operand"),
        (lambda: min_of(Rank, lambda r: flag), r"min_of body needs an integer operand"),
        (lambda: map_of(Rank, lambda r: flag, Small), r"map_of body has sort Bool where sort Int\[0..3\] is needed"),
        (lambda: minimum(x, flag), r"minimum needs an integer operand"),
        (lambda: maximum(mode), r"maximum needs an integer operand"),
    ],
)
def test_sort_mistakes_fail_at_definition_time(build: Callable[[], object], message: str) -> None:
    with pytest.raises(DefinitionError, match=message):
        build()


def test_definition_error_is_a_type_error() -> None:
    assert issubclass(DefinitionError, TypeError)


def test_terms_hash_by_identity() -> None:
    first, second = Term(X), Term(X)
    updates = {first: 1, second: 2}
    assert len(updates) == 2 and updates[first] == 1
