"""Static integer ranges of IR expressions, and the bit-vector width that no computation overflows.

The Z3 engines translate integers as signed bit-vectors of one width (``values.bit_vectors``). A
width that is too narrow wraps a value silently, and a wrapped value can hide a violation (``x * x
* x < 10000`` holds for every 11-bit ``x`` although ``x = 22`` breaks it). This module bounds every
integer the translation can compute, by interval arithmetic over the IR: a state variable or a
parameter lies in its sort (the engines assert the sort domain of every state and ground every
parameter), a constant is itself, and each operator maps the intervals of its operands to an
interval of its results (sums over a comprehension: the body's interval times the number of
terms). ``required_width`` is then the number of bits, sign included, that holds every bound with
room for the translator's own intermediate terms (floor division's ``quotient * divisor``), so the
bit-vector reading equals the mathematical one on every state in the domain. For a container the
interval covers every integer inside it (entries, slots, a sequence's length).

Values the concrete semantics leaves undefined (the head of an empty queue) are fresh unconstrained
constants in Z3; their bits may wrap, but no concrete run computes them, and every counterexample
is re-run through ``evaluate``.
"""

from __future__ import annotations

from collections.abc import Iterable

from lockstep.spec.expressions import (
    Bound,
    Comprehension,
    Constant,
    Expression,
    Operation,
    Operator,
    Parameter,
    Quantifier,
    Variable,
)
from lockstep.spec.machine import Machine
from lockstep.spec.sorts import BoolSort, EnumSort, IndexSort, IntSort, MapSort, RecordSort, SequenceSort, Sort, Value

Interval = tuple[int, int]


class UnboundedExpression(ValueError):
    """An integer expression with no finite bound (a variable of the unbounded INTEGER sort)."""


def hull(intervals: Iterable[Interval]) -> Interval:
    """The smallest interval holding all of them ((0, 0) for none)."""
    items = list(intervals)
    if not items:
        return (0, 0)
    return (min(low for low, _ in items), max(high for _, high in items))


def sort_interval(sort: Sort) -> Interval:
    """Every integer a value of ``sort`` holds (Bool as 0/1; a sequence's length included)."""
    if isinstance(sort, BoolSort):
        return (0, 1)
    if isinstance(sort, IntSort):
        if sort.low is None or sort.high is None:
            raise UnboundedExpression(f"sort {sort.name} has no finite bound")
        return (sort.low, sort.high)
    if isinstance(sort, (EnumSort, IndexSort)):
        return (0, sort.size - 1 if isinstance(sort, IndexSort) else len(sort.members) - 1)
    if isinstance(sort, MapSort):
        return hull([sort_interval(sort.key), sort_interval(sort.value)])
    if isinstance(sort, RecordSort):
        return hull(sort_interval(field_sort) for _, field_sort in sort.fields)
    if isinstance(sort, SequenceSort):
        return hull([(0, sort.capacity), sort_interval(sort.element)])
    raise UnboundedExpression(f"no interval for sort {sort.name}")


def value_interval(value: Value) -> Interval:
    if isinstance(value, bool):
        return (int(value), int(value))
    if isinstance(value, int):
        return (value, value)
    if isinstance(value, tuple):
        return hull([(0, len(value)), *(value_interval(item) for item in value)])
    raise UnboundedExpression(f"no interval for value {value!r}")


class Ranges:
    """Intervals of expressions; ``widest`` is the largest magnitude any sub-expression reached."""

    def __init__(self) -> None:
        self.widest = 0
        self.bound: dict[str, Interval] = {}

    def interval(self, expression: Expression) -> Interval:
        """The interval of ``expression``'s integers; every sub-expression raises ``widest`` too."""
        result = self._interval(expression)
        self.widest = max(self.widest, abs(result[0]), abs(result[1]))
        return result

    def _interval(self, expression: Expression) -> Interval:  # noqa: C901 - one branch per node class
        if isinstance(expression, Constant):
            return value_interval(expression.value)
        if isinstance(expression, (Variable, Parameter)):
            return sort_interval(expression.sort)
        if isinstance(expression, Bound):
            return self.bound.get(expression.name, sort_interval(expression.sort))
        if isinstance(expression, Comprehension):
            variable = expression.variable
            count = sum(1 for _ in variable.sort.values())
            outer = self.bound.get(variable.name)
            self.bound[variable.name] = sort_interval(variable.sort)
            body = self.interval(expression.body)
            if outer is None:
                del self.bound[variable.name]
            else:
                self.bound[variable.name] = outer
            match expression.quantifier:
                case Quantifier.SUM:
                    return (min(0, count * body[0]), max(0, count * body[1]))
                case Quantifier.COUNT:
                    return (0, count)
                case Quantifier.ALL | Quantifier.ANY:
                    return (0, 1)
            return hull([body, (0, count)])  # MAXIMUM, MINIMUM, MAP
        return self._operation(expression)

    def _operation(self, expression: Operation) -> Interval:  # noqa: C901 - one branch per operator
        operator = expression.operator
        operands = [self.interval(argument) for argument in expression.arguments]
        match operator:
            case Operator.ADD:
                (a, b), (c, d) = operands
                return (a + c, b + d)
            case Operator.SUBTRACT:
                (a, b), (c, d) = operands
                return (a - d, b - c)
            case Operator.MULTIPLY:
                (a, b), (c, d) = operands
                products = [a * c, a * d, b * c, b * d]
                return (min(products), max(products))
            case Operator.NEGATE:
                (a, b) = operands[0]
                return (-b, -a)
            case Operator.FLOOR_DIVIDE | Operator.MODULO:
                # |a // b| <= |a| + 1 and |a % b| <= |b|; the translation also forms (a // b) * b
                magnitude = sum(max(abs(low), abs(high)) for low, high in operands) + 1
                self.widest = max(self.widest, 2 * magnitude)
                return (-magnitude, magnitude)
            case Operator.IF_THEN_ELSE:
                return hull(operands[1:])
            case Operator.LENGTH | Operator.APPEND | Operator.TAIL | Operator.SEQUENCE:
                # a sequence's length may pass its capacity by one (append) or reach -1 (tail)
                capacity = expression.sort.capacity if isinstance(expression.sort, SequenceSort) else 0
                return hull([*operands, (-1, max(capacity, len(operands)) + 1)])
            case (
                Operator.NOT
                | Operator.AND
                | Operator.OR
                | Operator.IMPLIES
                | Operator.EQUAL
                | Operator.NOT_EQUAL
                | Operator.LESS
                | Operator.LESS_EQUAL
                | Operator.GREATER
                | Operator.GREATER_EQUAL
            ):
                return (0, 1)
        # MINIMUM, MAXIMUM, SELECT, STORE, AT, FIELD, WITH_FIELD, RECORD, MAP: values of the operands
        return hull(operands)


def expressions_of(machine: Machine) -> list[Expression]:
    """Every expression the Z3 engines translate: guards, updates, properties, final, strengthening."""
    found: list[Expression] = []
    for action in machine.actions:
        found.extend(action.guard)
        found.extend(expression for _, expression in action.updates)
    for prop in machine.properties:
        if prop.predicate is not None:
            found.append(prop.predicate)
        if prop.at_deadlock is not None:
            found.append(prop.at_deadlock)
    found.append(machine.final)
    found.extend(machine.strengthening)
    return found


def largest_magnitude(machine: Machine) -> int:
    """The largest absolute integer any translated expression, variable or parameter can take."""
    ranges = Ranges()
    for sort in [
        *(variable.sort for variable in machine.variables.values()),
        *(p.sort for a in machine.actions for p in a.parameters),
    ]:
        low, high = sort_interval(sort)
        ranges.widest = max(ranges.widest, abs(low), abs(high))
    for expression in expressions_of(machine):
        ranges.interval(expression)
    return ranges.widest


def required_width(magnitude: int) -> int:
    """Signed bits that hold every integer in [-magnitude, magnitude], and their sum or difference
    with one more such value (the encoding compares and adds in-range values)."""
    return (2 * magnitude + 1).bit_length() + 1
