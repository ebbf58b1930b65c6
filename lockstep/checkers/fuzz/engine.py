"""The fuzzing engine: run a model's Hypothesis state machine, then shrink and re-minimise a failure.

``fuzz(instance)`` builds the model's ``RuleBasedStateMachine`` (``state_machine.py``), runs it
for ``examples`` examples of at most ``steps`` steps each with Hypothesis, and returns a
``FuzzResult``; it never prints (Hypothesis's own report of the failing run is captured, not
printed). On a failure Hypothesis shrinks the run to a locally minimal one; ``minimise.py`` then
searches the states around it for a shorter one. The outcome is ``violated`` (exit code 1),
``nothing-found`` (0: no safety property failed in the runs tried, which proves nothing) or
``inconclusive`` (3: interrupted, or Hypothesis could not run the examples asked for).

Hypothesis settings: no example database (runs are reproducible from ``seed`` alone and leave no
``.hypothesis`` folder behind), no deadline, health checks off (a model's rule mix is what it
is), one bug reported (the smallest), and only the generate and shrink phases. Given
``hypothesis_settings`` (what a test in a user's suite runs under: the active profile), the session
is theirs instead: their example database, phases, verbosity and ``derandomize`` apply, and without
a ``seed`` Hypothesis chooses it (``--hypothesis-seed``, or fresh); lockstep still sets the
examples, the steps, no deadline, health checks off and one bug reported.
"""

from __future__ import annotations

import enum
import hashlib
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.errors import Flaky, Unsatisfiable
from hypothesis.reporting import with_reporter
from hypothesis.stateful import run_state_machine_as_test

from lockstep.checkers.fuzz.minimise import minimise
from lockstep.checkers.fuzz.session import chosen_seed, hypothesis_storage
from lockstep.checkers.fuzz.state_machine import OutOfTime, PropertyViolation, Recorder, state_machine_for
from lockstep.checkers.result import Path
from lockstep.spec.compiler import CompiledSystem
from lockstep.spec.machine import Machine, PropertyKind
from lockstep.spec.protocol import Instance, UsageError
from lockstep.spec.semantics import InterpretedSystem, TransitionSystem

DEFAULT_STEPS = 100
DEFAULT_EXAMPLES = 1000
DEFAULT_SHRINK_SECONDS = 30.0
# Rule calls a stateful run fits in Hypothesis's choice buffer, with room to spare (a few hundred
# fit for the shipped models). Longer examples take up to steps / BURST_DIVISOR steps per step_or_end call
# (state_machine.py); step_or_end is one rule call in several, so bursts must be long.
RULE_CALLS, BURST_DIVISOR = 200, 25


class FuzzOutcome(enum.Enum):
    NOTHING_FOUND = "nothing-found"
    VIOLATED = "violated"
    INCONCLUSIVE = "inconclusive"


EXIT_CODES = {FuzzOutcome.NOTHING_FOUND: 0, FuzzOutcome.VIOLATED: 1, FuzzOutcome.INCONCLUSIVE: 3}


@dataclass
class FuzzResult:
    machine: Machine
    outcome: FuzzOutcome
    steps: int  # the most steps an example takes
    examples: int  # the examples asked for
    seed: int | None
    runs: int  # examples Hypothesis ran: generation, then the shrinker's re-runs
    steps_run: int  # steps taken over all runs
    completed: int  # runs that reached a final state (the others ran out of steps, or failed)
    generate_seconds: float  # until the first failure, or the whole run if none
    seconds: float  # everything: generation, shrinking, minimising
    property_name: str | None = None
    detail: str = ""
    path: Path | None = None  # the counterexample: the shrunk run re-minimised by BFS
    shrunk: Path | None = None  # the run Hypothesis's shrinker returned
    first_failing: Path | None = None  # the first failing run, as generated
    examples_to_failure: int | None = None  # 1-based number of the first failing example
    witnessed: list[str] = field(default_factory=list)  # `sometimes` properties seen true
    unchecked: list[str] = field(default_factory=list)  # properties fuzzing does not check (leads-to)
    program: list[str] = field(default_factory=list)  # Hypothesis's report of the shrunk run
    stopped: str | None = None  # why the session was cut short: timeout, shrink-timeout, interrupted...

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.outcome]

    @property
    def seconds_per_example(self) -> float:
        """Generation time per example (the examples before the first failure, or all of them)."""
        count = self.examples_to_failure or self.runs
        return self.generate_seconds / count if count else 0.0


def fuzz(
    target: Instance | Machine,
    *,
    steps: int = DEFAULT_STEPS,
    examples: int = DEFAULT_EXAMPLES,
    seed: int | None = None,
    timeout: float | None = None,
    shrink_seconds: float | None = DEFAULT_SHRINK_SECONDS,
    shrink: bool = True,
    minimise_radius: int = 8,
    compiled: bool = True,
    hypothesis_settings: settings | None = None,
) -> FuzzResult:
    """Fuzz every safety property of ``target`` with Hypothesis; see the module doc.

    ``seed`` fixes Hypothesis's random choices (None: a fresh seed, reported in the result). ``timeout`` bounds
    the whole session in seconds (a session cut short with nothing found is inconclusive);
    ``shrink_seconds`` bounds shrinking (then the shortest failing run so far is shrunk's
    result); ``shrink=False`` skips Hypothesis's shrinker (the BFS re-minimisation, up to
    ``minimise_radius`` steps around the runs, still runs). ``compiled=False`` steps the reference
    interpreter instead of the generated code. ``hypothesis_settings``: run under those settings (see
    the module doc); the result's ``seed`` is then None unless one was given."""
    if steps < 1 or examples < 1:
        raise UsageError(f"steps and examples must be positive, got steps={steps}, examples={examples}")
    machine = target.machine() if isinstance(target, Instance) else target.finish()
    system: TransitionSystem = CompiledSystem(machine) if compiled else InterpretedSystem(machine)
    started = time.monotonic()
    burst = 1 if steps <= RULE_CALLS else -(-steps // BURST_DIVISOR)
    recorder = Recorder(None if timeout is None else started + timeout, shrink_seconds, steps, burst)
    state_machine = state_machine_for(system, recorder)
    storage: AbstractContextManager[None]
    if hypothesis_settings is None:
        seed = chosen_seed(seed)
        options = settings(
            max_examples=examples,
            stateful_step_count=min(steps, 4 * RULE_CALLS),
            deadline=None,
            database=None,
            derandomize=False,
            suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False,
            phases=(Phase.generate, Phase.shrink) if shrink else (Phase.generate,),
            verbosity=Verbosity.normal,
            print_blob=False,
        )
        storage = hypothesis_storage()
    else:
        # the example database keys a stateful test by its class: one name per model and instance
        label = target.label if isinstance(target, Instance) else machine.name
        digest = (
            hashlib.sha256(repr(sorted(target.parameters.items())).encode()).hexdigest()[:12]
            if isinstance(target, Instance)
            else ""
        )
        state_machine.__name__ = state_machine.__qualname__ = f"Fuzz_{label}_{digest}"
        options = settings(
            hypothesis_settings,
            max_examples=examples,
            stateful_step_count=min(steps, 4 * RULE_CALLS),
            deadline=None,
            suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False,
            phases=tuple(phase for phase in hypothesis_settings.phases if shrink or phase is not Phase.shrink),
        )
        storage = nullcontext()
    if seed is not None:
        state_machine = hypothesis_seed(seed)(state_machine)
    program: list[str] = []
    violation: PropertyViolation | None = None
    stopped: str | None = None
    try:
        with storage, with_reporter(lambda text: program.append(str(text))):
            run_state_machine_as_test(state_machine, settings=options)
    except PropertyViolation as error:
        violation = error
    except OutOfTime as error:
        stopped = error.reason
    except KeyboardInterrupt:
        stopped = "interrupted"
    except Unsatisfiable as error:
        stopped = f"Hypothesis could not run the examples: {error}"
    except Flaky as error:  # pragma: no cover - the models are deterministic
        stopped = f"a failure did not reproduce: {error}"
    finished = time.monotonic()
    result = FuzzResult(
        machine,
        FuzzOutcome.NOTHING_FOUND,
        steps,
        examples,
        seed,
        recorder.runs,
        recorder.steps,
        recorder.completed,
        (recorder.failure_time or finished) - started,
        finished - started,
        witnessed=[prop.name for prop in machine.properties if prop.name in recorder.witnessed],
        unchecked=[prop.name for prop in machine.properties if prop.kind is PropertyKind.LEADS_TO],
        stopped=stopped,
    )
    if violation is not None:
        shrunk = recorder.last  # Hypothesis re-ran the shrunk example last, and it raised
    elif recorder.shortest_failing is not None:  # cut short while shrinking: the best run so far
        shrunk = recorder.shortest_failing
        assert shrunk.violation is not None
        violation = shrunk.violation
    else:
        result.outcome = FuzzOutcome.NOTHING_FOUND if stopped is None else FuzzOutcome.INCONCLUSIVE
        return result
    assert shrunk is not None and recorder.first_failing is not None
    result.outcome = FuzzOutcome.VIOLATED
    result.property_name = violation.property_name
    result.detail = violation.detail
    result.shrunk = Path(shrunk.initial, tuple(shrunk.steps))
    result.first_failing = Path(recorder.first_failing.initial, tuple(recorder.first_failing.steps))
    result.examples_to_failure = recorder.first_failure
    result.program = program
    runs = [result.shrunk, result.first_failing]
    result.path = minimise(system, violation.property_name, runs, max_radius=minimise_radius) or result.shrunk
    result.seconds = time.monotonic() - started
    return result
