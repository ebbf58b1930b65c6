"""Houdini: the largest inductive subset of candidate invariants, found before Spacer is asked.

The candidates are the machine's own state predicates: every ``always`` property (as the encoding
reads it, deadlock conditions and ``in_bounds`` included) and the strengthening invariants a model
declares for k-induction. A candidate that some initial state violates is dropped; then, while
some candidate can be broken by one step from a state in the domains satisfying all that remain,
it is dropped too. What survives is inductive as a whole (a query the solver cannot decide drops
its candidate, so an unknown answer never survives). Properties among the survivors are proved at
once, and the survivors are assumed by Spacer's queries for the others.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import z3

from lockstep.checkers.symbolic.encoding import Encoding
from lockstep.checkers.symbolic.invariants import components, named_state
from lockstep.checkers.symbolic.solving import ask
from lockstep.checkers.symbolic.values import integer_constant, to_z3
from lockstep.spec.machine import PropertyKind


def candidates(encoding: Encoding, only: frozenset[int]) -> dict[str, z3.BoolRef]:
    """Label -> formula over the named state: the asked ``always`` properties and the strengthening."""
    state = named_state(encoding)
    found: dict[str, z3.BoolRef] = {}
    for position, prop in enumerate(encoding.machine.properties):
        if position in only and prop.kind is PropertyKind.ALWAYS:
            found[prop.name] = to_z3(encoding.holds(position, state))
    for number, expression in enumerate(encoding.machine.strengthening):
        found[f"strengthening#{number}"] = to_z3(encoding.predicate(expression, state))
    return found


class Queries(NamedTuple):
    """The two solvers of a Houdini run and the substitutions that read a named-state formula in them."""

    initial: z3.Solver  # a state in the domains and initial
    step: z3.Solver  # two states in the domains, one transition apart
    before: list[tuple[z3.ExprRef, z3.ExprRef]]  # named state -> the first state
    after: list[tuple[z3.ExprRef, z3.ExprRef]]  # named state -> the second state


def queries(encoding: Encoding, tag: str) -> Queries:
    """Initiation and consecution solvers over fresh state copies named by ``tag`` (each query is
    limited in CPU seconds where it is asked: ``solving.ask``)."""
    named = components(encoding, named_state(encoding))
    before, after = encoding.state(tag), encoding.state(f"{tag}'")
    domain = to_z3(encoding.domain(before))
    initial, step = z3.Solver(), z3.Solver()
    initial.add(domain, to_z3(encoding.initial(before)))
    step.add(domain, to_z3(encoding.domain(after)))
    step.add(*[to_z3(part) for part in encoding.transition(before, after, integer_constant(f"action@{tag}"), tag)])
    return Queries(
        initial,
        step,
        list(zip(named, components(encoding, before), strict=True)),
        list(zip(named, components(encoding, after), strict=True)),
    )


def inductive_subset(
    encoding: Encoding, formulas: dict[str, z3.BoolRef], *, query_timeout: float = 10.0, deadline: float | None = None
) -> dict[str, z3.BoolRef]:
    """The largest subset of ``formulas`` that is inductive as a conjunction (see the module doc)."""
    initial, step, pairs_before, pairs_after = queries(encoding, "houdini")
    alive = dict(formulas)
    for label, formula in list(alive.items()):
        initial.push()
        initial.add(z3.Not(z3.substitute(formula, *pairs_before)))
        if ask(initial, cpu=query_timeout)[0] != z3.unsat:
            del alive[label]
        initial.pop()
    changed = True
    while changed and alive:
        changed = False
        step.push()
        step.add(*[z3.substitute(formula, *pairs_before) for formula in alive.values()])
        for label, formula in list(alive.items()):
            if deadline is not None and time.monotonic() > deadline:
                step.pop()
                return {}
            step.push()
            step.add(z3.Not(z3.substitute(formula, *pairs_after)))
            answer, _ = ask(step, cpu=query_timeout)
            step.pop()
            if answer != z3.unsat:  # not inductive relative to these, so relative to no subset either
                del alive[label]
                changed = True
        step.pop()
    return alive
