"""Certificates from the explicit engines: an exhaustive run's reachable set as a Z3-checked invariant.

For one instance, "proved for every depth" and "checked exhaustively" assert the same thing; a
certificate adds a second trust base and something to check: the reachable set the explicit
engine enumerated (``bfs`` over the compiled successors), written as a formula over the named
state (``diagram``), is an inductive invariant of the *encoding*, the other translation of the
model, which every Z3 engine uses. Z3 re-checks it (``invariants.verify_inductive``: initiation and
consecution, once) and then, for every safety property the search found holding (a ``sometimes``
property: without a witness), that no state of the set is bad (``verify_safe``). So each such
property is proved by a checked certificate, and the two translations are cross-checked on every
reachable state: a set that is not inductive under the encoding, or a state of it the encoding
calls bad, means they disagree (``TranslationBug``, an internal error naming which check failed),
never a verdict. About ``SPOT_CHECKED`` of the set's states also get the translator's spot check
(``spot_checks``: an action the encoding lacks keeps the set inductive, but not the successors
equal). A property the search found violated keeps its counterexample; leads-to properties keep
the search's verdict.

The diagram: every scalar component (``flatten``'s order) that is constant on the set becomes an
equality; the others are the levels of a reduced decision diagram, one node per distinct
(level, outgoing edges), edges to the same child merged into one value set, shared subgraphs
shared (Z3 terms are hash-consed, so the formula is as large as the diagram).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import z3

from lockstep.checkers.explicit.search import ExplicitSearch, Progress
from lockstep.checkers.limits import Limits
from lockstep.checkers.result import CheckResult, PropertyResult, Statistics, Verdict
from lockstep.checkers.symbolic.bmc import TranslationBug
from lockstep.checkers.symbolic.encoding import Encoding, flatten
from lockstep.checkers.symbolic.invariants import components, named_state, verify_inductive, verify_safe
from lockstep.checkers.symbolic.spot_checks import check_states
from lockstep.checkers.symbolic.values import bit_vectors, lift_value
from lockstep.spec.compiler import CompiledSystem
from lockstep.spec.machine import Machine, PropertyKind
from lockstep.spec.semantics import State

SPOT_CHECKED = 150  # about this many of the certificate's states get the translator's spot check
Edges = tuple[tuple[tuple[int, ...], int], ...]  # (the values leading to a child, the child's node)


@dataclass(frozen=True)
class Diagram:
    """A set of states as a formula over the named state (integer reading), and its size."""

    formula: z3.BoolRef
    states: int
    nodes: int  # decision-diagram nodes (the terminal not counted)
    constant: int  # components constant on the set (equalities)
    levels: int  # components that vary (the diagram's levels)


def diagram(encoding: Encoding, states: list[State]) -> Diagram:
    """``states`` (packed, as the explicit engine keeps them) as a formula (see the module doc)."""
    rows = sorted(
        {
            tuple(
                int(component)
                for (name, sort), value in zip(encoding.sorts.items(), state, strict=True)
                for component in flatten(sort, lift_value(value, sort))
            )
            for state in states
        }
    )
    with bit_vectors(None):
        terms = components(encoding, named_state(encoding))
    varying = [column for column in range(len(terms)) if len({row[column] for row in rows}) > 1]
    constant = [column for column in range(len(terms)) if column not in set(varying)]
    table = _reduced([tuple(row[column] for column in varying) for row in rows])
    built: list[z3.BoolRef] = [z3.BoolVal(True)]  # node 0: the terminal
    for level, edges in table:
        term = terms[varying[level]]
        built.append(_disjunction([z3.And(_member(term, values), built[child]) for values, child in edges]))
    equalities = [_member(terms[column], (rows[0][column],)) for column in constant]
    formula = z3.And(*equalities, built[-1]) if rows else z3.BoolVal(False)
    return Diagram(formula, len(rows), len(table), len(constant), len(varying))


def _reduced(rows: list[tuple[int, ...]]) -> list[tuple[int, Edges]]:
    """The nodes of the reduced decision diagram of ``rows`` (sorted, distinct, of equal length),
    children before parents, the root last; node ``k`` of the list is number ``k + 1``."""
    if not rows:
        return []
    width = len(rows[0])
    first_difference = [0] + [
        next(column for column in range(width) if rows[index][column] != rows[index - 1][column])
        for index in range(1, len(rows))
    ]
    unique: dict[tuple[int, Edges], int] = {}
    child = [0] * len(rows)
    for level in range(width - 1, -1, -1):
        following = list(child)
        start = 0
        while start < len(rows):
            end = start + 1
            while end < len(rows) and first_difference[end] >= level:
                end += 1
            by_child: dict[int, set[int]] = {}
            for index in range(start, end):
                by_child.setdefault(child[index], set()).add(rows[index][level])
            edges = tuple(sorted((tuple(sorted(values)), target) for target, values in by_child.items()))
            node = unique.setdefault((level, edges), len(unique) + 1)
            for index in range(start, end):
                following[index] = node
            start = end
        child = following
    return list(unique)


def _member(term: z3.ExprRef, values: tuple[int, ...]) -> z3.BoolRef:
    if z3.is_bool(term):
        return term if values == (1,) else z3.Not(term) if values == (0,) else z3.BoolVal(True)
    return _disjunction([term == value for value in values])


def _disjunction(parts: list[z3.BoolRef]) -> z3.BoolRef:
    return parts[0] if len(parts) == 1 else z3.Or(*parts)


def certify(
    machine: Machine,
    *,
    only: frozenset[int] | None = None,
    limits: Limits | None = None,
    progress: Progress | None = None,
    timeout: float | None = None,
) -> CheckResult:
    """The explicit engine's exhaustive run of ``machine``, its reachable set re-checked by Z3 as an
    inductive invariant proving each safety property found holding (see the module doc); ``timeout``:
    CPU seconds per Z3 query (None: no limit)."""
    started = time.monotonic()
    machine = machine.finish()
    search = ExplicitSearch(CompiledSystem(machine), order="bfs", limits=limits, progress=progress, watched=only)
    explicit = search.run()
    holding = [item for item in explicit.properties if _holding(item)]
    bounded = any(item.verdict is Verdict.HOLDS_WITHIN_BOUND for item in explicit.properties)
    if not holding or explicit.stopped is not None or bounded:  # (with nothing holding, the search may stop early)
        if holding or bounded:
            explicit.warnings.append("the explicit run did not finish: no certificate")
        return CheckResult(machine, "certify", explicit.properties, explicit.stats, explicit.stopped, explicit.warnings)
    encoding = Encoding(machine)
    found = diagram(encoding, search.states)
    size = (
        f"the reachable set of the exhaustive bfs run, {found.states:,} states: {found.constant} components "
        f"constant, a decision diagram of {found.nodes:,} nodes over the other {found.levels}"
    )
    positions = {prop.name: position for position, prop in enumerate(machine.properties)}
    with bit_vectors(None):
        broken = verify_inductive(encoding, found.formula, timeout)
        if broken is not None:
            raise TranslationBug(f"{size} is not inductive under the encoding ({broken}): the translations disagree")
        for item in holding:
            unsafe = verify_safe(encoding, positions[item.name], found.formula, timeout)
            if unsafe is not None:
                raise TranslationBug(
                    f"{item.name}: {size} holds it for the explicit engine, but Z3 on the encoding finds {unsafe}: "
                    "the translations disagree"
                )
            item.detail = f"proved by a certificate: {size}, re-checked by Z3 on the encoding"
    every = max(1, len(search.states) // SPOT_CHECKED)
    check_states(encoding, search.states[::every], where="the certificate's")
    stats = Statistics(
        explicit.stats.states, explicit.stats.transitions, explicit.stats.depth, time.monotonic() - started
    )
    return CheckResult(machine, "certify", explicit.properties, stats, None, explicit.warnings)


def _holding(item: PropertyResult) -> bool:
    """A safety property the complete search found holding (a ``sometimes`` one: with no witness)."""
    if item.kind is PropertyKind.ALWAYS:
        return item.verdict is Verdict.HOLDS
    return item.kind is PropertyKind.SOMETIMES and item.verdict is Verdict.VIOLATED
