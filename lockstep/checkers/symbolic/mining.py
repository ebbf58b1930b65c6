"""Candidate invariants mined from the explicit state space, and Houdini's filter for many of them.

Where the reachable set is small enough to enumerate (``reachable_rows``: the explicit engine's
BFS, every state flattened to the encoding's scalar components, in ``components`` order), the facts
that hold in every reachable state are candidate invariants (``mine``):

- ``values``: a component's observed values (``mode[0] in {0, 2}``), or its observed range when it
  takes more than ``VALUE_LIMIT`` values;
- ``equal``: two components (of the same kind, neither constant) equal in every state;
- ``implies``: ``a == v -> b == w`` for atoms over components with at most ``ATOM_LIMIT`` values,
  wherever the atom ``a == v`` is true only in states where ``b == w`` is.

They are only candidates: a fact of the sampled states need not be inductive (an unreachable state
satisfying every candidate may step out of one). ``inductive_subset`` (Houdini, batched: one query
asks whether any candidate can be broken, and every candidate the model breaks is dropped at once)
keeps the largest inductive subset, and only that subset is assumed; the certificates Z3 re-checks
include it, so no proof rests on the sampling. Houdini over thousands of candidates is slow on a
large model (docs/performance.md), so it has a deadline; past it nothing mined
is assumed. ``formulas`` builds each fact in the reading in
force (integers for Z3, bit-vectors of the encoding's width for ABC's circuit).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import z3

from lockstep.checkers.explicit.search import ExplicitSearch
from lockstep.checkers.limits import Limits
from lockstep.checkers.symbolic.encoding import Encoding, flatten
from lockstep.checkers.symbolic.houdini import inductive_subset as one_by_one
from lockstep.checkers.symbolic.houdini import queries
from lockstep.checkers.symbolic.invariants import components, named_state
from lockstep.checkers.symbolic.solving import ask
from lockstep.checkers.symbolic.values import integer_value, lift_value
from lockstep.spec.compiler import CompiledSystem

VALUE_LIMIT = 8  # at most this many observed values: a value set; more: a range
ATOM_LIMIT = 4  # components with at most this many observed values take part in implications
STATE_LIMIT = 500_000  # more reachable states than this: nothing is mined


@dataclass(frozen=True)
class Fact:
    """A fact of every reachable state: ``kind`` is ``values``, ``range``, ``equal`` or ``implies``;
    ``first``/``second`` are component positions, ``values`` the observed values (``implies``: v, w)."""

    kind: str
    first: int
    second: int = -1
    values: tuple[int, ...] = ()


def reachable_rows(encoding: Encoding, state_limit: int = STATE_LIMIT) -> np.ndarray | None:
    """Every reachable state as a row of its scalar components (bools as 0/1), or None when the
    search does not finish within ``state_limit`` states."""
    machine = encoding.machine
    search = ExplicitSearch(CompiledSystem(machine), limits=Limits(max_states=state_limit))
    result = search.run()
    if result.stopped is not None or len(search.states) >= state_limit:
        return None
    sorts = [variable.sort for variable in machine.variables.values()]
    rows: np.ndarray | None = None
    for number, state in enumerate(search.states):  # one row at a time: no list of every state's ints
        row = [
            int(scalar)
            for sort, value in zip(sorts, state, strict=True)
            for scalar in flatten(sort, lift_value(value, sort))
        ]
        if rows is None:
            rows = np.empty((len(search.states), len(row)), dtype=np.int64)
        rows[number] = row
    return np.empty((0, 0), dtype=np.int64) if rows is None else rows


def mine(rows: np.ndarray, booleans: list[bool]) -> list[Fact]:
    """The candidate facts of the rows (see the module doc); ``booleans[i]``: component i is a bool."""
    facts: list[Fact] = []
    observed = [np.unique(rows[:, column]) for column in range(rows.shape[1])]
    for column, values in enumerate(observed):
        if booleans[column] and len(values) == 2:
            continue
        if len(values) <= VALUE_LIMIT:
            facts.append(Fact("values", column, values=tuple(int(value) for value in values)))
        else:
            facts.append(Fact("range", column, values=(int(values[0]), int(values[-1]))))
    varying = [column for column, values in enumerate(observed) if len(values) > 1]
    groups: dict[tuple[bool, bytes], list[int]] = {}
    for column in varying:
        groups.setdefault((booleans[column], rows[:, column].tobytes()), []).append(column)
    for members in groups.values():
        facts.extend(Fact("equal", left, right) for left, right in zip(members, members[1:]))
    atoms = [
        (column, int(value)) for column in varying if len(observed[column]) <= ATOM_LIMIT for value in observed[column]
    ]
    if atoms:
        truth = np.stack([rows[:, column] == value for column, value in atoms], axis=1).astype(np.float32)
        together = truth.T @ truth  # states where both atoms hold (exact: counts stay below 2**24)
        alone = truth.sum(axis=0)
        for left, (column, value) in enumerate(atoms):
            for right in np.nonzero(together[left] == alone[left])[0]:
                other, target = atoms[int(right)]
                if other != column:
                    facts.append(Fact("implies", column, other, (value, target)))
    return facts


def formulas(encoding: Encoding, facts: list[Fact]) -> dict[str, z3.BoolRef]:
    """Label -> formula over the named state, in the reading in force."""
    terms = components(encoding, named_state(encoding))

    def atom(column: int, value: int) -> z3.BoolRef:
        term = terms[column]
        if z3.is_bool(term):
            return term if value else z3.Not(term)
        return term == integer_value(value)

    found: dict[str, z3.BoolRef] = {}
    for fact in facts:
        first = terms[fact.first]
        if fact.kind == "values":
            formula = z3.Or(*[atom(fact.first, value) for value in fact.values])
            label = f"mined: {first} in {set(fact.values)}"
        elif fact.kind == "range":
            low, high = fact.values
            bounds = [integer_value(low) <= first, first <= integer_value(high)]
            formula, label = z3.And(*bounds), f"mined: {low} <= {first} <= {high}"
        elif fact.kind == "equal":
            formula, label = first == terms[fact.second], f"mined: {first} == {terms[fact.second]}"
        else:
            value, target = fact.values
            formula = z3.Implies(atom(fact.first, value), atom(fact.second, target))
            label = f"mined: {first} == {value} -> {terms[fact.second]} == {target}"
        found[label] = formula
    return found


def component_kinds(encoding: Encoding) -> list[bool]:
    """Per scalar component, whether it is a bool."""
    return [z3.is_bool(term) for term in components(encoding, named_state(encoding))]


def inductive_subset(
    encoding: Encoding, candidates: dict[str, z3.BoolRef], *, query_timeout: float = 60.0, deadline: float | None = None
) -> dict[str, z3.BoolRef] | None:
    """The largest inductive subset of ``candidates`` (Houdini), asking once per round whether any
    candidate breaks and dropping every one the model breaks; a query the solver cannot decide
    hands the rest to ``houdini.inductive_subset`` (one query per candidate, unknown drops it).
    None when ``deadline`` passes first: no subset is known to be inductive then."""
    found = _houdini(encoding, candidates, query_timeout, deadline)
    if deadline is not None and time.monotonic() > deadline:
        return None
    return found


def _houdini(
    encoding: Encoding, candidates: dict[str, z3.BoolRef], query_timeout: float, deadline: float | None
) -> dict[str, z3.BoolRef]:
    initial, step, pairs_before, pairs_after = queries(encoding, "mined")
    alive = dict(candidates)
    first = {label: z3.substitute(formula, *pairs_before) for label, formula in alive.items()}
    decided: bool | None = True
    while alive and decided:  # initiation: no initial state breaks a candidate
        decided = _drop_broken(initial, first, alive, deadline, query_timeout)
    if decided is False:
        return one_by_one(encoding, alive, deadline=deadline)
    following = {label: z3.substitute(formula, *pairs_after) for label, formula in alive.items()}
    while alive:  # consecution: no step from a state satisfying them all breaks one
        step.push()
        step.add(*[first[label] for label in alive])
        decided = _drop_broken(step, following, alive, deadline, query_timeout)
        step.pop()
        if decided is None:
            return alive
        if not decided:
            return one_by_one(encoding, alive, deadline=deadline)
    return alive


def _drop_broken(
    solver: z3.Solver,
    readings: dict[str, z3.BoolRef],
    alive: dict[str, z3.BoolRef],
    deadline: float | None,
    query_timeout: float,
) -> bool | None:
    """One round: drop from ``alive`` every candidate that a model of ``solver`` falsifies (read
    through ``readings``). None: no candidate can be broken (unsat); True: some were dropped;
    False: undecided (unknown, past the deadline, or a model that breaks none)."""
    if deadline is not None and time.monotonic() > deadline:
        return False
    solver.push()
    solver.add(z3.Or(*[z3.Not(readings[label]) for label in alive]))
    answer, model = ask(solver, cpu=query_timeout)
    solver.pop()
    if answer == z3.unsat:
        return None
    if model is None:
        return False
    broken = [label for label in alive if z3.is_false(model.eval(readings[label], model_completion=True))]
    for label in broken:
        del alive[label]
    return bool(broken)
