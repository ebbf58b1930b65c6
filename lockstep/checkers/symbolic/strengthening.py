"""ABC's ``pdr`` relative to invariants already known: what the circuit assumes, and the re-check.

An invariant that holds in every reachable state may be assumed when proving another property
(issue 13's lever 1). ``Strengthening`` keeps the lemmas the circuit assumes, each in two
readings: its formula over the named state in the integer reading (for Z3's re-check) and, for
the circuit, either the same predicate in the bit-vector reading of the encoding's width (the
model's own predicates: Houdini's survivors) or the blocked cubes of an earlier ABC proof. In the
circuit (``circuit.Assumptions``) a state that violates a lemma is never bad, so ABC need not
exclude it. By default only the bad output is masked and the sort domains are not assumed: gating
the steps too (``stutter``) or assuming the domains made ABC slower (measured in
docs/performance.md).

Soundness does not rest on the lemmas being right: ABC's invariant is conjoined with every lemma
the circuit assumed, and that conjunction is what ``invariants.verify`` re-checks (initiation,
consecution, safety) on the original encoding. A lemma that is not an invariant makes the
initiation or consecution check fail, and the proof is refused. Each new proof (ABC's cubes with
the lemmas it assumed) is itself an inductive invariant and becomes a lemma for the next property.
"""

from __future__ import annotations

from dataclasses import dataclass

import z3

from lockstep.checkers.symbolic import abc
from lockstep.checkers.symbolic.aig import FALSE
from lockstep.checkers.symbolic.budget import cpu_seconds
from lockstep.checkers.symbolic.circuit import Assumptions, Circuit
from lockstep.checkers.symbolic.encoding import Encoding
from lockstep.checkers.symbolic.invariants import verify
from lockstep.checkers.symbolic.values import bit_vectors

Blocked = tuple[tuple[str, ...], tuple[int, ...]]


@dataclass(frozen=True)
class Lemma:
    """An invariant the circuit assumes: ``formula`` (integer reading) for the re-check, and in the
    circuit either ``bits`` (bit-vector reading of the encoding's width) or ``blocked`` cubes."""

    label: str
    formula: z3.BoolRef
    bits: z3.BoolRef | None = None
    blocked: Blocked | None = None


@dataclass
class Outcome:
    """ABC's answer under the lemmas, and for "safe" the re-checked invariant or why it was refused."""

    answer: abc.AbcAnswer
    circuit: Circuit
    invariant: z3.BoolRef | None = None  # ABC's invariant conjoined with every lemma assumed
    rejected: str | None = None
    seconds: float = 0.0  # CPU seconds


class Strengthening:
    """The lemmas ABC's circuit assumes, and proofs under them (see the module doc)."""

    def __init__(self, encoding: Encoding, *, domain: bool = False, stutter: bool = False) -> None:
        self.encoding = encoding
        self.domain = domain
        self.stutter = stutter
        self.lemmas: list[Lemma] = []
        self._circuit: Circuit | None = None

    def assume(self, lemma: Lemma) -> None:
        if lemma.bits is None and lemma.blocked is None:
            raise ValueError(f"lemma {lemma.label} has no reading the circuit can assume")
        self.lemmas.append(lemma)
        self._circuit = None

    def assume_predicate(self, label: str, formula: z3.BoolRef, bits: z3.BoolRef) -> None:
        """A predicate of the model (integer and bit-vector readings of the same expression)."""
        self.assume(Lemma(label, formula, bits=bits))

    def circuit(self) -> Circuit:
        """The circuit under the current lemmas (rebuilt after a lemma is added)."""
        if self._circuit is None:
            assumptions = Assumptions(
                domain=self.domain,
                stutter=self.stutter,
                formulas=tuple(lemma.bits for lemma in self.lemmas if lemma.bits is not None),
                blocked=tuple(lemma.blocked for lemma in self.lemmas if lemma.blocked is not None),
            )
            self._circuit = Circuit(self.encoding, assumptions)
        return self._circuit

    def assumed(self) -> list[z3.BoolRef]:
        """The integer-reading formulas of every lemma assumed."""
        return [lemma.formula for lemma in self.lemmas]

    def prove(
        self, program: str, position: int, limit: float, *, check_timeout: float = 10.0, wall: float | None = None
    ) -> Outcome:
        """ABC's ``pdr`` on property ``position`` under the lemmas, within ``limit`` CPU seconds (and
        ``wall`` seconds, where given); a "safe" answer's invariant, conjoined with the lemmas, is
        re-checked (``check_timeout`` CPU seconds at least) before it is returned (``rejected`` says
        why not)."""
        started = cpu_seconds()
        circuit = self.circuit()
        aiger = circuit.aiger(position)
        if circuit.aig.outputs == [FALSE]:  # the lemmas exclude every bad state: they are the invariant
            answer = abc.AbcAnswer("safe", 0.0)
        else:
            answer = abc.prove(program, aiger, limit, wall=wall)
        outcome = Outcome(answer, circuit)
        if answer.answer == "safe":
            with bit_vectors(None):
                found = circuit.invariant(answer.cubes, answer.columns)
                whole = z3.And(found, *self.assumed()) if self.lemmas else found
                rejected = verify(self.encoding, position, whole, timeout=max(limit, check_timeout))
            if rejected is None:
                outcome.invariant = whole
            else:
                outcome.rejected = rejected
        outcome.seconds = cpu_seconds() - started
        return outcome

    def learn(self, label: str, outcome: Outcome) -> None:
        """Assume a re-checked proof from now on: its cubes and the lemmas it assumed (already kept)."""
        if outcome.invariant is None:
            raise ValueError(f"{label}: only a re-checked invariant may be assumed")
        answer = outcome.answer
        with bit_vectors(None):
            found = outcome.circuit.invariant(answer.cubes, answer.columns)
        self.assume(Lemma(label, found, blocked=(tuple(answer.cubes), tuple(answer.columns))))
