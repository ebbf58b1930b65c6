"""Symbolic values: the Z3 counterpart of concrete values, and the operations on them.

A symbolic value mirrors a concrete one: a Z3 term (or a plain Python bool/int when the value is
known) for scalars, a tuple for maps and records, and a ``SymbolicSequence`` (a length and
``capacity`` slots) for sequences. Operations fold known operands (partial evaluation), so guards
of grounded actions become constants. Slots beyond a sequence's length always hold the sort's
default value, which keeps one Z3 state per concrete state. Integers are bit-vectors inside
``bit_vectors(width)``, mathematical integers otherwise.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeAlias

import z3

from lockstep.spec.evaluation import apply_operator
from lockstep.spec.expressions import Operator
from lockstep.spec.sorts import BoolSort, EnumSort, IndexSort, IntSort, MapSort, RecordSort, SequenceSort, Sort, Value


@dataclass(frozen=True)
class SymbolicSequence:
    length: Any  # int or z3.ExprRef
    slots: tuple[Any, ...]


# bool | int | z3.ExprRef | tuple[Symbolic, ...] | SymbolicSequence; z3 ships no type stubs, so
# its terms are Any to mypy and the alias can say no more than that.
Symbolic: TypeAlias = Any


class TranslationError(ValueError):
    """An IR node the translator cannot express (a bug: every node class must be covered)."""


# Integers are Z3 bit-vectors of this width inside ``bit_vectors(width)`` (bounded model checking:
# bit-blasting is far faster than linear arithmetic there), mathematical integers otherwise.
_WIDTH: ContextVar[int | None] = ContextVar("lockstep_z3_integer_width", default=None)


@contextlib.contextmanager
def bit_vectors(width: int | None) -> Iterator[None]:
    """Translate integers as signed ``width``-bit vectors in this block (None: unbounded integers)."""
    token = _WIDTH.set(width)
    try:
        yield
    finally:
        _WIDTH.reset(token)


def integer_constant(name: str) -> z3.ExprRef:
    width = _WIDTH.get()
    return z3.Int(name) if width is None else z3.BitVec(name, width)


def integer_value(value: int) -> z3.ExprRef:
    width = _WIDTH.get()
    return z3.IntVal(value) if width is None else z3.BitVecVal(value, width)


def integer_of(term: z3.ExprRef) -> int:
    """The Python int a Z3 numeral stands for (bit-vectors read as signed)."""
    if z3.is_bv_value(term):
        return int(term.as_signed_long())
    return int(term.as_long())


# ------------------------------------------------------------------------------------ helpers
def is_known(value: Symbolic) -> bool:
    """Whether a symbolic value is fully concrete (no Z3 term inside)."""
    if isinstance(value, bool | int):
        return True
    if isinstance(value, tuple):
        return all(is_known(item) for item in value)
    if isinstance(value, SymbolicSequence):
        return is_known(value.length) and all(is_known(item) for item in value.slots[: value.length])
    return False


def known_scalar(value: Symbolic) -> bool | int | None:
    """The Python value of a scalar if it is known (Z3 literals included), else None."""
    if isinstance(value, bool | int):
        return value
    if isinstance(value, z3.ExprRef):
        if z3.is_true(value):
            return True
        if z3.is_false(value):
            return False
        if z3.is_int_value(value) or z3.is_bv_value(value):
            return integer_of(value)
    return None


def to_z3(value: Symbolic) -> z3.ExprRef:
    """A scalar as a Z3 term."""
    if isinstance(value, bool):
        return z3.BoolVal(value)
    if isinstance(value, int):
        return integer_value(value)
    if isinstance(value, z3.ExprRef):
        return value
    raise TranslationError(f"expected a scalar, got {value!r}")


def default_value(sort: Sort) -> Value:
    """The value unused sequence slots hold: False, 0, the first member, or a structure of those."""
    if isinstance(sort, BoolSort):
        return False
    if isinstance(sort, (IntSort, EnumSort, IndexSort)):
        return 0 if not isinstance(sort, IntSort) or sort.low is None else max(sort.low, min(0, sort.high or 0))
    if isinstance(sort, MapSort):
        return tuple(default_value(sort.value) for _ in sort.keys)
    if isinstance(sort, RecordSort):
        return tuple(default_value(field_sort) for _, field_sort in sort.fields)
    if isinstance(sort, SequenceSort):
        return ()
    raise TranslationError(f"no default value for sort {sort.name}")


def lift_value(value: Value, sort: Sort) -> Symbolic:
    """A concrete value of ``sort`` as a symbolic value (sequences padded with default slots)."""
    if isinstance(sort, MapSort):
        assert isinstance(value, tuple)
        return tuple(lift_value(item, sort.value) for item in value)
    if isinstance(sort, RecordSort):
        assert isinstance(value, tuple)
        return tuple(lift_value(item, field_sort) for item, (_, field_sort) in zip(value, sort.fields))
    if isinstance(sort, SequenceSort):
        assert isinstance(value, tuple)
        padding = [default_value(sort.element)] * (max(sort.capacity, len(value)) - len(value))
        return SymbolicSequence(len(value), tuple(lift_value(item, sort.element) for item in (*value, *padding)))
    return value


def ite(condition: Symbolic, then: Symbolic, otherwise: Symbolic) -> Symbolic:
    """``then if condition else otherwise`` over structured values."""
    known = known_scalar(condition)
    if known is not None:
        return then if known else otherwise
    if isinstance(then, tuple) and isinstance(otherwise, tuple):
        return tuple(ite(condition, a, b) for a, b in zip(then, otherwise, strict=True))
    if isinstance(then, SymbolicSequence) and isinstance(otherwise, SymbolicSequence):
        width = max(len(then.slots), len(otherwise.slots))
        then_slots, otherwise_slots = _widen(then, width), _widen(otherwise, width)
        return SymbolicSequence(
            ite(condition, then.length, otherwise.length),
            tuple(ite(condition, a, b) for a, b in zip(then_slots, otherwise_slots, strict=True)),
        )
    if _same(then, otherwise):
        return then
    return z3.If(to_z3(condition), to_z3(then), to_z3(otherwise))


def _widen(sequence: SymbolicSequence, width: int) -> tuple[Any, ...]:
    if len(sequence.slots) >= width:
        return sequence.slots
    filler = sequence.slots[-1] if sequence.slots else 0
    return sequence.slots + tuple(filler for _ in range(width - len(sequence.slots)))


def _same(left: Symbolic, right: Symbolic) -> bool:
    if isinstance(left, z3.ExprRef) and isinstance(right, z3.ExprRef):
        return bool(left.eq(right))
    if isinstance(left, z3.ExprRef) or isinstance(right, z3.ExprRef):
        return False
    return type(left) is type(right) and left == right


def equal(left: Symbolic, right: Symbolic) -> Symbolic:
    """Structural equality (sequences: equal lengths and equal slots below the length)."""
    if isinstance(left, tuple) and isinstance(right, tuple):
        return conjoin([equal(a, b) for a, b in zip(left, right, strict=True)])
    if isinstance(left, SymbolicSequence) and isinstance(right, SymbolicSequence):
        width = min(len(left.slots), len(right.slots))
        parts = [equal(left.length, right.length)]
        for position in range(width):
            parts.append(implies(less(position, left.length), equal(left.slots[position], right.slots[position])))
        if len(left.slots) != len(right.slots):  # a longer sequence must not use its extra slots
            longer = left if len(left.slots) > len(right.slots) else right
            parts.append(less_equal(longer.length, width))
        return conjoin(parts)
    if _same(left, right):
        return True
    if isinstance(left, bool | int) and isinstance(right, bool | int):
        return left == right
    return to_z3(left) == to_z3(right)


def _connective(parts: list[Symbolic], absorbing: bool) -> Symbolic:
    """AND (absorbing False) or OR (absorbing True), folding known operands away."""
    terms: list[z3.BoolRef] = []
    for part in parts:
        known = known_scalar(part)
        if known is absorbing:
            return absorbing
        if known is None:
            terms.append(to_z3(part))
    if not terms:
        return not absorbing
    if len(terms) == 1:
        return terms[0]
    return z3.Or(*terms) if absorbing else z3.And(*terms)


def conjoin(parts: list[Symbolic]) -> Symbolic:
    return _connective(parts, absorbing=False)


def disjoin(parts: list[Symbolic]) -> Symbolic:
    return _connective(parts, absorbing=True)


def negate(value: Symbolic) -> Symbolic:
    known = known_scalar(value)
    return (not known) if known is not None else z3.Not(to_z3(value))


def implies(left: Symbolic, right: Symbolic) -> Symbolic:
    return disjoin([negate(left), right])


def less(left: Symbolic, right: Symbolic) -> Symbolic:
    return _compare(Operator.LESS, left, right)


def less_equal(left: Symbolic, right: Symbolic) -> Symbolic:
    return _compare(Operator.LESS_EQUAL, left, right)


def _compare(operator: Operator, left: Symbolic, right: Symbolic) -> Symbolic:
    a, b = known_scalar(left), known_scalar(right)
    if a is not None and b is not None:
        return bool(apply_operator(operator, [a, b]))
    x, y = to_z3(left), to_z3(right)
    match operator:
        case Operator.LESS:
            return x < y
        case Operator.LESS_EQUAL:
            return x <= y
        case Operator.GREATER:
            return x > y
        case Operator.GREATER_EQUAL:
            return x >= y
    raise TranslationError(f"not a comparison: {operator}")  # pragma: no cover


def select(container: Symbolic, key: Symbolic, keys: int) -> Symbolic:
    """``container[key]`` for a map/record tuple: direct for a known key, an ITE chain otherwise."""
    assert isinstance(container, tuple)
    known = known_scalar(key)
    if known is not None:
        if not 0 <= int(known) < len(container):
            raise _Undefined()
        return container[int(known)]
    result = container[keys - 1]
    for position in range(keys - 2, -1, -1):
        result = ite(to_z3(key) == position, container[position], result)
    return result


def store(container: Symbolic, key: Symbolic, value: Symbolic) -> Symbolic:
    assert isinstance(container, tuple)
    known = known_scalar(key)
    if known is not None:
        if not 0 <= int(known) < len(container):
            raise _Undefined()
        items = list(container)
        items[int(known)] = value
        return tuple(items)
    return tuple(ite(to_z3(key) == position, value, item) for position, item in enumerate(container))


class _Undefined(Exception):
    """An operation the concrete semantics leaves undefined, reached with known operands."""


# --------------------------------------------------------------------------------- translator


def declare(sort: Sort, name: str) -> Symbolic:
    """Fresh Z3 constants laid out like a value of ``sort`` (maps and records: one per entry;
    sequences: a length and ``capacity`` slots)."""
    if isinstance(sort, BoolSort):
        return z3.Bool(name)
    if isinstance(sort, (IntSort, EnumSort, IndexSort)):
        return integer_constant(name)
    if isinstance(sort, MapSort):
        return tuple(declare(sort.value, f"{name}[{sort.key.render(key)}]") for key in sort.keys)
    if isinstance(sort, RecordSort):
        return tuple(declare(field_sort, f"{name}.{field}") for field, field_sort in sort.fields)
    if isinstance(sort, SequenceSort):
        slots = tuple(declare(sort.element, f"{name}#{position}") for position in range(sort.capacity))
        return SymbolicSequence(integer_constant(f"{name}.length"), slots)
    raise TranslationError(f"no symbolic value for sort {sort.name}")
