"""The ``test-runtime`` command of ``lockstep``: model-guided testing of the reference runtime.

``lockstep test-runtime PROTOCOL|--model-file PATH [--variant V] [--instance I] [--backend gloo|nccl]
[--hang-timeout S] [--timeout S] [--max-paths N] [--fail-fast] [--seed S] [--trace-dir DIR] [--json]``
(a model file's protocol is named as a protocol the runtime runs, an edited copy of it) computes the model's coverage
goals (``lockstep.checkers.conformance.goals``: every action with its arguments, every guard conjunct true and
false, every branch condition of an update, every ``sometimes`` witness, the states one step from
violating an ``always`` property, the highest level of each bounded-response monitor), finds a
shortest model path to each and a few paths that together pass through all of them, and drives
the real runtime through each path's choices exactly as ``lockstep reproduce`` does (the
protocol's ``plan_reproduction``: ``reproduce.reproduction_config``). Every run's trace is
replayed against the model (``replay_traces`` with the goal observer), and
the command reports per goal whether the model reaches it and whether the runtime did, and per
path the run's outcome and the replay's verdict, with the trace directory. ``--fail-fast`` stops
after the first run that diverges or violates a property (runtime mutation testing uses it).

Exit codes: 0 every run completed and its trace follows the model; 1 some run's trace diverges
from the model (a value, action or actor the model does not have counts too, and so does a choice
of the path the runtime did not offer), violates a property, or the run hung; 2 usage (an unknown
protocol, variant or instance, a runtime without a reproduction plan); 3 runtime trouble (a run
ended otherwise, its trace could not be judged, or ``--timeout`` left paths unrun: then
``stopped`` is "timeout") and nothing diverged; 4 a process of a run was killed (a signal, the OOM
killer: that run's verdict is ``crashed``, never a protocol verdict, and no path runs after it)
and nothing diverged before. ``--timeout`` is the command's one clock (``lockstep.clock``): the
model's build, the goal search, every run and every replay count. Progress goes to stderr; with
``--json`` stdout carries one object (``lockstep/schemas/test-runtime.schema.json``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from lockstep.cli.failures import usage_error
from lockstep.cli.invocation import clock
from lockstep.clock import TIMEOUT, Clock, TimeoutReached
from lockstep.traces.claim_holder import refuse_claimed
from lockstep.traces.output import DirectoryClaim, OutputError, claim_directory, claim_new_directory, write_stdout

SCHEMA_VERSION = 1  # of test-runtime's --json object
EXIT_CONSISTENT, EXIT_DIVERGENCE, EXIT_TROUBLE, EXIT_CRASHED = 0, 1, 3, 4


def _not_empty(folder: Path) -> str | None:
    return "is not empty; give an empty or new directory" if any(folder.iterdir()) else None


def _trace_dir(arguments: argparse.Namespace, label: str) -> DirectoryClaim:
    """The command's folder, held by this process (``claim_directory``): ``--trace-dir``, or the first
    of ``lockstep-out/test-runtime-<label>``, ``...-2``, ... that no other command holds or filled; an
    ``OutputError`` (a ``ValueError``) naming a folder that cannot be used."""
    if arguments.trace_dir is not None:
        try:
            return claim_directory(arguments.trace_dir, _not_empty)
        except OutputError as error:
            raise OutputError(f"--trace-dir {error}") from None
    return claim_new_directory(Path("lockstep-out") / f"test-runtime-{label}", _not_empty)


def _model(arguments: argparse.Namespace) -> tuple[Any, Any]:
    """The model instance (``--model-file``'s protocol, or the named one) and the runtime protocol of
    its name (ValueError: a usage error)."""
    from lockstep.cli.listing import one_protocol
    from lockstep.impl.protocols import RUNTIME_PROTOCOLS

    model = one_protocol(arguments)  # UsageError (a ValueError) names the protocols
    instance = model.instance(arguments.variant, arguments.instance)
    runtime = RUNTIME_PROTOCOLS.get(model.name)
    if runtime is None:
        raise ValueError(f"the runtime has no protocol {model.name!r}; it runs: {', '.join(RUNTIME_PROTOCOLS)}")
    if instance.variant not in runtime.variants:
        raise ValueError(f"the {runtime.name} runtime runs {', '.join(runtime.variants)}, not {instance.variant!r}")
    if not runtime.reproduction:
        raise ValueError(f"the {runtime.name} runtime cannot follow model paths (it has no reproduction plan)")
    return instance, runtime


def _verdict(outcome: str, message: str, replayed: dict[str, Any] | None) -> str:
    """One run's verdict: consistent, violation (a hang or a violated property), divergence (the
    trace leaves the model, or the runtime did not offer a choice the model's path takes), trouble."""
    if outcome == "process crashed":  # killed by a signal (the OOM killer): nothing about the protocol
        return "crashed"
    replay = (replayed or {}).get("verdict")
    if replay == "diverges" or "ChoiceDivergence" in message:
        return "divergence"
    if replay == "violated" or outcome == "hang diagnosed":
        return "violation"
    if outcome == "completed" and replay == "conforms":
        return "consistent"
    return "trouble"


def _replay(config: Any, goals: Any, protocol: Any) -> dict[str, Any]:
    """The run's traces replayed against ``protocol`` (the model the paths came from) at the run's parameters."""
    from lockstep.checkers.conformance.judgement import HeaderMismatch, replay_traces
    from lockstep.harness.runtime_replay import runtime_expectations
    from lockstep.traces.reader import TraceInputError

    try:
        expected = runtime_expectations(config)
        declared = {parameter.name for parameter in protocol.parameters}
        expected.update(
            protocol=protocol,  # a model file's, not the built-in one of its name
            parameters={name: value for name, value in expected["parameters"].items() if name in declared},
        )
        verdict = replay_traces(config.trace_dir, **expected, observe=goals.observe)
    except HeaderMismatch as error:  # the run's header is not what its configuration promised
        return {"verdict": "error", "event": None, "property": None, "model": None, "detail": str(error)}
    except TraceInputError as error:  # the runtime under test recorded what the model cannot represent
        return {"verdict": "diverges", "event": None, "property": None, "model": None, "detail": str(error)}
    except (ValueError, OSError) as error:
        return {"verdict": "error", "event": None, "property": None, "model": None, "detail": str(error)}
    result = verdict.to_json()
    return {
        "verdict": result["verdict"],
        "event": result.get("event"),
        "property": result.get("property"),
        "model": result.get("model"),
        "detail": str(
            (result.get("explanation") or {}).get("reason") or (result.get("explanation") or {}).get("detail") or ""
        ),
    }


def _short(label: str, width: int = 100) -> str:
    return label if len(label) <= width else label[: width - 1] + "…"


def _say(console: Any, text: str) -> None:
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def command_test_runtime(arguments: argparse.Namespace, console: Any) -> int:
    """Run the model's goal paths in the runtime; the exit code (see the module doc)."""
    from lockstep.cli.runtime import check_devices

    timer = clock(arguments)  # --timeout: the whole command's, the build and the goal search included
    try:
        if arguments.trace_dir is not None:  # who writes it, if anyone does, before its contents are judged
            refuse_claimed(arguments.trace_dir)
        instance, runtime = _model(arguments)
        check_devices(arguments.backend, runtime.ranks[0])  # no CUDA at all: refused before the search
        claim = _trace_dir(arguments, f"{runtime.name}-{instance.variant}")
    except ValueError as error:  # OutputError too: a file in the way, a folder that cannot be made or is taken
        return usage_error(console, str(error), arguments)
    with claim as folder:  # held until the command ends: no other command writes into it meanwhile
        return _test_paths(arguments, console, timer, instance, folder)


def _test_paths(arguments: argparse.Namespace, console: Any, timer: Clock, instance: Any, folder: Path) -> int:
    """The model's goal search and the runs of ``command_test_runtime`` in ``folder``; the exit code."""
    from lockstep.checkers import system_for
    from lockstep.checkers.conformance.goals import RuntimeGoals, covering_paths, find_goals
    from lockstep.checkers.counterexample import write_counterexample
    from lockstep.cli.reproduce import read_counterexample, reproduction_config
    from lockstep.cli.runtime import check_devices, deadline
    from lockstep.impl.launcher import launch

    with timer.alarm(f"building the model {instance.label}"):  # a build() may never return
        machine = instance.machine()
    _say(console, f"test-runtime {instance.label}: searching the model for coverage goals")
    search = find_goals(system_for(machine), clock=timer)
    stopped = search.stopped
    chosen = [] if stopped is not None else covering_paths(search, arguments.max_paths)
    _say(
        console,
        f"model: {search.states:,} states, {len(search.goals)} goals, {len(search.reached)} reached; "
        + (
            f"--timeout {timer.timeout:g} s ran out during the search: no path run"
            if stopped is not None
            else f"{len(chosen)} paths cover {sum(len(goals) for _, goals in chosen)} of them"
        ),
    )
    reached_in_runtime = RuntimeGoals()
    runs: list[dict[str, Any]] = []
    path_of: dict[str, int] = {}
    for number, (label, covered) in enumerate(chosen, start=1):
        for goal in covered:
            path_of.setdefault(goal, number)
        path = search.path(label)
        file = folder / f"path-{number}.jsonl"
        try:
            write_counterexample(
                file,
                machine,
                path,
                protocol=instance.protocol.name,
                variant=instance.variant,
                instance=instance.name,
                parameters=instance.parameters,
                property_name=label,
                backend="lockstep-goals",
            )
        except OutputError as error:  # the system refused the write (a full disk): no run can use the path
            return usage_error(console, str(error), arguments)
        run_dir = folder / f"path-{number}"
        record: dict[str, Any] = {"index": number, "goal": label, "steps": path.length, "file": str(file)}
        record["trace_dir"] = str(run_dir.resolve())
        try:
            header, events = read_counterexample(str(file))
            options = argparse.Namespace(
                counterexample=str(file),
                backend=arguments.backend,
                seed=arguments.seed,
                hang_timeout=arguments.hang_timeout,
            )
            config = reproduction_config(options, header, events, run_dir)
            check_devices(config.backend, config.ranks)
        except ValueError as error:
            if number == 1 and "--backend" in str(error):
                return usage_error(console, str(error), arguments)
            record.update(outcome="not run", message=str(error), seconds=0.0, events=0, replay=None, verdict="trouble")
            runs.append(record)
            _say(console, f"path {number}/{len(chosen)} ({_short(label)}, {path.length} steps): not run: {error}")
            continue
        left = timer.left()
        if left is not None and left <= 1:
            _say(console, f"--timeout {timer.timeout:g} s reached: {len(chosen) - number + 1} paths not run")
            stopped = TIMEOUT
            break
        outcome = launch(config, deadline=timer.within(deadline(None, config)))
        try:
            with timer.alarm("replaying a run's traces"):
                replayed = _replay(config, reached_in_runtime, instance.protocol)
        except TimeoutReached as reached:
            replayed = dict.fromkeys(("event", "property", "model"))
            replayed.update(verdict="inconclusive", detail=str(reached))
        if timer.expired():
            stopped = TIMEOUT  # this run, or its replay, was cut short by the clock
        verdict = _verdict(outcome.outcome, outcome.message, replayed)
        record.update(
            outcome=outcome.outcome,
            message=outcome.message,
            seconds=round(outcome.seconds, 3),
            events=outcome.events,
            replay=replayed,
            verdict=verdict,
        )
        runs.append(record)
        detail = f"; replay {replayed['verdict']}" + (f" ({replayed['property']})" if replayed.get("property") else "")
        if replayed.get("verdict") in ("diverges", "error") and replayed.get("detail"):
            detail += f" at event {replayed.get('event')}: {replayed['detail']}"
        if outcome.outcome != "completed" and outcome.message:
            detail += f"; {outcome.message.strip().splitlines()[-1]}"
        _say(
            console,
            f"path {number}/{len(chosen)} ({_short(label)}, {path.length} steps): {outcome.outcome} in "
            f"{outcome.seconds:.1f} s{detail} -> {verdict}",
        )
        if verdict == "crashed" or stopped is not None:
            break  # a killed process: the machine, not the protocol, failed; no run after it is trusted
        if arguments.fail_fast and verdict in ("divergence", "violation"):
            break
    goals = [
        {
            "kind": goal.kind,
            "label": goal.label,
            "model": goal.label in search.reached,
            "depth": search.reached[goal.label].depth if goal.label in search.reached else None,
            "path": path_of.get(goal.label),
            "runtime": reached_in_runtime.reaches(goal),
        }
        for goal in search.goals
    ]
    verdicts = {run["verdict"] for run in runs}
    if verdicts & {"divergence", "violation"}:
        code = EXIT_DIVERGENCE
        overall = "divergence" if "divergence" in verdicts else "violation"
    elif "crashed" in verdicts:
        code, overall = EXIT_CRASHED, "crashed"
    elif "trouble" in verdicts or not runs or stopped is not None:
        code, overall = EXIT_TROUBLE, "trouble"
    else:
        code, overall = EXIT_CONSISTENT, "consistent"
    in_model = sum(bool(goal["model"]) for goal in goals)
    in_runtime = sum(bool(goal["model"] and goal["runtime"]) for goal in goals)
    colour = {"consistent": "green", "trouble": "yellow"}.get(overall, "red")
    console.print(
        f"[bold {colour}]{overall}[/bold {colour}]: {len(runs)} runs; goals reached in the model {in_model} of "
        f"{len(goals)}, in the runtime {in_runtime} of {in_model}",
        highlight=False,
        soft_wrap=True,
    )
    if stopped is not None:
        _say(console, f"stopped: {stopped} (--timeout {timer.timeout:g} s)")
    for run in runs:
        if run["verdict"] in ("divergence", "violation", "crashed"):
            _say(
                console, f"  path {run['index']} ({_short(run['goal'])}): {run['verdict']}; traces: {run['trace_dir']}"
            )
    _say(console, f"traces: {folder.resolve()}")
    if arguments.json:
        payload = {
            "schema_version": SCHEMA_VERSION,
            "protocol": instance.protocol.name,
            "variant": instance.variant,
            "instance": instance.name,
            "verdict": overall,
            "exit_code": code,
            "stopped": stopped,
            "model": {"states": search.states, "complete": search.complete},
            "summary": {"goals": len(goals), "model_reached": in_model, "runtime_reached": in_runtime},
            "goals": goals,
            "runs": runs,
            "trace_dir": str(folder.resolve()),
        }
        write_stdout(json.dumps(payload) + "\n")
    return code
