"""Bounded model checking: the transition relation unrolled step by step, one incremental solver.

At each depth k (0..K) the engine asks, for every property not yet decided, whether a path of k
steps from the initial state violates it (``always``), witnesses it (``sometimes``), ends in a
state where nothing is enabled and the property's deadlock condition fails, or (``in_bounds``)
enables a step whose update leaves its sort. Depths are tried in order, so each counterexample is
a shortest one, as with BFS. Every counterexample is decoded and re-run through the concrete
evaluator, which must show the same violation; otherwise ``TranslationBug`` is raised. A query
that times out, or answers ``sat`` with a model that fails its own assertions (a cancelled
search), counts as unknown: its property is inconclusive and nothing is decoded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import z3

from lockstep.checkers.counterexample import first_invalid_step
from lockstep.checkers.result import CheckResult, Path, PropertyResult, Statistics, Step, Verdict, bounds_detail
from lockstep.checkers.symbolic.encoding import Encoding, Grounded
from lockstep.checkers.symbolic.solving import ask, milliseconds
from lockstep.checkers.symbolic.values import (
    Symbolic,
    bit_vectors,
    conjoin,
    disjoin,
    integer_constant,
    integer_of,
    negate,
    to_z3,
)
from lockstep.spec.machine import IN_BOUNDS, NO_DEADLOCK, Machine, PropertyKind
from lockstep.spec.semantics import InterpretedSystem, State


class TranslationBug(RuntimeError):
    """A Z3 counterexample that the concrete evaluator does not reproduce: a translator bug."""


Progress = Callable[[Statistics], None]


@dataclass
class _Outcome:
    verdict: Verdict
    path: Path | None = None
    detail: str = ""


class BoundedModelChecker:
    def __init__(
        self,
        machine: Machine,
        depth: int,
        *,
        solver_timeout: float | None = None,
        progress: Progress | None = None,
        timeout: float | None = None,
        only: frozenset[int] | None = None,
    ) -> None:
        if depth < 0:
            raise ValueError("the BMC depth must be non-negative")
        self.encoding = Encoding(machine)
        self.machine = self.encoding.machine
        self.depth = depth
        self.width = self.encoding.integer_width()
        self.solver = z3.SolverFor("QF_BV")
        self.progress = progress
        self.timeout = timeout  # wall clock of the whole run: stop (inconclusive) once exceeded
        self.only = frozenset(range(len(self.machine.properties))) if only is None else only  # properties asked
        self.solver_timeout = solver_timeout
        self.reference = InterpretedSystem(self.machine)
        self.depth_seconds: list[float] = []  # time spent at each depth (queries + unrolling)

    def run(self) -> CheckResult:
        with bit_vectors(self.width):
            return self._run()

    def _run(self) -> CheckResult:
        started = time.monotonic()
        machine, encoding, solver = self.machine, self.encoding, self.solver
        properties = machine.properties
        outcomes: dict[int, _Outcome] = {}
        unknown: set[int] = set()
        states = [encoding.state(0)]
        selectors: list[z3.ExprRef] = []
        solver.add(to_z3(encoding.domain(states[0])), to_z3(encoding.initial(states[0])))
        reached = -1  # the deepest depth whose queries all answered
        stopped = None
        try:
            for depth in range(self.depth + 1):
                depth_started = time.monotonic()
                if self.timeout is not None and depth_started - started >= self.timeout:
                    stopped = "timeout"
                    break
                current = states[depth]
                steps = encoding.steps(current)
                enabled = encoding.enabled(steps)
                for position, prop in enumerate(properties):
                    if position in outcomes or position not in self.only:
                        continue
                    goal, kind = self._goal(position, current, steps, enabled)
                    if goal is None or (prop.name == IN_BOUNDS and depth == self.depth):
                        continue
                    if not self._limit_query(started):
                        stopped = "timeout"
                        break
                    solver.push()
                    solver.add(to_z3(goal))
                    answer, model = ask(solver)
                    path = self._path(model, states, selectors, depth) if model is not None else None
                    solver.pop()
                    if path is not None:
                        detail = "no action is enabled" if kind == "deadlock" else ""
                        if kind == "bounds":
                            path, detail = self._bounds_step(path)
                        self._confirm(position, path, kind)
                        verdict = Verdict.HOLDS if prop.kind is PropertyKind.SOMETIMES else Verdict.VIOLATED
                        outcomes[position] = _Outcome(verdict, path, detail)
                        continue
                    if answer == z3.unknown:
                        if self.timeout is not None and time.monotonic() - started >= self.timeout:
                            stopped = "timeout"
                            break
                        unknown.add(position)
                if stopped is not None:
                    break
                reached = depth  # every query at this depth answered
                if len(outcomes) == len(self.only) or depth == self.depth:
                    self.depth_seconds.append(time.monotonic() - depth_started)
                    break
                following = encoding.state(depth + 1)
                selector = integer_constant(f"action@{depth}")
                solver.add(to_z3(encoding.domain(following)))
                solver.add(
                    *[to_z3(constraint) for constraint in encoding.transition(current, following, selector, depth)]
                )
                states.append(following)
                selectors.append(selector)
                self.depth_seconds.append(time.monotonic() - depth_started)
                if self.progress is not None:
                    self.progress(Statistics(None, None, depth + 1, time.monotonic() - started))
        except KeyboardInterrupt:
            stopped = "interrupted"
        results = []
        for position, prop in enumerate(properties):
            if position not in self.only:
                continue
            outcome = outcomes.get(position)
            if outcome is None:
                if position in unknown or stopped is not None:
                    outcome = _Outcome(
                        Verdict.INCONCLUSIVE, None, "the solver answered unknown" if position in unknown else ""
                    )
                elif prop.kind is PropertyKind.SOMETIMES:
                    outcome = _Outcome(Verdict.INCONCLUSIVE, None, f"no witness within {self.depth} steps")
                else:
                    outcome = _Outcome(Verdict.HOLDS_WITHIN_BOUND, None, f"no violation within {self.depth} steps")
            results.append(
                PropertyResult(prop.name, prop.kind, outcome.verdict, outcome.path, outcome.detail, prop.builtin)
            )
        stats = Statistics(None, None, max(reached, 0) if stopped else self.depth, time.monotonic() - started)
        return CheckResult(machine, "bmc", results, stats, stopped, [])

    def _limit_query(self, started: float) -> bool:
        """Each query gets the per-query limit, or what is left of the run's wall clock if less;
        False (ask nothing) once the run's wall clock is spent."""
        limits = []
        if self.solver_timeout is not None:
            limits.append(self.solver_timeout)
        if self.timeout is not None:
            left = self.timeout - (time.monotonic() - started)
            if left <= 0:
                return False
            limits.append(left)
        if limits:
            self.solver.set("timeout", milliseconds(min(limits)))
        return True

    def _goal(
        self,
        position: int,
        state: dict[str, Symbolic],
        steps: list,  # type: ignore[type-arg]
        enabled: Symbolic,
    ) -> tuple[Symbolic | None, str]:
        prop = self.machine.properties[position]
        encoding = self.encoding
        if prop.name == IN_BOUNDS:
            return disjoin([conjoin([guard, out]) for guard, _, out in steps]), "bounds"
        if prop.kind is PropertyKind.SOMETIMES:
            return encoding.predicate(prop.predicate, state), "witness"
        goals: list[Symbolic] = [negate(encoding.predicate(prop.predicate, state))]
        kinds = "invariant"
        if prop.name == NO_DEADLOCK:
            goals = [conjoin([negate(enabled), negate(encoding.predicate(self.machine.final, state))])]
            kinds = "deadlock"
        elif prop.at_deadlock is not None:
            goals.append(conjoin([negate(enabled), negate(encoding.predicate(prop.at_deadlock, state))]))
        return disjoin(goals), kinds

    def _path(
        self, model: z3.ModelRef, states: list[dict[str, Symbolic]], selectors: list[z3.ExprRef], depth: int
    ) -> Path:
        decoded = [self.encoding.decode_state(states[step], model) for step in range(depth + 1)]
        steps = []
        for step in range(depth):
            grounded = self.encoding.grounded[integer_of(model.eval(selectors[step], model_completion=True))]
            steps.append(self._step(grounded, decoded[step + 1]))
        return Path(decoded[0], tuple(steps))

    def _step(self, grounded: Grounded, target: State) -> Step:
        action = self.machine.actions[grounded.action]
        arguments = {
            parameter.name: value for parameter, value in zip(action.parameters, grounded.arguments, strict=True)
        }
        return Step(action.name, action.actor_for(arguments), arguments, target)

    def _bounds_step(self, path: Path) -> tuple[Path, str]:
        """Extend a path by the enabled step whose update leaves its sort (found concretely)."""
        for transition in self.reference.transitions(path.final_state):
            if transition.out_of_bounds is not None:
                grounded = Grounded(transition.action, transition.arguments)
                extended = Path(path.initial, (*path.steps, self._step(grounded, transition.target)))
                return extended, bounds_detail(self.machine, transition.out_of_bounds, transition.target)
        raise TranslationBug("Z3 found an out-of-sort update that the concrete evaluator does not take")

    def _confirm(self, position: int, path: Path, kind: str) -> None:
        """Re-run the path through the concrete evaluator; it must show the same outcome."""
        reference, machine = self.reference, self.machine
        invalid = first_invalid_step(reference, path, ends_out_of_bounds=kind == "bounds")
        if invalid == 0:
            raise TranslationBug(
                f"Z3's initial state differs from the machine's: {path.initial} vs {reference.initial()}"
            )
        if invalid is not None:
            step = path.steps[invalid - 1]
            raise TranslationBug(
                f"step {invalid} ({step.action}{step.arguments}) of the Z3 counterexample is not a step of the model"
            )
        current = path.final_state  # (for "bounds" the replay above already checked the last step)
        prop = machine.properties[position]
        if kind == "invariant":
            holds = reference.holds(position, current)
            deadlocked = not reference.transitions(current)
            fails_at_deadlock = deadlocked and not reference.holds_at_deadlock(position, current)
            if holds and not fails_at_deadlock:
                raise TranslationBug(f"{prop.name}: Z3's counterexample state satisfies it concretely")
        elif kind == "witness" and not reference.holds(position, current):
            raise TranslationBug(f"{prop.name}: Z3's witness state does not satisfy it concretely")
        elif kind == "deadlock" and (reference.transitions(current) or reference.is_final(current)):
            raise TranslationBug(f"{prop.name}: Z3's deadlock state is not a deadlock concretely")
