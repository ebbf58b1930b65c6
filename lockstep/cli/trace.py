"""The trace commands of ``lockstep``: ``replay`` (conformance against a model) and ``trace merge``.

``command_replay`` and ``command_trace`` run them (their options: ``lockstep.cli.commands``) and
return the exit code: 0 conforms (or merged), 1 violated or diverges, 2 bad input (one message
naming the file, line and problem; never a traceback), 3 the candidate set outgrew
``--max-candidates`` or lacks evidence (below). Human output goes to stderr; with ``--json`` stdout carries one JSON
object
``{schema_version, verdict, event, property, explanation, longest_conforming_prefix,
candidate_states_max, ...}`` (``lockstep/schemas/replay.schema.json``). A final line cut short by
a killed run is a warning; the events before it decide the exit code.

The model is the caller's (``lockstep.checkers.conformance.judgement``): protocol and variant from
``--protocol`` / ``--variant`` (else the header's), the instance from ``--instance``, parameters
from ``--set NAME=VALUE`` or a recorder ``--profile`` (else the instance's; the header may supply
only the parameters that size the run, such as ranks), unrecorded actions from ``--unrecorded``
and the profile. A header value that would widen the check (another ``hang_bound``, an
``unrecorded`` entry the caller did not give) is bad input unless ``--trust-header``. A trace
with no events, or none from an expected actor (``--expect-actor``; default every rank), or that
stops before a final state under ``--require-complete``, is inconclusive (exit 3).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from lockstep.checkers.conformance.judgement import ReplayVerdict, replay_traces
from lockstep.checkers.conformance.replay import ReplayResult
from lockstep.cli.failures import io_file, usage_error
from lockstep.spec.protocol import Instance, Protocol, UsageError, parse_assignments
from lockstep.traces.merge import TraceInput, merge_to_file, open_traces
from lockstep.traces.output import write_stdout
from lockstep.traces.reader import TraceInputError

if TYPE_CHECKING:
    from lockstep.checkers.flight_recorder.model_check import ModelCheck
    from lockstep.traces.flight_recorder import FlightRecorderDirectory

EXIT_OK = 0
SCHEMA_VERSION = 1  # of replay's --json object


def _error(console: Console, message: str, arguments: argparse.Namespace) -> int:
    return usage_error(console, message, arguments)


def _trace_error(console: Console, error: TraceInputError, arguments: argparse.Namespace) -> int:
    """A trace that cannot be read: the message, and with ``--json`` its file and line in the error object."""
    return usage_error(console, str(error), arguments, file=error.path, line=error.line)


def _warn(console: Console, warnings: list[str]) -> None:
    for warning in warnings:
        console.print(f"[yellow]lockstep: warning:[/yellow] {escape(warning)}", soft_wrap=True)


def command_replay(arguments: argparse.Namespace, console: Console) -> int:
    if arguments.flight_recorder is not None:
        return _replay_flight_recorder(arguments, console)
    if not arguments.paths:
        return _error(console, "replay needs trace files (PATH...) or --flight-recorder DIR", arguments)
    if arguments.operations or arguments.mapping or arguments.max_states != 200_000:
        return _error(console, "--operations, --mapping and --max-states apply to --flight-recorder", arguments)
    try:
        protocol = _replayed_protocol(arguments)
        trace = open_traces(arguments.paths)
        verdict = replay_traces(
            trace,
            protocol=protocol,
            variant=arguments.variant,
            instance=arguments.instance,
            parameters=parse_assignments(arguments.set),
            unrecorded=arguments.unrecorded,
            profile=arguments.profile,
            trust_header=arguments.trust_header,
            expected_actors=list(arguments.expect_actor) if arguments.expect_actor else None,
            require_complete=arguments.require_complete,
            guard_coverage=arguments.guard_coverage,
            max_candidates=arguments.max_candidates,
            closure_depth=arguments.closure_depth,
        )
    except TraceInputError as error:
        return _trace_error(console, error, arguments)
    except UsageError as error:
        return _error(console, str(error), arguments)
    except OSError as error:
        file = io_file(error, ", ".join(map(str, arguments.paths)))
        return usage_error(console, f"{file}:0: cannot read: {error.strerror or error}", arguments, file=file)
    result, instance = verdict.result, verdict.instance
    _warn(console, trace.warnings)
    if arguments.json:
        payload = {"schema_version": SCHEMA_VERSION, **verdict.to_json()}
        write_stdout(json.dumps(payload) + "\n")
    else:
        _render(console, result, instance, trace)
        _render_evidence(console, verdict)
    code: int = result.exit_code
    return code


def _replayed_protocol(arguments: argparse.Namespace) -> str | Protocol | None:
    """``--protocol``'s name, or the protocol ``--model-file`` defines (the two must agree)."""
    if getattr(arguments, "model_file", None) is None:
        return str(arguments.protocol) if arguments.protocol else None
    from lockstep.cli.listing import one_protocol

    return one_protocol(arguments)


def _replay_flight_recorder(arguments: argparse.Namespace, console: Console) -> int:
    """Exit 0 when the dumps are consistent, 1 for a hang, desync or divergence, 2 for unreadable
    input (the message names the file; its control characters escaped), 3 when nothing could be
    compared (gloo groups with one poster; a model check that maps no group) or the model check's
    search bound came first."""
    from lockstep.checkers.flight_recorder.diagnosis import diagnose
    from lockstep.cli.flight_recorder_report import diagnosis_to_json, render, render_model_check
    from lockstep.traces.flight_recorder import FlightRecorderError, read_directory
    from lockstep.traces.swimlanes import printable

    if (
        arguments.paths
        or arguments.unrecorded
        or arguments.set
        or arguments.profile
        or arguments.trust_header
        or arguments.expect_actor
        or arguments.require_complete
        or arguments.guard_coverage
    ):
        return _error(
            console,
            "--flight-recorder takes no trace files or trace options (--set, --unrecorded, --profile, ...); "
            "it takes --protocol, --variant, --instance, --mapping and --max-states",
            arguments,
        )
    if arguments.protocol is None and (arguments.variant or arguments.instance or arguments.mapping):
        return _error(
            console,
            "--variant, --instance and --mapping check the dumps against a model: name it with --protocol",
            arguments,
        )
    try:
        directory = read_directory(arguments.flight_recorder)
        diagnosis = diagnose(directory)
        check = None if arguments.protocol is None else _check_flight_recorder(arguments, directory)
    except FlightRecorderError as error:
        return usage_error(console, printable(str(error)), arguments, file=error.path)
    except UsageError as error:
        return _error(console, printable(str(error)), arguments)
    if arguments.json:
        payload = {"schema_version": SCHEMA_VERSION, **diagnosis_to_json(diagnosis)}
        if check is not None:
            payload["model_check"] = check.to_json()
        write_stdout(json.dumps(payload) + "\n")
    else:
        write_stdout(render(diagnosis, operations=arguments.operations))
        if check is not None:
            write_stdout(render_model_check(check))
    code: int = diagnosis.exit_code if check is None else check.exit_code
    return code


def _check_flight_recorder(arguments: argparse.Namespace, directory: FlightRecorderDirectory) -> ModelCheck:
    """The dumps against ``--protocol``'s model, mapped by ``--mapping``, else by the mapping file
    ``lockstep run --flight-recorder`` wrote beside them (when it ran the same protocol), else guessed."""
    from lockstep.checkers.flight_recorder.model_check import check_dumps, model_instance
    from lockstep.checkers.flight_recorder.projection import find_mapping, read_mapping
    from lockstep.models import get_protocol

    notes = []
    path = arguments.mapping
    mapping = None if path is None else read_mapping(path)
    found = find_mapping(arguments.flight_recorder) if path is None else None
    if found is not None:
        beside = read_mapping(found)
        if beside.protocol in (None, arguments.protocol):
            mapping, path = beside, str(found)
            notes.append(
                f"mapping read from {found}, which lockstep run wrote beside the dumps (--mapping FILE: another)"
            )
        else:
            notes.append(f"{found} maps the groups of a {beside.protocol} run: not used; the mapping is guessed")
    model = model_instance(
        get_protocol(arguments.protocol), arguments.variant, arguments.instance, len(directory.dumps)
    )
    check = check_dumps(
        directory,
        model,
        mapping=None if mapping is None else mapping.groups,
        mapping_file=path,
        acknowledged=() if mapping is None else mapping.acknowledged,
        runtime_only=() if mapping is None else mapping.runtime_only,
        max_states=arguments.max_states,
    )
    check.notes[:0] = notes
    return check


def _render(console: Console, result: ReplayResult, instance: Instance, trace: TraceInput) -> None:
    files = ", ".join(trace.files) if len(trace.files) <= 3 else f"{len(trace.files)} files"
    model = escape(instance.label)
    if result.verdict == "conforms":
        console.print(
            f"[bold green]conforms[/bold green]: {result.events} events of {escape(files)} follow {model}; "
            f"at most {result.candidate_states_max} candidate states"
        )
    elif result.verdict == "violated":
        console.print(
            f"[bold red]violated[/bold red]: {result.failed_property} fails after event {result.event}; "
            f"the {result.longest_conforming_prefix} events replayed follow {model}"
        )
    elif result.verdict == "inconclusive":
        detail = (result.explanation or {}).get("detail", "")
        console.print(f"[bold yellow]inconclusive[/bold yellow]: {escape(detail)}")
    else:
        explanation = result.explanation or {}
        event = explanation.get("event", {})
        where = f"{explanation.get('file')}:{explanation.get('line')}"
        console.print(
            f"[bold red]diverges[/bold red] at event {result.event} ({escape(where)}) from {model}: "
            f"{escape(str(event.get('actor')))} {escape(str(event.get('action')))} "
            f"{escape(json.dumps(event.get('args', {})))}"
        )
        console.print(f"  {escape(str(explanation.get('reason', '')))}")
        for number, candidate in enumerate(explanation.get("candidates", []), start=1):
            console.print(f"  candidate {number} of {explanation.get('candidate_count')}:")
            for reason in candidate["why"]:
                console.print(f"    - {escape(reason)}")
            state = ", ".join(f"{name}={value}" for name, value in candidate["state"].items())
            console.print(f"    state: {escape(state)}", soft_wrap=True)
        if result.failed_property is not None:
            console.print(f"  (earlier, {result.failed_property} failed: a violation within the conforming prefix)")
        console.print(f"  longest conforming prefix: {result.longest_conforming_prefix} events")
    if result.witnessed:
        seen = ", ".join(f"{name} after event {index}" for name, index in result.witnessed.items())
        console.print(f"  witnessed: {escape(seen)}")


def _render_evidence(console: Console, verdict: ReplayVerdict) -> None:
    actors = ", ".join(f"{actor} {count}" for actor, count in verdict.coverage.events_per_actor.items())
    console.print(f"  events per actor: {escape(actors or 'none')}", soft_wrap=True)
    if verdict.exemptions:
        exempt = ", ".join(f"{item.name} ({item.origin})" for item in verdict.exemptions)
        console.print(f"  exempt: {escape(exempt)}", soft_wrap=True)
    if verdict.coverage.witnesses_missed:
        console.print(
            f"  witnesses not reached: {escape(', '.join(verdict.coverage.witnesses_missed))}", soft_wrap=True
        )


def command_trace(arguments: argparse.Namespace, console: Console) -> int:
    if arguments.trace_command != "merge":
        return _error(console, "name a trace command: merge", arguments)
    from lockstep.traces.output import OutputError, check_target

    try:
        check_target(arguments.output)
        count, warnings = merge_to_file(arguments.paths, arguments.output)
    except OutputError as error:
        return _error(console, f"-o {error}", arguments)
    except TraceInputError as error:
        return _trace_error(console, error, arguments)
    except OSError as error:
        return _error(console, f"{io_file(error)}:0: cannot read or write: {error.strerror or error}", arguments)
    _warn(console, warnings)
    console.print(f"merged {count} events into {escape(str(arguments.output))}")
    return EXIT_OK
