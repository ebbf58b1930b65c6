"""The packed-state layout: every state of a ``Machine`` as a fixed number of 63-bit words.

A layout is derived from the machine's sorts alone (no per-model code). Each variable's sort is
flattened into *leaves*, scalar fields of a fixed bit width: a Bool, bounded Int, Enum or Index
is one leaf holding ``value - low``; a map is its values in key order; a record its fields in
order; a bounded sequence is a length leaf followed by ``capacity`` element slots, where a slot
past the length holds the element's lowest value (all-zero bits), so every sequence value has
exactly one encoding. Leaves are packed in order into words of at most 63 bits, a leaf never
straddling two words, so a word is a non-negative int64 for numpy and torch alike and two states
are equal exactly when their words are. A sequence's slots that fit in one word are kept together
in it (``SequenceSlots``), so appending and popping are shifts of that region.

``encode`` and ``decode`` convert between the engines' tuple states (``lockstep.spec.semantics``)
and words; the vectorised engines (``lockstep.checkers.vector``) decode and encode whole frontiers
with the same offsets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from lockstep.spec.machine import Machine
from lockstep.spec.sorts import BoolSort, EnumSort, IndexSort, IntSort, MapSort, RecordSort, SequenceSort, Sort, Value

WORD_BITS = 63


class LayoutError(ValueError):
    """A sort that has no packed layout (an unbounded integer in a state)."""


@dataclass(frozen=True)
class Leaf:
    """One scalar field of the packed state: where it lives and how its value is offset."""

    position: int  # index among all leaves
    path: str  # e.g. "mode[1]", "queue.to_engine[0].kind", "queue.to_engine#length"
    low: int  # the value stored as 0
    high: int
    width: int  # bits
    word: int
    shift: int
    boolean: bool = False  # a Bool leaf (decoded as a truth value)

    @property
    def mask(self) -> int:
        return (1 << self.width) - 1


def scalar_range(sort: Sort) -> tuple[int, int]:
    """The ``(low, high)`` values of a scalar sort."""
    if isinstance(sort, BoolSort):
        return 0, 1
    if isinstance(sort, IntSort):
        if sort.low is None or sort.high is None:
            raise LayoutError(f"sort {sort.name} is unbounded and has no packed layout")
        return sort.low, sort.high
    if isinstance(sort, (EnumSort, IndexSort)):
        return 0, sort.size - 1
    raise LayoutError(f"sort {sort.name} is not a scalar sort")


def is_scalar(sort: Sort) -> bool:
    return isinstance(sort, (BoolSort, IntSort, EnumSort, IndexSort))


def scalar_leaves(sort: Sort, path: str) -> Iterator[tuple[str, Sort]]:
    """The scalar parts of ``sort`` in layout order, each with its path."""
    if is_scalar(sort):
        yield path, sort
    elif isinstance(sort, MapSort):
        for key in sort.keys:
            yield from scalar_leaves(sort.value, f"{path}[{sort.key.render(key)}]")
    elif isinstance(sort, RecordSort):
        for name, field_sort in sort.fields:
            yield from scalar_leaves(field_sort, f"{path}.{name}")
    elif isinstance(sort, SequenceSort):
        yield f"{path}#length", IntSort(0, sort.capacity)
        for slot in range(sort.capacity):
            yield from scalar_leaves(sort.element, f"{path}[{slot}]")
    else:
        raise LayoutError(f"sort {sort.name} of {path} has no packed layout")


@dataclass(frozen=True)
class SequenceSlots:
    """Where a sequence's slots live: when they all fit in one word they are placed together
    (``word`` set), ``stride`` bits apart from bit ``base``, so appending or popping an element is a
    shift of that region; ``word`` is None when they do not fit."""

    length: int  # the position of the length leaf
    first: int  # the position of the first slot's first leaf
    capacity: int
    per_slot: int  # leaves per slot
    word: int | None
    base: int
    stride: int


class Layout:
    """The leaves of a machine's variables and their places in the words of a packed state."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self.names = tuple(machine.variables)
        self.sorts = tuple(variable.sort for variable in machine.variables.values())
        self._leaves: list[Leaf] = []
        self.sequences: dict[int, SequenceSlots] = {}  # by the position of the length leaf
        self.spans: list[tuple[int, int]] = []  # per variable: its first leaf and one past its last
        self._word, self._used = 0, 0
        for name, sort in zip(self.names, self.sorts):
            first = len(self._leaves)
            self._place(sort, name, inside=False)
            self.spans.append((first, len(self._leaves)))
        self.leaves = tuple(self._leaves)
        self.words = self._word + 1
        self.bits = sum(leaf.width for leaf in self.leaves)
        self._flatteners = tuple(_flattener(sort) for sort in self.sorts)
        self._rebuilders = tuple(_rebuilder(sort) for sort in self.sorts)
        self._placements = tuple((leaf.low, leaf.high, leaf.word, leaf.shift) for leaf in self.leaves)
        self._fields = tuple((leaf.word, leaf.shift, leaf.mask, leaf.low) for leaf in self.leaves)
        # per word: each variable with leaves there, and those leaves' (offset in the variable, low, shift)
        self._word_parts: list[list[tuple[int, list[tuple[int, int, int]]]]] = [[] for _ in range(self.words)]
        for position, (first, end) in enumerate(self.spans):
            for leaf in self.leaves[first:end]:
                parts = self._word_parts[leaf.word]
                if not parts or parts[-1][0] != position:
                    parts.append((position, []))
                parts[-1][1].append((leaf.position - first, leaf.low, leaf.shift))

    def _add(self, path: str, scalar: Sort) -> None:
        low, high = scalar_range(scalar)
        width = (high - low).bit_length()
        if width > WORD_BITS:
            raise LayoutError(f"{path}: the range {low}..{high} needs {width} bits, more than a word's {WORD_BITS}")
        if self._used + width > WORD_BITS:
            self._word, self._used = self._word + 1, 0
        self._leaves.append(
            Leaf(len(self._leaves), path, low, high, width, self._word, self._used, isinstance(scalar, BoolSort))
        )
        self._used += width

    def _place(self, sort: Sort, path: str, inside: bool) -> None:
        """Place ``sort``'s leaves; ``inside`` a region already known to fit in the current word."""
        if not isinstance(sort, SequenceSort):
            if is_scalar(sort):
                self._add(path, sort)
                return
            for child_path, child in _children(sort, path):
                self._place(child, child_path, inside)
            return
        length = len(self._leaves)
        self._add(f"{path}#length", IntSort(0, sort.capacity))
        element_width = sum(
            (high - low).bit_length()
            for low, high in (scalar_range(leaf) for _, leaf in scalar_leaves(sort.element, ""))
        )
        region = element_width * sort.capacity
        packed = not inside and 0 < region <= WORD_BITS
        if packed and self._used + region > WORD_BITS:
            self._word, self._used = self._word + 1, 0
        first, base = len(self._leaves), self._used
        for slot in range(sort.capacity):
            self._place(sort.element, f"{path}[{slot}]", inside or packed)
        per_slot = (len(self._leaves) - first) // sort.capacity if sort.capacity else 0
        self.sequences[length] = SequenceSlots(
            length, first, sort.capacity, per_slot, self._word if packed else None, base, element_width
        )

    # ------------------------------------------------------------------ tuple states <-> leaf values
    def leaf_values(self, state: Sequence[Value]) -> list[int]:
        """The integer value of every leaf of a tuple state (sequence padding at the lowest value)."""
        values: list[int] = []
        for flatten, value in zip(self._flatteners, state):
            flatten(value, values)
        return values

    def from_leaf_values(self, values: Sequence[int]) -> tuple[Value, ...]:
        """The tuple state whose leaves hold ``values``."""
        cursor = iter(values)
        return tuple(rebuild(cursor) for rebuild in self._rebuilders)

    # ------------------------------------------------------------------------- words <-> states
    def encode(self, state: Sequence[Value]) -> tuple[int, ...]:
        """The packed words of a tuple state; a value outside its sort is a ``LayoutError``."""
        words = [0] * self.words
        for position, ((low, high, word, shift), value) in enumerate(zip(self._placements, self.leaf_values(state))):
            if not low <= value <= high:
                raise LayoutError(f"{self.leaves[position].path} = {value} is outside {low}..{high}")
            words[word] |= (value - low) << shift
        return tuple(words)

    def word(self, state: Sequence[Value], index: int) -> int:
        """Word ``index`` of ``encode(state)`` alone, flattening only the variables with leaves in it
        (no range check: for ordering states known to be in their sorts word by word)."""
        total = 0
        for position, fields in self._word_parts[index]:
            values: list[int] = []
            self._flatteners[position](state[position], values)
            for offset, low, shift in fields:
                total |= (values[offset] - low) << shift
        return total

    def decode(self, words: Sequence[int]) -> tuple[Value, ...]:
        """The tuple state packed in ``words``."""
        words = [int(word) for word in words]
        values = [((words[word] >> shift) & mask) + low for word, shift, mask, low in self._fields]
        return self.from_leaf_values(values)

    def describe(self) -> str:
        return f"{len(self.leaves)} fields, {self.bits} bits in {self.words} word{'s' if self.words != 1 else ''}"


def _children(sort: Sort, path: str) -> Iterator[tuple[str, Sort]]:
    if isinstance(sort, MapSort):
        for key in sort.keys:
            yield f"{path}[{sort.key.render(key)}]", sort.value
    elif isinstance(sort, RecordSort):
        for name, field_sort in sort.fields:
            yield f"{path}.{name}", field_sort
    else:
        raise LayoutError(f"sort {sort.name} of {path} has no packed layout")


Flatten = Callable[[Value, list[int]], None]
Rebuild = Callable[[Iterator[int]], Value]


def _flattener(sort: Sort) -> Flatten:
    """A function appending the leaf values of a value of ``sort`` (built once per layout)."""
    if is_scalar(sort):

        def scalar(value: Value, out: list[int]) -> None:
            out.append(int(value))  # type: ignore[call-overload]

        return scalar
    if isinstance(sort, MapSort):
        item_flatten = _flattener(sort.value)

        def mapping(value: Value, out: list[int]) -> None:
            assert isinstance(value, tuple)
            for item in value:
                item_flatten(item, out)

        return mapping
    if isinstance(sort, RecordSort):
        field_flattens = tuple(_flattener(field_sort) for _, field_sort in sort.fields)

        def record(value: Value, out: list[int]) -> None:
            assert isinstance(value, tuple)
            for flatten, item in zip(field_flattens, value):
                flatten(item, out)

        return record
    if isinstance(sort, SequenceSort):
        element_flatten, capacity = _flattener(sort.element), sort.capacity
        padding = [scalar_range(scalar)[0] for _, scalar in scalar_leaves(sort.element, "")]

        def sequence(value: Value, out: list[int]) -> None:
            assert isinstance(value, tuple)
            if len(value) > capacity:
                raise LayoutError(f"a sequence of {len(value)} elements exceeds its capacity {capacity}")
            out.append(len(value))
            for item in value:
                element_flatten(item, out)
            out.extend(padding * (capacity - len(value)))

        return sequence
    raise LayoutError(f"sort {sort.name} has no packed layout")


def _rebuilder(sort: Sort) -> Rebuild:
    """A function reading a value of ``sort`` from leaf values (built once per layout)."""
    if isinstance(sort, BoolSort):
        return lambda cursor: bool(next(cursor))
    if is_scalar(sort):
        return next
    if isinstance(sort, (MapSort, RecordSort)):
        children = (
            (_rebuilder(sort.value),) * len(sort.keys)
            if isinstance(sort, MapSort)
            else tuple(_rebuilder(field_sort) for _, field_sort in sort.fields)
        )
        return lambda cursor: tuple(rebuild(cursor) for rebuild in children)
    if isinstance(sort, SequenceSort):
        element, capacity = _rebuilder(sort.element), sort.capacity

        def sequence(cursor: Iterator[int]) -> Value:
            length = next(cursor)
            items = [element(cursor) for _ in range(capacity)]
            return tuple(items[:length])

        return sequence
    raise LayoutError(f"sort {sort.name} has no packed layout")


__all__ = ["WORD_BITS", "Layout", "LayoutError", "Leaf", "SequenceSlots", "is_scalar", "scalar_leaves", "scalar_range"]
