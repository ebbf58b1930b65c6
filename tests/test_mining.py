"""Candidate invariants mined from the reachable states (mining.py): Houdini keeps the inductive
subset, which Z3 re-checks as an invariant, and drops a mined candidate that is not inductive."""

from __future__ import annotations

import time

import pytest
import z3

from lockstep.checkers import Verdict, check
from lockstep.checkers.symbolic import mining
from lockstep.checkers.symbolic.encoding import Encoding
from lockstep.checkers.symbolic.invariants import verify
from lockstep.checkers.symbolic.values import bit_vectors
from lockstep.spec.machine import Machine, Step
from lockstep.spec.protocol import UsageError
from lockstep.spec.sorts import integers


def counter() -> Machine:
    """x and y count up together to 3; ``y_small`` (y <= 3) is not inductive alone (x == y is needed)."""
    machine = Machine("pair")
    x = machine.variable("x", integers(0, 5), 0)
    y = machine.variable("y", integers(0, 5), 0)
    machine.add_action("tick", lambda: Step(x < 3, {x: x + 1, y: y + 1}), actor="clock")
    machine.always("y_small", y <= 3)
    machine.set_final(x == 3)
    return machine.finish()


def test_mined_facts_kept_by_houdini_are_an_invariant_z3_rechecks() -> None:
    encoding = Encoding(counter())
    rows = mining.reachable_rows(encoding)
    assert rows is not None and rows.tolist() == [[0, 0], [1, 1], [2, 2], [3, 3]]
    facts = mining.mine(rows, mining.component_kinds(encoding))
    with bit_vectors(None):
        candidates = mining.formulas(encoding, facts)
        assert "mined: x == y" in candidates and "mined: x in {0, 1, 2, 3}" in candidates
        kept = mining.inductive_subset(encoding, candidates)
        assert kept is not None and set(kept) == set(candidates)  # every fact of this small space is inductive
        position = [prop.name for prop in encoding.machine.properties].index("y_small")
        assert verify(encoding, position, z3.And(*kept.values())) is None
        assert verify(encoding, position, candidates["mined: y in {0, 1, 2, 3}"]) is not None  # alone: not inductive


def test_a_mined_candidate_that_is_not_inductive_is_dropped() -> None:
    encoding = Encoding(counter())
    rows = mining.reachable_rows(encoding)
    assert rows is not None
    sample = rows[:2]  # a partial sample: x in {0, 1} holds in it but the step from x == 1 breaks it
    with bit_vectors(None):
        candidates = mining.formulas(encoding, mining.mine(sample, mining.component_kinds(encoding)))
        assert "mined: x in {0, 1}" in candidates
        kept = mining.inductive_subset(encoding, candidates)
    assert kept is not None and "mined: x in {0, 1}" not in kept and "mined: y in {0, 1}" not in kept
    assert "mined: x == y" in kept


def test_pdr_with_mined_invariants_proves_through_houdini() -> None:
    result = check(counter(), "pdr", properties=["y_small"], solver_timeout=20, mine_invariants=True)
    (item,) = result.properties
    assert item.verdict is Verdict.HOLDS and "Houdini" in item.detail and "mined candidate invariants" in item.detail
    assert item.invariant is not None and "x == y" in item.invariant.replace("y == x", "x == y")


def test_houdini_past_its_deadline_keeps_nothing_mined() -> None:
    encoding = Encoding(counter())
    rows = mining.reachable_rows(encoding)
    assert rows is not None
    with bit_vectors(None):
        candidates = mining.formulas(encoding, mining.mine(rows, mining.component_kinds(encoding)))
        assert mining.inductive_subset(encoding, candidates, deadline=time.monotonic() - 1) is None


def test_mining_is_an_option_of_pdr_only() -> None:
    with pytest.raises(UsageError, match="mine_invariants applies to engine pdr, not to bfs"):
        check(counter(), "bfs", mine_invariants=True)
