"""``Term``: the user-facing builder of IR expressions, with Python operators and sort checks.

Models write ``(mode[rank] == Mode.TOP) & ~running[rank]``; a ``Term`` wraps the IR node and
checks sorts as it goes, so a mistake is reported where the model is defined, not deep inside an
engine. ``bool(term)`` raises: ``if term:``, ``and``, ``or`` and ``not`` would silently pick one
branch at definition time. Engines never see a ``Term``, only ``term.expression``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Union

from lockstep.spec.expressions import (
    Bound,
    Comprehension,
    Constant,
    Expression,
    Operation,
    Operator,
    Quantifier,
)
from lockstep.spec.sorts import (
    BOOL,
    INTEGER,
    BoolSort,
    EnumSort,
    IndexSort,
    IntSort,
    MapSort,
    RecordSort,
    SequenceSort,
    Sort,
    SortError,
    Value,
    same_kind,
)


class DefinitionError(TypeError):
    """A model is written wrongly; the message says how to fix it."""


TermLike = Union["Term", bool, int, str]
_bound_names = itertools.count()


class Term:
    """An IR expression with Python operators. Build with ``constant``, machine variables, parameters."""

    __slots__ = ("expression",)

    def __init__(self, expression: Expression) -> None:
        self.expression = expression

    @property
    def sort(self) -> Sort:
        return self.expression.sort

    def __repr__(self) -> str:
        from lockstep.spec.expressions import render

        return f"Term({render(self.expression)})"

    __hash__ = object.__hash__  # identity: Terms may key an action's update dictionary

    def __bool__(self) -> bool:
        raise DefinitionError(
            f"{self!r} has no truth value while a model is being defined: use & | ~ instead of "
            "and/or/not, if_then_else(c, a, b) instead of if, and == only inside expressions"
        )

    # Boolean connectives.
    def __and__(self, other: TermLike) -> Term:
        return conjunction(self, other)

    __rand__ = __and__

    def __or__(self, other: TermLike) -> Term:
        return disjunction(self, other)

    __ror__ = __or__

    def __invert__(self) -> Term:
        _expect_bool(self, "~")
        return Term(Operation(Operator.NOT, (self.expression,), BOOL))

    def implies(self, other: TermLike) -> Term:
        return _binary(Operator.IMPLIES, self, other, BOOL, _expect_bool)

    # Comparisons.
    def __eq__(self, other: object) -> Term:  # type: ignore[override]
        return _compare(Operator.EQUAL, self, other)

    def __ne__(self, other: object) -> Term:  # type: ignore[override]
        return _compare(Operator.NOT_EQUAL, self, other)

    def __lt__(self, other: TermLike) -> Term:
        return _compare(Operator.LESS, self, other, ordered=True)

    def __le__(self, other: TermLike) -> Term:
        return _compare(Operator.LESS_EQUAL, self, other, ordered=True)

    def __gt__(self, other: TermLike) -> Term:
        return _compare(Operator.GREATER, self, other, ordered=True)

    def __ge__(self, other: TermLike) -> Term:
        return _compare(Operator.GREATER_EQUAL, self, other, ordered=True)

    # Arithmetic.
    def __add__(self, other: TermLike) -> Term:
        return _arithmetic(Operator.ADD, self, other)

    def __radd__(self, other: TermLike) -> Term:
        return _arithmetic(Operator.ADD, lift(other, INTEGER), self)

    def __sub__(self, other: TermLike) -> Term:
        return _arithmetic(Operator.SUBTRACT, self, other)

    def __rsub__(self, other: TermLike) -> Term:
        return _arithmetic(Operator.SUBTRACT, lift(other, INTEGER), self)

    def __mul__(self, other: TermLike) -> Term:
        return _arithmetic(Operator.MULTIPLY, self, other)

    __rmul__ = __mul__

    def __floordiv__(self, other: TermLike) -> Term:
        return _arithmetic(Operator.FLOOR_DIVIDE, self, other)

    def __mod__(self, other: TermLike) -> Term:
        return _arithmetic(Operator.MODULO, self, other)

    def __neg__(self) -> Term:
        _expect_integer(self, "-")
        return Term(Operation(Operator.NEGATE, (self.expression,), INTEGER))

    # Maps, sequences and records.
    def __getitem__(self, key: TermLike) -> Term:
        sort = self.sort
        if isinstance(sort, MapSort):
            key_term = lift(key, sort.key)
            _check_same(key_term.sort, sort.key, "map key")
            return Term(Operation(Operator.SELECT, (self.expression, key_term.expression), sort.value))
        if isinstance(sort, SequenceSort):
            position = lift(key, INTEGER)
            _expect_integer(position, "sequence position")
            return Term(Operation(Operator.AT, (self.expression, position.expression), sort.element))
        raise DefinitionError(f"{self!r} of sort {sort.name} cannot be indexed; only maps and sequences can")

    def set(self, key: TermLike, value: TermLike) -> Term:
        """This map with ``key`` mapped to ``value`` (the map itself is not changed)."""
        sort = self.sort
        if not isinstance(sort, MapSort):
            raise DefinitionError(f".set() needs a map, {self!r} has sort {sort.name}")
        key_term, value_term = lift(key, sort.key), lift(value, sort.value)
        _check_same(key_term.sort, sort.key, "map key")
        _check_same(value_term.sort, sort.value, "map value")
        return Term(Operation(Operator.STORE, (self.expression, key_term.expression, value_term.expression), sort))

    def length(self) -> Term:
        _expect_sequence(self, "length()")
        return Term(Operation(Operator.LENGTH, (self.expression,), INTEGER))

    def is_empty(self) -> Term:
        return self.length() == 0

    def head(self) -> Term:
        """The front element (undefined on an empty sequence: guard with ``~is_empty()``)."""
        return self[0]

    def append(self, element: TermLike) -> Term:
        sort = _expect_sequence(self, "append()")
        element_term = lift(element, sort.element)
        _check_same(element_term.sort, sort.element, "sequence element")
        return Term(Operation(Operator.APPEND, (self.expression, element_term.expression), sort))

    def tail(self) -> Term:
        """The sequence without its front element (pop front)."""
        sort = _expect_sequence(self, "tail()")
        return Term(Operation(Operator.TAIL, (self.expression,), sort))

    def field(self, name: str) -> Term:
        sort = self.sort
        if not isinstance(sort, RecordSort):
            raise DefinitionError(f".field({name!r}) needs a record, {self!r} has sort {sort.name}")
        position = _defined(sort.field_index, name)
        return Term(Operation(Operator.FIELD, (self.expression, Constant(position, INTEGER)), sort.fields[position][1]))

    def with_field(self, name: str, value: TermLike) -> Term:
        sort = self.sort
        if not isinstance(sort, RecordSort):
            raise DefinitionError(f".with_field({name!r}) needs a record, {self!r} has sort {sort.name}")
        position = _defined(sort.field_index, name)
        value_term = lift(value, sort.fields[position][1])
        _check_same(value_term.sort, sort.fields[position][1], f"field {name!r}")
        return Term(
            Operation(
                Operator.WITH_FIELD,
                (self.expression, Constant(position, INTEGER), value_term.expression),
                sort,
            )
        )


def constant(value: Value, sort: Sort) -> Term:
    """A literal of a sort; enum members may be given by name."""
    if isinstance(sort, EnumSort) and isinstance(value, str):
        value = _defined(sort.index, value)
    if not sort.contains(value):
        raise DefinitionError(f"{value!r} is not a value of sort {sort.name}")
    return Term(Constant(value, sort))


def lift(value: TermLike | tuple[Value, ...], expected: Sort | None = None) -> Term:
    """A Term for ``value``: Terms pass through; Python literals become constants."""
    if isinstance(value, Term):
        return value
    if isinstance(value, bool):
        return Term(Constant(value, BOOL))
    if isinstance(value, int):
        if isinstance(expected, (IntSort, IndexSort)):
            return Term(Constant(value, expected if expected.contains(value) else INTEGER))
        return Term(Constant(value, INTEGER))
    if isinstance(value, str) and isinstance(expected, EnumSort):
        return constant(value, expected)
    if isinstance(value, tuple) and expected is not None and expected.contains(value):
        return Term(Constant(value, expected))
    wanted = f" (expected sort {expected.name})" if expected is not None else ""
    raise DefinitionError(f"cannot use {value!r} in an expression{wanted}")


def _defined(lookup: Callable[[str], int], name: str) -> int:
    """Look ``name`` up in a sort (enum member, record field); a miss is a definition error."""
    try:
        return lookup(name)
    except SortError as error:
        raise DefinitionError(str(error)) from None


def _check_same(actual: Sort, expected: Sort, what: str) -> None:
    if not same_kind(actual, expected):
        raise DefinitionError(f"{what} has sort {actual.name} where sort {expected.name} is needed")


def _expect_bool(term: Term, what: str) -> None:
    if not isinstance(term.sort, BoolSort):
        raise DefinitionError(f"{what} needs a Bool operand, {term!r} has sort {term.sort.name}")


def _expect_integer(term: Term, what: str) -> None:
    if not isinstance(term.sort, (IntSort, IndexSort)):
        raise DefinitionError(f"{what} needs an integer operand, {term!r} has sort {term.sort.name}")


def _expect_sequence(term: Term, what: str) -> SequenceSort:
    if not isinstance(term.sort, SequenceSort):
        raise DefinitionError(f"{what} needs a sequence, {term!r} has sort {term.sort.name}")
    return term.sort


def _binary(
    operator: Operator, left: TermLike, right: TermLike, sort: Sort, check: Callable[[Term, str], None]
) -> Term:
    left_term, right_term = lift(left), lift(right)
    check(left_term, operator.value)
    check(right_term, operator.value)
    return Term(Operation(operator, (left_term.expression, right_term.expression), sort))


def _flatten(operator: Operator, terms: Sequence[TermLike]) -> tuple[Expression, ...]:
    flat: list[Expression] = []
    for item in terms:
        term = lift(item)
        _expect_bool(term, operator.value)
        expression = term.expression
        if isinstance(expression, Operation) and expression.operator is operator:
            flat.extend(expression.arguments)
        else:
            flat.append(expression)
    return tuple(flat)


def conjunction(*terms: TermLike) -> Term:
    """``a & b & ...``; the empty conjunction is true."""
    if not terms:
        return Term(Constant(True, BOOL))
    arguments = _flatten(Operator.AND, terms)
    return Term(arguments[0]) if len(arguments) == 1 else Term(Operation(Operator.AND, arguments, BOOL))


def disjunction(*terms: TermLike) -> Term:
    """``a | b | ...``; the empty disjunction is false."""
    if not terms:
        return Term(Constant(False, BOOL))
    arguments = _flatten(Operator.OR, terms)
    return Term(arguments[0]) if len(arguments) == 1 else Term(Operation(Operator.OR, arguments, BOOL))


def _compare(operator: Operator, left: Term, right: object, ordered: bool = False) -> Term:
    right_term = lift(right, left.sort)  # type: ignore[arg-type]
    _check_same(right_term.sort, left.sort, f"the right side of {operator.value}")
    if ordered:
        _expect_integer(left, operator.value)
        _expect_integer(right_term, operator.value)
    return Term(Operation(operator, (left.expression, right_term.expression), BOOL))


def _arithmetic(operator: Operator, left: TermLike, right: TermLike) -> Term:
    return _binary(operator, left, right, INTEGER, _expect_integer)


def if_then_else(condition: TermLike, then: TermLike, otherwise: TermLike) -> Term:
    """``then`` where ``condition`` holds, else ``otherwise``."""
    condition_term = lift(condition)
    _expect_bool(condition_term, "if_then_else condition")
    then_term = lift(then, lift(otherwise).sort if isinstance(otherwise, Term) else None)
    otherwise_term = lift(otherwise, then_term.sort)
    _check_same(otherwise_term.sort, then_term.sort, "the else branch of if_then_else")
    sort = then_term.sort
    if isinstance(sort, (IntSort, IndexSort)) and sort != otherwise_term.sort:
        sort = INTEGER
    return Term(
        Operation(
            Operator.IF_THEN_ELSE, (condition_term.expression, then_term.expression, otherwise_term.expression), sort
        )
    )


def minimum(*terms: TermLike) -> Term:
    lifted = [lift(term) for term in terms]
    for term in lifted:
        _expect_integer(term, "minimum")
    return Term(Operation(Operator.MINIMUM, tuple(term.expression for term in lifted), INTEGER))


def maximum(*terms: TermLike) -> Term:
    lifted = [lift(term) for term in terms]
    for term in lifted:
        _expect_integer(term, "maximum")
    return Term(Operation(Operator.MAXIMUM, tuple(term.expression for term in lifted), INTEGER))


def _comprehension(quantifier: Quantifier, sort: Sort, body: Callable[[Term], TermLike]) -> tuple[Bound, Term]:
    if not sort.is_finite:
        raise DefinitionError(f"{quantifier.value}_of needs a finite sort, {sort.name} is not")
    label = "".join(character if character.isalnum() else "_" for character in sort.name.lower())
    variable = Bound(f"{label}{next(_bound_names)}", sort)
    return variable, lift(body(Term(variable)))


def all_of(sort: Sort, body: Callable[[Term], TermLike]) -> Term:
    """``body(x)`` holds for every value ``x`` of ``sort``."""
    variable, result = _comprehension(Quantifier.ALL, sort, body)
    _expect_bool(result, "all_of body")
    return Term(Comprehension(Quantifier.ALL, variable, result.expression, BOOL))


def any_of(sort: Sort, body: Callable[[Term], TermLike]) -> Term:
    """``body(x)`` holds for some value ``x`` of ``sort``."""
    variable, result = _comprehension(Quantifier.ANY, sort, body)
    _expect_bool(result, "any_of body")
    return Term(Comprehension(Quantifier.ANY, variable, result.expression, BOOL))


def sum_of(sort: Sort, body: Callable[[Term], TermLike]) -> Term:
    """The sum of ``body(x)`` over every value ``x`` of ``sort``."""
    variable, result = _comprehension(Quantifier.SUM, sort, body)
    _expect_integer(result, "sum_of body")
    return Term(Comprehension(Quantifier.SUM, variable, result.expression, INTEGER))


def max_of(sort: Sort, body: Callable[[Term], TermLike]) -> Term:
    """The largest ``body(x)`` over every value ``x`` of ``sort``."""
    variable, result = _comprehension(Quantifier.MAXIMUM, sort, body)
    _expect_integer(result, "max_of body")
    return Term(Comprehension(Quantifier.MAXIMUM, variable, result.expression, INTEGER))


def min_of(sort: Sort, body: Callable[[Term], TermLike]) -> Term:
    """The smallest ``body(x)`` over every value ``x`` of ``sort``."""
    variable, result = _comprehension(Quantifier.MINIMUM, sort, body)
    _expect_integer(result, "min_of body")
    return Term(Comprehension(Quantifier.MINIMUM, variable, result.expression, INTEGER))


def count_of(sort: Sort, body: Callable[[Term], TermLike]) -> Term:
    """How many values ``x`` of ``sort`` satisfy ``body(x)``."""
    variable, result = _comprehension(Quantifier.COUNT, sort, body)
    _expect_bool(result, "count_of body")
    return Term(Comprehension(Quantifier.COUNT, variable, result.expression, INTEGER))


def map_of(key: Sort, body: Callable[[Term], TermLike], value: Sort) -> Term:
    """The map ``x -> body(x)`` over every key ``x`` of ``key``, with values of sort ``value``."""
    variable, result = _comprehension(Quantifier.MAP, key, lambda term: lift(body(term), value))
    _check_same(result.sort, value, "map_of body")
    return Term(Comprehension(Quantifier.MAP, variable, result.expression, MapSort(key, value)))


def record_of(sort: RecordSort, **fields: TermLike) -> Term:
    """A record value from its fields."""
    missing = [name for name, _ in sort.fields if name not in fields]
    extra = [name for name in fields if name not in dict(sort.fields)]
    if missing or extra:
        raise DefinitionError(f"record {sort.name}: missing fields {missing}, unknown fields {extra}")
    arguments: list[Expression] = []
    for name, field_sort in sort.fields:
        field_term = lift(fields[name], field_sort)
        _check_same(field_term.sort, field_sort, f"field {name!r} of record {sort.name}")
        arguments.append(field_term.expression)
    return Term(Operation(Operator.RECORD, tuple(arguments), sort))


def sequence_of(sort: SequenceSort, *elements: TermLike) -> Term:
    """A sequence value from its elements, front first."""
    if len(elements) > sort.capacity:
        raise DefinitionError(f"{len(elements)} elements exceed the capacity of {sort.name}")
    lifted = [lift(element, sort.element) for element in elements]
    for element_term in lifted:
        _check_same(element_term.sort, sort.element, "sequence element")
    return Term(Operation(Operator.SEQUENCE, tuple(term.expression for term in lifted), sort))


def ensure_sort(term: Term, sort: Sort, what: str) -> None:
    """Refuse ``term`` where a value of ``sort`` is required."""
    try:
        _check_same(term.sort, sort, what)
    except SortError as error:  # pragma: no cover - same_kind raises nothing today
        raise DefinitionError(str(error)) from error
