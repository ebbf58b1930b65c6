"""The ``check`` command: model-check a protocol instance, or every pinned one (``--all``).

``command_check`` runs it and returns the exit code: 0 every property holds (or, with ``--all``,
every verdict is as pinned), 1 a property is violated (``--all``: a verdict differs from its
pin), 3 inconclusive (a limit or Ctrl-C stopped the search; ``--timeout`` is the command's
clock, ``lockstep.clock``: a model's ``build()`` that outlives it stops with "stopped: timeout").
Usage errors are raised (``UsageError``) for the root to report (exit 2). Human output goes to
stderr; with ``--json`` stdout carries one JSON object (``lockstep/schemas/check.schema.json``).
Without a terminal a progress line goes to stderr every ``PROGRESS_SECONDS``.
``pinned_instances`` lists every instance × variant with a pinned verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from lockstep.checkers import CheckResult, Limits, Statistics, check
from lockstep.checkers.counterexample import write_counterexample
from lockstep.checkers.engines import OptionError, Options, options_for
from lockstep.checkers.limits import resident_memory_bytes
from lockstep.checkers.result import PropertyResult
from lockstep.cli.invocation import clock
from lockstep.cli.listing import EXIT_INCONCLUSIVE, selected_protocols
from lockstep.cli.report import SCHEMA_VERSION, PinnedRow, markdown_tables, render, result_json, summary_table
from lockstep.models import PROTOCOLS
from lockstep.models.proofs import BUDGET, PINNED
from lockstep.spec.protocol import POST_FIX, Instance, Protocol, UsageError, parse_assignments
from lockstep.traces.output import write_stdout

if TYPE_CHECKING:  # z3 is imported by --proofs alone (a plain check never needs it)
    from lockstep.checkers.symbolic.proofs import ProofCheck

EXIT_OK, EXIT_VIOLATED = 0, 1


def _limits(arguments: argparse.Namespace) -> Limits:
    """The search's limits, its time on the command's clock (what the build took counts)."""
    memory = None if arguments.max_memory is None else int(arguments.max_memory * 1024**3)
    return Limits.on(clock(arguments), arguments.max_states, arguments.max_depth, memory)


PROGRESS_SECONDS = 30.0  # without a terminal (CI logs), one progress line on stderr this often


def _run(instance: Instance, arguments: argparse.Namespace, options: Options, console: Console) -> CheckResult:
    printed = [0.0]  # the engine's seconds at the last progress line (no terminal: no spinner)
    with clock(arguments).alarm(f"building the model {instance.label}"):  # a build() may never return
        machine = instance.machine()
    with console.status(f"checking {instance.label}…") as status:

        def progress(stats: Statistics) -> None:
            if stats.states is None:
                text = f"checking {instance.label}: depth {stats.depth} unrolled"
            else:
                generated = f" of {stats.transitions:,} generated" if stats.transitions else ""
                waiting = f", frontier {stats.frontier:,}" if stats.frontier is not None else ""
                text = (
                    f"checking {instance.label}: {stats.states:,} distinct states{generated}{waiting}, "
                    f"depth {stats.depth}, {stats.states_per_second:,.0f} states/s, "
                    f"{resident_memory_bytes() / 2**20:,.0f} MiB"
                )
            status.update(f"{text}, {stats.seconds:.1f} s" if stats.states is None else text)
            interval = getattr(arguments, "progress_interval", None) or PROGRESS_SECONDS
            if not console.is_terminal and stats.seconds - printed[0] >= interval:
                printed[0] = stats.seconds
                console.print(f"{text}, {stats.seconds:,.0f} s elapsed", markup=False, highlight=False, soft_wrap=True)

        try:  # the engine stops itself on the clock (Limits.on)
            return check(machine, arguments.engine, options, progress=progress)
        except OptionError as error:
            raise UsageError(error.render(FLAGS)) from None


# each engine option's flag: an OptionError names fields, the command reports flags
FLAGS = {
    "engine": "--engine",
    "properties": "--property",
    "limits.max_states": "--max-states",
    "limits.max_depth": "--max-depth",
    "symmetry": "--symmetry",
    "stop_at_first": "--stop-at-first",
    "compiled": "--interpreted",
    "compact": "--compact",
    "workers": "--workers",
    "kernels": "--kernels",
    "device": "--device",
    "depth": "--depth",
    "walks": "--walks",
    "seed": "--seed",
    "k": "--k",
    "solver_timeout": "--solver-timeout",
    "solver": "--solver",
    "reduction": "--reduction",
    "mine_invariants": "--mine-invariants",
}


def engine_options(arguments: argparse.Namespace) -> Options:
    """The typed options of ``--engine`` made from the command's flags; a flag the engine does not
    take (or a bad combination) is a ``UsageError`` naming the flags."""
    try:
        return options_for(
            arguments.engine,
            properties=arguments.properties or None,  # none named: every property
            limits=_limits(arguments),
            symmetry=arguments.symmetry,
            stop_at_first=arguments.stop_at_first,
            compiled=not arguments.interpreted,
            compact=arguments.compact,
            workers=arguments.workers,
            kernels=arguments.kernels,
            device=arguments.device,
            depth=arguments.depth,
            walks=getattr(arguments, "walks", None),
            seed=getattr(arguments, "swarm_seed", None),
            k=arguments.induction_k,
            solver_timeout=arguments.solver_timeout,
            solver=arguments.bmc_solver,
            reduction=arguments.reduction,
            mine_invariants=arguments.mine_invariants,
        )
    except OptionError as error:
        raise UsageError(error.render(FLAGS)) from None


def check_trace_out(target: Path | None, inputs: Sequence[Path] = ()) -> None:
    """Refuse, before a check that may be long, a ``--trace-out`` that cannot be written (a
    directory, a file in the way) or that would replace an input or a file that is not a trace."""
    if target is None:
        return
    from lockstep.traces.output import OutputError, check_trace_target, refuse_inputs

    try:
        refuse_inputs(target, inputs)
        check_trace_target(target)
    except OutputError as error:
        raise UsageError(f"--trace-out {error}") from None


_SAME_COUNTEREXAMPLE = frozenset({"auto", "bfs", "bfs-vec", "bfs-gpu"})


def _write_trace(
    instance: Instance, result: CheckResult, target: Path | None, console: Console, inputs: Sequence[Path] = ()
) -> Path | None:
    """Write the shortest counterexample; a file that cannot be written is reported, and the result
    of the (possibly long) check is still shown rather than lost."""
    shortest = result.counterexample
    if shortest is None or shortest.path is None:
        return None
    from lockstep.traces.output import OutputError, refuse_inputs, safe_name

    # the BFS engines (auto, bfs, bfs-vec, bfs-gpu) give the same shortest counterexample; another
    # engine's trace is named after it, so that checks with different engines never overwrite each other
    engine = [] if result.engine in _SAME_COUNTEREXAMPLE else [result.engine]
    name = safe_name(instance.protocol.name, instance.variant, instance.name, *engine) + ".jsonl"
    file = target or Path("lockstep-out") / name
    try:
        refuse_inputs(file, inputs)  # never over the model file
        return _write_counterexample(instance, result, file)
    except OutputError as error:
        console.print(f"[bold red]lockstep: error:[/bold red] cannot write the trace: {error}")
        return None
    except OSError as error:
        console.print(f"[bold red]lockstep: error:[/bold red] cannot write the trace {file}: {error.strerror or error}")
        return None


def _write_counterexample(instance: Instance, result: CheckResult, file: Path) -> Path:
    shortest = result.counterexample
    assert shortest is not None and shortest.path is not None
    return write_counterexample(
        file,
        result.machine,
        shortest.path,
        protocol=instance.protocol.name,
        variant=instance.variant,
        instance=instance.name,
        parameters=instance.parameters,
        property_name=shortest.name,
    )


def command_check(arguments: argparse.Namespace, console: Console) -> int:
    options = engine_options(arguments)
    if arguments.all:
        if any(
            (
                arguments.variant,
                arguments.instance,
                arguments.set,
                arguments.ranks,
                arguments.properties,
            )
        ):
            raise UsageError(
                "--all checks every built-in instance (of PROTOCOL if one is named, or the --model-file model's) "
                "against its pin; it takes no variant, instance, --ranks, --set or --property"
            )
        _require_abc_for_proofs(arguments)
        return _check_all(arguments, options, console)
    if arguments.markdown:
        raise UsageError("--markdown applies to check --all")
    if getattr(arguments, "proofs", False):
        raise UsageError("--proofs applies to check --all")
    if not arguments.protocol and arguments.model_file is None:
        raise UsageError("name a protocol (see `lockstep list`), give --model-file PATH, or use --all")
    (protocol,) = selected_protocols(arguments)
    overrides = parse_assignments(arguments.set)
    instance = protocol.instance(arguments.variant, arguments.instance, overrides, arguments.ranks)
    check_trace_out(arguments.trace_out, [arguments.model_file] if arguments.model_file else [])
    result = _run(instance, arguments, options, console)
    if arguments.workers > 1 and os.environ.get("RANK", "0") != "0":
        return result.exit_code  # a torchrun process other than rank 0: the same verdict, reported by rank 0
    inputs = [arguments.model_file] if arguments.model_file else []
    trace_file = _write_trace(instance, result, arguments.trace_out, console, inputs)
    if arguments.json:
        write_stdout(json.dumps(result_json(result, instance, trace_file, states=arguments.json_states)) + "\n")
    else:
        render(
            console, result, label=instance.label, expected=instance.expected, trace_file=trace_file, instance=instance
        )
        if arguments.show_invariant:
            _show_invariants(console, result)
    return result.exit_code


INVARIANT_LINES = 8  # --show-invariant: lines printed per invariant (the whole one is in --json)
INVARIANT_WIDTH = 160  # characters of one line


def _show_invariants(console: Console, result: CheckResult) -> None:
    """Each proved property's inductive invariant (pdr), simplified, a few lines each; properties
    proved by the same invariant share it."""
    proved = [item for item in result.properties if item.invariant]
    if not proved:
        console.print("no property came with an inductive invariant (only --engine pdr proves with one)")
    groups: dict[str, list[PropertyResult]] = {}
    for item in proved:
        groups.setdefault(str(item.invariant), []).append(item)
    for items in groups.values():
        names = ", ".join(f"[bold]{item.name}[/bold]" for item in items)
        summary = items[0].invariant_summary
        verb = "hold" if len(items) > 1 else "holds"
        if not summary:
            console.print(f"{names} {verb} by the inductive invariant True (the sorts' bounds)", highlight=False)
            continue
        console.print(f"{names} {verb} by the inductive invariant (simplified), all of:", highlight=False)
        for line in summary[:INVARIANT_LINES]:
            shown = line if len(line) <= INVARIANT_WIDTH else line[: INVARIANT_WIDTH - 1] + "…"
            console.print(f"  {escape(shown)}", soft_wrap=True, highlight=False)
        hidden = len(summary) - INVARIANT_LINES
        if hidden > 0 or any(len(line) > INVARIANT_WIDTH for line in summary[:INVARIANT_LINES]):
            more = f"and {hidden} more conjuncts; " if hidden > 0 else ""
            console.print(f"  … {more}the whole invariant is in --json (invariant, invariant_summary)", highlight=False)


def pinned_instances(protocols: Sequence[Protocol] | None = None) -> list[Instance]:
    """Every instance × variant that carries a pinned verdict (default: the built-in models), in order."""
    return [
        protocol.instance(variant.name, spec.name)
        for protocol in (PROTOCOLS.values() if protocols is None else protocols)
        for spec in protocol.instances
        for variant in protocol.variants
        if variant.name in spec.expected
    ]


def _require_abc_for_proofs(arguments: argparse.Namespace) -> None:
    """``--proofs`` re-proves pins measured with ABC's pdr: without it the run could not prove them,
    so it is refused before the (long) table rather than reported as proofs lost."""
    from lockstep.checkers.symbolic import abc

    if getattr(arguments, "proofs", False) and abc.binary() is None:
        raise UsageError(
            f"--proofs re-proves the pinned pdr proofs, which need ABC's pdr: {abc.NOT_INSTALLED}; "
            "--engine pdr runs without it (Houdini and Spacer alone)"
        )


def _check_proofs(arguments: argparse.Namespace) -> list[ProofCheck]:
    """With ``--proofs``: pdr re-proves each post-fix seed's pinned properties (``models.proofs``)."""
    if not getattr(arguments, "proofs", False):
        return []
    from lockstep.checkers.symbolic.proofs import check_pinned

    return [
        proof
        for protocol in selected_protocols(arguments)
        if protocol.name in PINNED
        for proof in check_pinned(protocol.name, protocol.instance(POST_FIX).machine(), PINNED[protocol.name], BUDGET)
    ]


class _Heartbeat:
    """A line on stderr every ``PROGRESS_SECONDS`` while a long command works (``check --all``,
    ``--proofs``): what it is doing and for how long, whatever the stream (a CI log too)."""

    def __init__(self, console: Console) -> None:
        self.console, self.doing, self.since = console, "", time.monotonic()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._beat, name="lockstep-heartbeat", daemon=True)

    def __enter__(self) -> _Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, *exception: object) -> None:
        self.stopped.set()

    def now(self, doing: str) -> None:
        self.doing, self.since = doing, time.monotonic()

    def _beat(self) -> None:
        while not self.stopped.wait(PROGRESS_SECONDS):
            if self.doing:
                seconds = time.monotonic() - self.since
                self.console.print(f"… {self.doing}: {seconds:,.0f} s so far", markup=False, highlight=False)


def _check_all(arguments: argparse.Namespace, options: Options, console: Console) -> int:
    rows: list[PinnedRow] = []
    payloads = []
    instances = pinned_instances(selected_protocols(arguments))
    with _Heartbeat(console) as heartbeat:
        try:
            for position, instance in enumerate(instances, 1):
                heartbeat.now(f"checking {instance.label} ({position} of {len(instances)})")
                started = time.monotonic()
                result = _run(instance, arguments, options, console)
                trace_file = _write_trace(instance, result, None, console)
                rows.append(PinnedRow.of(instance, result))
                payloads.append(result_json(result, instance, trace_file, states=arguments.json_states))
                mark = "as pinned" if rows[-1].as_pinned else f"DIFFERS (pinned {instance.expected})"
                console.print(
                    f"{position} of {len(instances)}: {instance.label}: {result.verdict.value}, {mark} "
                    f"({time.monotonic() - started:.1f} s)",
                    markup=False,
                    highlight=False,
                )
        except KeyboardInterrupt:  # what finished is shown, not thrown away
            console.print(summary_table(rows))
            console.print(f"lockstep: interrupted (Ctrl-C) after {len(rows)} of {len(instances)} checks")
            if arguments.json:
                write_stdout(
                    json.dumps(
                        {
                            "schema_version": SCHEMA_VERSION,
                            "as_pinned": False,
                            "stopped": "interrupted",
                            "checks": payloads,
                        }
                    )
                    + "\n"
                )
            return EXIT_INCONCLUSIVE
        heartbeat.now("re-proving the pinned properties with pdr (--proofs)" if arguments.proofs else "")
        proofs = _check_proofs(arguments)
    all_as_pinned = all(row.as_pinned for row in rows) and all(proof.proved for proof in proofs)
    if arguments.json:
        summary: dict[str, object] = {"schema_version": SCHEMA_VERSION, "as_pinned": all_as_pinned, "checks": payloads}
        if proofs:
            summary["proofs"] = [
                {"protocol": proof.protocol, "property": proof.prop, "proved": proof.proved, "seconds": proof.seconds}
                for proof in proofs
            ]
        if arguments.markdown:  # both: the tables ride along in the JSON
            summary["markdown"] = markdown_tables(rows)
        write_stdout(json.dumps(summary) + "\n")
    elif arguments.markdown:
        write_stdout(markdown_tables(rows))
    if not arguments.json:
        console.print(summary_table(rows))
        for proof in proofs:
            mark = "proved" if proof.proved else "[bold red]NOT proved[/bold red]"
            console.print(
                f"{proof.protocol} post-fix seed: {proof.prop} {mark} by pdr ({proof.seconds:.1f} s)"
                + ("" if proof.proved else f": {escape(proof.detail)}"),
                highlight=False,
            )
        differ = "[bold red]some verdicts differ from their pins[/bold red]"
        console.print("every verdict is as pinned" if all_as_pinned else differ)
    return EXIT_OK if all_as_pinned else EXIT_VIOLATED
