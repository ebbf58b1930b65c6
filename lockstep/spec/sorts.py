"""Finite sorts: the types of state variables, action parameters and expressions.

Every sort here is finite (or, for the unbounded ``INTEGER`` used only for intermediate
arithmetic, never stored in state), so the explicit engine can enumerate parameter values and
pack states, and the symbolic engine can emit domain constraints. Concrete values are plain,
hashable Python data: ``bool``, ``int`` (enum members and indices are their position), and
``tuple`` for maps, sequences and records. Plain data keeps states cheap to hash; Python's
hash of ints, bools and tuples of them is not salted, so fingerprints are stable across runs.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lockstep.spec.terms import Term

Value = object
"""A concrete value: bool, int, or a (nested) tuple of values."""


class SortError(ValueError):
    """A sort was declared wrongly, or a value was used at the wrong sort."""


class Sort:
    """Base class of all sorts."""

    name: str

    def values(self) -> Iterator[Value]:
        """Every value of the sort, in a fixed order (refused for infinite sorts)."""
        raise SortError(f"sort {self.name} is not finite and cannot be enumerated")

    def contains(self, value: Value) -> bool:
        """Whether ``value`` is a value of this sort."""
        raise NotImplementedError

    def render(self, value: Value) -> str:
        """A short human-readable form of ``value``."""
        return repr(value)

    def to_json(self, value: Value) -> object:
        """A JSON-friendly form of ``value`` (enum members by name)."""
        return value

    @property
    def is_finite(self) -> bool:
        return True

    @property
    def size(self) -> int:
        return sum(1 for _ in self.values())


@dataclass(frozen=True)
class BoolSort(Sort):
    name: str = "Bool"

    def values(self) -> Iterator[Value]:
        return iter((False, True))

    def contains(self, value: Value) -> bool:
        return isinstance(value, bool)

    def render(self, value: Value) -> str:
        return "true" if value else "false"


@dataclass(frozen=True)
class IntSort(Sort):
    """Integers in ``[low, high]``; ``None`` bounds make the unbounded ``INTEGER``."""

    low: int | None
    high: int | None
    name: str = ""

    def __post_init__(self) -> None:
        if self.low is not None and self.high is not None and self.low > self.high:
            raise SortError(f"IntSort({self.low}, {self.high}): the low bound exceeds the high bound")
        if not self.name:
            label = "Int" if self.low is None or self.high is None else f"Int[{self.low}..{self.high}]"
            object.__setattr__(self, "name", label)

    @property
    def is_finite(self) -> bool:
        return self.low is not None and self.high is not None

    def values(self) -> Iterator[Value]:
        if self.low is None or self.high is None:
            return super().values()
        return iter(range(self.low, self.high + 1))

    def contains(self, value: Value) -> bool:
        if not isinstance(value, int) or isinstance(value, bool):
            return False
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)


INTEGER = IntSort(None, None)
BOOL = BoolSort()


@dataclass(frozen=True)
class EnumSort(Sort):
    """A finite set of named members; a member's value is its position."""

    name: str
    members: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.members:
            raise SortError(f"EnumSort {self.name} needs at least one member")
        if len(set(self.members)) != len(self.members):
            raise SortError(f"EnumSort {self.name} has repeated members: {self.members}")

    def values(self) -> Iterator[Value]:
        return iter(range(len(self.members)))

    def contains(self, value: Value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(self.members)

    def index(self, member: str) -> int:
        try:
            return self.members.index(member)
        except ValueError:
            raise SortError(f"{member!r} is not a member of {self.name}; members: {', '.join(self.members)}") from None

    def render(self, value: Value) -> str:
        assert isinstance(value, int)
        return self.members[value]

    def to_json(self, value: Value) -> object:
        return self.render(value)

    def __getattr__(self, member: str) -> Term:
        # Enum members as attributes give Terms: ``PauseState.UNPAUSED``.
        if member.startswith("_") or member not in self.__dict__.get("members", ()):
            raise AttributeError(member)
        from lockstep.spec.terms import constant

        return constant(self.members.index(member), self)


@dataclass(frozen=True)
class IndexSort(Sort):
    """``size`` interchangeable-by-declaration indices ``0..size-1`` (ranks, requests)."""

    name: str
    count: int

    def __post_init__(self) -> None:
        if self.count < 1:
            raise SortError(f"IndexSort {self.name} needs a size of at least 1, got {self.count}")

    @property
    def size(self) -> int:
        return self.count

    def values(self) -> Iterator[Value]:
        return iter(range(self.count))

    def contains(self, value: Value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < self.count

    def render(self, value: Value) -> str:
        return str(value)


@dataclass(frozen=True)
class MapSort(Sort):
    """A total map from a finite key sort (enum or index) to a value sort: a tuple by key position."""

    key: Sort
    value: Sort
    name: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.key, (IndexSort, EnumSort, BoolSort)):
            raise SortError(f"map keys must be an IndexSort, EnumSort or Bool, got {self.key.name}")
        if not self.name:
            object.__setattr__(self, "name", f"Map[{self.key.name} -> {self.value.name}]")

    @property
    def keys(self) -> tuple[Value, ...]:
        return tuple(self.key.values())

    def values(self) -> Iterator[Value]:
        return iter(itertools.product(*[list(self.value.values()) for _ in self.keys]))

    def contains(self, value: Value) -> bool:
        return (
            isinstance(value, tuple)
            and len(value) == len(self.keys)
            and all(self.value.contains(item) for item in value)
        )

    def render(self, value: Value) -> str:
        assert isinstance(value, tuple)
        return "[" + ", ".join(self.value.render(item) for item in value) + "]"

    def to_json(self, value: Value) -> object:
        assert isinstance(value, tuple)
        return [self.value.to_json(item) for item in value]


@dataclass(frozen=True)
class SequenceSort(Sort):
    """A bounded sequence (FIFO queue) of at most ``capacity`` elements, front first."""

    element: Sort
    capacity: int
    name: str = ""

    def __post_init__(self) -> None:
        if self.capacity < 0:
            raise SortError(f"SequenceSort capacity must be non-negative, got {self.capacity}")
        if not self.name:
            object.__setattr__(self, "name", f"Seq[{self.element.name}; {self.capacity}]")

    def values(self) -> Iterator[Value]:
        elements = list(self.element.values())
        for length in range(self.capacity + 1):
            yield from itertools.product(elements, repeat=length)

    def contains(self, value: Value) -> bool:
        return (
            isinstance(value, tuple)
            and len(value) <= self.capacity
            and all(self.element.contains(item) for item in value)
        )

    def render(self, value: Value) -> str:
        assert isinstance(value, tuple)
        return "<" + ", ".join(self.element.render(item) for item in value) + ">"

    def to_json(self, value: Value) -> object:
        assert isinstance(value, tuple)
        return [self.element.to_json(item) for item in value]


@dataclass(frozen=True)
class RecordSort(Sort):
    """A record with named fields: a tuple in field order."""

    name: str
    fields: tuple[tuple[str, Sort], ...] = field(default=())

    def __post_init__(self) -> None:
        names = [name for name, _ in self.fields]
        if len(set(names)) != len(names):
            raise SortError(f"RecordSort {self.name} has repeated fields: {names}")

    def field_index(self, name: str) -> int:
        for position, (field_name, _) in enumerate(self.fields):
            if field_name == name:
                return position
        raise SortError(f"record {self.name} has no field {name!r}; fields: {[n for n, _ in self.fields]}")

    def values(self) -> Iterator[Value]:
        return iter(itertools.product(*[list(sort.values()) for _, sort in self.fields]))

    def contains(self, value: Value) -> bool:
        return (
            isinstance(value, tuple)
            and len(value) == len(self.fields)
            and all(sort.contains(item) for (_, sort), item in zip(self.fields, value))
        )

    def render(self, value: Value) -> str:
        """``{a=1, b=2}``; a record whose first field is an enum reads as a call: ``ADD(wave=0)``."""
        assert isinstance(value, tuple)
        pairs = [(name, sort, item) for (name, sort), item in zip(self.fields, value)]
        if pairs and isinstance(pairs[0][1], EnumSort):
            inner = ", ".join(f"{name}={sort.render(item)}" for name, sort, item in pairs[1:])
            return f"{pairs[0][1].render(pairs[0][2])}({inner})"
        return "{" + ", ".join(f"{name}={sort.render(item)}" for name, sort, item in pairs) + "}"

    def to_json(self, value: Value) -> object:
        assert isinstance(value, tuple)
        return {name: sort.to_json(item) for (name, sort), item in zip(self.fields, value)}


def record(name: str, **fields: Sort) -> RecordSort:
    """Declare a record sort: ``record("Op", kind=OpKind, payload=Int(0, 3))``."""
    return RecordSort(name, tuple(fields.items()))


def integers(low: int, high: int) -> IntSort:
    """The bounded integer sort ``[low, high]``."""
    return IntSort(low, high)


def enum(name: str, members: Sequence[str]) -> EnumSort:
    """Declare an enumeration: ``enum("PauseState", ["UNPAUSED", "PAUSED_NEW", "PAUSED_ALL"])``."""
    return EnumSort(name, tuple(members))


def same_kind(left: Sort, right: Sort) -> bool:
    """Whether values of the two sorts may be compared (integers compare across bounds)."""
    if isinstance(left, IntSort) and isinstance(right, IntSort):
        return True
    if isinstance(left, IndexSort) and isinstance(right, IntSort):
        return True
    if isinstance(left, IntSort) and isinstance(right, IndexSort):
        return True
    if isinstance(left, MapSort) and isinstance(right, MapSort):
        return same_kind(left.key, right.key) and same_kind(left.value, right.value)
    if isinstance(left, SequenceSort) and isinstance(right, SequenceSort):
        return same_kind(left.element, right.element)
    return left == right
