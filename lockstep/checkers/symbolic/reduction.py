"""A partial-order reduction of the BMC unrolling: commuting steps in one canonical order.

Two grounded transitions ``a``, ``b`` (indices into ``Encoding.grounded``), in this order, *commute*
when, from every state ``s`` in the sort domains where ``a`` can be taken and then ``b``, ``b`` can
be taken from ``s`` and then ``a``, and both orders reach the same state:

    en_a(s) and en_b(a(s))  implies  en_b(s) and en_a(b(s)) and b(a(s)) == a(b(s))

("can be taken" is the encoding's: the guard holds and no update leaves its sort; the states
include the monitor variables of bounded responses and ``no_hang``, so those commute only where
their counters agree). Each pair is decided once per machine: by footprints where ``a`` writes
nothing ``b`` reads or writes and vice versa, otherwise by one Z3 query on the one-step encoding
(a query that does not answer ``unsat`` keeps the pair dependent). Where the machine declares a
rank symmetry (``symmetry_breaking``), the relation is invariant under it (``a, b`` commute iff
``p(a), p(b)`` do), so one pair of each orbit is decided and the rest are mapped. The decided
relation is cached on disk (``analysis_cache``), keyed by a hash of the transitions' terms.

The constraint. Say ``a`` *passes* ``c`` when ``c`` then ``a`` commute (``c`` greater or less than
``a``: both directions of every pair are decided), and call ``b`` a *blocker* of ``a`` when ``a``
passes ``b`` and ``b > a``.
BMC forbids a step ``a`` at frame j when some earlier frame i < j took a blocker of ``a`` and
every frame strictly between took a transition ``a`` passes: a flag per transition and frame,
``blocked_a@(j+1) = blocker_a(step j) or (blocked_a@j and passes_a(step j))``, with
``step j == a implies not blocked_a@j``. With no frame in between this is the adjacent rule "``b``
directly followed by ``a``"; longer factors ``b c ... a`` are cut as well.

Soundness. Let ``S`` be the set of paths of exactly k steps from the initial state to a state
where a goal asked at depth k holds, and order paths of equal length lexicographically by their
sequences of transition indices. Take the least path ``m`` of ``S``, and suppose it had a
forbidden factor: ``b`` at step i, ``c_1 .. c_n`` after it, then ``a`` with ``b`` a blocker of
``a`` and ``a`` passing every ``c``. Swap ``a`` leftwards past ``c_n``, ..., ``c_1`` and ``b`` in
turn: each swap replaces ``x`` then ``a`` by ``a`` then ``x`` on the current path, which by the
commuting condition is again a path of the model, of the same length, from the same state, and
ends in the same state. The result is in ``S`` and, as it agrees with ``m`` before step i and has
``a < b`` at step i, is less than ``m``: a contradiction. So ``m`` satisfies the constraint, and
whenever the unreduced unrolling reaches a goal at depth k so does the reduced one; every BMC
goal is a predicate of the state at the depth asked (an ``always`` violation, its deadlock
condition, a ``sometimes`` witness, ``no_deadlock``, an enabled out-of-sort step for
``in_bounds``, and bounded-response/``no_hang`` monitors, which are state variables), so every
verdict and every shortest counterexample length is unchanged; only which of the equally short
paths is shown may differ. ``leads_to`` is not a BMC goal (the Z3 engines leave it inconclusive),
so no property kind is left for which the reduction would be unsound. The argument picks the same
least path as symmetry breaking's (``symmetry_breaking``), so the two constraints combine.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

import z3

from lockstep.checkers.symbolic.analysis_cache import read_pairs, write_pairs
from lockstep.checkers.symbolic.encoding import Encoding, flatten
from lockstep.checkers.symbolic.solving import milliseconds
from lockstep.checkers.symbolic.symmetry_breaking import Flags, membership, transition_permutations
from lockstep.checkers.symbolic.unrolling import Renaming
from lockstep.checkers.symbolic.values import Symbolic, conjoin, negate, to_z3

_VERSION = "commuting-pairs 2"  # part of the cache key: change it when the decision procedure changes


@dataclass(frozen=True)
class Reduction:
    """The ordered pairs ``(x, y)`` such that ``x`` then ``y`` commute, and the constraint built
    from them (module doc)."""

    pairs: frozenset[tuple[int, int]]
    pairs_checked: int  # Z3 queries made (the other pairs were decided by footprints, symmetry or the cache)
    seconds: float
    cached: bool = False  # read from the on-disk cache
    mapped: int = 0  # ordered pairs decided by mapping their orbit representative's answer

    @property
    def size(self) -> int:
        return len(self.pairs)

    @property
    def forbidden(self) -> dict[int, frozenset[int]]:
        """For each ``a``, the ``b < a`` such that ``a`` then ``b`` commute (the adjacent rule)."""
        found: dict[int, set[int]] = {}
        for first, second in self.pairs:
            if first > second:
                found.setdefault(first, set()).add(second)
        return {first: frozenset(seconds) for first, seconds in found.items()}

    def _passes(self) -> dict[int, tuple[frozenset[int], frozenset[int]]]:
        """For each ``a`` with a blocker: its blockers, and the transitions ``c < a`` it passes."""
        blockers: dict[int, set[int]] = {}
        lower: dict[int, set[int]] = {}
        for first, second in self.pairs:
            (blockers if first > second else lower).setdefault(second, set()).add(first)
        return {a: (frozenset(found), frozenset(lower.get(a, ()))) for a, found in sorted(blockers.items())}

    @property
    def flags(self) -> list[str]:
        return [f"blocked!{a}" for a in self._passes()]

    def initial(self, flags: Flags) -> z3.BoolRef:
        return z3.And(*[z3.Not(flags[name]) for name in self.flags])

    def step(self, selector: z3.ExprRef, before: Flags, after: Flags) -> z3.BoolRef:
        """The flags after a step of ``selector``, and the ban on a blocked transition (module doc)."""
        parts = []
        for a, (blockers, lower) in self._passes().items():
            name = f"blocked!{a}"
            passed = z3.And(before[name], membership(selector, lower))
            parts.append(after[name] == z3.Or(membership(selector, blockers), passed))
            parts.append(z3.Implies(selector == a, z3.Not(before[name])))
        return z3.And(*parts)


@dataclass(frozen=True)
class _Transition:
    enabled: z3.BoolRef  # over the pre state's components
    after: list[z3.ExprRef]  # each component after the step
    written: frozenset[int]  # the components whose term differs from the pre state's
    reads: frozenset[str]
    renaming: Renaming  # a pre-state term to its value after the step


def commuting_pairs(
    encoding: Encoding,
    *,
    query_timeout: float = 2.0,
    deadline: float | None = None,
    cache_directory: Path | None = None,
    symmetry: bool = True,
) -> Reduction:
    """Decide, for every ordered pair of grounded transitions, whether they commute (see the module
    doc); past ``deadline`` every remaining pair stays dependent. With
    ``cache_directory`` a complete answer is read from and written to it; with ``symmetry`` one pair
    per orbit of the machine's rank symmetry is decided."""
    started = time.monotonic()
    state = encoding.state("commute")
    pre = _components(encoding, state)
    names = [component.decl().name() for component in pre]
    transitions: list[_Transition | None] = []
    digest = hashlib.sha256(_VERSION.encode())
    domain = to_z3(encoding.domain(state))
    digest.update(domain.sexpr().encode())
    for guard, updates, out_of_bounds in encoding.steps(state):
        if guard is False:
            transitions.append(None)
            digest.update(b"never;")
            continue
        after = _components(encoding, {name: updates.get(name, value) for name, value in state.items()})
        enabled = to_z3(conjoin([guard, negate(out_of_bounds)]))
        written = frozenset(
            position for position, (old, new) in enumerate(zip(pre, after, strict=True)) if not new.eq(old)
        )
        digest.update(enabled.sexpr().encode())
        for position in sorted(written):
            digest.update(f";{names[position]}:=".encode() + after[position].sexpr().encode())
        digest.update(b"|")
        reads = frozenset(_constants(enabled)).union(*[_constants(after[position]) for position in written])
        renaming = Renaming([(old, new) for old, new in zip(pre, after, strict=True) if not new.eq(old)])
        transitions.append(_Transition(enabled, after, written, reads, renaming))
    permutations = transition_permutations(encoding)[0] if symmetry else [tuple(range(len(transitions)))]
    digest.update(repr(permutations).encode())
    key = digest.hexdigest()
    if cache_directory is not None:
        found = read_pairs(cache_directory, key)
        if found is not None:
            return Reduction(frozenset(found), 0, time.monotonic() - started, cached=True)
    solver = z3.SolverFor("QF_BV")
    solver.set("timeout", milliseconds(query_timeout))
    solver.add(domain)
    answers: dict[tuple[int, int], bool] = {}
    checked = mapped = 0
    complete = True
    for a, first in enumerate(transitions):
        for b in range(a):
            second = transitions[b]
            if first is None or second is None or (a, b) in answers:
                continue  # a transition never enabled never takes a step: nothing to forbid
            first_writes = {names[position] for position in first.written}
            second_writes = {names[position] for position in second.written}
            if not (first_writes & (second.reads | second_writes)) and not (second_writes & first.reads):
                forward = backward = True
            elif deadline is not None and time.monotonic() > deadline:
                complete = False
                continue
            else:
                forward, backward, queries = _commute(solver, first, second)
                checked += queries
            for permutation in permutations:  # the pair's orbit has the same answers (the first is the pair)
                image = (permutation[a], permutation[b])
                if image not in answers:
                    mapped += 2 * (image != (a, b))
                    answers[image], answers[image[::-1]] = forward, backward
    commuting = frozenset(pair for pair, commutes in answers.items() if commutes)
    if cache_directory is not None and complete:
        write_pairs(cache_directory, key, sorted(commuting))
    return Reduction(commuting, checked, time.monotonic() - started, mapped=mapped)


def _commute(solver: z3.Solver, first: _Transition, second: _Transition) -> tuple[bool, bool, int]:
    """Whether ``first`` then ``second`` always commute (the module doc's condition), whether
    ``second`` then ``first`` do, and how many queries it took: one asks both (the negation of
    their conjunction), and only a direction its model does not refute is asked alone."""
    same = z3.And(
        *[
            first.renaming(second.after[position]) == second.renaming(first.after[position])
            for position in sorted(first.written | second.written)
        ]
    )
    forward = z3.And(first.enabled, first.renaming(second.enabled))  # first then second can be taken
    backward = z3.And(second.enabled, second.renaming(first.enabled))
    forward_fails = z3.And(forward, z3.Not(z3.And(backward, same)))
    backward_fails = z3.And(backward, z3.Not(z3.And(forward, same)))
    answer, model = _ask(solver, z3.Or(forward_fails, backward_fails))
    if answer == z3.unsat:
        return True, True, 1
    answers, queries = [False, False], 1
    for direction, fails in enumerate((forward_fails, backward_fails)):
        if model is None or not z3.is_true(model.eval(fails, model_completion=True)):  # not refuted: ask
            queries += 1
            answers[direction] = _ask(solver, fails)[0] == z3.unsat
    return answers[0], answers[1], queries


def _ask(solver: z3.Solver, negation: z3.BoolRef) -> tuple[z3.CheckSatResult, z3.ModelRef | None]:
    """Is there a state where the swap fails (``negation``)? unsat: never; sat comes with a model;
    unknown (the query's time limit) counts as a failed swap."""
    negation = z3.simplify(negation)
    if z3.is_false(negation):
        return z3.unsat, None
    solver.push()
    solver.add(negation)
    answer = solver.check()
    model = solver.model() if answer == z3.sat else None
    solver.pop()
    return answer, model


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
