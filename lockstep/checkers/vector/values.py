"""Array values of the IR over a whole frontier of states: their shapes and the code emitter.

A value is a ``Scalar`` (the code of a one-dimensional array, or a constant), a ``Compound`` (a
map's values in key order, a record's fields) or a ``Sequence`` (a length and a fixed number of
slots past which elements hold their lowest value, with an ``Origin`` when it derives from a
sequence of the state). ``Emitter`` and ``Scope`` hold the straight-line code that computes them:
identical code is emitted once per scope (hash-consing), so a sub-expression that several actions
or parameter values share is computed once per frontier. ``lockstep.checkers.vector.translator``
builds values from IR expressions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lockstep.spec.layout import is_scalar, scalar_range
from lockstep.spec.sorts import BoolSort, MapSort, RecordSort, SequenceSort, Sort, Value


class Unsupported(ValueError):
    """A construct the vectorised engines cannot compile (use ``--engine bfs``)."""


_UNKNOWN = object()


@dataclass(frozen=True)
class Scalar:
    code: str  # the name of an array temporary, or a literal
    value: object = _UNKNOWN  # the value, when known at compile time

    @property
    def constant(self) -> bool:
        return self.value is not _UNKNOWN


@dataclass(frozen=True)
class Compound:
    parts: tuple[VectorValue, ...]


@dataclass(frozen=True)
class Origin:
    """How a sequence value came from one in the state (so its slots can be written as one shift):
    ``read`` unchanged, or ``append``ed ``element`` / ``tail``ed where ``condition`` holds."""

    kind: str  # "read", "append" or "tail"
    length_leaf: int  # the position of the state sequence's length leaf
    element: VectorValue | None = None
    condition: Scalar | None = None  # None: every row


@dataclass(frozen=True)
class Sequence:
    length: Scalar
    slots: tuple[VectorValue, ...]
    element: Sort  # the element sort: unused slots hold its padding
    origin: Origin | None = None


VectorValue = Scalar | Compound | Sequence
TRUE = Scalar("True", True)
FALSE = Scalar("False", False)


def constant_of(value: Value, sort: Sort) -> VectorValue:
    """The vector value of a concrete value of ``sort`` (sequences padded to their capacity)."""
    if is_scalar(sort):
        return Scalar(repr(value), value)
    assert isinstance(value, tuple)
    if isinstance(sort, MapSort):
        return Compound(tuple(constant_of(item, sort.value) for item in value))
    if isinstance(sort, RecordSort):
        return Compound(tuple(constant_of(item, field_sort) for (_, field_sort), item in zip(sort.fields, value)))
    assert isinstance(sort, SequenceSort)
    slots = [constant_of(item, sort.element) for item in value]
    slots.extend(padding(sort.element) for _ in range(len(value), sort.capacity))
    return Sequence(Scalar(repr(len(value)), len(value)), tuple(slots), sort.element)


def padding(sort: Sort) -> VectorValue:
    """The value an unused sequence slot of element sort ``sort`` holds: every leaf at its lowest."""
    if is_scalar(sort):
        low = scalar_range(sort)[0]
        return constant_of(bool(low) if isinstance(sort, BoolSort) else low, sort)
    if isinstance(sort, MapSort):
        return Compound(tuple(padding(sort.value) for _ in sort.keys))
    if isinstance(sort, RecordSort):
        return Compound(tuple(padding(field_sort) for _, field_sort in sort.fields))
    assert isinstance(sort, SequenceSort)
    return Sequence(Scalar("0", 0), tuple(padding(sort.element) for _ in range(sort.capacity)), sort.element)


def leaves_of(value: VectorValue) -> list[Scalar]:
    """The scalars of a value in layout order (length before slots)."""
    if isinstance(value, Scalar):
        return [value]
    if isinstance(value, Compound):
        return [leaf for part in value.parts for leaf in leaves_of(part)]
    return [value.length, *(leaf for slot in value.slots for leaf in leaves_of(slot))]


@dataclass
class Scope:
    """The lines of one straight-line block and the temporaries they define (hash-consed)."""

    words: str  # the name of the (words x rows) array that columns are decoded from
    lines: list[str] = field(default_factory=list)
    memo: dict[str, str] = field(default_factory=dict)
    codes: dict[str, str] = field(default_factory=dict)  # temporary -> the code that defines it
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)  # temporary -> bounds of its integers
    variables: dict[str, VectorValue] = field(default_factory=dict)  # a state variable's decoded value
    facts: dict[int, tuple[int, int]] = field(default_factory=dict)  # leaf -> its range in every row (``facts``)
    leaves: dict[str, int] = field(default_factory=dict)  # temporary -> the leaf it decodes


class Emitter:
    """Fresh temporary names shared by every scope of one generated function."""

    def __init__(self) -> None:
        self.count = 0

    def fresh(self, prefix: str = "t") -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def emit(self, scope: Scope, code: str) -> str:
        name = scope.memo.get(code)
        if name is None:
            name = self.fresh()
            scope.lines.append(f"{name} = {code}")
            scope.memo[code] = name
            scope.codes[name] = code
        return name


__all__ = [
    "FALSE",
    "TRUE",
    "Compound",
    "Emitter",
    "Origin",
    "Scalar",
    "Scope",
    "Sequence",
    "Unsupported",
    "VectorValue",
    "constant_of",
    "leaves_of",
    "padding",
]
