"""Tests for lockstep.checkers.vector.facts and the translator's folding that uses it.

A successor block knows what its guard pins (a field it compares with a constant, a flag it tests),
an if-then-else branch knows its condition, and tests of one-bit fields of one word merge: the
generated code shrinks, and the search still gives exactly the reference engine's results.
"""

from __future__ import annotations

from lockstep.checkers import check
from lockstep.checkers.vector.backend import NumpyBackend
from lockstep.checkers.vector.facts import column_code
from lockstep.checkers.vector.kernels import compile_kernels
from lockstep.spec.layout import Layout
from lockstep.spec.machine import Machine, Step
from lockstep.spec.sorts import BOOL, IndexSort, MapSort, integers
from lockstep.spec.terms import Term, if_then_else


def _machine() -> Machine:
    Rank = IndexSort("Rank", 3)
    machine = Machine("facts")
    mode = machine.variable("mode", MapSort(Rank, integers(0, 3)), (0, 0, 0))
    posted = machine.variable("posted", MapSort(Rank, integers(0, 1)), (0, 0, 0))
    ready = machine.variable("ready", BOOL, False)
    count = machine.variable("count", integers(0, 5), 0)

    @machine.action(actor="rank", rank=Rank)
    def advance(rank: Term) -> Step:
        # the guard pins mode[rank] to 1 and posted[rank] to 0: the block needs neither decoded
        next_mode = if_then_else(mode[rank] == 1, 2, 3)
        return Step(
            (mode[rank] == 1) & (posted[rank] == 0) & ~ready,
            {mode: mode.set(rank, next_mode), posted: posted.set(rank, posted[rank] + 1)},
        )

    @machine.action(actor="rank", rank=Rank)
    def start(rank: Term) -> Step:
        return Step(mode[rank] == 0, {mode: mode.set(rank, 1)})

    @machine.action(actor="coordinator")
    def settle() -> Step:
        pending = (posted[0] != 0) | (posted[1] != 0) | (posted[2] != 0)
        # the inner test of ``pending`` is decided inside the branch where it is false
        return Step(
            count < 5,
            {count: if_then_else(pending, count + 1, if_then_else(pending, 0, count)), ready: ~ready},
        )

    machine.always("count_small", count < 5)
    return machine.finish()


def _block(source: str, tuple_id: int) -> str:
    return source.split(f"if counts[{tuple_id}]:")[1].split("if counts[")[0]


def test_a_field_the_guard_pins_is_a_constant_in_the_successor_block() -> None:
    machine = _machine()
    kernels = compile_kernels(machine, Layout(machine), NumpyBackend().namespace())
    advance = next(position for position, action in enumerate(machine.actions) if action.name == "advance")
    tuple_id = next(index for index, (action, arguments) in enumerate(kernels.tuples) if action == advance)
    block = _block(kernels.source, tuple_id)
    layout = kernels.layout
    for path in ("mode[0]", "posted[0]"):  # 1 and 0 in every row of the block: read nowhere in it
        leaf = next(leaf for leaf in layout.leaves if leaf.path == path)
        assert column_code(leaf, f"P{tuple_id}") not in block
        assert f"P{tuple_id}[{leaf.word}] & {1 << leaf.shift}) " not in block


def test_tests_of_bits_of_one_word_merge_and_a_branch_knows_its_condition() -> None:
    machine = _machine()
    kernels = compile_kernels(machine, Layout(machine), NumpyBackend().namespace())
    settle = next(position for position, action in enumerate(machine.actions) if action.name == "settle")
    tuple_id = next(index for index, (action, _) in enumerate(kernels.tuples) if action == settle)
    block = _block(kernels.source, tuple_id)
    posted = [leaf for leaf in kernels.layout.leaves if leaf.path.startswith("posted[")]
    assert len({leaf.word for leaf in posted}) == 1
    mask = sum(1 << leaf.shift for leaf in posted)
    assert f"& {mask}) != 0)" in block  # any of the three posted bits: one test
    assert block.count("_where(") == 1  # the inner if-then-else folded to ``count``


def test_the_folded_kernels_search_like_the_reference() -> None:
    machine = _machine()
    reference = check(machine, "bfs")
    for result in (check(machine, "bfs-vec"), check(machine, "bfs-gpu", device="cpu")):
        assert (result.stats.states, result.stats.transitions, result.verdict) == (
            reference.stats.states,
            reference.stats.transitions,
            reference.verdict,
        )
