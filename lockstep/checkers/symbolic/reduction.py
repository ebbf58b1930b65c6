"""A partial-order reduction of the BMC unrolling: independent adjacent steps in one canonical order.

Two grounded transitions ``a > b`` (indices into ``Encoding.grounded``) *commute after each other*
when, from every state ``s`` in the sort domains where ``a`` can be taken and then ``b``, ``b`` can
be taken from ``s`` and then ``a``, and both orders reach the same state:

    en_a(s) and en_b(a(s))  implies  en_b(s) and en_a(b(s)) and b(a(s)) == a(b(s))

("can be taken" is the encoding's: the guard holds and no update leaves its sort; the states
include the monitor variables of bounded responses and ``no_hang``, so those commute only where
their counters agree). Each pair is decided once per machine: by footprints where ``a`` writes
nothing ``b`` reads or writes and vice versa, otherwise by one Z3 query on the one-step encoding
(a query that does not answer ``unsat`` keeps the pair dependent). BMC then forbids, at every
pair of adjacent frames, ``a`` at step i followed by ``b`` at step i+1 for such pairs.

Soundness. Take any path of k steps from the initial state to a state ``t``. While it has adjacent
steps ``a`` then ``b`` with ``a > b`` that commute after each other, swap them: by the condition
the swapped path is a path of the model, of the same length, from the same initial state, through
the same states except the one between the two steps, and it ends in ``t``. Each swap removes one
inversion of the sequence of transition indices, so this ends, with a path the reduced unrolling
allows. Hence the states reachable in exactly k steps are the same with and without the reduction,
for every k. Every BMC goal is a predicate of the state at the depth asked (an ``always``
violation, its deadlock condition, a ``sometimes`` witness, ``no_deadlock``, an enabled
out-of-sort step for ``in_bounds``, and bounded-response/``no_hang`` monitors, which are state
variables), so every verdict and every shortest counterexample length is unchanged; only which of
the equally short paths is shown may differ. ``leads_to`` is not a BMC goal (the Z3 engines leave
it inconclusive), so no property kind is left for which the reduction would be unsound.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import z3

from lockstep.checkers.symbolic.encoding import Encoding, flatten
from lockstep.checkers.symbolic.solving import milliseconds
from lockstep.checkers.symbolic.unrolling import Renaming
from lockstep.checkers.symbolic.values import Symbolic, conjoin, negate, to_z3


@dataclass(frozen=True)
class Reduction:
    """For each transition ``a``, the transitions ``b < a`` that may not directly follow it."""

    forbidden: dict[int, frozenset[int]]
    pairs_checked: int  # pairs decided by a Z3 query (the rest by footprints)
    seconds: float

    @property
    def size(self) -> int:
        return sum(len(followers) for followers in self.forbidden.values())

    def constraint(self, first: z3.ExprRef, second: z3.ExprRef) -> z3.BoolRef:
        """The selectors ``first`` (step i) and ``second`` (step i+1) are in canonical order."""
        parts = [
            z3.Implies(first == a, z3.And(*[second != b for b in sorted(followers)]))
            for a, followers in sorted(self.forbidden.items())
            if followers
        ]
        return z3.And(*parts)


@dataclass(frozen=True)
class _Transition:
    enabled: z3.BoolRef  # over the pre state's components
    after: list[z3.ExprRef]  # each component after the step
    written: frozenset[int]  # the components whose term differs from the pre state's
    reads: frozenset[str]
    renaming: Renaming  # a pre-state term to its value after the step


def commuting_pairs(encoding: Encoding, *, query_timeout: float = 2.0, deadline: float | None = None) -> Reduction:
    """Decide, for every pair ``a > b`` of grounded transitions, whether they commute after each
    other (see the module doc); past ``deadline`` every remaining pair stays dependent."""
    started = time.monotonic()
    state = encoding.state("commute")
    pre = _components(encoding, state)
    names = [component.decl().name() for component in pre]
    transitions: list[_Transition | None] = []
    for guard, updates, out_of_bounds in encoding.steps(state):
        if guard is False:
            transitions.append(None)
            continue
        after = _components(encoding, {name: updates.get(name, value) for name, value in state.items()})
        enabled = to_z3(conjoin([guard, negate(out_of_bounds)]))
        written = frozenset(
            position for position, (old, new) in enumerate(zip(pre, after, strict=True)) if not new.eq(old)
        )
        reads = frozenset(_constants(enabled)).union(*[_constants(after[position]) for position in written])
        renaming = Renaming([(old, new) for old, new in zip(pre, after, strict=True) if not new.eq(old)])
        transitions.append(_Transition(enabled, after, written, reads, renaming))
    solver = z3.SolverFor("QF_BV")
    solver.set("timeout", milliseconds(query_timeout))
    solver.add(to_z3(encoding.domain(state)))
    forbidden: dict[int, set[int]] = {}
    checked = 0
    for a, first in enumerate(transitions):
        for b in range(a):
            second = transitions[b]
            if first is None or second is None:
                continue  # a transition never enabled never takes a step: nothing to forbid
            first_writes = {names[position] for position in first.written}
            second_writes = {names[position] for position in second.written}
            if not (first_writes & (second.reads | second_writes)) and not (second_writes & first.reads):
                forbidden.setdefault(a, set()).add(b)
                continue
            if deadline is not None and time.monotonic() > deadline:
                continue
            checked += 1
            if _commute(solver, first, second):
                forbidden.setdefault(a, set()).add(b)
    return Reduction(
        {a: frozenset(followers) for a, followers in forbidden.items()}, checked, time.monotonic() - started
    )


def _commute(solver: z3.Solver, first: _Transition, second: _Transition) -> bool:
    """``first`` then ``second`` can always be swapped (the module doc's condition): its negation is unsat."""
    same = [
        first.renaming(second.after[position]) == second.renaming(first.after[position])
        for position in sorted(first.written | second.written)
    ]
    negation = z3.simplify(
        z3.And(
            first.enabled,
            first.renaming(second.enabled),
            z3.Not(z3.And(second.enabled, second.renaming(first.enabled), *same)),
        )
    )
    if z3.is_false(negation):
        return True
    solver.push()
    solver.add(negation)
    answer = solver.check()
    solver.pop()
    return bool(answer == z3.unsat)


def _components(encoding: Encoding, state: dict[str, Symbolic]) -> list[z3.ExprRef]:
    return [to_z3(component) for name, sort in encoding.sorts.items() for component in flatten(sort, state[name])]


def _constants(term: z3.ExprRef) -> set[str]:
    found: set[str] = set()
    seen: set[int] = set()
    stack = [term]
    while stack:
        current = stack.pop()
        if current.get_id() in seen:
            continue
        seen.add(current.get_id())
        if z3.is_const(current) and current.decl().kind() == z3.Z3_OP_UNINTERPRETED:
            found.add(current.decl().name())
        stack.extend(current.children())
    return found
