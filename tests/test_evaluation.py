"""Tests for lockstep.spec.evaluation: the reference value of every operator and quantifier, and its errors."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from example_sorts import Color, Pair, Queue, Rank, Small, Table

from lockstep.spec.evaluation import Environment, EvaluationError, evaluate
from lockstep.spec.expressions import Constant, Expression, Operation, Operator, Parameter, Quantifier, Variable
from lockstep.spec.sorts import BOOL, Value, integers
from lockstep.spec.terms import (
    Term,
    all_of,
    any_of,
    count_of,
    if_then_else,
    map_of,
    max_of,
    maximum,
    min_of,
    minimum,
    record_of,
    sequence_of,
    sum_of,
)

x, y = Term(Variable("x", Small)), Term(Variable("y", Small))
flag, other = Term(Variable("flag", BOOL)), Term(Variable("other", BOOL))
mode, rank = Term(Variable("mode", Color)), Term(Variable("rank", Rank))
table, queue, pair = Term(Variable("table", Table)), Term(Variable("queue", Queue)), Term(Variable("pair", Pair))
empty = Term(Variable("empty", Queue))

STATE: dict[str, Value] = {
    "x": 2,
    "y": 3,
    "flag": True,
    "other": False,
    "mode": 1,
    "rank": 1,
    "table": (3, 0),
    "queue": (1, 2),
    "pair": (2, True),
    "empty": (),
}
ENVIRONMENT = Environment(STATE)

Case = tuple[str, Callable[[], Term | Expression], Value]

OPERATOR_CASES: dict[Operator, list[Case]] = {
    Operator.NOT: [("~flag", lambda: ~flag, False), ("~other", lambda: ~other, True)],
    Operator.AND: [
        ("flag & other", lambda: flag & other, False),
        ("flag & ~other & flag", lambda: flag & ~other & flag, True),
    ],
    Operator.OR: [("other | flag", lambda: other | flag, True), ("other | ~flag", lambda: other | ~flag, False)],
    Operator.IMPLIES: [
        ("other -> flag", lambda: other.implies(flag), True),
        ("flag -> other", lambda: flag.implies(other), False),
        ("flag -> flag", lambda: flag.implies(flag), True),
    ],
    Operator.EQUAL: [("x == 2", lambda: x == 2, True), ("mode == BLUE", lambda: mode == "BLUE", False)],
    Operator.NOT_EQUAL: [
        ("x != y", lambda: x != y, True),
        ("queue != <1, 2>", lambda: queue != sequence_of(Queue, 1, 2), False),
    ],
    Operator.LESS: [("x < y", lambda: x < y, True), ("y < x", lambda: y < x, False)],
    Operator.LESS_EQUAL: [("x <= 2", lambda: x <= 2, True), ("y <= x", lambda: y <= x, False)],
    Operator.GREATER: [("y > x", lambda: y > x, True), ("x > 2", lambda: x > 2, False)],
    Operator.GREATER_EQUAL: [("x >= 2", lambda: x >= 2, True), ("x >= y", lambda: x >= y, False)],
    Operator.ADD: [("x + y", lambda: x + y, 5)],
    Operator.SUBTRACT: [("x - y", lambda: x - y, -1), ("10 - y", lambda: 10 - y, 7)],
    Operator.MULTIPLY: [("x * y", lambda: x * y, 6)],
    Operator.FLOOR_DIVIDE: [("(x - 9) // 2", lambda: (x - 9) // 2, -4), ("y // x", lambda: y // x, 1)],
    Operator.MODULO: [("(x - 9) % 3", lambda: (x - 9) % 3, 2), ("y % x", lambda: y % x, 1)],
    Operator.NEGATE: [("-x", lambda: -x, -2)],
    Operator.MINIMUM: [("min(y, x, 5)", lambda: minimum(y, x, 5), 2), ("min(y)", lambda: minimum(y), 3)],
    Operator.MAXIMUM: [("max(y, x, 5)", lambda: maximum(y, x, 5), 5), ("max(x)", lambda: maximum(x), 2)],
    Operator.IF_THEN_ELSE: [
        ("other ? x : y", lambda: if_then_else(other, x, y), 3),
        ("flag ? x : y", lambda: if_then_else(flag, x, y), 2),
    ],
    Operator.SELECT: [("table[rank]", lambda: table[rank], 0), ("table[0]", lambda: table[0], 3)],
    Operator.STORE: [
        ("table.set(rank, 2)", lambda: table.set(rank, 2), (3, 2)),
        ("table.set(0, 1)", lambda: table.set(0, 1), (1, 0)),
    ],
    Operator.LENGTH: [("len(queue)", lambda: queue.length(), 2), ("len(empty)", lambda: empty.length(), 0)],
    Operator.AT: [("queue[1]", lambda: queue[1], 2), ("head(queue)", lambda: queue.head(), 1)],
    Operator.APPEND: [("empty + 3", lambda: empty.append(3), (3,)), ("queue + x", lambda: queue.append(x), (1, 2, 2))],
    Operator.TAIL: [("tail(queue)", lambda: queue.tail(), (2,))],
    Operator.FIELD: [("pair.on", lambda: pair.field("on"), True), ("pair.count", lambda: pair.field("count"), 2)],
    Operator.WITH_FIELD: [("pair with count 0", lambda: pair.with_field("count", 0), (0, True))],
    Operator.RECORD: [("Pair(x, other)", lambda: record_of(Pair, count=x, on=other), (2, False))],
    Operator.SEQUENCE: [("<y>", lambda: sequence_of(Queue, y), (3,)), ("<>", lambda: sequence_of(Queue), ())],
    Operator.MAP: [("map(1, x)", lambda: Operation(Operator.MAP, (Constant(1, Small), x.expression), Table), (1, 2))],
}

QUANTIFIER_CASES: dict[Quantifier, list[Case]] = {
    Quantifier.ALL: [
        ("all table > 0", lambda: all_of(Rank, lambda r: table[r] > 0), False),
        ("all table <= 3", lambda: all_of(Rank, lambda r: table[r] <= 3), True),
    ],
    Quantifier.ANY: [
        ("any table > 0", lambda: any_of(Rank, lambda r: table[r] > 0), True),
        ("any color is mode", lambda: any_of(Color, lambda color: color == mode), True),
        ("any bool is both", lambda: any_of(BOOL, lambda b: b & ~b), False),
    ],
    Quantifier.SUM: [
        ("sum table", lambda: sum_of(Rank, lambda r: table[r]), 3),
        ("sum 1..3", lambda: sum_of(integers(1, 3), lambda value: value), 6),
    ],
    Quantifier.COUNT: [
        ("count table == 0", lambda: count_of(Rank, lambda r: table[r] == 0), 1),
        ("count bools", lambda: count_of(BOOL, lambda b: b), 1),
    ],
    Quantifier.MAXIMUM: [("max table", lambda: max_of(Rank, lambda r: table[r]), 3)],
    Quantifier.MINIMUM: [
        ("min table", lambda: min_of(Rank, lambda r: table[r]), 0),
        ("min -v over 1..3", lambda: min_of(integers(1, 3), lambda value: -value), -3),
    ],
    Quantifier.MAP: [
        ("map table + 1", lambda: map_of(Rank, lambda r: table[r] + 1, integers(0, 4)), (4, 1)),
        ("map color == mode", lambda: map_of(Color, lambda color: color == mode, BOOL), (False, True, False)),
    ],
}


def _expression(build: Callable[[], Term | Expression]) -> Expression:
    built = build()
    return built.expression if isinstance(built, Term) else built


def test_every_operator_and_quantifier_has_a_case() -> None:
    assert set(OPERATOR_CASES) == set(Operator), f"no case for {set(Operator) - set(OPERATOR_CASES)}"
    assert set(QUANTIFIER_CASES) == set(Quantifier), f"no case for {set(Quantifier) - set(QUANTIFIER_CASES)}"


def _flatten(
    cases: dict[Operator, list[Case]] | dict[Quantifier, list[Case]],
) -> list[tuple[object, str, Callable[[], Term | Expression], Value]]:
    return [(member, label, build, expected) for member, entries in cases.items() for label, build, expected in entries]


OPERATOR_TABLE = _flatten(OPERATOR_CASES)
QUANTIFIER_TABLE = _flatten(QUANTIFIER_CASES)


@pytest.mark.parametrize(
    ("operator", "label", "build", "expected"), OPERATOR_TABLE, ids=[row[1] for row in OPERATOR_TABLE]
)
def test_operator_values(
    operator: Operator, label: str, build: Callable[[], Term | Expression], expected: Value
) -> None:
    expression = _expression(build)
    assert isinstance(expression, Operation) and expression.operator is operator, label
    value = evaluate(expression, ENVIRONMENT)
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize(
    ("quantifier", "label", "build", "expected"), QUANTIFIER_TABLE, ids=[row[1] for row in QUANTIFIER_TABLE]
)
def test_quantifier_values(
    quantifier: Quantifier, label: str, build: Callable[[], Term | Expression], expected: Value
) -> None:
    expression = _expression(build)
    assert getattr(expression, "quantifier", None) is quantifier, label
    value = evaluate(expression, ENVIRONMENT)
    assert value == expected and type(value) is type(expected)


def test_leaves_read_state_parameters_and_bindings() -> None:
    environment = Environment({"x": 1}, {"who": 1}).binding("b", 3)
    assert evaluate(Variable("x", Small), environment) == 1
    assert evaluate(Parameter("who", Rank), environment) == 1
    assert evaluate(Constant((0, 1), Table), environment) == (0, 1)
    assert environment.bound == {"b": 3}
    assert Environment({}).binding("b", 1).binding("b", 2).bound == {"b": 2}


def test_nested_comprehensions_see_outer_bindings() -> None:
    matrix = count_of(Rank, lambda first: any_of(Rank, lambda second: table[first] > table[second]))
    assert evaluate(matrix.expression, ENVIRONMENT) == 1


@pytest.mark.parametrize(
    ("label", "build", "expected"),
    [
        ("and skips the rest once false", lambda: ~empty.is_empty() & (empty.head() == 1), False),
        ("or skips the rest once true", lambda: empty.is_empty() | (empty.head() == 1), True),
        ("implies skips the consequent", lambda: (~empty.is_empty()).implies(empty.tail().is_empty()), True),
        ("ite skips the untaken branch", lambda: if_then_else(empty.is_empty(), 0, empty.head()), 0),
        ("ite skips the then branch", lambda: if_then_else(~empty.is_empty(), empty.head() // 0, 7), 7),
    ],
)
def test_short_circuit_forms_skip_undefined_operands(label: str, build: Callable[[], Term], expected: Value) -> None:
    assert evaluate(build().expression, ENVIRONMENT) == expected, label


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: empty.tail(), "tail of an empty sequence"),
        (lambda: x // (y - 3), "division by zero"),
        (lambda: x % (y - 3), "modulo by zero"),
        (lambda: queue[2], "position 2 outside a sequence of length 2"),
        (lambda: empty.head(), "position 0 outside a sequence of length 0"),
        (lambda: queue[x - 3], "position -1 outside a sequence of length 2"),
        (lambda: table[x], "key 2 outside a map of 2 keys"),
        (lambda: table[x - 3], "key -1 outside a map of 2 keys"),
        (lambda: (empty.head() == 1) & flag, "position 0 outside"),
        (lambda: flag.implies(empty.head() == 1), "position 0 outside"),
        (lambda: sum_of(Rank, lambda r: table[r] // r), "division by zero"),
    ],
)
def test_undefined_operations_raise_evaluation_error(build: Callable[[], Term], message: str) -> None:
    with pytest.raises(EvaluationError, match=message):
        evaluate(build().expression, ENVIRONMENT)


def test_evaluation_error_is_a_value_error_and_unknown_nodes_are_refused() -> None:
    assert issubclass(EvaluationError, ValueError)
    with pytest.raises(EvaluationError, match="does not know node str"):
        evaluate("x", ENVIRONMENT)  # type: ignore[arg-type]
