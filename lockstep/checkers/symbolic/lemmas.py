"""Proving lemmas for all sizes with Z3: base, step and conclusion as separate queries.

For a fold lemma (``lockstep.spec.lemma``) over lists of any length: the base query asks whether
the strengthening can fail on the empty prefix, the step query whether it can fail after one more
element when it held before, and the conclusion query whether the conclusion can fail at a size
of at least ``minimum_size`` where the strengthening holds. All unsat: **proved**. A lemma whose
query is sat is **refuted** only if a concrete list breaks it (searched with ``evaluate`` up to
``search_size`` elements); otherwise the strengthening is too weak: **unproved**. A timeout or an
unknown answer is **unknown**. Integers here are mathematical integers, not bit-vectors.
A lemma over unbounded integer parameters (``IntegerLemma``) is one query: its domain with the
conclusion negated; a concrete counterexample is searched among values up to ``search_size``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import z3

from lockstep.checkers.symbolic.encoding import in_sort
from lockstep.checkers.symbolic.solving import ask, milliseconds
from lockstep.checkers.symbolic.translate import Translator
from lockstep.checkers.symbolic.values import bit_vectors, conjoin, declare, lift_value, negate, to_z3
from lockstep.spec.lemma import ELEMENT, INDEX, SIZE, AnyLemma, IntegerLemma, Lemma
from lockstep.spec.sorts import Value


@dataclass(frozen=True)
class LemmaOutcome:
    lemma: AnyLemma
    outcome: str  # proved, refuted, unproved, unknown
    seconds: float
    detail: str = ""
    counterexample: tuple[Value, ...] | None = None

    @property
    def as_expected(self) -> bool:
        return self.outcome == self.lemma.expected


def prove(lemma: AnyLemma, *, solver_timeout: float | None = 30.0, search_size: int = 6) -> LemmaOutcome:
    started = time.monotonic()
    with bit_vectors(None):
        queries = _integer_queries(lemma) if isinstance(lemma, IntegerLemma) else _queries(lemma)
        answers = {name: _ask(query, solver_timeout) for name, query in queries.items()}
    seconds = time.monotonic() - started
    if all(answer == z3.unsat for answer in answers.values()):
        proof = (
            "the conclusion query is unsat"
            if isinstance(lemma, IntegerLemma)
            else "base, step and conclusion queries are unsat"
        )
        return LemmaOutcome(lemma, "proved", seconds, proof)
    failing = ", ".join(name for name, answer in answers.items() if answer != z3.unsat)
    counterexample = lemma.concrete_counterexample(search_size)
    seconds = time.monotonic() - started
    if counterexample is not None:
        return LemmaOutcome(
            lemma,
            "refuted",
            seconds,
            f"{failing} query sat; a concrete {'case' if isinstance(lemma, IntegerLemma) else 'list'} breaks it",
            counterexample,
        )
    if any(answer == z3.unknown for answer in answers.values()):
        return LemmaOutcome(lemma, "unknown", seconds, f"the solver answered unknown on: {failing}")
    searched = (
        f"values up to {search_size}" if isinstance(lemma, IntegerLemma) else f"list of up to {search_size} elements"
    )
    return LemmaOutcome(lemma, "unproved", seconds, f"{failing} query sat but no {searched} breaks it")


def _ask(query: z3.BoolRef, solver_timeout: float | None) -> z3.CheckSatResult:
    solver = z3.Solver()
    if solver_timeout is not None:
        solver.set("timeout", milliseconds(solver_timeout))
    solver.add(query)
    return ask(solver)[0]


def _queries(lemma: Lemma) -> dict[str, z3.BoolRef]:
    before = {name: declare(sort, f"{name}") for name, sort in lemma.sorts.items()}
    element = declare(lemma.element, ELEMENT)
    index, size = z3.Int(INDEX), z3.Int(SIZE)
    initial = {name: lift_value(value, lemma.sorts[name]) for name, value in lemma.initial.items()}

    def invariant(state: dict[str, object], at: object) -> object:
        return Translator(state, {INDEX: at}).translate(lemma.invariant)

    after = {
        name: Translator(before, {ELEMENT: element, INDEX: index}).translate(expression)
        for name, expression in lemma.updates.items()
    }
    conclusion = Translator(before, {SIZE: size}).translate(lemma.conclusion)
    return {
        "base": to_z3(negate(invariant(initial, 0))),
        "step": to_z3(
            conjoin(
                [
                    index >= 0,
                    in_sort(lemma.element, element),
                    invariant(before, index),
                    negate(invariant(after, index + 1)),
                ]
            )
        ),
        "conclusion": to_z3(conjoin([size >= lemma.minimum_size, invariant(before, size), negate(conclusion)])),
    }


def _integer_queries(lemma: IntegerLemma) -> dict[str, z3.BoolRef]:
    values = {name: z3.Int(name) for name in lemma.parameters}
    translator = Translator({}, values)
    return {
        "conclusion": to_z3(
            conjoin([translator.translate(lemma.domain), negate(translator.translate(lemma.conclusion))])
        )
    }
