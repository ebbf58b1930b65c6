"""The ``explore`` command and ``show --html``: the explorer (``lockstep.explore``) on the command line.

``lockstep explore PROTOCOL`` (with ``--variant``, ``--instance``, ``--set``, ``--ranks``, or
``--model-file PATH``) opens a model instance at its initial state; ``lockstep explore TRACE``
(a trace file or a directory of per-actor files) opens a counterexample or a recording, replayed
against the caller's model as ``lockstep replay`` replays it (``--model-file``, ``--variant``,
``--instance``, ``--set``, ``--profile``, ``--trust-header``). It serves the page on 127.0.0.1 at a
port the system picks and prints the URL (with the session's token) on stderr; the page's "export
trace" writes into ``--export-dir`` (default ``lockstep-out``). Ctrl-C stops the server: one line,
exit 0 (stopping is how a session ends; it leaves no verdict open); SIGTERM exits 143. Bad input
(a trace that cannot be read, a header replay refuses, an unknown protocol) exits 2 before the
server starts.

``lockstep show --html TRACE [-o OUT.html]`` writes the same view of a trace as one self-contained
HTML file (stdout without ``-o``; never over an input), stepping included and no actions to take.
Where replay refuses the trace (or with ``--no-replay``) the page has the events and no model
states, and stderr says why (exit 0), as ``show`` draws its picture without a highlight.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from lockstep.cli.failures import io_message, usage_error
from lockstep.cli.listing import one_protocol
from lockstep.explore.page import static_page
from lockstep.explore.recorded import events_document, read_events, recorded_session
from lockstep.explore.server import ExplorerServer
from lockstep.explore.session import Session
from lockstep.spec.protocol import Protocol, UsageError, parse_assignments
from lockstep.traces.merge import TraceInput, open_traces
from lockstep.traces.output import OutputError, write_output
from lockstep.traces.reader import TraceInputError

EXIT_OK, EXIT_USAGE = 0, 2
DEFAULT_EXPORT_DIRECTORY = Path("lockstep-out")


def _names_a_trace(target: str) -> bool:
    """Whether ``target`` names a trace (a path) rather than a protocol (a name without slashes)."""
    return target == "-" or os.path.exists(target) or target.endswith(".jsonl") or os.sep in target


def _model_file_protocol(arguments: argparse.Namespace) -> Protocol | None:
    if getattr(arguments, "model_file", None) is None:
        return None
    return one_protocol(argparse.Namespace(**{**vars(arguments), "protocol": None}))


def _recorded(trace: TraceInput, arguments: argparse.Namespace) -> Session:
    return recorded_session(
        trace,
        protocol=_model_file_protocol(arguments) or getattr(arguments, "protocol", None),
        variant=arguments.variant,
        instance=arguments.instance,
        parameters=parse_assignments(arguments.set),
        profile=arguments.profile,
        trust_header=arguments.trust_header,
    )


def _session(arguments: argparse.Namespace) -> Session:
    """The session ``arguments`` ask for: a trace's, or a model instance's at its initial state."""
    target = arguments.target
    if target is not None and _names_a_trace(target):
        if arguments.ranks is not None:
            raise UsageError("--ranks applies to a protocol; replay a trace against other sizes with --set NAME=VALUE")
        trace = open_traces([target])  # a runtime recording's refusal names its profile (replay_model)
        return _recorded(trace, argparse.Namespace(**{**vars(arguments), "protocol": None}))
    if target is None and arguments.model_file is None:
        raise UsageError("name a protocol (see `lockstep list`) or a trace file, or give --model-file PATH")
    if arguments.profile is not None or arguments.trust_header:
        raise UsageError("--profile and --trust-header apply to a trace, not to a protocol")
    protocol = one_protocol(argparse.Namespace(**{**vars(arguments), "protocol": target}))
    instance = protocol.instance(
        arguments.variant, arguments.instance, parse_assignments(arguments.set), arguments.ranks
    )
    return Session(instance)


def command_explore(arguments: argparse.Namespace, console: Console) -> int:
    try:
        session = _session(arguments)
    except TraceInputError as error:
        return usage_error(console, str(error), arguments, file=error.path, line=error.line)
    directory = arguments.export_dir if arguments.export_dir is not None else DEFAULT_EXPORT_DIRECTORY
    server = ExplorerServer(session, Path(directory))
    try:
        steps = len(session.path)
        what = f"{session.instance.label}" + (f", {steps} steps of {session.source['files'][0]}" if steps else "")
        console.print(f"lockstep explore: {escape(what)}", soft_wrap=True, highlight=False)
        console.print(f"  open {server.url}", soft_wrap=True, highlight=False, markup=False)
        console.print("  (this machine only; Ctrl-C stops the explorer)", highlight=False)
        server.serve_forever()
    except KeyboardInterrupt:
        console.print("lockstep: explorer stopped (Ctrl-C)", highlight=False)
        return EXIT_OK
    finally:
        server.server_close()
    return EXIT_OK


def command_show_html(arguments: argparse.Namespace, console: Console) -> int:
    """``show --html``: the trace's page, on stdout or into ``-o``."""
    try:
        if not arguments.html:
            raise UsageError("-o/--output applies to show --html (show alone draws in the terminal)")
        trace = open_traces(arguments.paths)
        read_events(trace)  # a trace that cannot be read is bad input (exit 2), not a refusal
        if arguments.no_replay:
            document = events_document(trace, "--no-replay")
        else:
            try:
                document = _recorded(trace, arguments).document(interactive=False)
            except TraceInputError as error:  # replay refuses the header: the events, no states
                why = f"replay refuses the trace: {error}"
                console.print(f"[yellow]lockstep: warning:[/yellow] {escape(why)}", soft_wrap=True)
                document = events_document(trace, why)
        page = static_page(document)
        write_output(arguments.output, lambda file: file.write(page), trace.files)
    except TraceInputError as error:
        return usage_error(console, str(error), arguments, file=error.path, line=error.line)
    except (UsageError, OutputError) as error:
        return usage_error(console, str(error), arguments)
    except BrokenPipeError:
        raise  # the reader of stdout went away (lockstep.cli.failures stops quietly)
    except OSError as error:
        return usage_error(console, io_message(error), arguments)
    for warning in trace.warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(warning)}", soft_wrap=True)
    if arguments.output is not None:
        console.print(f"wrote {escape(str(arguments.output))} (html, {len(document['steps'])} steps)", highlight=False)
    return EXIT_OK
