"""Bounded model checking: the transition relation unrolled step by step, one incremental solver.

At each depth k (0..K) the engine asks whether a path of k steps from the initial state violates a
property not yet decided (``always``), witnesses it (``sometimes``), ends in a state where nothing
is enabled and the property's deadlock condition fails, or (``in_bounds``) enables a step whose
update leaves its sort. The step is encoded once (``unrolling.Template``) and renamed per frame;
one query asks for all of a depth's goals, every goal its model satisfies is decided by that path,
and the rest are asked again until unsat. Depths are tried in order, so each counterexample is a
shortest one, as with BFS. The solver is Z3 (``backends``) or CaDiCaL on the CNF unrolling
(``cnf``). ``reduction`` optionally constrains the order of the steps, keeping every verdict and
shortest length: ``por`` forbids commuting steps out of a canonical order (``reduction``),
``symmetry`` keeps one path per orbit of the declared rank symmetry (``symmetry_breaking``;
skipped, with the reason in ``symmetry_skipped``, where the machine's symmetry does not hold),
``both`` combines them (sound together: both keep the least path of each depth's goal paths).
Every counterexample is decoded and re-run through the concrete evaluator, which must show the
same violation; otherwise ``TranslationBug`` is raised. A bound has no path to replay: after the
run the encoding's successors are compared with the evaluator's on a sample of reachable states
(``spot_checks``), a difference being a ``TranslationBug`` too. A query that times out, or answers ``sat``
with a model that fails its own assertions (a cancelled search), counts as unknown: its property
is inconclusive and nothing is decoded. Every query is logged (``queries``: its depth, the
properties asked, the answer, wall and CPU seconds); from depth ``separate_from`` on each goal is
asked in a query of its own (the same verdicts and lengths, one path per goal), which shows which
property a depth's time goes to.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path as Folder

from lockstep.checkers.counterexample import first_invalid_step
from lockstep.checkers.definedness import undefined_at
from lockstep.checkers.result import CheckResult, Path, PropertyResult, Statistics, Step, Verdict, bounds_detail
from lockstep.checkers.symbolic.analysis_cache import default_cache_directory
from lockstep.checkers.symbolic.backends import Backend, Ordering, Valuation, Z3Backend
from lockstep.checkers.symbolic.budget import cpu_seconds, z3_cpu_limit
from lockstep.checkers.symbolic.encoding import Encoding, Grounded
from lockstep.checkers.symbolic.reduction import Reduction, commuting_pairs
from lockstep.checkers.symbolic.symmetry_breaking import LexLeader, lex_leader
from lockstep.checkers.symbolic.unrolling import Goal, Template
from lockstep.checkers.symbolic.values import bit_vectors
from lockstep.spec.definitions import Property
from lockstep.spec.machine import IN_BOUNDS, Machine, PropertyKind
from lockstep.spec.semantics import InterpretedSystem, ModelError, State


def checked_within(prop: Property, steps: int) -> str:
    """What a bounded check of ``steps`` steps that found nothing says of ``prop``."""
    found = "witness" if prop.kind is PropertyKind.SOMETIMES else "violation"
    return f"no {found} within {steps} step{'' if steps == 1 else 's'}"


class TranslationBug(RuntimeError):
    """A Z3 counterexample that the concrete evaluator does not reproduce: a translator bug."""


Progress = Callable[[Statistics], None]


@dataclass(frozen=True)
class QueryRecord:
    """One solver query: the depth, the properties whose goals it asked, its answer, its seconds."""

    depth: int
    properties: tuple[str, ...]
    answer: str
    seconds: float
    cpu_seconds: float


@dataclass
class _Outcome:
    verdict: Verdict
    path: Path | None = None
    detail: str = ""


SOLVERS = ("z3", "cadical")
REDUCTIONS = ("off", "por", "symmetry", "both")
_USE_CACHE = Folder()  # the default of ``cache_directory``: the user's cache folder


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
        reduction: str | bool = "off",
        solver: str = "z3",
        pack: bool = True,
        cache_directory: Folder | None = _USE_CACHE,
        sat_options: dict[str, int] | None = None,
        separate_from: int | None = None,
        cpu_timeout: float | None = None,
        spot_check: bool = True,
    ) -> None:
        if depth < 0:
            raise ValueError("the BMC depth must be non-negative")
        if solver not in SOLVERS:
            raise ValueError(f"unknown BMC solver {solver!r}; solvers: {', '.join(SOLVERS)}")
        if isinstance(reduction, bool) or reduction == "on":  # the former on/off switch: on is por
            reduction = "por" if reduction in (True, "on") else "off"
        if reduction not in REDUCTIONS:
            raise ValueError(f"unknown BMC reduction {reduction!r}; reductions: {', '.join(REDUCTIONS)}")
        if solver == "cadical" and solver_timeout is not None:
            raise ValueError("CaDiCaL queries cannot be interrupted: a per-query limit needs the z3 solver")
        self.encoding = Encoding(machine)
        self.machine = self.encoding.machine
        self.depth = depth
        self.width = self.encoding.integer_width()
        self.progress = progress
        self.timeout = timeout  # wall clock of the whole run: stop (inconclusive) once exceeded
        self.cpu_timeout = cpu_timeout  # CPU seconds of the whole run (``budget.cpu_seconds``): likewise
        self._cpu_started = 0.0
        self.spot_check = spot_check  # check the encoding against evaluate after the run (``spot_checks``)
        self.only = frozenset(range(len(self.machine.properties))) if only is None else only  # properties asked
        self.solver_timeout = solver_timeout
        self.reference = InterpretedSystem(self.machine)
        self.reduction_mode, self.solver_name, self.pack = reduction, solver, pack
        self.sat_options = sat_options  # CaDiCaL's options; None: cnf.UNSAT_OPTIONS
        self.cache_directory = default_cache_directory() if cache_directory is _USE_CACHE else cache_directory
        self.reduction: Reduction | None = None
        self.symmetry: LexLeader | None = None
        self.symmetry_skipped: str | None = None  # why symmetry breaking was asked for but not used
        self.setup_seconds = 0.0  # translating the template, deciding the commuting pairs
        self.depth_seconds: list[float] = []  # time spent at each depth (queries + unrolling)
        self.separate_from = separate_from  # from this depth on, one query per goal
        self.queries: list[QueryRecord] = []
        self.checked: dict[int, int] = {}  # per property: the deepest depth its goal was unsat at
        self.outcomes: dict[int, _Outcome] = {}  # per property decided so far: its violation or witness
        self.on_depth: Callable[[int], None] | None = None  # called once every query of a depth answered

    def steps_checked(self, position: int) -> int | None:
        """How many steps property ``position`` is known to hold for (no violation or witness on any
        path of at most that many steps): the deepest depth its goal was unsat at, one more for
        ``in_bounds`` (its goal at depth k is a step out of its sort from frame k); None where no
        query for it answered unsat."""
        depth = self.checked.get(position)
        if depth is None:
            return None
        return depth + 1 if self.machine.properties[position].name == IN_BOUNDS else depth

    def decided(self, position: int) -> PropertyResult | None:
        """Property ``position``'s result if a path decided it (a violation, or a ``sometimes``
        property's witness), confirmed by the concrete evaluator; None while it is open."""
        outcome = self.outcomes.get(position)
        if outcome is None:
            return None
        prop = self.machine.properties[position]
        return PropertyResult(prop.name, prop.kind, outcome.verdict, outcome.path, outcome.detail, prop.builtin)

    def run(self) -> CheckResult:
        with bit_vectors(self.width):
            result = self._run()
        if self.spot_check and result.stopped != "interrupted":
            from lockstep.checkers.symbolic.spot_checks import check_encoding  # (it reads TranslationBug here)

            check_encoding(self.encoding)
        return result

    def _backend(self, started: float) -> tuple[Template, Backend]:
        template = Template(self.encoding, pack=self.pack)
        orderings: list[Ordering] = []
        if self.reduction_mode in ("symmetry", "both") and self.depth > 0:
            self.symmetry, self.symmetry_skipped = lex_leader(self.encoding)
            if self.symmetry is not None:
                orderings.append(self.symmetry)
        if self.reduction_mode in ("por", "both") and self.depth > 1:
            deadline = None if self.timeout is None else started + self.timeout / 2
            self.reduction = commuting_pairs(self.encoding, deadline=deadline, cache_directory=self.cache_directory)
            orderings.append(self.reduction)
        if self.solver_name == "cadical":
            from lockstep.checkers.symbolic.cnf import UNSAT_OPTIONS, CadicalBackend

            options = UNSAT_OPTIONS if self.sat_options is None else self.sat_options
            return template, CadicalBackend(template, orderings, options)
        return template, Z3Backend(template, orderings)

    def _run(self) -> CheckResult:
        started = time.monotonic()
        self._cpu_started = cpu_seconds()
        machine = self.machine
        properties = machine.properties
        outcomes = self.outcomes
        unknown: set[int] = set()
        reached = -1  # the deepest depth whose queries all answered
        stopped = None
        try:
            template, backend = self._backend(started)
            self.setup_seconds = time.monotonic() - started
            for depth in range(self.depth + 1):
                depth_started = time.monotonic()
                if self.timeout is not None and depth_started - started >= self.timeout:
                    stopped = "timeout"
                    break
                open_goals = [
                    template.goals[position]
                    for position, prop in enumerate(properties)
                    if position in self.only
                    and position not in outcomes
                    and not (prop.name == IN_BOUNDS and depth == self.depth)
                ]
                stopped = self._ask(backend, open_goals, depth, started, outcomes, unknown)
                if stopped is not None:
                    break
                reached = depth  # every query at this depth answered
                if self.on_depth is not None:
                    self.on_depth(depth)
                if len(outcomes) == len(self.only) or depth == self.depth:
                    self.depth_seconds.append(time.monotonic() - depth_started)
                    break
                backend.extend(depth)
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
                    outcome = _Outcome(Verdict.INCONCLUSIVE, None, self._partial(position, unknown, stopped))
                elif prop.kind is PropertyKind.SOMETIMES:
                    outcome = _Outcome(Verdict.INCONCLUSIVE, None, f"no witness within {self.depth} steps")
                else:
                    outcome = _Outcome(Verdict.HOLDS_WITHIN_BOUND, None, f"no violation within {self.depth} steps")
            results.append(
                PropertyResult(prop.name, prop.kind, outcome.verdict, outcome.path, outcome.detail, prop.builtin)
            )
        stats = Statistics(None, None, max(reached, 0) if stopped else self.depth, time.monotonic() - started)
        return CheckResult(machine, "bmc", results, stats, stopped, [])

    def _ask(
        self,
        backend: Backend,
        goals: list[Goal],
        depth: int,
        started: float,
        outcomes: dict[int, _Outcome],
        unknown: set[int],
    ) -> str | None:
        """Ask the depth's goals together; every goal a model satisfies is decided by its path (a
        shortest one: the shallower depths were unsat for it); ask again for the rest until unsat.
        An unknown answer for several goals asks each alone, as does every depth from
        ``separate_from`` on. Returns why the run stops, or None."""
        if self.separate_from is not None and depth >= self.separate_from and len(goals) > 1:
            for goal in goals:
                stop = self._ask(backend, [goal], depth, started, outcomes, unknown)
                if stop is not None:
                    return stop
            return None
        pending = list(goals)
        while pending:
            seconds = self._query_seconds(started)
            cpu_left = self._cpu_left()
            if (seconds is not None and seconds <= 0) or (cpu_left is not None and cpu_left <= 0):
                return "timeout"
            asked_at, cpu_at = time.monotonic(), time.process_time()
            with z3_cpu_limit(cpu_left):
                answer, valuation = backend.query(pending, depth, seconds)
            names = tuple(self.machine.properties[goal.position].name for goal in pending)
            spent = QueryRecord(depth, names, answer, time.monotonic() - asked_at, time.process_time() - cpu_at)
            self.queries.append(spent)
            if valuation is not None:
                hits = [goal for goal in pending if valuation.holds(goal, depth)]
                if not hits:
                    raise TranslationBug("the solver's model satisfies none of the goals it was asked")
                path = self._path(valuation, depth)
                for goal in hits:
                    self._decide(goal, path, outcomes)
                decided = {goal.position for goal in hits}
                pending = [goal for goal in pending if goal.position not in decided]
                continue
            if answer == "unsat":  # (past an unknown answer a property's depths are no longer contiguous)
                for goal in pending:
                    if goal.position not in unknown:
                        self.checked[goal.position] = depth
            if answer == "unknown":
                if self.timeout is not None and time.monotonic() - started >= self.timeout:
                    return "timeout"
                if (cpu_left := self._cpu_left()) is not None and cpu_left <= 0:
                    return "timeout"
                if len(pending) == 1:
                    unknown.add(pending[0].position)
                else:
                    for goal in pending:
                        stop = self._ask(backend, [goal], depth, started, outcomes, unknown)
                        if stop is not None:
                            return stop
            return None
        return None

    def _partial(self, position: int, unknown: set[int], stopped: str | None) -> str:
        """Why an undecided property is inconclusive, and how far it was checked."""
        reason = "the solver answered unknown" if position in unknown else f"stopped ({stopped})"
        steps = self.steps_checked(position)
        return reason if steps is None else f"{checked_within(self.machine.properties[position], steps)}; {reason}"

    def _decide(self, goal: Goal, path: Path, outcomes: dict[int, _Outcome]) -> None:
        prop = self.machine.properties[goal.position]
        detail = "no action is enabled" if goal.kind == "deadlock" else ""
        if goal.kind == "bounds":
            path, detail = self._bounds_step(path)
        detail = self._confirm(goal.position, path, goal.kind) or detail
        verdict = Verdict.HOLDS if prop.kind is PropertyKind.SOMETIMES else Verdict.VIOLATED
        outcomes[goal.position] = _Outcome(verdict, path, detail)

    def _cpu_left(self) -> float | None:
        """CPU seconds left of ``cpu_timeout`` (None: no CPU limit)."""
        if self.cpu_timeout is None:
            return None
        return self.cpu_timeout - (cpu_seconds() - self._cpu_started)

    def _query_seconds(self, started: float) -> float | None:
        """Each query gets the per-query limit, or what is left of the run's wall clock if less
        (0 or less: the run's wall clock is spent)."""
        limits = []
        if self.solver_timeout is not None:
            limits.append(self.solver_timeout)
        if self.timeout is not None:
            limits.append(self.timeout - (time.monotonic() - started))
        return min(limits) if limits else None

    def _path(self, valuation: Valuation, depth: int) -> Path:
        decoded = []
        for frame in range(depth + 1):
            state, model = valuation.state(frame)
            decoded.append(self.encoding.decode_state(state, model))
        steps = []
        for step in range(depth):
            grounded = self.encoding.grounded[valuation.selector(step)]
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

    def _confirm(self, position: int, path: Path, kind: str) -> str | None:
        """Re-run the path through the concrete evaluator; it must show the same outcome. Returns
        why the last state is undefined where that is the outcome (``well_defined``, or a predicate
        that cannot be evaluated)."""
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
        if kind == "undefined":
            why = undefined_at(reference, current)
            if why is None:
                raise TranslationBug(f"{prop.name}: evaluate computes everything in Z3's undefined state")
            return why
        holds, why = _evaluated(lambda: reference.holds(position, current))
        if kind == "witness":
            if holds is not True:
                raise TranslationBug(f"{prop.name}: Z3's witness state does not satisfy it concretely")
            return None
        try:
            deadlocked = not reference.transitions(current)
        except ModelError:  # no successors, but no deadlock either: well_defined is violated there
            deadlocked = False
        if kind == "deadlock":
            final, why = _evaluated(lambda: reference.is_final(current))
            if not deadlocked or final is True:
                raise TranslationBug(f"{prop.name}: Z3's deadlock state is not a deadlock concretely")
            return why
        if kind == "invariant":
            if holds is True and deadlocked:
                holds, why = _evaluated(lambda: reference.holds_at_deadlock(position, current))
            if holds is True:
                raise TranslationBug(f"{prop.name}: Z3's counterexample state satisfies it concretely")
        return why


def _evaluated(question: Callable[[], bool]) -> tuple[bool | None, str | None]:
    """A predicate's value, or None and why where it cannot be evaluated (it does not hold there)."""
    try:
        return question(), None
    except ModelError as error:
        return None, f"its predicate cannot be evaluated: {error}"
