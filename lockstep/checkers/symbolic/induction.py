"""k-induction for ``always`` properties, on the same encoding as BMC.

For a property Q (its predicate, and its deadlock condition where it has one; ``in_bounds``:
"no enabled step leaves its sort"), k-induction proves Q in every reachable state when
(base) no path of fewer than k steps from the initial state violates Q, and (step) any k+1
consecutive states, linked by transitions, in which Q holds in the first k, satisfy Q in the
last. Strengthening invariants a model declares (``machine.strengthen(...)``) are assumed in the
first k states and must hold in the last as well, so they are proved together with Q. Without a
fixed k, k rises from 1 to ``max_k``. A step that fails at the last k is shown as its k+1 states
and the actions between them; the verdict is then inconclusive, never holds.
"""

from __future__ import annotations

import time

import z3

from lockstep.checkers.result import CheckResult, Path, PropertyResult, Statistics, Step, Verdict
from lockstep.checkers.symbolic.bmc import BoundedModelChecker
from lockstep.checkers.symbolic.encoding import Encoding
from lockstep.checkers.symbolic.solving import ask, milliseconds
from lockstep.checkers.symbolic.values import (
    Symbolic,
    bit_vectors,
    conjoin,
    integer_constant,
    integer_of,
    negate,
    to_z3,
)
from lockstep.spec.expressions import Expression
from lockstep.spec.machine import IN_BOUNDS, Machine, PropertyKind


class Induction:
    def __init__(
        self,
        machine: Machine,
        *,
        k: int | None = None,
        max_k: int = 10,
        solver_timeout: float | None = None,
        only: frozenset[int] | None = None,
    ) -> None:
        self.encoding = Encoding(machine)
        self.machine = self.encoding.machine
        self.fixed_k = k
        self.max_k = k if k is not None else max_k
        self.solver_timeout = solver_timeout
        self.only = only
        self.width = self.encoding.integer_width()
        self.strengthening: list[Expression] = list(self.machine.strengthening)
        self.base_seconds = 0.0  # time of the base case (BMC to max_k - 1 steps)
        self.step_seconds: dict[str, float] = {}  # time of the induction steps, per property

    def _solver(self) -> z3.Solver:
        solver = z3.SolverFor("QF_BV")
        if self.solver_timeout is not None:
            solver.set("timeout", milliseconds(self.solver_timeout))
        return solver

    def _holds(self, position: int, state: dict[str, Symbolic]) -> Symbolic:
        """The state predicate induction proves for property ``position`` (with the strengthening
        invariants, except for ``in_bounds``)."""
        holds = self.encoding.holds(position, state)
        if self.machine.properties[position].name == IN_BOUNDS:
            return holds
        return conjoin([holds, *(self.encoding.predicate(expression, state) for expression in self.strengthening)])

    def run(self) -> CheckResult:
        with bit_vectors(self.width):
            return self._run()

    def _run(self) -> CheckResult:
        started = time.monotonic()
        machine = self.machine
        # Base: BMC up to max_k - 1 steps gives every violation shorter than any k tried.
        base = BoundedModelChecker(
            machine, max(self.max_k - 1, 0), solver_timeout=self.solver_timeout, only=self.only
        ).run()
        base_results = {item.name: item for item in base.properties}
        broken = self._strengthening_fails()
        self.base_seconds = time.monotonic() - started
        results: list[PropertyResult] = []
        deepest = 0
        for position, prop in enumerate(machine.properties):
            if prop.name not in base_results:
                continue
            base_result = base_results[prop.name]
            if prop.kind is not PropertyKind.ALWAYS or base_result.verdict is not Verdict.HOLDS_WITHIN_BOUND:
                results.append(base_result)
                continue
            property_started = time.monotonic()
            ks = [self.fixed_k] if self.fixed_k is not None else list(range(1, self.max_k + 1))
            outcome = PropertyResult(prop.name, prop.kind, Verdict.INCONCLUSIVE, None, "", prop.builtin)
            for k in ks:
                deepest = max(deepest, k)
                answer, path = self._step(position, k)
                if answer == z3.unsat and broken is not None:
                    outcome = PropertyResult(prop.name, prop.kind, Verdict.INCONCLUSIVE, None, broken, prop.builtin)
                    break
                if answer == z3.unsat:
                    outcome = PropertyResult(
                        prop.name, prop.kind, Verdict.HOLDS, None, f"proved by {k}-induction", prop.builtin
                    )
                    break
                if answer == z3.unknown:
                    outcome = PropertyResult(
                        prop.name,
                        prop.kind,
                        Verdict.INCONCLUSIVE,
                        None,
                        f"the solver answered unknown at k={k}",
                        prop.builtin,
                    )
                    break
                outcome = PropertyResult(
                    prop.name,
                    prop.kind,
                    Verdict.INCONCLUSIVE,
                    path,
                    f"the induction step fails at k={k} (not necessarily reachable)",
                    prop.builtin,
                )
            results.append(outcome)
            self.step_seconds[prop.name] = time.monotonic() - property_started
        stats = Statistics(None, None, deepest, time.monotonic() - started)
        return CheckResult(machine, "induction", results, stats, None, [])

    def _strengthening_fails(self) -> str | None:
        """The base case of the strengthening invariants: they must hold on every path shorter than
        the largest k from the initial state (else a proof that assumed them proves nothing)."""
        if not self.strengthening:
            return None
        encoding, solver = self.encoding, self._solver()
        state = encoding.state("s0")
        solver.add(to_z3(encoding.domain(state)), to_z3(encoding.initial(state)))
        for depth in range(self.max_k):
            holds = conjoin([encoding.predicate(expression, state) for expression in self.strengthening])
            solver.push()
            solver.add(to_z3(negate(holds)))
            answer, _ = ask(solver)
            solver.pop()
            if answer != z3.unsat:
                return (
                    f"a strengthening invariant fails (or is unknown) on a path of {depth} steps from the initial state"
                )
            following = encoding.state(f"s{depth + 1}")
            solver.add(to_z3(encoding.domain(following)))
            solver.add(
                *[
                    to_z3(part)
                    for part in encoding.transition(state, following, integer_constant(f"action@s{depth}"), f"s{depth}")
                ]
            )
            state = following
        return None

    def _step(self, position: int, k: int) -> tuple[z3.CheckSatResult, Path | None]:
        encoding = self.encoding
        solver = self._solver()
        states = [encoding.state(f"i{index}") for index in range(k + 1)]
        selectors = [integer_constant(f"action@i{index}") for index in range(k)]
        for index, state in enumerate(states):
            solver.add(to_z3(encoding.domain(state)))
            holds = self._holds(position, state)
            solver.add(to_z3(holds) if index < k else to_z3(negate(holds)))
            if index < k:
                solver.add(
                    *[
                        to_z3(part)
                        for part in encoding.transition(state, states[index + 1], selectors[index], f"i{index}")
                    ]
                )
        answer, model = ask(solver)
        if model is None:
            return answer, None
        decoded = [encoding.decode_state(state, model) for state in states]
        steps = []
        for index in range(k):
            grounded = encoding.grounded[integer_of(model.eval(selectors[index], model_completion=True))]
            action = self.machine.actions[grounded.action]
            arguments = {
                parameter.name: value for parameter, value in zip(action.parameters, grounded.arguments, strict=True)
            }
            steps.append(Step(action.name, action.actor_for(arguments), arguments, decoded[index + 1]))
        return answer, Path(decoded[0], tuple(steps))
