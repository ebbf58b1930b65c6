"""Runtime-against-model fuzzing: Hypothesis draws the reference runtime's schedules, the model judges.

``fuzz_runtime(protocol, variant, ...)`` runs the torch reference runtime (``lockstep.impl``,
imported here only when this runs) ``examples`` times. Each example is one Hypothesis draw: a
seed and, per actor, a list of option indices that the run's choice source takes at that actor's
next choices, whatever they are (message arrival order and delay, request placement, draft
acceptance, chunk sizes; ``lockstep.impl.choices.indexed``); beyond the list the drawn seed
decides. The run records its trace; the trace is replayed against the model of the same variant
(``lockstep.harness.runtime_replay``), which compares the runtime's observed state with the
model's projection after every event. An example fails when

- the runtime and the model disagree (replay ``diverges``, or the trace cannot be read): the
  explanation shows the event, the model's candidate states and the values the runtime observed;
- the run failed (a runtime error, or no outcome in time).

A run that hangs or violates a property while its trace conforms does what the model says this
variant does (a pre-fix hang, a finding): it is counted (``observed_violations``), not a failure.
A run whose process was killed (by a signal: the OOM killer, a ``kill``; ``process crashed``)
says nothing about the protocol: the session stops there with outcome ``crashed`` (exit 4), never
a verdict. A run that the command's clock (``--timeout``) cut short is no failure either: the
session stops with ``stopped: timeout``.

The first failing example is the result (Hypothesis's shrinking is off: each example is a real
multi-process run of seconds). A ``runner`` runs one configuration: ``launch`` (fresh processes
per example) or a ``RankPool``'s ``run`` (long-lived rank processes reset per example).
Its working directory (under ``LOCKSTEP_RUN_ROOT`` when set) is registered with the guardian
(``lockstep.lifetime``), which removes it if this process is killed.
Imports Hypothesis and the runtime lazily; engines return values and never print.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lockstep.clock import TIMEOUT, Clock
from lockstep.traces.output import OutputError, make_directory, replacing

CRASHED = "process crashed"  # as lockstep.impl.launcher (imported only when a session runs)
INDEX_LIMIT = 7  # indices 0..7: options are few at every choice point
MAX_CHOICES = 48  # indexed choices per actor; the seed decides the rest


@dataclass
class RuntimeExample:
    """One example: its choices, how the run ended, and what replay said."""

    number: int
    seed: int
    choices: list[dict[str, Any]]
    outcome: str
    message: str
    replay: dict[str, Any] | None
    seconds: float
    trace_dir: str | None = None

    @property
    def crashed(self) -> bool:
        """A process of the run was killed or died (the OOM killer, a signal): no verdict on the protocol."""
        return self.outcome == CRASHED

    @property
    def failure(self) -> str | None:
        """Why this example fails (the runtime and the model disagree, or the run failed), or None
        (also for a crashed run, which says nothing about the protocol: ``crashed``)."""
        if self.crashed:
            return None
        if self.outcome not in ("completed", "hang diagnosed"):
            return f"the run ended with {self.outcome}: {self.message}"
        verdict = None if self.replay is None else self.replay.get("verdict")
        if verdict == "diverges":
            reason = (self.replay or {}).get("explanation", {}).get("reason", "")
            return f"the runtime diverges from the model at event {(self.replay or {}).get('event')}: {reason}"
        if verdict not in ("conforms", "violated"):
            return f"the run's trace could not be replayed ({verdict})"
        return None

    @property
    def observed_violation(self) -> str | None:
        """What the run showed for real that the model also shows (a hang, a violated property)."""
        if self.failure is not None or self.crashed:
            return None
        if self.replay is not None and self.replay.get("verdict") == "violated":
            return f"{self.replay.get('property')} violated"
        return "a hang" if self.outcome == "hang diagnosed" else None

    def to_json(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "seed": self.seed,
            "choices": self.choices,
            "outcome": self.outcome,
            "message": self.message,
            "failure": self.failure,
            "observed_violation": self.observed_violation,
            "seconds": round(self.seconds, 3),
            "trace_dir": self.trace_dir,
            "replay": None
            if self.replay is None
            else {key: self.replay.get(key) for key in ("verdict", "event", "property", "model", "explanation")},
        }


@dataclass
class RuntimeFuzzResult:
    """A runtime-against-model fuzzing session."""

    protocol: str
    variant: str
    scenario: str
    ranks: int
    examples: int
    seed: int | None
    runs: list[RuntimeExample] = field(default_factory=list)
    failing: RuntimeExample | None = None
    crashed: RuntimeExample | None = None  # the run whose process was killed: the session stopped there
    seconds: float = 0.0
    stopped: str | None = None
    pool_starts: int = 0  # rank pools started (again after each run that did not complete)
    keep_error: str | None = None  # why the failing run's traces could not be kept (``keep_traces``)

    @property
    def outcome(self) -> str:
        if self.failing is not None:
            return "violated"
        if self.crashed is not None:
            return "crashed"
        return "inconclusive" if self.stopped is not None or not self.runs else "nothing-found"

    @property
    def exit_code(self) -> int:
        return {"violated": 1, "nothing-found": 0, "inconclusive": 3, "crashed": 4}[self.outcome]

    def to_json(self) -> dict[str, Any]:
        seconds = [run.seconds for run in self.runs]
        return {
            "protocol": self.protocol,
            "variant": self.variant,
            "scenario": self.scenario,
            "ranks": self.ranks,
            "engine": "fuzz-runtime",
            "outcome": self.outcome,
            "exit_code": self.exit_code,
            "seed": self.seed,
            "examples": self.examples,
            "stopped": self.stopped,
            "stats": {
                "runs": len(self.runs),
                "seconds": round(self.seconds, 3),
                "observed_violations": sum(run.observed_violation is not None for run in self.runs),
                "pool_starts": self.pool_starts,
                "seconds_per_example": round(sum(seconds) / len(seconds), 3) if seconds else None,
                "examples_to_failure": None if self.failing is None else self.failing.number,
            },
            "failing": None if self.failing is None else self.failing.to_json(),
            "crashed": None if self.crashed is None else self.crashed.to_json(),
        }


Runner = Callable[[Any], Any]  # RunConfig -> launcher.Outcome


def fuzz_runtime(
    protocol: str,
    variant: str,
    *,
    scenario: str | None = None,
    ranks: int | None = None,
    settings: Mapping[str, int] | None = None,
    examples: int = 20,
    seed: int | None = None,
    hang_timeout: float = 5.0,
    timeout: float | None = None,
    runner: Runner | None = None,
    keep_traces: str | None = None,
    pooled: bool = True,
    clock: Clock | None = None,
) -> RuntimeFuzzResult:
    """Fuzz the runtime of ``protocol``/``variant`` against its model (see the module doc).

    ``keep_traces`` names a folder for the failing example's traces (else they are removed), each
    copied whole (``lockstep.traces.output.replacing``); a folder that cannot take them leaves
    ``keep_error`` saying why.
    ``pooled`` runs the examples on a ``RankPool`` (else fresh processes per example).
    ``clock`` is the command's (``lockstep.clock``; default: one of ``timeout`` seconds started
    now): no example starts once it has run out, and each run's deadline is what it has left.
    ``UsageError``-worthy input raises ``ValueError`` with the reason."""
    from hypothesis import HealthCheck, Phase, given, strategies
    from hypothesis import seed as hypothesis_seed
    from hypothesis import settings as hypothesis_settings

    from lockstep.checkers.fuzz.session import chosen_seed, hypothesis_storage
    from lockstep.harness.runtime_replay import runtime_expectations
    from lockstep.impl.arguments import check_model_bounds, setting_values
    from lockstep.impl.choices import indexed
    from lockstep.impl.launcher import INCONCLUSIVE, launch
    from lockstep.impl.pool import RankPool
    from lockstep.impl.protocols import RUNTIME_PROTOCOLS
    from lockstep.impl.runtime import RunConfig
    from lockstep.lifetime import guardian

    known = RUNTIME_PROTOCOLS.get(protocol)
    if known is None:
        raise ValueError(f"the runtime has no protocol {protocol!r}; it runs: {', '.join(RUNTIME_PROTOCOLS)}")
    if variant not in known.variants:
        raise ValueError(f"the {protocol} runtime runs {', '.join(known.variants)}, not {variant!r}")
    chosen_scenario = scenario or known.fuzz_scenario or known.scenarios[0]
    if chosen_scenario not in known.scenarios or chosen_scenario == "counterexample":
        raise ValueError(
            f"{protocol} has no scenario {chosen_scenario!r} to fuzz; choose one of "
            f"{', '.join(name for name in known.scenarios if name != 'counterexample')}"
        )
    rank_count = known.default_ranks if ranks is None else ranks
    if not known.ranks[0] <= rank_count <= known.ranks[1]:
        raise ValueError(f"{protocol} runs {known.ranks[0]} to {known.ranks[1]} ranks, got {rank_count}")
    values = setting_values(known, [f"{name}={value}" for name, value in (settings or {}).items()])
    base = RunConfig(protocol, variant, chosen_scenario, rank_count, timeout=hang_timeout, extra=dict(values))
    check_model_bounds(known, base)  # before any process starts: a setting the model does not take fails every run
    if keep_traces is not None and Path(keep_traces).exists() and not Path(keep_traces).is_dir():
        raise ValueError(f"--trace-out {keep_traces} is not a directory (with --impl it names a folder for the traces)")
    actors = [*(f"rank:{rank}" for rank in range(rank_count)), *known.helper_actors]
    seed = chosen_seed(seed)
    result = RuntimeFuzzResult(protocol, variant, chosen_scenario, rank_count, examples, seed)
    started = time.monotonic()
    clock = clock or Clock(timeout, started)
    run_deadline = max(60.0, 6 * hang_timeout)  # a run's own limit, within what the clock has left
    work = Path(tempfile.mkdtemp(prefix="lockstep-fuzz-runtime-", dir=os.environ.get("LOCKSTEP_RUN_ROOT")))
    guardian().protect(directory=work)  # removed even if this process is killed
    pool = RankPool(protocol, rank_count, "gloo", hang_timeout) if runner is None and pooled else None

    def run(config: RunConfig) -> Any:
        if runner is not None:
            return runner(config)
        if pool is not None:
            return pool.run(config, deadline=clock.within(run_deadline))
        return launch(config, deadline=clock.within(run_deadline))

    @hypothesis_settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=False,
        phases=(Phase.generate,),
        suppress_health_check=list(HealthCheck),
    )
    @given(strategies.data())
    def example(data: Any) -> None:
        run_seed = data.draw(strategies.integers(0, 2**31 - 1), label="seed")
        choices = [
            choice
            for actor in actors
            for choice in indexed(
                actor,
                data.draw(strategies.lists(strategies.integers(0, INDEX_LIMIT), max_size=MAX_CHOICES), label=actor),
            )
        ]
        if result.failing is not None or result.crashed is not None or result.stopped is not None:
            return  # drawn all the same: Hypothesis requires the same draws for the same data
        if clock.expired():
            result.stopped = TIMEOUT
            return
        number = len(result.runs) + 1
        folder = work / f"example-{number}"
        folder.mkdir()
        script = folder / "choices.json"
        script.write_text("".join(_json_line(choice.to_json()) for choice in choices), encoding="utf-8")
        trace_dir = folder / "trace"
        trace_dir.mkdir()
        config = RunConfig(
            protocol=protocol,
            variant=variant,
            scenario=chosen_scenario,
            ranks=rank_count,
            seed=run_seed,
            timeout=hang_timeout,
            trace_dir=str(trace_dir),
            choices=str(script),
            extra=dict(values),
        )
        began = time.monotonic()
        expected = runtime_expectations(config)  # before the run: the runner may not change the judge
        outcome = run(config)
        replayed: dict[str, Any] | None = replay_example(trace_dir, expected)
        sample = RuntimeExample(
            number,
            run_seed,
            [choice.to_json() for choice in choices],
            outcome.outcome,
            outcome.message,
            replayed,
            time.monotonic() - began,
            str(trace_dir),
        )
        if outcome.outcome == INCONCLUSIVE and clock.expired():
            result.stopped = TIMEOUT  # the clock, not the runtime, ended this run: it judges nothing
            return
        result.runs.append(sample)
        if sample.crashed:
            result.crashed = sample  # a process was killed: what follows would run on a broken machine
        elif sample.failure is not None:
            result.failing = sample

    example = hypothesis_seed(seed)(example)
    try:
        with hypothesis_storage():
            example()
    except KeyboardInterrupt:
        result.stopped = "interrupted"
    finally:
        result.seconds = time.monotonic() - started
        if pool is not None:  # first: its ranks may still write into the working directory
            pool.close(kill=sys.exc_info()[0] is not None)  # stopped (Ctrl-C, SIGTERM): no waiting on them
            result.pool_starts = pool.started
        if result.failing is not None and keep_traces is not None:
            try:
                result.failing.trace_dir = str(_keep(Path(str(result.failing.trace_dir)), Path(keep_traces)))
            except OutputError as error:
                result.failing.trace_dir, result.keep_error = None, str(error)
        elif result.failing is not None:
            result.failing.trace_dir = None
        shutil.rmtree(work, ignore_errors=True)
        guardian().release(directory=work)
    return result


def _keep(source: Path, target: Path) -> Path:
    """Copy the trace files of ``source`` into the folder ``target`` (made if missing), each whole."""
    make_directory(target)
    for file in sorted(source.glob("*.jsonl")):
        with replacing(target / file.name) as temporary:
            shutil.copyfile(file, temporary)
    return target


def replay_example(trace_dir: str | Path, expected: Mapping[str, Any]) -> dict[str, Any]:
    """One example's traces replayed (the one replay path, ``replay_traces``) against the model
    ``expected`` names (``runtime_expectations`` of its config, taken before the run): the
    verdict's JSON, or ``unreadable`` with the reason."""
    from lockstep.checkers.conformance.judgement import replay_traces
    from lockstep.traces.reader import TraceInputError

    try:
        return replay_traces(trace_dir, **expected).to_json()
    except (TraceInputError, ValueError) as error:
        return {"verdict": "unreadable", "explanation": {"reason": str(error)}}


def _json_line(value: Mapping[str, Any]) -> str:
    import json

    return json.dumps(value) + "\n"
