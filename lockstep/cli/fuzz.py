"""The ``fuzz`` command of ``lockstep``: random exploration of a model with Hypothesis.

``command_fuzz`` runs it (its options: ``lockstep.cli.commands.fuzz``) and returns the exit code:
0 nothing found (no safety property failed in the examples tried, which proves nothing), 1 a
property is violated, 2 usage error (one message, never a traceback),
3 inconclusive (``--timeout``, the command's one clock from its start to the last run, or Ctrl-C
stopped the session before it found anything, or Hypothesis could not run the examples), 4 with
``--impl``: a process of a run was killed (a signal, the OOM killer): no verdict. Human output
goes to stderr: the counterexample as the same swimlanes ``lockstep check`` draws, written as a
trace that ``lockstep replay`` and ``lockstep show`` read. With ``--json`` stdout carries one
JSON object (``fuzz_json``; with ``--impl`` the runtime session's; both
``lockstep/schemas/fuzz.schema.json``).
Hypothesis is imported only when the command runs.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from lockstep.cli.commands import DEFAULT_EXAMPLES, DEFAULT_RUNTIME_EXAMPLES
from lockstep.cli.failures import definition_error, input_error, usage_error
from lockstep.cli.invocation import clock
from lockstep.spec.protocol import Instance, Protocol, UsageError, parse_assignment, parse_assignments
from lockstep.spec.semantics import ModelError
from lockstep.spec.terms import DefinitionError
from lockstep.traces.output import write_stdout

if TYPE_CHECKING:
    from lockstep.checkers.fuzz import FuzzResult

SCHEMA_VERSION = 1  # of fuzz's --json object (model and runtime sessions)
OUTCOME_STYLES = {"violated": "bold red", "nothing-found": "green", "inconclusive": "yellow", "crashed": "bold red"}


def _protocol(arguments: argparse.Namespace) -> Protocol:
    from lockstep.cli.listing import one_protocol

    return one_protocol(arguments)  # --timeout covers a model file's import


def command_fuzz(arguments: argparse.Namespace, console: Console) -> int:
    """Run ``lockstep fuzz``; usage and model errors are reported here as one message (exit 2)."""
    if arguments.impl:
        return command_fuzz_runtime(arguments, console)
    if arguments.scenario is not None:
        return usage_error(console, "--scenario is for --impl (the runtime's scenarios)", arguments)
    if arguments.hang_timeout is not None:
        return usage_error(console, "--hang-timeout is for --impl (runs of the runtime)", arguments)
    if arguments.examples is None:
        arguments.examples = DEFAULT_EXAMPLES
    timer = clock(arguments)
    try:
        protocol = _protocol(arguments)
        overrides = parse_assignments(arguments.set)
        instance = protocol.instance(arguments.variant, arguments.instance, overrides, arguments.ranks)
        from lockstep.checkers.fuzz import fuzz
        from lockstep.cli.check import check_trace_out

        check_trace_out(arguments.trace_out, [arguments.model_file] if arguments.model_file else [])

        with timer.alarm(f"building the model {instance.label}"):  # a build() may never return
            machine = instance.machine()
        with console.status(f"fuzzing {instance.label}…"):  # the session stops itself on what the clock has left
            result = fuzz(
                machine,
                steps=arguments.steps,
                examples=arguments.examples,
                seed=arguments.seed,
                timeout=timer.left(),  # what the command's clock has left
                shrink_seconds=arguments.shrink_seconds,
            )
    except UsageError as error:
        return input_error(console, error, arguments)
    except (ModelError, DefinitionError) as error:
        return definition_error(console, error, arguments)
    inputs = [arguments.model_file] if arguments.model_file else []
    trace_file = _write_trace(instance, result, arguments.trace_out, console, inputs)
    if arguments.json:
        write_stdout(json.dumps(fuzz_json(result, instance, trace_file)) + "\n")
    else:
        render_fuzz(console, result, instance.label, trace_file)
    return result.exit_code


def command_fuzz_runtime(arguments: argparse.Namespace, console: Console) -> int:
    """``lockstep fuzz PROTOCOL --impl``: the runtime against the model (``checkers.fuzz.runtime``)."""
    for option in ("model_file", "instance"):
        if getattr(arguments, option) is not None:
            return usage_error(
                console,
                f"--{option.replace('_', '-')} does not apply to --impl (the runtime runs the "
                "built-in protocols' scenarios)",
                arguments,
            )
    from lockstep.harness.runtime_fuzzing import fuzz_runtime

    try:
        settings = {}
        for text in arguments.set:
            name, value = parse_assignment(text)
            settings[name] = value
        label = f"{arguments.protocol} {arguments.variant or 'post-fix'} runtime"
        with console.status(f"fuzzing the {label} against its model…"):
            result = fuzz_runtime(
                str(arguments.protocol),
                arguments.variant or "post-fix",
                scenario=arguments.scenario,
                ranks=arguments.ranks,
                settings=settings,
                examples=arguments.examples or DEFAULT_RUNTIME_EXAMPLES,
                seed=arguments.seed,
                hang_timeout=5.0 if arguments.hang_timeout is None else arguments.hang_timeout,
                keep_traces=None if arguments.trace_out is None else str(arguments.trace_out),
                clock=clock(arguments),
            )
    except (ValueError, UsageError) as error:
        return usage_error(console, str(error), arguments)
    if result.keep_error is not None:
        console.print(f"[bold red]lockstep: error:[/bold red] cannot keep the traces: {escape(result.keep_error)}")
    if arguments.json:
        write_stdout(json.dumps({"schema_version": SCHEMA_VERSION, **result.to_json()}) + "\n")
        return result.exit_code
    outcome = result.outcome
    per_run = sum(run.seconds for run in result.runs) / len(result.runs) if result.runs else 0.0
    console.print(
        Text.assemble(
            (label, "bold"),
            f" (scenario {result.scenario}, {result.ranks} ranks)  ",
            (outcome, OUTCOME_STYLES[outcome]),
            f"  ({len(result.runs)} runs, seed {result.seed} (--seed re-runs it), "
            f"{result.seconds:.1f} s, "
            f"{per_run:.2f} s/run, {result.pool_starts} pool start(s))",
        )
    )
    if result.stopped is not None:
        console.print(f"[yellow]stopped early: {escape(result.stopped)}[/yellow]")
    observed = [run for run in result.runs if run.observed_violation is not None]
    if observed:
        console.print(
            f"{len(observed)} run(s) showed for real what the model predicts for {result.variant}: "
            + ", ".join(sorted({str(run.observed_violation) for run in observed}))
        )
    if result.crashed is not None:
        crashed = result.crashed
        console.print(
            f"[bold red]run {crashed.number} (seed {crashed.seed}): a process was killed[/bold red] (no verdict on "
            f"the protocol; the session stopped): {escape(crashed.message)}",
            soft_wrap=True,
        )
    failing = result.failing
    if failing is not None:
        console.print(
            f"[bold red]run {failing.number} (seed {failing.seed}):[/bold red] {escape(str(failing.failure))}"
        )
        explanation = (failing.replay or {}).get("explanation") or {}
        for number, candidate in enumerate(explanation.get("candidates", []), start=1):
            reasons = "; ".join(escape(reason) for reason in candidate.get("why", []))
            console.print(f"  model candidate {number}: {reasons}")
            state = ", ".join(f"{name}={value}" for name, value in candidate.get("state", {}).items())
            console.print(f"    model state: {escape(state)}", soft_wrap=True)
        event = explanation.get("event") or {}
        if event:
            console.print(f"  runtime event: {escape(json.dumps(event))}", soft_wrap=True)
        console.print(f"  choices: {escape(json.dumps(failing.choices))}", soft_wrap=True)
        if failing.trace_dir is not None:
            console.print(f"traces: {failing.trace_dir}")
    elif result.runs:
        console.print(f"every run's trace conforms to the {result.variant} model")
    return result.exit_code


def _write_trace(
    instance: Instance, result: FuzzResult, target: Path | None, console: Console, inputs: Sequence[Path] = ()
) -> Path | None:
    if result.path is None or result.property_name is None:
        return None
    from lockstep.checkers.counterexample import write_counterexample
    from lockstep.traces.output import OutputError, refuse_inputs, safe_name

    name = safe_name(instance.protocol.name, instance.variant, instance.name, "fuzz") + ".jsonl"
    file = target or Path("lockstep-out") / name
    try:
        refuse_inputs(file, inputs)  # never over the model file
        return write_counterexample(
            file,
            result.machine,
            result.path,
            protocol=instance.protocol.name,
            variant=instance.variant,
            instance=instance.name,
            parameters=instance.parameters,
            property_name=result.property_name,
            backend="lockstep-fuzz",
        )
    except OutputError as error:
        console.print(f"[bold red]lockstep: error:[/bold red] cannot write the trace: {escape(str(error))}")
        return None
    except OSError as error:
        console.print(f"[bold red]lockstep: error:[/bold red] cannot write the trace {file}: {error.strerror or error}")
        return None


def render_fuzz(console: Console, result: FuzzResult, label: str, trace_file: Path | None) -> None:
    """The human report of one fuzzing session."""
    from lockstep.checkers.counterexample import blocked_summary
    from lockstep.cli.report import swimlanes

    outcome = result.outcome.value
    seed = f"seed {result.seed} (--seed re-runs it)"
    summary = (
        f"  (fuzz: {result.runs:,} runs of ≤{result.steps} steps, {seed}, {result.seconds:.2f} s, "
        f"{result.seconds_per_example * 1000:.1f} ms/example)"
    )
    console.print(Text.assemble((label, "bold"), "  ", (outcome, OUTCOME_STYLES[outcome]), summary))
    if result.stopped is not None:
        console.print(f"[yellow]stopped early: {escape(result.stopped)}[/yellow]")
    if result.path is not None and result.property_name is not None:
        shrunk = "" if result.shrunk is None else f"; Hypothesis shrank it to {result.shrunk.length}"
        first = "" if result.first_failing is None else f", the first failing run had {result.first_failing.length}"
        console.print(
            f"found in example {result.examples_to_failure} ({result.generate_seconds:.2f} s){first}{shrunk}; "
            f"BFS around the runs: {result.path.length} steps"
        )
        title = f"counterexample: {result.property_name} ({result.path.length} steps)"
        console.print(swimlanes(result.machine, result.path, title))
        detail = f": {escape(result.detail)}" if result.detail else ""
        console.print(f"[red]{escape(result.property_name)}[/red] is violated{detail}")
        blocked = blocked_summary(result.machine, result.path)
        if blocked:
            console.print(f"at the end: {escape(blocked)}")
    elif result.stopped is None:
        console.print(
            f"no safety property failed in {result.examples:,} examples of at most {result.steps} steps "
            "(random runs prove nothing: `lockstep check` explores every interleaving)"
        )
        console.print(
            f"{result.completed:,} of {result.runs:,} runs reached a final state"
            + ("" if result.completed else " (more --steps may be needed to reach the end of the scenario)")
        )
    if result.witnessed:
        console.print(f"sometimes properties witnessed: {', '.join(result.witnessed)}")
    if result.unchecked:
        console.print(f"[yellow]not checked by fuzzing (leads-to):[/yellow] {', '.join(result.unchecked)}")
    if trace_file is not None:
        console.print(f"trace: {trace_file}")


def fuzz_json(result: FuzzResult, instance: Instance, trace_file: Path | None) -> dict[str, Any]:
    """The ``--json`` object of ``lockstep fuzz``."""
    counterexample = None
    if result.path is not None:
        counterexample = {
            "property": result.property_name,
            "detail": result.detail,
            "length": result.path.length,
            "shrunk_length": None if result.shrunk is None else result.shrunk.length,
            "first_failing_length": None if result.first_failing is None else result.first_failing.length,
            "trace_file": None if trace_file is None else str(trace_file),
        }
    return {
        "schema_version": SCHEMA_VERSION,
        "protocol": instance.protocol.name,
        "variant": instance.variant,
        "instance": instance.name,
        "parameters": dict(instance.parameters),
        "engine": "fuzz",
        "outcome": result.outcome.value,
        "exit_code": result.exit_code,
        "seed": result.seed,
        "steps": result.steps,
        "examples": result.examples,
        "stats": {
            "runs": result.runs,
            "steps_run": result.steps_run,
            "completed_runs": result.completed,
            "examples_to_failure": result.examples_to_failure,
            "seconds": round(result.seconds, 3),
            "generate_seconds": round(result.generate_seconds, 3),
            "seconds_per_example": round(result.seconds_per_example, 5),
        },
        "stopped": result.stopped,
        "counterexample": counterexample,
        "witnessed": list(result.witnessed),
        "unchecked": list(result.unchecked),
    }
