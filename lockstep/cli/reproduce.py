"""The ``reproduce`` command of ``lockstep``: run a model counterexample for real in the runtime.

``lockstep reproduce COUNTEREXAMPLE.jsonl [--backend gloo|nccl] [--hang-timeout S] [--timeout S]
[--seed S] [--trace-dir DIR] [--json]`` reads a counterexample that ``lockstep check`` (or ``fuzz``) wrote,
asks the protocol's runtime for a plan (``RuntimeProtocol.plan_reproduction``: the scenario that
holds the run to the counterexample's order, and the scripted choices: message arrival order,
request placement, accepted drafts, chunking), runs it with real processes and collectives, and
replays the runtime's own trace against the model of the counterexample's variant. It reports
whether the failure happened for real: a hang diagnosed (with what every rank waits in), or the
runtime's trace violating a property (named, with whether it is the counterexample's).

The counterexample is data from outside: before anything starts, every header parameter the
model declares must be an integer within the model's ``ParameterSpec`` bounds, and the run the
plan asks for must be within the runtime's (rank range, settings); otherwise exit 2 naming the
file and the field.

Exit codes: 1 the failure happened for real (reproduced), 0 the run completed and its trace
conforms (not reproduced), 2 usage or input error (a message naming file and line, never a
traceback; so is a ``--trace-dir`` another run holds, named with its pid), 3 the run ended
otherwise (a runtime error, no outcome within ``--timeout``: ``stopped`` is "timeout"), 4 a
process of the run was killed (a signal, the OOM killer: verdict ``crashed``, never "reproduced").
``--timeout`` is the command's one clock (``lockstep.clock``): reading and checking the
counterexample, the run and the replay of its traces all count; ``--hang-timeout`` is how long a
blocked collective takes to count as a hang. With ``--json`` stdout carries one object
(``lockstep/schemas/reproduce.schema.json``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from lockstep.cli.failures import usage_error
from lockstep.cli.invocation import clock
from lockstep.clock import TIMEOUT
from lockstep.traces.claim_holder import refuse_claimed
from lockstep.traces.output import (
    DirectoryClaim,
    OutputError,
    claim_directory,
    claim_new_directory,
    holding_traces,
    make_directory,
    write_atomically,
    write_stdout,
)

EXIT_REPRODUCED, EXIT_CLEAN, EXIT_OTHER, EXIT_CRASHED = 1, 0, 3, 4
SCHEMA_VERSION = 1  # of reproduce's --json object


class ReproduceError(ValueError):
    """Input that cannot be reproduced (the message names the file and line, or the reason)."""


def read_counterexample(path: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and events of a model counterexample (``ReproduceError`` for anything else)."""
    from lockstep.traces.merge import open_traces
    from lockstep.traces.reader import TraceInputError

    try:
        trace = open_traces([path])
        events = [record.event for record in trace.records()]
    except TraceInputError as error:
        raise ReproduceError(str(error)) from None
    except OSError as error:
        raise ReproduceError(f"{path}:0: cannot read: {error.strerror or error}") from None
    header = trace.header
    if header["source"]["kind"] != "model":
        raise ReproduceError(
            f"{path}:1: a runtime recording, not a model counterexample "
            "(run it again with `lockstep run --choices`, or replay it)"
        )
    return header, events


def _check_path(path: str) -> None:
    """The counterexample is a path of its model: replayed against the model its header names, it
    does not diverge (an edited or corrupted file would otherwise drive the runtime somewhere the
    model never goes, and its outcome would be read as the counterexample's)."""
    from lockstep.checkers.conformance.judgement import replay_traces
    from lockstep.checkers.conformance.result import DIVERGES
    from lockstep.spec.protocol import UsageError
    from lockstep.traces.reader import TraceInputError

    try:
        result = replay_traces(path, trust_header=True).result  # its parameters: checked against the bounds already
    except (TraceInputError, UsageError) as error:
        raise ReproduceError(str(error)) from None
    if result.verdict == DIVERGES:
        explanation = result.explanation or {}
        event = explanation.get("event", {})
        raise ReproduceError(
            f"{explanation.get('file', path)}:{explanation.get('line', 0)}: event {result.event} "
            f"({event.get('actor')} {event.get('action')}) is not a step of the model: {explanation.get('reason', '')} "
            f"(`lockstep replay {path}` shows why)"
        )


def _trace_dir(arguments: argparse.Namespace) -> DirectoryClaim:
    """The run's trace folder, held by this process (``claim_directory``): ``--trace-dir``, or the
    first of ``lockstep-out/<counterexample>-reproduced``, ``...-2``, ... that no other run holds or
    filled; an ``OutputError`` (a ``ValueError``) naming a folder that cannot be used."""
    if arguments.trace_dir is not None:
        try:
            return claim_directory(arguments.trace_dir, holding_traces)
        except OutputError as error:
            raise ReproduceError(f"--trace-dir {error}") from None
    return claim_new_directory(
        Path("lockstep-out") / (Path(arguments.counterexample).stem + "-reproduced"), holding_traces
    )


def reproduction_plan(arguments: argparse.Namespace, header: dict[str, Any], events: list[dict[str, Any]]) -> Any:
    """The runtime protocol of the counterexample (``header``, ``events``) and its plan to run it,
    every check of the counterexample against its model passed (``ReproduceError`` otherwise); nothing
    is written. ``arguments`` gives ``counterexample`` (the file named in messages)."""
    from lockstep.impl.protocols import RUNTIME_PROTOCOLS

    protocol = RUNTIME_PROTOCOLS.get(str(header["protocol"]))
    file = arguments.counterexample
    if protocol is None:
        raise ReproduceError(
            f"{file}:1: the runtime has no protocol {header['protocol']!r}; it runs: {', '.join(RUNTIME_PROTOCOLS)}"
        )
    if header["variant"] not in protocol.variants:
        raise ReproduceError(
            f"{file}:1: the {protocol.name} runtime runs {', '.join(protocol.variants)}, "
            f"not variant {header['variant']!r}"
        )
    _check_parameters(file, header)  # before planning: a plan sizes its tables by them
    _check_path(file)
    try:
        plan = protocol.plan_reproduction(header, events)
    except (ValueError, KeyError, TypeError) as error:
        raise ReproduceError(f"{file}: {error}") from None
    _check_plan(file, protocol, plan)
    return protocol, plan


def reproduction_config(
    arguments: argparse.Namespace,
    header: dict[str, Any],
    events: list[dict[str, Any]],
    trace_dir: Path,
    planned: Any = None,
) -> Any:
    """The ``RunConfig`` that runs the counterexample (``header``, ``events``) as the protocol's plan
    says (``planned``: ``reproduction_plan``'s answer, else asked here), its choices written to
    ``trace_dir/choices.json`` (``lockstep test-runtime`` uses it too). ``arguments`` gives
    ``counterexample`` (the file named in messages), ``backend``, ``seed`` and ``hang_timeout``."""
    from lockstep.impl.runtime import RunConfig

    protocol, plan = planned or reproduction_plan(arguments, header, events)
    make_directory(trace_dir)  # an OutputError (a ValueError) names it
    choices = trace_dir / "choices.json"  # not *.jsonl: the trace directory holds only trace files
    write_atomically(
        choices, lambda file: file.writelines(json.dumps(choice.to_json()) + "\n" for choice in plan.choices)
    )
    return RunConfig(
        protocol=protocol.name,
        variant=str(header["variant"]),
        scenario=plan.scenario,
        ranks=plan.ranks,
        backend=arguments.backend,
        seed=arguments.seed,
        timeout=arguments.hang_timeout,
        trace_dir=str(trace_dir.resolve()),
        choices=str(choices.resolve()),
        extra=dict(plan.extra),
        **plan.settings,
    )


def _check_parameters(file: str, header: dict[str, Any]) -> None:
    """Every header parameter the model declares is an integer within the model's bounds."""
    from lockstep.models import get_protocol
    from lockstep.spec.protocol import UsageError

    try:
        model = get_protocol(str(header["protocol"]))
    except UsageError as error:
        raise ReproduceError(f"{file}:1: header: {error}") from None
    parameters = header["parameters"]
    for spec in model.parameters:
        if spec.name not in parameters:
            continue
        value = parameters[spec.name]
        if type(value) is not int:
            raise ReproduceError(f"{file}:1: header parameter {spec.name} must be an integer, got {value!r}")
        if spec.range_problem(value) is not None:
            bound = f"{spec.minimum} to {spec.maximum}" if spec.maximum is not None else f"at least {spec.minimum}"
            raise ReproduceError(
                f"{file}:1: header parameter {spec.name}={value} is out of the model's bounds ({bound})"
            )


def _check_plan(file: str, protocol: Any, plan: Any) -> None:
    """The run the plan asks for is one the runtime runs (its rank range, its settings' bounds;
    the plan's other fields come from parameters the model's bounds already limit)."""
    fewest, most = protocol.ranks
    if not fewest <= plan.ranks <= most:
        raise ReproduceError(
            f"{file}:1: header parameter ranks={plan.ranks}: the {protocol.name} runtime runs {fewest} to {most} ranks"
        )
    for name, setting in protocol.settings.items():
        value = plan.extra.get(name)
        if value is not None and (type(value) is not int or not setting.low <= value <= setting.high):
            raise ReproduceError(
                f"{file}:1: header parameter {name}={value!r}: the runtime runs {setting.low} to {setting.high}"
            )


def command_reproduce(arguments: argparse.Namespace, console: Any) -> int:
    """Reproduce the counterexample; the exit code (see the module doc)."""
    from lockstep.cli.runtime import check_devices

    timer = clock(arguments)  # --timeout: the whole command's (reading and planning count)
    try:
        if arguments.trace_dir is not None:  # who writes it, if anyone does, before its contents are judged
            refuse_claimed(arguments.trace_dir)
        with timer.alarm(f"reading {arguments.counterexample}"):
            header, events = read_counterexample(arguments.counterexample)
        with timer.alarm(f"checking {arguments.counterexample} against its model"):
            planned = reproduction_plan(arguments, header, events)
        check_devices(arguments.backend, planned[1].ranks)
        claim = _trace_dir(arguments)  # only now: a counterexample refused leaves no folder behind
    except ValueError as error:  # ReproduceError, RunUsageError, OutputError
        return usage_error(console, str(error), arguments)
    with claim as trace_dir:  # held until the run is over: no other run writes into it meanwhile
        try:
            config = reproduction_config(arguments, header, events, trace_dir, planned)
        except ValueError as error:  # OutputError: the choices file cannot be written
            return usage_error(console, str(error), arguments)
        return _reproduce(arguments, header, events, config, console)


def _reproduce(
    arguments: argparse.Namespace, header: dict[str, Any], events: list[dict[str, Any]], config: Any, console: Any
) -> int:
    """The run of ``command_reproduce``, its report and its exit code."""
    from lockstep.cli.runtime import deadline, replay_run
    from lockstep.impl.launcher import CRASHED, INCONCLUSIVE, launch

    timer = clock(arguments)

    wanted = header["parameters"].get("property")
    console.print(
        f"reproducing {arguments.counterexample} ({header['protocol']} {header['variant']} "
        f"{header['instance']}: {wanted or 'a violation'} in {len(events)} steps) with real processes, "
        f"{config.ranks} ranks, {config.backend}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    outcome = launch(config, deadline=timer.within(deadline(arguments.timeout, config)))
    console.print(
        f"run: {outcome.outcome} in {outcome.seconds:.2f} s ({outcome.events} events)", markup=False, highlight=False
    )
    if outcome.outcome != "completed":
        console.print(outcome.message, soft_wrap=True, markup=False, highlight=False)
    replayed = replay_run(config, console, timer)
    stopped = TIMEOUT if outcome.outcome == INCONCLUSIVE or (replayed or {}).get("stopped") else None
    violated = replayed is not None and replayed.get("verdict") == "violated"
    if outcome.outcome == CRASHED:  # killed by a signal (the OOM killer): the machine failed, not the protocol
        code, verdict = EXIT_CRASHED, "crashed"
        violated = False
    elif outcome.outcome == "hang diagnosed" or violated:
        code, verdict = EXIT_REPRODUCED, "reproduced"
    elif outcome.outcome == "completed":
        code, verdict = EXIT_CLEAN, "not reproduced"
    else:
        code, verdict = EXIT_OTHER, "inconclusive"
    what = []
    if outcome.outcome == "hang diagnosed":
        what.append(f"a real hang ({outcome.message})")
    if violated and replayed is not None:
        same = " (the counterexample's property)" if replayed.get("property") == wanted else ""
        what.append(f"the runtime's trace violates {replayed.get('property')}{same}")
    colour = {"reproduced": "red", "not reproduced": "green"}.get(verdict, "yellow")
    console.print(
        f"[bold {colour}]{verdict}[/bold {colour}]" + (": " + "; ".join(what) if what else ""),
        soft_wrap=True,
        highlight=False,
    )
    console.print(f"traces: {config.trace_dir}", markup=False, highlight=False)
    if arguments.json:
        payload = {
            "schema_version": SCHEMA_VERSION,
            "verdict": verdict,
            "exit_code": code,
            "stopped": stopped,
            "counterexample": arguments.counterexample,
            "protocol": config.protocol,
            "variant": config.variant,
            "property": wanted,
            "outcome": outcome.outcome,
            "message": outcome.message,
            "waits": outcome.waits,
            "seconds": round(outcome.seconds, 3),
            "events": outcome.events,
            "trace_dir": config.trace_dir,
            "replay": None
            if replayed is None
            else {key: replayed.get(key) for key in ("verdict", "event", "property", "model")},
        }
        write_stdout(json.dumps(payload) + "\n")
    return code
