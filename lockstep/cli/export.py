"""The picture commands of ``lockstep``: ``show`` (swimlanes), ``export`` (Perfetto, ITF, DOT,
GraphML) and ``graph`` (an instance's state graph).

``show TRACE...`` draws the run in the terminal: time runs down, one column per actor, and one
for the source function(s) each event's model action stands for (when the model names them); a
collective's ``enter`` and ``complete`` sit in each member's column with the op's name and number,
and a communicator's own completion step (in model traces) is drawn across every member's column.
The event where the run goes wrong is highlighted: the last event of a model counterexample
(its header names the property), or, for a recording, the event where replay finds a violation or
a divergence. ``export`` writes to ``-o FILE`` or stdout. Bad input exits 2 with a message naming
the file and line; ITF of a trace without full states exits 2.

**The model is the caller's**, chosen as ``lockstep replay`` chooses it (``--protocol`` or
``--model-file``, ``--variant``, ``--instance``, ``--set``, ``--profile``, ``--trust-header``; see
``lockstep.checkers.conformance.model_choice``), and the highlight comes from the one replay path
(``lockstep.checkers.conformance.judgement.replay_traces``). A recording of ``lockstep run`` replays with
``--profile runtime`` (its header's ``settle_before_resume``, ``hang_bound``, ... are the runtime
profile's, not the default instance's). Where replay refuses the trace (a header that would widen
the check, without ``--trust-header``), ``show`` still draws the picture, without the highlight,
and says why on stderr (exit 0); ``export --format itf``, whose states are the model's, exits 2.

``export --format perfetto`` and ``--format dot`` mark where the run goes wrong and what changed
(``lockstep.checkers.export.trace_annotations``): a model counterexample's violated property (its
header names it) after its last event, a recording's violation or divergence as replay finds it
(at most ``REPLAY_LIMIT`` events); where replay refuses the trace they are written unmarked and
stderr says why. ``graph`` (``--model-file``, ``--variant``, ``--instance``, ``--set``, ``--ranks``)
fills the states that violate a safety property red and names the properties.

``show`` and ``export`` stream (see ``lockstep.traces.swimlanes``, ``lockstep.traces.export`` and
``checkers.export.write_itf``): memory stays flat in the trace's length. ``show`` reads the input
two or three times (the picture's shape, replay when the trace has at most ``REPLAY_LIMIT`` events,
the rows); only a model counterexample of at most ``REPLAY_LIMIT`` events is held whole, to be
re-run through its model. ``graph`` draws a state graph, which it holds whole: ``--max-states``
bounds it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from lockstep.checkers.conformance.judgement import replay_traces
from lockstep.checkers.conformance.model_choice import recorder_profile, resolve_model
from lockstep.checkers.counterexample import blocked_summary
from lockstep.checkers.export import ExportError, state_graph, to_dot, trace_annotations, write_itf
from lockstep.checkers.result import Path as ResultPath
from lockstep.checkers.result import Step
from lockstep.cli.failures import io_message
from lockstep.cli.listing import one_protocol
from lockstep.cli.report import described, swimlanes
from lockstep.models import get_protocol
from lockstep.spec.machine import Machine
from lockstep.spec.protocol import Instance, Protocol, UsageError, parse_assignments
from lockstep.spec.semantics import InterpretedSystem
from lockstep.spec.trace_values import decode
from lockstep.traces.export import Annotations, Violation, write_dot, write_graphml, write_perfetto
from lockstep.traces.merge import TraceInput, open_traces
from lockstep.traces.output import OutputError, refuse_inputs, write_atomically, write_output, write_stdout
from lockstep.traces.reader import Record, TraceInputError
from lockstep.traces.swimlanes import survey, write_swimlanes

EXIT_OK, EXIT_USAGE, EXIT_INCONCLUSIVE = 0, 2, 3
REPLAY_LIMIT = 20_000  # events: above this, ``show`` does not replay to find the failing event


def _judge(arguments: argparse.Namespace, header: dict[str, Any]) -> dict[str, Any]:
    """The caller's choice of model (``replay``'s options), checked before any event is read: a name
    that is not a protocol, variant, instance, parameter or profile of the protocol the caller names
    (or the trace's header names, if the caller names none) is the caller's bad input (exit 2)."""
    named: str | Protocol | None = arguments.protocol
    if arguments.model_file is not None:
        named = one_protocol(arguments)  # the file's protocol; --protocol, if given, must be its name
    judge: dict[str, Any] = {
        "protocol": named,
        "variant": arguments.variant,
        "instance": arguments.instance,
        "parameters": parse_assignments(arguments.set),
        "profile": arguments.profile,
        "trust_header": arguments.trust_header,
    }
    chosen = arguments.variant or arguments.instance or arguments.set or arguments.profile
    if named is None and not chosen:
        return judge  # the header's model: replay says whether it takes the trace
    protocol = named if isinstance(named, Protocol) else get_protocol(str(named or header.get("protocol")))
    if arguments.variant is not None:
        protocol.variant(arguments.variant)
    if arguments.instance is not None:
        protocol.instance_spec(arguments.instance)
    for name in judge["parameters"]:
        protocol.parameter(name)
    if arguments.profile is not None:
        recorder_profile(arguments.profile, protocol.name)
    return judge


def _model(trace: TraceInput, judge: dict[str, Any]) -> tuple[Instance | None, str]:
    """The caller's model of ``trace`` (``lockstep.checkers.conformance.model_choice``), or None and why replay
    refuses it (a header that would widen the check, a header naming no model)."""
    try:
        return resolve_model(trace, **judge).instance, ""
    except (TraceInputError, UsageError) as error:  # a runtime recording's says to use its profile
        return None, str(error)


def _write(text: str, output: Path | None, inputs: Sequence[str | Path]) -> None:
    """``text`` to stdout, or all at once to ``output`` (never over an input; a failure leaves it as it was)."""
    if output is None:
        write_stdout(text)  # a reader gone away is found here (exit 141), not in the interpreter's last flush
    else:
        refuse_inputs(output, inputs)
        write_atomically(output, lambda file: file.write(text))


def _failing_event(trace: TraceInput, judge: dict[str, Any]) -> tuple[int | None, str, bool]:
    """The event to highlight and why, from replay against the caller's model (``replay_traces``,
    the one replay path): a violation or a divergence; and False when replay refused the trace."""
    try:
        verdict = replay_traces(trace, **judge)
    except (TraceInputError, UsageError) as error:
        return None, str(error), False
    result = verdict.result
    if result.verdict == "violated":
        return result.event, f"{result.failed_property} is violated after event {result.event}", True
    if result.verdict == "diverges":
        return result.event, f"the run diverges from {verdict.instance.label} at event {result.event}", True
    return None, f"replay against {verdict.instance.label}: {result.verdict}", True


def _model_path(instance: Instance, records: list[Record], loop_start: object) -> tuple[Machine, ResultPath] | None:
    """A model counterexample re-run through its model (None if an event is not a model step)."""
    machine = instance.machine()
    system = InterpretedSystem(machine)
    current = system.initial()
    steps = []
    for record in records:
        event = record.event
        try:
            action = machine.action_named(str(event["action"]))
            position = machine.actions.index(action)
            arguments = tuple(
                decode(parameter.sort, event["args"].get(parameter.name), parameter.name)
                for parameter in action.parameters
            )
        except (KeyError, ValueError):
            return None
        found = next(
            (t for t in system.transitions(current) if t.action == position and t.arguments == arguments), None
        )
        if found is None:
            return None
        named = {parameter.name: value for parameter, value in zip(action.parameters, arguments)}
        steps.append(Step(action.name, action.actor_for(named), named, found.target))
        current = found.target
    return machine, ResultPath(system.initial(), tuple(steps), loop_start if isinstance(loop_start, int) else None)


def command_show(arguments: argparse.Namespace, console: Console) -> int:
    """The swimlanes of a trace, on stdout (a picture is the command's result); why replay refused
    the trace, and errors, on stderr (``console``)."""
    trace = open_traces(arguments.paths)
    judge = _judge(arguments, trace.header)
    errors, console = console, Console(width=None if sys.stdout.isatty() else 160, emoji=False)
    header = trace.header
    model, refused = _model(trace, judge)
    mirrors = _mirrors(model, trace, judge)
    layout = survey(header, trace.records(), mirrors, console.width)  # every line checked before drawing
    if model is not None and header["source"]["kind"] == "model" and layout.events <= REPLAY_LIMIT:
        records = list(trace.records())  # re-run through the caller's model, as `lockstep check` draws it
        parameters = header.get("parameters", {})
        rebuilt = _model_path(model, records, parameters.get("loop_start"))
        if rebuilt is not None:
            machine, path = rebuilt
            prop = parameters.get("property")
            title = f"{header['protocol']} {header['variant']} {header.get('instance') or ''}: " + (
                f"counterexample of {prop} ({path.length} steps)" if isinstance(prop, str) else f"{path.length} steps"
            )
            console.print(swimlanes(machine, path, title))
            blocked = blocked_summary(machine, path)
            if blocked:
                console.print(f"at the end: {escape(blocked)}")
            if isinstance(prop, str):
                sentence = described(machine, prop)
                console.print(
                    f"[bold red]{escape(prop)} is violated at step {path.length}[/bold red]"
                    + (f": {escape(sentence)}" if sentence else "")
                )
            return EXIT_OK
    highlight, why, replayed = None, "", True
    if model is None:
        replayed = arguments.no_replay
        why = "" if arguments.no_replay else f"no highlight: replay refuses the trace: {refused}"
    elif not arguments.no_replay and layout.events <= REPLAY_LIMIT:
        highlight, why, replayed = _failing_event(trace, judge)
        if not replayed:
            why = f"no highlight: replay refuses the trace: {why}"
    console.file.flush()
    write_swimlanes(layout, trace.records(), sys.stdout, highlight, color=console.is_terminal and not console.no_color)
    sys.stdout.flush()
    for warning in trace.warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(warning)}")
    if not replayed:
        errors.print(f"[yellow]lockstep: warning:[/yellow] {escape(why)}", soft_wrap=True)
    elif why:
        console.print(("[bold red]" if highlight is not None else "[green]") + escape(why) + "[/]")
    return EXIT_OK


def _mirrors(model: Instance | None, trace: TraceInput, judge: dict[str, Any]) -> dict[str, str]:
    """The source function(s) each action stands for: the caller's model's, else (replay refused the
    trace; the names label the picture, they judge nothing) its protocol's default instance's."""
    try:
        if model is None:
            header, named = trace.header, judge["protocol"]
            protocol = named if isinstance(named, Protocol) else get_protocol(str(named or header["protocol"]))
            model = protocol.instance(str(judge["variant"] or header["variant"]))
        machine = model.machine()
    except (KeyError, UsageError, ValueError):
        return {}
    return {action.name: action.mirrors for action in machine.actions if action.mirrors}


def _violation(machine: Machine, trace: TraceInput, judge: dict[str, Any]) -> tuple[Violation | None, str]:
    """Where the run goes wrong, and why it is not known ("" when it is, or the run conforms): a
    model counterexample's property (its header's) after its last event, else replay's violation
    or divergence, for a trace of at most ``REPLAY_LIMIT`` events."""
    header = trace.header
    prop = header.get("parameters", {}).get("property")
    if header["source"]["kind"] == "model":
        if not isinstance(prop, str):
            return None, ""  # a path that violates nothing (taken in lockstep explore, say)
        return Violation(f"{prop} is violated", described(machine, prop), prop), ""
    if sum(1 for _ in trace.records()) > REPLAY_LIMIT:
        return None, f"no violation marked: the trace has more than {REPLAY_LIMIT:,} events to replay"
    try:
        verdict = replay_traces(trace, **judge)
    except (TraceInputError, UsageError) as error:
        return None, f"no violation marked: replay refuses the trace: {error}"
    result = verdict.result
    if result.verdict == "violated" and result.failed_property is not None:
        failed = result.failed_property
        return Violation(f"{failed} is violated", described(machine, failed), failed, result.event), ""
    if result.verdict == "diverges":
        reason = str((result.explanation or {}).get("reason", ""))
        return Violation(f"the run diverges from {verdict.instance.label}", reason, None, result.event), ""
    return None, ""


def _annotations(trace: TraceInput, judge: dict[str, Any]) -> tuple[Annotations | None, str]:
    """What the caller's model adds to a Perfetto or DOT export (see the module doc), or None and why."""
    model, refused = _model(trace, judge)
    if model is None:
        return None, f"no violation or state changes marked: replay refuses the trace: {refused}"
    machine = model.machine()
    violation, why = _violation(machine, trace, judge)
    return trace_annotations(machine, violation), why


def _inputs(arguments: argparse.Namespace, trace: TraceInput) -> list[str | Path]:
    """What ``-o`` may not overwrite: the traces, and the model file."""
    return [*trace.files, *([arguments.model_file] if arguments.model_file is not None else [])]


def command_export(arguments: argparse.Namespace, console: Console) -> int:
    trace = open_traces(arguments.paths)
    header = trace.header
    judge = _judge(arguments, header)
    inputs = _inputs(arguments, trace)
    if arguments.format == "itf":  # the states are the caller's model's: a refusal is bad input (exit 2)
        machine = resolve_model(trace, **judge).instance.machine()
        write_output(arguments.output, lambda file: write_itf(machine, header, trace.records(), file), inputs)
    elif arguments.format == "graphml":
        write_output(arguments.output, lambda file: write_graphml(header, trace.records(), file), inputs)
    else:
        annotations, why = _annotations(trace, judge)
        if why:
            console.print(f"[yellow]lockstep: warning:[/yellow] {escape(why)}", soft_wrap=True)
        writer = write_perfetto if arguments.format == "perfetto" else write_dot
        write_output(
            arguments.output, lambda file: writer(header, trace.records(), file, annotations=annotations), inputs
        )
    for warning in trace.warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(warning)}")
    if arguments.output is not None:
        console.print(f"wrote {arguments.output} ({arguments.format})")
    return EXIT_OK


def command_graph(arguments: argparse.Namespace, console: Console) -> int:
    import networkx as nx

    if arguments.max_states <= 0:
        raise UsageError(f"--max-states must be positive, got {arguments.max_states}")
    protocol = one_protocol(arguments)
    instance = protocol.instance(
        arguments.variant, arguments.instance, parse_assignments(arguments.set), arguments.ranks
    )
    graph, complete = state_graph(instance.machine(), arguments.max_states)
    if arguments.format == "dot":
        text = to_dot(graph)
    else:
        text = "\n".join(nx.generate_graphml(graph)) + "\n"
    _write(text, arguments.output, [arguments.model_file] if arguments.model_file is not None else [])
    violating = sum(1 for _, data in graph.nodes(data=True) if data.get("violates"))
    console.print(
        f"{instance.label}: {graph.number_of_nodes():,} states, {graph.number_of_edges():,} edges"
        + (f", {violating:,} violating a safety property (red)" if violating else "")
        + ("" if complete else f" (cut at --max-states {arguments.max_states}: the graph is partial)")
    )
    return EXIT_OK if complete else EXIT_INCONCLUSIVE


def run_export_command(arguments: argparse.Namespace, console: Console) -> int:
    """Dispatch with this module's error handling: bad input is one message and exit 2."""
    commands = {"show": command_show, "export": command_export, "graph": command_graph}
    try:
        return commands[arguments.command](arguments, console)
    except (TraceInputError, ExportError, UsageError, OutputError) as error:
        console.print(f"[bold red]lockstep: error:[/bold red] {escape(str(error))}")
        return EXIT_USAGE
    except BrokenPipeError:
        raise  # the reader of stdout went away: not an input error (lockstep.cli.failures stops quietly)
    except OSError as error:  # its file named: the one the error names, or stdout
        console.print(f"[bold red]lockstep: error:[/bold red] {escape(io_message(error))}")
        return EXIT_USAGE
