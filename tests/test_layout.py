"""Tests for lockstep.spec.layout: packed words round-trip every state of every built-in model."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockstep.cli.check import pinned_instances
from lockstep.spec.layout import WORD_BITS, Layout, LayoutError
from lockstep.spec.machine import Machine
from lockstep.spec.sorts import (
    BOOL,
    BoolSort,
    EnumSort,
    IndexSort,
    IntSort,
    MapSort,
    RecordSort,
    SequenceSort,
    Sort,
    Value,
    integers,
)


def values_of(sort: Sort) -> st.SearchStrategy[Value]:
    """Any value of ``sort`` (not only reachable ones)."""
    if isinstance(sort, BoolSort):
        return st.booleans()
    if isinstance(sort, IntSort):
        assert sort.low is not None and sort.high is not None
        return st.integers(sort.low, sort.high)
    if isinstance(sort, (EnumSort, IndexSort)):
        return st.integers(0, sort.size - 1)
    if isinstance(sort, MapSort):
        return st.tuples(*[values_of(sort.value) for _ in sort.keys])
    if isinstance(sort, RecordSort):
        return st.tuples(*[values_of(field_sort) for _, field_sort in sort.fields])
    assert isinstance(sort, SequenceSort)
    return st.lists(values_of(sort.element), max_size=sort.capacity).map(tuple)


def _distinct_machines() -> list[tuple[str, Machine]]:
    seen: dict[tuple[tuple[str, str], ...], tuple[str, Machine]] = {}
    for instance in pinned_instances():
        machine = instance.machine()
        shape = tuple((name, variable.sort.name) for name, variable in machine.variables.items())
        seen.setdefault(shape, (instance.label, machine))
    return list(seen.values())


MACHINES = _distinct_machines()


@pytest.mark.parametrize(("label", "machine"), MACHINES, ids=[label for label, _ in MACHINES])
def test_random_states_of_every_built_in_model_round_trip(label: str, machine: Machine) -> None:
    layout = Layout(machine)
    assert all(leaf.shift + leaf.width <= WORD_BITS for leaf in layout.leaves)
    assert layout.words == max(leaf.word for leaf in layout.leaves) + 1
    strategy = st.tuples(*[values_of(variable.sort) for variable in machine.variables.values()])

    @settings(max_examples=60, deadline=None)
    @given(strategy)
    def round_trip(state: tuple[Value, ...]) -> None:
        words = layout.encode(state)
        assert all(0 <= word < 1 << WORD_BITS for word in words)
        assert layout.decode(words) == state
        assert tuple(layout.word(state, index) for index in range(layout.words)) == words

    round_trip()
    initial = tuple(variable.initial for variable in machine.variables.values())
    assert layout.decode(layout.encode(initial)) == initial


def test_distinct_states_have_distinct_words_and_sequences_one_encoding() -> None:
    machine = Machine("layout")
    machine.variable("queue", SequenceSort(integers(-1, 2), 3), ())
    machine.variable("flag", BOOL, False)
    layout = Layout(machine)
    states = [(queue, flag) for queue in SequenceSort(integers(-1, 2), 3).values() for flag in (False, True)]
    encoded = {layout.encode(state) for state in states}
    assert len(encoded) == len(states)
    assert layout.leaf_values(((2,), True))[:5] == [1, 2, -1, -1, 1]  # past the length: the lowest value


def test_a_leaf_never_straddles_two_words_and_a_value_outside_its_sort_is_refused() -> None:
    machine = Machine("wide")
    for position in range(5):
        machine.variable(f"wide{position}", integers(0, 2**20), 0)
    layout = Layout(machine)
    assert layout.words == 2 and [leaf.word for leaf in layout.leaves] == [0, 0, 0, 1, 1]
    with pytest.raises(LayoutError, match="outside"):
        layout.encode((0, 0, 0, 0, 2**20 + 1))
