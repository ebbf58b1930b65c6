"""Property-directed reachability (IC3/PDR): ABC's ``pdr`` and Z3's Spacer, run as a portfolio with BMC.

Each safety property becomes a system of constrained Horn clauses over one relation
``reachable(state)``, built from the same encoding as BMC and k-induction (``Encoding``): the
initial states are reachable; for each grounded transition, a reachable state in the sort domains
whose guard holds and whose updates stay in their sorts reaches its successor; and no reachable
state is ``bad`` (an ``always`` property's violation, deadlock condition included; ``in_bounds``:
an enabled step leaves its sort; a ``sometimes`` property's predicate, to prove it has no witness).
Integers are mathematical integers here (Spacer's strength is linear arithmetic), so no width can
wrap.

The portfolio: BMC first, to ``depth`` steps within ``bmc_seconds`` of CPU (shallow violations
and witnesses, shortest as with BFS). With ``beside`` (``check``'s pdr engine) BMC then keeps
going, deeper, in a process of its own (``background``) while the provers run here, until every
property is settled or it has had the CPU time the provers were given (``bmc_seconds`` plus
``property_timeout`` for each property still open); a path it finds settles its property before
the next prover attempt (a deep violation no prover finds: docs/performance.md). Then Houdini
(``houdini``) keeps the largest inductive subset of
the model's own invariants (its ``always`` properties and strengthening invariants; with ``mine``,
also the candidates ``mining`` finds in the explicit engine's reachable states): the open
properties among them are proved at once, and the subset is assumed by every later query. Every
property still open goes to the provers, in stages (``STAGES``) that share its time limit: ABC's
``pdr`` on the circuit of the model (``circuit``: the second translation, bit-level, through the
``yosys-abc`` binary of the ``pyosys`` wheel, ``abc``) and Spacer on Horn clauses. Without
``pyosys`` the ABC stage is skipped with a warning and Spacer has the time. Every limit is CPU
time (``budget``: ``RLIMIT_CPU`` for ABC, a watchdog for Z3), so a loaded machine gives each
prover the same work, only later; a command's ``--timeout`` (``timeout``) is wall time and stops
everything. pdr is a prover: a property it neither proves nor refutes is ``inconclusive``, its
detail saying how many steps BMC checked it for (``no violation within 17 steps (BMC)``) and what
each prover answered; bounded checking is ``--engine bmc --depth K``. No answer is
believed before lockstep checks it:

- ABC's "proved" comes with its invariant (blocked cubes over the latches), read back into the
  model's variables (``Circuit.invariant``) and re-checked by ``invariants.verify`` exactly as
  Spacer's; a proof without an invariant, or one the re-check rejects, proves nothing. ABC's
  circuit assumes Houdini's lemmas and the earlier ABC proofs (``strengthening``), and the
  re-checked invariant is ABC's conjoined with all of them. A ``sometimes`` property's witness is
  first looked for with ABC's ``bmc3``.
- ABC's counterexample is decoded to grounded transitions and re-run through ``evaluate``
  (stutter steps dropped, the violation confirmed as BMC confirms its own); one that does not
  replay goes to BMC, unrolled until the violation shows, as Spacer's "reachable" does.

Spacer's answers:

- "safe" comes with the interpretation of ``reachable``, an inductive invariant. It is translated
  back to the model's variables (``invariants.certificate``) and re-checked with a fresh solver on
  the selector encoding BMC uses (``invariants.verify``: initiation, consecution, safety). Only then
  is the property proved (``holds``; a ``sometimes`` property ``violated``: no reachable state
  satisfies it); a failed re-check leaves it inconclusive and says why.
- "reachable" sends the property back to BMC, unrolled until the violation (or witness) shows,
  so the counterexample is decoded to actions and re-run through ``evaluate`` as BMC's always are.

Invariants already proved are assumed in later queries (they hold in every reachable state), which
often makes the next proof easier; the certificate of the later property is then its own invariant
conjoined with the ones it assumed, and it is that conjunction which is re-checked.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import z3

from lockstep.checkers.result import CheckResult, Path, PropertyResult, Statistics, Verdict
from lockstep.checkers.symbolic import abc
from lockstep.checkers.symbolic.background import BackgroundBmc
from lockstep.checkers.symbolic.bmc import BoundedModelChecker, TranslationBug, checked_within
from lockstep.checkers.symbolic.budget import cpu_seconds, z3_cpu_limit
from lockstep.checkers.symbolic.circuit import Circuit, CircuitError
from lockstep.checkers.symbolic.encoding import Encoding, flatten
from lockstep.checkers.symbolic.houdini import candidates, inductive_subset
from lockstep.checkers.symbolic.invariants import (
    Certificate,
    bad,
    certificate,
    components,
    conjuncts,
    free_constants,
    named_state,
    verify,
    without_domain,
)
from lockstep.checkers.symbolic.mining import STATE_LIMIT, Fact, component_kinds, mine, reachable_rows
from lockstep.checkers.symbolic.mining import formulas as mined_formulas
from lockstep.checkers.symbolic.mining import inductive_subset as mined_subset
from lockstep.checkers.symbolic.solving import milliseconds
from lockstep.checkers.symbolic.spot_checks import check_encoding
from lockstep.checkers.symbolic.strengthening import Strengthening
from lockstep.checkers.symbolic.values import Symbolic, bit_vectors, conjoin, known_scalar, negate, to_z3
from lockstep.spec.machine import IN_BOUNDS, NO_DEADLOCK, WELL_DEFINED, Machine, PropertyKind
from lockstep.spec.semantics import ModelError

Progress = Callable[[Statistics], None]


@dataclass
class Attempt:
    """What the provers did for one property: the last answer, seconds, and the checked certificate."""

    answer: str  # "safe", "reachable", "unknown"
    seconds: float  # CPU seconds
    certificate: Certificate | None = None
    rejected: str | None = None  # why the re-check refused a prover's invariant
    prover: str = ""  # which prover's answer settled it ("ABC pdr", "Spacer", "Houdini")
    abc_seconds: float = 0.0  # CPU seconds of ABC's pdr on it (circuit, run and re-check)
    abc_answer: str = ""  # ABC's answer when it settled nothing ("unknown: ..."), for the detail
    spacer_answer: str = ""  # Spacer's, likewise


# Spacer's readings of the integers, tried in turn, each stage giving every open property this
# fraction of its time limit; later stages assume the invariants that earlier ones proved in the
# same reading. "integers": mathematical integers (linear arithmetic). "bits": bit-vectors of the
# encoding's sound width, bit-blasted (``xform.bit_blast``); with z3 4.x/5.x Spacer answers fast
# there but its invariants are often not inductive (on a shipped model: an invariant that fails
# its own transition clauses), so lockstep's re-check rejects them; not used by default.
# "abc": ABC's pdr on the circuit (skipped when ``yosys-abc`` is not installed). The order is by
# measurement (README, ``bench/symbolic.py --pdr``): ABC proves in seconds what Spacer proves in
# tens of seconds or not at all, and Spacer keeps a share for what ABC leaves open.
STAGES: tuple[tuple[str, float], ...] = (("abc", 0.5), ("integers", 0.2), ("integers", 0.3))


class PropertyDirectedReachability:
    def __init__(
        self,
        machine: Machine,
        *,
        depth: int = 10,
        bmc_seconds: float = 10.0,
        property_timeout: float = 60.0,
        timeout: float | None = None,
        max_depth: int = 200,
        only: frozenset[int] | None = None,
        assume_proved: bool = True,
        stages: tuple[tuple[str, float], ...] = STAGES,
        houdini: bool = True,
        mine: bool = False,
        progress: Progress | None = None,
        beside: bool = False,
    ) -> None:
        self.encoding = Encoding(machine)
        self.machine = self.encoding.machine
        self.depth = depth
        self.bmc_seconds = bmc_seconds  # CPU seconds of the first BMC phase
        self.property_timeout = property_timeout  # CPU seconds of the provers per property
        self.timeout = timeout  # wall seconds of the whole run (a command's --timeout)
        self.max_depth = max_depth
        self.only = frozenset(range(len(self.machine.properties))) if only is None else only
        self.assume_proved = assume_proved
        self.stages = stages
        self.use_houdini = houdini
        self.mine = mine  # Houdini also filters candidates mined from the explicit state space
        self.beside = beside  # BMC keeps running in its own process beside the provers (``background``)
        self.mined: tuple[int, int] | None = None  # (candidates mined, kept by Houdini)
        self.progress = progress
        self.attempts: dict[str, Attempt] = {}  # per property Spacer was asked about
        self.bmc_depth = 0  # the depth BMC checked fully
        self.bmc_steps: dict[int, int] = {}  # per property: the steps BMC checked it for
        self.bmc_cpu_seconds = 0.0  # CPU seconds BMC used (the first phase, or the process beside)
        self.width = self.encoding.integer_width()
        self._lemmas: dict[str, list[z3.BoolRef]] = {"bits": [], "integers": []}
        self._certificates: dict[int, Certificate] = {}
        self._deadline: float | None = None
        self.houdini_seconds = 0.0
        self.abc_program = abc.binary()
        self.circuit: Circuit | None = None
        self.strengthening = Strengthening(self.encoding)
        self.circuit_seconds = 0.0
        self.warnings: list[str] = []
        self._reference = BoundedModelChecker(self.machine, 0, spot_check=False)  # replays counterexamples

    def _reading(self, mode: str) -> int | None:
        """The bit-vector width of a reading (None: mathematical integers)."""
        return self.width if mode == "bits" else None

    def run(self) -> CheckResult:
        started = time.monotonic()
        self._deadline = None if self.timeout is None else started + self.timeout
        machine = self.machine
        background = BackgroundBmc(machine, self.only, self.max_depth, self._deadline) if self.beside else None
        results: dict[str, PropertyResult] = {}
        pending: list[int] = []
        stopped: str | None = None
        warnings: list[str] = []
        try:
            if background is not None:
                background.start()
                background.wait(
                    lambda progress: progress.depth >= self.depth or len(progress.decided) == len(self.only),
                    cpu=self.bmc_seconds,
                    deadline=self._deadline,
                )
                decided = self._from_background(background)
            else:
                decided, warnings = self._first_bmc_phase()
            for position in sorted(self.only):
                prop = machine.properties[position]
                found = decided.get(position)
                results[prop.name] = found or PropertyResult(
                    prop.name, prop.kind, Verdict.INCONCLUSIVE, None, "", prop.builtin
                )
                if found is None and prop.kind is not PropertyKind.LEADS_TO:
                    pending.append(position)
            stopped = self._prove_pending(pending, results, background, started)
            if background is not None and pending and stopped is None:
                # the provers are done: BMC has the CPU time they were given, beside them or after
                budget = self.bmc_seconds + self.property_timeout * len(pending)
                background.wait(
                    lambda progress: all(position in progress.decided for position in pending),
                    cpu=budget,
                    deadline=self._deadline,
                )
                self._settle(background, results, pending)
        except KeyboardInterrupt:
            stopped = "interrupted"
        finally:
            if background is not None:
                background.stop()
                self._from_background(background)
        if stopped is None and self._deadline is not None and time.monotonic() >= self._deadline and pending:
            stopped = "timeout"
        if stopped != "interrupted":  # a proof has no path to replay: the translator is checked instead
            check_encoding(self.encoding, [proof.formula for proof in self._certificates.values()])
        pending += [position for position in sorted(self.only) if machine.properties[position].name not in results]
        for position in pending:  # a prover proves; what BMC covered is said, never given as a verdict
            prop = machine.properties[position]
            results[prop.name] = PropertyResult(
                prop.name, prop.kind, Verdict.INCONCLUSIVE, None, self._open_detail(position, stopped), prop.builtin
            )
        stats = Statistics(None, None, self.bmc_depth, time.monotonic() - started)
        if self.mined is not None:
            for name in results:
                kept, seconds = f"{self.mined[1]} of {self.mined[0]}", self.houdini_seconds
                results[name].detail += f" (Houdini kept {kept} mined candidate invariants, {seconds:.0f} s)"
        ordered = [results[prop.name] for position, prop in enumerate(machine.properties) if position in self.only]
        return CheckResult(machine, "pdr", ordered, stats, stopped, [*warnings, *self.warnings])

    def _first_bmc_phase(self) -> tuple[dict[int, PropertyResult], list[str]]:
        """BMC to ``depth`` in this process, within ``bmc_seconds`` of CPU: the properties a path
        decided, and its warnings."""
        bounded = BoundedModelChecker(
            self.machine,
            self.depth,
            timeout=self._wall_left(),
            cpu_timeout=self.bmc_seconds,
            only=self.only,
            spot_check=False,
        )
        before = cpu_seconds()
        first = bounded.run()
        self.bmc_cpu_seconds = cpu_seconds() - before
        self.bmc_depth = first.stats.depth
        self.bmc_steps = {
            position: steps for position in self.only if (steps := bounded.steps_checked(position)) is not None
        }
        decided = {position: found for position in self.only if (found := bounded.decided(position)) is not None}
        return decided, first.warnings

    def _from_background(self, background: BackgroundBmc) -> dict[int, PropertyResult]:
        """What BMC beside the provers has shown: its depth and steps per property (kept), and the
        properties its paths decided."""
        progress = background.update()
        self.bmc_depth = max(0, progress.depth)
        self.bmc_steps = dict(progress.checked)
        self.bmc_cpu_seconds = background.cpu()
        return dict(progress.decided)

    def _settle(self, background: BackgroundBmc, results: dict[str, PropertyResult], pending: list[int]) -> None:
        """Take the violations and witnesses BMC found meanwhile: those properties are settled. A
        path for a property a prover proved means that a proof was wrong: a translator bug."""
        for position, found in self._from_background(background).items():
            prop = self.machine.properties[position]
            if position in pending:
                results[prop.name] = found
                pending.remove(position)
            elif position in self._certificates:
                raise TranslationBug(
                    f"{prop.name} was proved by an invariant that lockstep re-checked, yet BMC found a path that "
                    f"replays through evaluate ({found.verdict.value}, {found.path.length if found.path else 0} "
                    "steps): the encoding does not match the model"
                )

    def _wall_left(self) -> float | None:
        """Wall seconds left before the run's deadline (None: no deadline)."""
        return None if self._deadline is None else self._deadline - time.monotonic()

    def _prove_pending(
        self,
        pending: list[int],
        results: dict[str, PropertyResult],
        background: BackgroundBmc | None,
        started: float,
    ) -> str | None:
        """Houdini, then each prover stage on every property still pending (``pending`` shrinks as
        they are settled); why the run stopped short, or None."""
        machine = self.machine
        clauses: dict[str, _Clauses] = {}
        with bit_vectors(None):
            for position in self._houdini(pending, started) if self.use_houdini else []:
                results[machine.properties[position].name] = self._proved(
                    position, "integers", "Houdini over the model's own invariants"
                )
                self.attempts[machine.properties[position].name].prover = "Houdini"
                pending.remove(position)
        for mode, fraction in self.stages:
            for position in list(pending):
                if background is not None:
                    self._settle(background, results, pending)
                    if position not in pending:
                        continue
                left = self._wall_left()
                if left is not None and left <= 0:
                    return "timeout"
                prop = machine.properties[position]
                limit = self.property_timeout * fraction  # CPU seconds
                if mode == "abc":
                    outcome = self._prove_abc(position, limit)
                else:
                    with bit_vectors(self._reading(mode)):
                        if mode not in clauses:
                            clauses[mode] = _Clauses(self.encoding, bit_blast=mode == "bits")
                        outcome = self._prove(position, clauses[mode], mode, limit)
                if outcome is not None:
                    results[prop.name] = outcome
                    pending.remove(position)
                if self.progress is not None:
                    self.progress(Statistics(None, None, self.bmc_depth, time.monotonic() - started))
        if background is not None:
            self._settle(background, results, pending)
        return None

    def _open_detail(self, position: int, stopped: str | None) -> str:
        """Why a property is inconclusive: how far BMC checked it, and what each prover answered."""
        prop = self.machine.properties[position]
        steps = self.bmc_steps.get(position)
        parts = [] if steps is None else [f"{checked_within(prop, steps)} (BMC)"]
        attempt = self.attempts.get(prop.name)
        if attempt is not None:
            parts += [note for note in (attempt.abc_answer, attempt.spacer_answer, attempt.rejected) if note]
        if stopped is not None:
            parts.append(f"stopped ({stopped})")
        return "; ".join(parts) if parts else "no prover settled it"

    def _abc_circuit(self) -> Circuit | None:
        """The circuit ABC reads under the current lemmas, or None with a warning saying why ABC is not used."""
        if self.abc_program is None:
            self._warn(f"{abc.NOT_INSTALLED}: the provers are Houdini and Spacer alone")
            return None
        started = time.monotonic()
        try:
            self.circuit = self.strengthening.circuit()
        except CircuitError as error:
            self._warn(f"ABC's pdr is not used: the model has no circuit ({error})")
            self.abc_program = None
            return None
        self.circuit_seconds += time.monotonic() - started
        return self.circuit

    def _warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)

    def _prove_abc(self, position: int, limit: float) -> PropertyResult | None:
        """The property's result if ABC's pdr settled it within ``limit`` CPU seconds and lockstep's
        re-check agrees (None: open); a ``sometimes`` property's witness is first looked for with
        ABC's bmc3."""
        circuit = self._abc_circuit()
        if circuit is None or self.abc_program is None:
            return None
        prop = self.machine.properties[position]
        started = cpu_seconds()
        attempt = self.attempts.setdefault(prop.name, Attempt("unknown", 0.0))
        if prop.kind is PropertyKind.SOMETIMES:  # a deep witness: ABC's bmc3 first, with half the time
            found = abc.prove(
                self.abc_program, circuit.aiger(position), limit / 2, engine="bmc3", wall=self._wall_left()
            )
            limit -= found.seconds
            if found.answer == "unsafe":
                attempt.answer = "reachable"
                witness = self._abc_counterexample(position, circuit, found.frames, limit, "bmc3")
                attempt.abc_seconds += cpu_seconds() - started
                attempt.seconds += cpu_seconds() - started
                return witness
        outcome = self.strengthening.prove(self.abc_program, position, limit, wall=self._wall_left())
        answer = outcome.answer
        result: PropertyResult | None = None
        if answer.answer == "safe":
            attempt.answer = "safe"
            if outcome.invariant is not None:
                with bit_vectors(None):
                    self._certificates[position] = certificate(self.encoding, outcome.invariant)
                    if self.assume_proved:
                        self._lemmas["integers"] = [*self._lemmas["integers"], *conjuncts(outcome.invariant)]
                        self.strengthening.learn(prop.name, outcome)
                attempt.prover = "ABC pdr"
                assumed = len(self.strengthening.lemmas) - (1 if self.assume_proved else 0)
                how = "PDR, ABC's pdr on the circuit" + (f" assuming {assumed} proved lemmas" if assumed else "")
                result = self._proved(position, "integers", how)
            else:
                attempt.rejected = f"ABC's invariant was rejected: {outcome.rejected}"
        elif answer.answer == "unsafe":
            attempt.answer = "reachable"
            result = self._abc_counterexample(position, circuit, answer.frames, limit)
        else:
            attempt.abc_answer = f"ABC's pdr answered unknown ({answer.reason})"
        attempt.abc_seconds += cpu_seconds() - started
        attempt.seconds += cpu_seconds() - started
        return result

    def _abc_counterexample(
        self, position: int, circuit: Circuit, frames: list[str], limit: float, engine: str = "pdr"
    ) -> PropertyResult:
        """ABC's counterexample as actions, re-run through ``evaluate``; BMC if it does not replay."""
        prop = self.machine.properties[position]
        reference = self._reference
        system = reference.reference
        state = system.initial()
        steps = []
        for grounded in circuit.decode_path(frames):
            try:
                transitions = system.transitions(state)
            except ModelError:  # the circuit steps on where evaluate cannot: a path of more steps than the model's
                return self._counterexample(position, limit)
            for transition in transitions:
                if (transition.action, transition.arguments) == (grounded.action, grounded.arguments):
                    if transition.out_of_bounds is None:
                        steps.append(reference._step(grounded, transition.target))
                        state = transition.target
                    break
        path = Path(system.initial(), tuple(steps))
        kind = "invariant"
        detail = ""
        if prop.name == IN_BOUNDS:
            kind = "bounds"
        elif prop.name == WELL_DEFINED:
            kind = "undefined"
        elif prop.kind is PropertyKind.SOMETIMES:
            kind = "witness"
        elif prop.name == NO_DEADLOCK:
            kind, detail = "deadlock", "no action is enabled"
        try:
            if kind == "bounds":
                path, detail = reference._bounds_step(path)
            detail = reference._confirm(position, path, kind) or detail
        except TranslationBug:
            return self._counterexample(position, limit)
        verdict = Verdict.HOLDS if prop.kind is PropertyKind.SOMETIMES else Verdict.VIOLATED
        found = "witness" if prop.kind is PropertyKind.SOMETIMES else "counterexample"
        note = f"ABC's {engine} {found}, replayed through evaluate"
        return PropertyResult(
            prop.name, prop.kind, verdict, path, f"{detail}; {note}" if detail else note, prop.builtin
        )

    def _houdini(self, pending: list[int], started: float) -> list[int]:
        """The pending properties the model's own invariants prove together (``houdini``); their
        inductive conjunction becomes the first lemmas of the integer reading."""
        self.houdini_seconds = time.monotonic()
        deadline = None if self.timeout is None else started + self.timeout
        facts: list[Fact] = []
        if self.mine:
            rows = reachable_rows(self.encoding)
            if rows is None:
                self._warn(f"--mine-invariants: more than {STATE_LIMIT:,} reachable states, nothing mined")
            else:
                facts = mine(rows, component_kinds(self.encoding))
        own = candidates(self.encoding, frozenset(pending))
        found: dict[str, z3.BoolRef] | None = None
        if facts:  # the mined candidates' Houdini gets at most one property's time limit
            mined = mined_formulas(self.encoding, facts)
            limit = time.monotonic() + self.property_timeout
            found = mined_subset(
                self.encoding, {**own, **mined}, deadline=limit if deadline is None else min(limit, deadline)
            )
            if found is None:
                self._warn(f"--mine-invariants: Houdini did not finish over {len(mined):,} mined candidates in time")
                facts = []
            else:
                self.mined = (len(mined), len([label for label in found if label in mined]))
        survivors = inductive_subset(self.encoding, own, deadline=deadline) if found is None else found
        self.houdini_seconds = time.monotonic() - self.houdini_seconds
        if not survivors:
            return []
        whole = without_domain(self.encoding, z3.And(*survivors.values()))
        proved = []
        for position in pending:
            if self.machine.properties[position].name in survivors and verify(self.encoding, position, whole) is None:
                proved.append(position)
                self._certificates[position] = certificate(self.encoding, whole)
        if self.assume_proved:
            self._lemmas["integers"] = conjuncts(whole)
            with bit_vectors(self.width):
                bits = {**candidates(self.encoding, frozenset(pending)), **mined_formulas(self.encoding, facts)}
            for label, formula in survivors.items():
                self.strengthening.assume_predicate(f"Houdini: {label}", formula, bits[label])
        return proved

    def _proved(self, position: int, mode: str, how: str) -> PropertyResult:
        prop = self.machine.properties[position]
        proof = self._certificates[position]
        self.attempts.setdefault(prop.name, Attempt("safe", 0.0)).certificate = proof
        if prop.kind is PropertyKind.SOMETIMES:
            detail = f"no reachable state satisfies it (proved by {how})"
            return PropertyResult(
                prop.name, prop.kind, Verdict.VIOLATED, None, detail, prop.builtin, proof.text, proof.summary
            )
        return PropertyResult(
            prop.name, prop.kind, Verdict.HOLDS, None, f"proved by {how}", prop.builtin, proof.text, proof.summary
        )

    def _prove(self, position: int, clauses: _Clauses, mode: str, limit: float) -> PropertyResult | None:
        """The property's result if Spacer settled it in this reading within ``limit`` CPU seconds
        (None: still open)."""
        prop = self.machine.properties[position]
        started = cpu_seconds()
        lemmas = self._lemmas[mode]
        answer, invariant = clauses.solve(position, lemmas, limit, wall=self._wall_left())
        attempt = self.attempts.setdefault(prop.name, Attempt("unknown", 0.0))
        attempt.answer = answer
        result: PropertyResult | None = None
        if answer == "safe" and invariant is not None:
            whole = z3.And(invariant, *lemmas) if lemmas else invariant
            whole = without_domain(self.encoding, whole)
            rejected = verify(self.encoding, position, whole, timeout=max(limit, 10.0))
            if rejected is None:
                self._certificates[position] = certificate(self.encoding, whole)
                if self.assume_proved:
                    self._lemmas[mode] = conjuncts(whole)
                attempt.prover = "Spacer"
                result = self._proved(position, mode, f"PDR, Spacer over {mode}")
            else:
                attempt.rejected = f"Spacer's invariant ({mode}) was rejected: {rejected}"
        elif answer == "reachable":
            result = self._counterexample(position, limit)
        else:
            attempt.spacer_answer = "Spacer answered unknown"
        attempt.seconds += cpu_seconds() - started
        return result

    def _counterexample(self, position: int, limit: float) -> PropertyResult:
        """BMC, unrolled until the violation (or witness) a prover reports shows, within ``limit``
        CPU seconds (at least 10); its path is decoded and re-run through ``evaluate`` as every BMC
        counterexample is."""
        prop = self.machine.properties[position]
        budget = max(limit, 10.0)
        deep = BoundedModelChecker(
            self.machine,
            self.max_depth,
            timeout=self._wall_left(),
            cpu_timeout=budget,
            only=frozenset({position}),
            spot_check=False,
        ).run()
        item = deep.properties[0]
        if item.path is not None:
            return item
        return PropertyResult(
            prop.name,
            prop.kind,
            Verdict.INCONCLUSIVE,
            None,
            f"a prover reports it reachable; BMC found no path within {deep.stats.depth} steps "
            f"in {budget:.0f} s of CPU",
            prop.builtin,
        )


class _Clauses:
    """The Horn clauses of one machine: shared initial and transition parts, one query per property."""

    def __init__(self, encoding: Encoding, *, bit_blast: bool) -> None:
        self.encoding = encoding
        self.bit_blast = bit_blast
        self.state = named_state(encoding)
        self.current = components(encoding, self.state)
        following = encoding.state("next")
        self.following = components(encoding, following)
        self.relation = z3.Function("reachable", *[term.sort() for term in self.current], z3.BoolSort())
        domain = to_z3(encoding.domain(self.state))
        self.initial = z3.And(domain, to_z3(encoding.initial(self.state)))
        self.steps: list[z3.BoolRef] = []  # per grounded transition: its body without ``reachable``
        for guard, updates, out_of_bounds in encoding.steps(self.state):
            if guard is False:
                continue
            after: list[Symbolic] = []
            for name, sort in encoding.sorts.items():
                after.extend(flatten(sort, updates.get(name, self.state[name])))
            equalities = [target == to_z3(value) for target, value in zip(self.following, after, strict=True)]
            self.steps.append(
                z3.And(
                    domain,
                    to_z3(conjoin([guard, negate(out_of_bounds)])),
                    to_z3(encoding.domain(following)),
                    *equalities,
                )
            )

    def solve(
        self, position: int, lemmas: list[z3.BoolRef], limit: float, wall: float | None = None
    ) -> tuple[str, z3.BoolRef | None]:
        """Spacer's answer for property ``position`` within ``limit`` CPU seconds (and ``wall``
        seconds, where given) and, when safe, the invariant (over the named state)."""
        relation, current = self.relation, self.relation(*self.current)
        violation = bad(self.encoding, position, self.state)
        if known_scalar(violation) is False:  # no state is bad (a built-in with nothing to check): True proves it
            return "safe", z3.BoolVal(True)
        solver = z3.SolverFor("HORN")
        if wall is not None:
            solver.set("timeout", milliseconds(max(wall, 0.001)))
        if self.bit_blast:
            solver.set("xform.bit_blast", True)
        assumed = z3.And(*lemmas) if lemmas else z3.BoolVal(True)
        rules = [(self.initial, current)]
        rules += [(z3.And(current, assumed, step), relation(*self.following)) for step in self.steps]
        # (no domain here: every reachable state is in it already, and with it Spacer's bit-blasted
        # invariants come back existentially quantified over bits)
        rules.append((z3.And(current, assumed, to_z3(violation)), z3.BoolVal(False)))
        for body, head in rules:
            quantified = free_constants([body, head])
            rule = z3.Implies(body, head)
            solver.add(z3.ForAll(quantified, rule) if quantified else rule)
        with z3_cpu_limit(limit):
            answer = solver.check()
        if answer == z3.unsat:
            return "reachable", None
        if answer != z3.sat:
            return "unknown", None
        invariant = solver.model().eval(current)
        return "safe", invariant
