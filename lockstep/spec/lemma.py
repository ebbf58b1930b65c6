"""Lemmas for all sizes: facts over lists of any length, stated once as a fold in the IR.

A lemma walks a list of any length: accumulators start at their initial values and are updated
by ``step`` for each element; ``conclusion`` must hold at the end for every list of at least
``minimum_size`` elements. ``invariant`` is the strengthening a proof by induction on the
length needs (it must hold after every prefix). Accumulators and the length are unbounded
integers or Booleans, which is the IR extension lemmas need: ``evaluate`` runs a lemma on
concrete lists (``holds_for``), and the Z3 engine proves base, step and conclusion as
separate queries (``lockstep.checkers.symbolic.lemmas``). A lemma expected to be ``refuted``
is a deliberate counter-lemma: a concrete list must break it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from lockstep.spec.evaluation import Environment, evaluate
from lockstep.spec.expressions import Expression, Parameter, Variable
from lockstep.spec.sorts import BOOL, INTEGER, BoolSort, IntSort, Sort, Value
from lockstep.spec.terms import DefinitionError, Term, lift

ELEMENT, INDEX, SIZE = "element", "index", "size"
OUTCOMES = ("proved", "refuted")


@dataclass(frozen=True)
class Lemma:
    name: str
    statement: str
    expected: str  # "proved" or "refuted"
    element: Sort
    minimum_size: int
    initial: Mapping[str, Value]
    sorts: Mapping[str, Sort]
    updates: Mapping[str, Expression]  # over accumulators (Variables), element and index (Parameters)
    invariant: Expression  # over accumulators and index
    conclusion: Expression  # over accumulators and size

    def holds_for(self, values: tuple[Value, ...]) -> bool:
        """The conclusion on one concrete list (the invariant is checked after every prefix too)."""
        state = dict(self.initial)
        for index, value in enumerate(values):
            if not evaluate(self.invariant, Environment(state, {INDEX: index})):
                raise DefinitionError(f"lemma {self.name}: the strengthening fails after {values[:index]}")
            bindings = {ELEMENT: value, INDEX: index}
            state = {
                name: evaluate(expression, Environment(state, bindings)) for name, expression in self.updates.items()
            }
        if not evaluate(self.invariant, Environment(state, {INDEX: len(values)})):
            raise DefinitionError(f"lemma {self.name}: the strengthening fails after {values}")
        return bool(evaluate(self.conclusion, Environment(state, {SIZE: len(values)})))

    def lists(self, largest: int) -> Iterator[tuple[Value, ...]]:
        """Every list of ``minimum_size`` to ``largest`` elements."""
        elements = list(self.element.values())
        for size in range(self.minimum_size, largest + 1):
            yield from itertools.product(elements, repeat=size)

    def concrete_counterexample(self, largest: int = 6) -> tuple[Value, ...] | None:
        return next((values for values in self.lists(largest) if not self.holds_for(values)), None)


def lemma(
    name: str,
    statement: str,
    *,
    expected: str,
    element: Sort,
    accumulators: Mapping[str, tuple[Sort, Value]],
    step: Callable[[dict[str, Term], Term, Term], Mapping[str, Term | bool | int]],
    invariant: Callable[[dict[str, Term], Term], Term | bool],
    conclusion: Callable[[dict[str, Term], Term], Term | bool],
    minimum_size: int = 0,
) -> Lemma:
    """Define a lemma; accumulators are unbounded integers or Booleans: ``{"total": (INTEGER, 0)}``."""
    if expected not in OUTCOMES:
        raise DefinitionError(f"lemma {name}: expected must be one of {OUTCOMES}, got {expected!r}")
    for accumulator, (sort, _) in accumulators.items():
        if not isinstance(sort, (BoolSort, IntSort)):
            raise DefinitionError(f"lemma {name}: accumulator {accumulator!r} must be Bool or an integer sort")
    terms = {accumulator: Term(Variable(accumulator, sort)) for accumulator, (sort, _) in accumulators.items()}
    element_term = Term(Parameter(ELEMENT, element))
    index_term, size_term = Term(Parameter(INDEX, INTEGER)), Term(Parameter(SIZE, INTEGER))
    updated = step(dict(terms), element_term, index_term)
    missing = set(accumulators) - set(updated)
    if missing:
        raise DefinitionError(f"lemma {name}: step must give every accumulator a new value; missing {sorted(missing)}")
    updates = {
        accumulator: lift(value, accumulators[accumulator][0]).expression for accumulator, value in updated.items()
    }
    invariant_term, conclusion_term = lift(invariant(dict(terms), index_term)), lift(conclusion(dict(terms), size_term))
    for label, term in (("invariant", invariant_term), ("conclusion", conclusion_term)):
        if term.sort != BOOL:
            raise DefinitionError(f"lemma {name}: the {label} must be Bool, not {term.sort.name}")
    return Lemma(
        name,
        statement,
        expected,
        element,
        minimum_size,
        {accumulator: value for accumulator, (_, value) in accumulators.items()},
        {accumulator: sort for accumulator, (sort, _) in accumulators.items()},
        updates,
        invariant_term.expression,
        conclusion_term.expression,
    )


@dataclass(frozen=True)
class IntegerLemma:
    """A lemma over unbounded integer parameters: ``domain ⇒ conclusion`` for every assignment.

    For facts that are not folds over a list (an arithmetic identity over two sizes, say). The Z3
    engine proves it directly (one query: the domain with the conclusion negated); ``holds_for``
    runs it on concrete values with ``evaluate``."""

    name: str
    statement: str
    expected: str  # "proved" or "refuted"
    parameters: tuple[str, ...]
    domain: Expression  # over the parameters
    conclusion: Expression  # over the parameters

    def holds_for(self, values: tuple[Value, ...]) -> bool:
        """The lemma at one assignment (true outside the domain)."""
        environment = Environment({}, dict(zip(self.parameters, values)))
        return not evaluate(self.domain, environment) or bool(evaluate(self.conclusion, environment))

    def cases(self, largest: int) -> Iterator[tuple[Value, ...]]:
        """Every assignment of values in ``[-largest, largest]`` inside the domain."""
        for values in itertools.product(range(-largest, largest + 1), repeat=len(self.parameters)):
            if evaluate(self.domain, Environment({}, dict(zip(self.parameters, values)))):
                yield values

    def concrete_counterexample(self, largest: int = 6) -> tuple[Value, ...] | None:
        return next((values for values in self.cases(largest) if not self.holds_for(values)), None)


def integer_lemma(
    name: str,
    statement: str,
    *,
    expected: str,
    parameters: tuple[str, ...],
    domain: Callable[..., Term | bool],
    conclusion: Callable[..., Term | bool],
) -> IntegerLemma:
    """Define a lemma over unbounded integers; ``domain`` and ``conclusion`` take one Term per
    parameter, by name: ``integer_lemma(..., parameters=("a", "b"), domain=lambda a, b: a <= b, ...)``."""
    if expected not in OUTCOMES:
        raise DefinitionError(f"lemma {name}: expected must be one of {OUTCOMES}, got {expected!r}")
    if not parameters or len(set(parameters)) != len(parameters):
        raise DefinitionError(f"lemma {name}: parameters must be distinct names, got {parameters}")
    terms = {parameter: Term(Parameter(parameter, INTEGER)) for parameter in parameters}
    domain_term, conclusion_term = lift(domain(**terms)), lift(conclusion(**terms))
    for label, term in (("domain", domain_term), ("conclusion", conclusion_term)):
        if term.sort != BOOL:
            raise DefinitionError(f"lemma {name}: the {label} must be Bool, not {term.sort.name}")
    return IntegerLemma(
        name, statement, expected, tuple(parameters), domain_term.expression, conclusion_term.expression
    )


AnyLemma = Lemma | IntegerLemma
