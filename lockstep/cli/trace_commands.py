"""The options of ``lockstep``'s trace commands (``replay``, ``trace merge``, ``show``, ``export``,
``graph``), declared with click.

As ``lockstep.cli.commands`` (whose shared options these reuse): this module imports only click and
the completion functions, and each callback returns the ``Invocation`` of the command's body.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from lockstep.cli import completion
from lockstep.cli.commands import (
    FILE,
    TRACE_FORMATS,
    json_option,
    judge_options,
    protocol_argument,
    ranks_option,
    set_option,
)
from lockstep.cli.invocation import Invocation, call
from lockstep.cli.numbers import NON_NEGATIVE, POSITIVE_INTEGER


@click.command("replay")
@click.argument("paths", nargs=-1, metavar="PATH...", type=click.Path())
@click.option(
    "--flight-recorder",
    metavar="DIR",
    type=click.Path(),
    help="diagnose PyTorch flight-recorder dumps (one per rank, pickle or JSON; DIR, or one dump file) instead of "
    "traces: per process group, where the ranks disagree and who waits where; with --protocol, check them against "
    "the model. A directory lockstep run --flight-recorder wrote is read with its nccl/ dumps and its mapping file",
)
@click.option("--operations", is_flag=True, help="with --flight-recorder: list every rank's ops per group")
@click.option(
    "--mapping",
    metavar="FILE",
    type=click.Path(),
    help="with --flight-recorder and --protocol: a JSON file naming each dump group's model communicator "
    "(default: the flight-recorder-mapping.json lockstep run --flight-recorder wrote beside the dumps, else guessed)",
)
@click.option(
    "--max-states",
    type=POSITIVE_INTEGER,
    default=200_000,
    metavar="N",
    help="with --flight-recorder and --protocol: the search bound, in (model state, progress) pairs "
    "(default 200000; past it exit 3)",
)
@click.option(
    "--protocol",
    metavar="NAME",
    shell_complete=completion.protocols,
    help="replay against this protocol instead of the header's",
)
@click.option(
    "--model-file",
    type=click.Path(path_type=Path),
    metavar="PATH",
    help="replay against the model a Python file defines (its PROTOCOL; an overlay's counterexample, say)",
)
@click.option(
    "--variant",
    metavar="NAME",
    shell_complete=completion.variants,
    help="replay against this variant instead of the header's",
)
@click.option(
    "--max-candidates",
    type=POSITIVE_INTEGER,
    default=100_000,
    metavar="K",
    help="stop (exit 3) when more model states than this fit the events (default 100000)",
)
@click.option(
    "--closure-depth",
    type=NON_NEGATIVE,
    default=16,
    metavar="N",
    help="unrecorded steps allowed between two recorded events (default 16)",
)
@click.option(
    "--unrecorded",
    multiple=True,
    metavar="NAME",
    help="an action, actor or actor kind ('group:*') the trace does not record (repeatable)",
)
@click.option("--instance", metavar="NAME", help="replay against this instance of the model (default: its default)")
@click.option(
    "--set",
    "set",
    multiple=True,
    metavar="NAME=VALUE",
    help="a model parameter's value (repeatable); the header may not widen the check past it",
)
@click.option(
    "--profile",
    metavar="NAME",
    help="the recorder profile the trace was written under: runtime (lockstep run) or vllm-dp-pause",
)
@click.option(
    "--trust-header",
    is_flag=True,
    help="take the header's parameters and unrecorded actions even where they widen the check",
)
@click.option(
    "--expect-actor",
    multiple=True,
    metavar="ACTOR",
    help="an actor the trace must have events from (repeatable; default: every rank)",
)
@click.option(
    "--guard-coverage",
    is_flag=True,
    help="report each guard conjunct as seen true and false along the trace (coverage.guards)",
)
@click.option(
    "--require-complete",
    is_flag=True,
    help="a trace that stops before a final state of the model is inconclusive (exit 3)",
)
@json_option
def replay(**options: Any) -> Invocation:
    """Replay trace files (PATH: files, or a directory of per-actor files, merged in causal order) against the
    model their header names; or diagnose a hang from flight-recorder dumps (--flight-recorder DIR)."""
    return call("lockstep.cli.trace:command_replay", "replay", options)


@click.group("trace", invoke_without_command=True)
@click.pass_context
def trace(ctx: click.Context) -> None:
    """Trace file tools (merge)."""
    if ctx.invoked_subcommand is None:
        raise click.UsageError("name a trace command: merge", ctx)


@trace.command("merge")
@click.argument("paths", nargs=-1, required=True, metavar="PATH...", type=click.Path())
@click.option("-o", "--output", required=True, metavar="FILE", type=click.Path(), help="the merged trace to write")
def merge(**options: Any) -> Invocation:
    """Merge per-actor trace files (PATH: a directory of *.jsonl files, or the files) into one file in causal order."""
    return call("lockstep.cli.trace:command_trace", "trace", options, trace_command="merge")


@click.command("show")
@click.argument("paths", nargs=-1, required=True, metavar="TRACE...", type=click.Path())
@click.option("--no-replay", is_flag=True, help="do not replay a recording to find its failing event")
@click.option(
    "--html",
    is_flag=True,
    help="write one self-contained HTML page instead (the explorer's view: step through the trace, no server)",
)
@click.option("-o", "--output", type=FILE, metavar="FILE", help="with --html: where to write (default: stdout)")
@judge_options
def show(**options: Any) -> Invocation:
    """Draw a trace (TRACE: trace files or a trace directory) as per-actor swimlanes on stdout, the event where
    replay against the caller's model (as `lockstep replay` chooses it) finds the failure highlighted. A recording of
    `lockstep run` replays with --profile runtime; where replay refuses, the picture has no highlight and stderr says
    why. With --html, the same view as `lockstep explore` in one HTML file (-o, else stdout)."""
    html = options["html"] or options["output"] is not None
    return call(
        "lockstep.cli.explore:command_show_html" if html else "lockstep.cli.export:run_export_command", "show", options
    )


@click.command("export")
@click.argument("paths", nargs=-1, required=True, metavar="TRACE...", type=click.Path())
@click.option(
    "--format",
    "format",
    required=True,
    type=click.Choice(TRACE_FORMATS),
    help="perfetto: ui.perfetto.dev; itf: Apalache/Quint (full states only)",
)
@click.option("-o", "--output", type=FILE, metavar="FILE", help="where to write (default: stdout)")
@judge_options
def export(**options: Any) -> Invocation:
    """Write a trace (TRACE: trace files or a trace directory) as Perfetto trace events, ITF, DOT or GraphML."""
    return call("lockstep.cli.export:run_export_command", "export", options)


@click.command("graph")
@protocol_argument
@click.option(
    "--model-file", type=FILE, metavar="PATH", help="the model a Python file defines, instead of a built-in one"
)
@click.option("--variant", metavar="NAME", shell_complete=completion.variants, help="default: post-fix")
@click.option("--instance", metavar="NAME", shell_complete=completion.instances, help="default: seed")
@set_option
@ranks_option
@click.option("--format", "format", required=True, type=click.Choice(("dot", "graphml")))
@click.option(
    "--max-states",
    type=POSITIVE_INTEGER,
    default=5000,
    metavar="K",
    help="explore at most K states (default 5000); more: exit 3",
)
@click.option("-o", "--output", type=FILE, metavar="FILE", help="where to write (default: stdout)")
def graph(**options: Any) -> Invocation:
    """Export a protocol instance's reachable state graph (DOT or GraphML), the states that violate a safety
    property coloured and named."""
    return call("lockstep.cli.export:run_export_command", "graph", options)
