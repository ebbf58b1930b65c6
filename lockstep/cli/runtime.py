"""The ``run`` command of ``lockstep``: run a protocol in the torch reference runtime.

``lockstep run PROTOCOL [--variant V] [--scenario NAME] [--ranks N] [--backend gloo|nccl]
[--seed S] [--hang-timeout S] [--timeout S] [--trace-dir DIR] [--json]`` spawns the run's
processes on 127.0.0.1 (``lockstep.impl.launcher``), prints a summary (steps, events, outcome) and
the trace directory to stderr, or with ``--json`` one JSON object on stdout
(``lockstep/schemas/run.schema.json``). With ``--trace-dir`` it then replays the run's own traces
against the model of its variant (``--no-replay`` skips that) and prints the verdict. Exit codes:
0 completed (and, when replayed, conforming), 1 hang diagnosed, a completed run whose trace does
not conform, or a run a process of which failed (a runtime error) with a trace that violates a
property (it died of the protocol's failure: pd-kv-transfer's EngineCore assert), 2 usage error
(a message, never a traceback; a ``--choices`` file is read whole before anything starts, and a
choice in it that the run cannot take stops the run: both name the file and line; so is a
``--set`` value the model of the run's trace header does not take, and a ``--trace-dir`` another
run holds, named with its pid), 3 inconclusive (no outcome within ``--timeout``: ``stopped`` is
"timeout") or another runtime error, 4 a process of the run crashed (``launcher.CRASHED``: killed
by a signal, the OOM killer included; never a hang or a verdict).
``--timeout`` is the command's one clock (``lockstep.clock``): the checks before the launch, the
run and the replay of its traces all count. ``--hang-timeout`` is how long a process may block in
one collective or receive before the run counts as hung.

The run's options are the runtime's own (``lockstep.impl.arguments.add_run_arguments``, which
``python -m lockstep.impl.rank`` parses under torchrun with argparse): ``run`` is the click command
``click_parameters`` makes of that parser, plus ``--timeout`` and ``--no-replay``, which only the
launcher has. This module imports the runtime's registry (and so the models): the root loads it
only when ``run`` is used.
"""

from __future__ import annotations

import argparse
import json
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import click

from lockstep.cli import completion
from lockstep.cli.failures import usage_error
from lockstep.cli.invocation import Invocation, call, clock
from lockstep.cli.numbers import POSITIVE_NUMBER, ParamType
from lockstep.clock import TIMEOUT, Clock, TimeoutReached
from lockstep.impl.arguments import RunUsageError, add_run_arguments, config_from_arguments
from lockstep.traces.claim_holder import refuse_claimed
from lockstep.traces.output import OutputError, claim_directory, holding_traces, write_stdout

SCHEMA_VERSION = 1  # of run's --json object: 1 added hang_timeout (was timeout) and the whole run's timeout
COMPLETIONS = {
    "protocol": completion.runtime_protocols,
    "variant": completion.runtime_variants,
    "scenario": completion.runtime_scenarios,
    "settings": completion.runtime_settings,
}


class ArgparseType(ParamType):
    """An argparse ``type=`` callable as a click type (its ``ArgumentTypeError`` as click's message)."""

    name = "value"

    def __init__(self, parse: Any) -> None:
        self.parse = parse

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value  # a default
        try:
            return self.parse(value)
        except (argparse.ArgumentTypeError, ValueError, TypeError) as error:
            self.fail(str(error) or f"{value!r} is not valid", param, ctx)


def click_parameter(action: argparse.Action) -> click.Parameter | None:
    """The click parameter that means what argparse's ``action`` means (None: ``--help``)."""
    if isinstance(action, argparse._HelpAction):
        return None
    kind: Any = None
    if action.choices is not None:
        kind = click.Choice([str(choice) for choice in action.choices])
    elif action.type is Path:
        kind = click.Path(path_type=Path)
    elif action.type is not None:
        kind = ArgparseType(action.type)
    complete = COMPLETIONS.get(action.dest)
    if not action.option_strings:  # a positional argument
        return click.Argument(
            [action.dest], type=kind, required=action.nargs != "?", metavar=action.metavar, shell_complete=complete
        )
    help = (action.help or "").replace("%%", "%")
    if isinstance(action, argparse._StoreTrueAction):
        return click.Option([*action.option_strings, action.dest], is_flag=True, help=help)
    multiple = isinstance(action, argparse._AppendAction)
    metavar = action.metavar or (None if action.choices is not None else action.dest.upper())
    return click.Option(
        [*action.option_strings, action.dest],
        type=kind,
        multiple=multiple,
        default=() if multiple else action.default,
        metavar=metavar,
        help=help,
        shell_complete=complete,
    )


def click_parameters(parser: argparse.ArgumentParser) -> list[click.Parameter]:
    return [parameter for parameter in map(click_parameter, parser._actions) if parameter is not None]


def _invoke(**options: Any) -> Invocation:
    return call("lockstep.cli.runtime:command_run", "run", options)


def _command() -> click.Command:
    parser = argparse.ArgumentParser(add_help=False)
    add_run_arguments(parser)
    extra = [
        click.Option(
            ["--timeout"],
            type=POSITIVE_NUMBER,
            metavar="SECONDS",
            help="wall-clock limit of the whole run (default: 6 × --hang-timeout, at least 60; then exit 3)",
        ),
        click.Option(
            ["--no-replay"], is_flag=True, help="do not replay the recorded traces against the model after the run"
        ),
    ]
    from lockstep.impl.protocols import RUNTIME_PROTOCOLS

    protocols = "\n\n".join(
        f"{protocol.name}: variants {', '.join(protocol.variants)}; scenarios "
        f"{', '.join(protocol.scenarios)}; {protocol.ranks[0]} to {protocol.ranks[1]} ranks"
        for protocol in RUNTIME_PROTOCOLS.values()
    )
    return click.Command(
        "run",
        params=[*click_parameters(parser), *extra],
        callback=_invoke,
        help="Run a protocol (PROTOCOL) in the torch reference runtime: real processes and collectives.",
        epilog=f"Protocols (the first scenario is the default):\n\n{protocols}",
    )


run = _command()


def deadline(timeout: float | None, config: Any) -> float:
    """The whole run's wall clock: ``--timeout``, else 6 × the hang limit (at least 60 s)."""
    return timeout if timeout is not None else max(60.0, 6 * config.timeout)


def replay_run(config: Any, console: Any, timer: Clock | None = None) -> dict[str, Any] | None:
    """Replay the run's own traces against the model of its variant (None without traces), within
    what the command's clock ``timer`` has left (past it: verdict inconclusive, ``stopped`` timeout)."""
    if config.trace_dir is None:
        return None
    from lockstep.harness.runtime_replay import runtime_replay
    from lockstep.traces.reader import TraceInputError

    try:
        with (timer or Clock()).alarm("replaying the run's traces"):
            result = runtime_replay(config, config.trace_dir).to_json()
    except TimeoutReached as reached:
        console.print(f"replay against the model: {reached}", markup=False, highlight=False, soft_wrap=True)
        return {"verdict": "inconclusive", "detail": str(reached), "stopped": TIMEOUT}
    except (TraceInputError, ValueError, OSError) as error:
        console.print(f"replay of the run's traces failed: {error}", markup=False, highlight=False, soft_wrap=True)
        return {"verdict": "error", "detail": str(error)}
    verdict = result["verdict"]
    detail = {
        "conforms": f"{result.get('longest_conforming_prefix')} events follow {result['model']}",
        "violated": f"{result.get('property')} fails after event {result.get('event')} of {result['model']}",
        "diverges": f"at event {result.get('event')} from {result['model']}: "
        f"{(result.get('explanation') or {}).get('reason', '')}",
        "inconclusive": (result.get("explanation") or {}).get("detail", ""),
    }.get(verdict, "")
    console.print(
        f"replay against the model: {verdict} {detail}".rstrip(), markup=False, highlight=False, soft_wrap=True
    )
    return result


def check_devices(backend: str, ranks: int) -> None:
    """Refuse ``--backend nccl`` with fewer than ``ranks`` CUDA devices (a ``RunUsageError``)."""
    if backend != "nccl":
        return
    import torch  # lazily: only the NCCL check needs it in this process

    if not torch.cuda.is_available() or torch.cuda.device_count() < ranks:
        found = torch.cuda.device_count() if torch.cuda.is_available() else 0
        raise RunUsageError(f"--backend nccl needs {ranks} CUDA devices, found {found}")


def check_choices(config: Any, given: Path) -> None:
    """Read the whole ``--choices`` file before anything starts: a ``ChoicesInputError`` (named as
    the user wrote it, ``given``) at its first bad line, an unknown actor included."""
    from lockstep.impl.choices import read_script
    from lockstep.impl.protocols import runtime_protocol

    read_script(given, runtime_protocol(config.protocol).actors_that_choose(config.ranks))


def diverged(console: Any, config: Any, outcome: Any, arguments: argparse.Namespace) -> int:
    """The run stopped at a ``--choices`` line it could not take: an input error (exit 2) naming the
    file as given, the line and why, and where the partial traces are."""
    error = outcome.diverged
    file = str(arguments.choices) if error.path in (None, config.choices) else error.path
    kept = f"; its traces so far are in {config.trace_dir}" if config.trace_dir else ""
    message = f"{file}:{error.line}: {error.problem} (the run does not fit --choices: it was stopped{kept})"
    return usage_error(console, message, arguments, file=file, line=error.line)


def command_run(arguments: argparse.Namespace, console: Any) -> int:
    """Run the protocol; the exit code of the outcome (2 for a usage error, a bad ``--choices``
    file or choices that do not fit the run)."""
    from lockstep.impl.choices import ChoicesInputError

    try:
        if arguments.trace_dir is not None:  # before its contents are judged: who writes it, if anyone does
            refuse_claimed(arguments.trace_dir)
        config = config_from_arguments(arguments)
        check_devices(config.backend, config.ranks)
        if config.choices is not None:
            check_choices(config, Path(arguments.choices))
    except (RunUsageError, OutputError) as error:
        return usage_error(console, str(error), arguments)
    except ChoicesInputError as error:
        return usage_error(console, str(error), arguments, file=error.path, line=error.line)
    claim: AbstractContextManager[object] = nullcontext()
    if config.trace_dir is not None:
        try:  # held until the run is over: a second run into the folder is refused, not mixed in
            claim = claim_directory(arguments.trace_dir, holding_traces)
        except OutputError as error:
            return usage_error(console, f"--trace-dir {error}", arguments)
    with claim:
        return _run(config, arguments, console)


def _run(config: Any, arguments: argparse.Namespace, console: Any) -> int:
    """The run of ``command_run``, its report and its exit code."""
    from lockstep.impl.launcher import ERROR, INCONCLUSIVE, launch

    timer = clock(arguments)  # the command's clock: what ran before the launch counts against --timeout
    limit = timer.within(deadline(arguments.timeout, config))
    outcome = launch(config, deadline=limit)
    if outcome.diverged is not None:
        return diverged(console, config, outcome, arguments)
    label = (
        f"{config.protocol}/{config.variant} scenario {config.scenario}, {config.ranks} ranks, {config.backend}, "
        f"seed {config.seed}"
    )
    colour = {"completed": "green", "hang diagnosed": "red"}.get(outcome.outcome, "yellow")
    console.print(
        f"lockstep run {label}: [bold {colour}]{outcome.outcome}[/bold {colour}] in {outcome.seconds:.2f} s "
        f"({outcome.steps} steps, {outcome.events} events)",
        soft_wrap=True,
        markup=True,
        highlight=False,
    )
    if outcome.outcome != "completed":
        console.print(outcome.message, soft_wrap=True, markup=False, highlight=False)
    console.print(
        f"traces: {config.trace_dir if config.trace_dir else 'not recorded (no --trace-dir)'}",
        markup=False,
        highlight=False,
    )
    replayed = None if getattr(arguments, "no_replay", False) else replay_run(config, console, timer)
    stopped = TIMEOUT if outcome.outcome == INCONCLUSIVE or (replayed or {}).get("stopped") else None
    code = outcome.exit_code
    if outcome.outcome == ERROR and replayed is not None and replayed["verdict"] == "violated":
        code = 1  # a process died of the protocol's failure (an engine's assert) and the trace shows it
    elif code == 0 and replayed is not None and replayed["verdict"] in ("error", "inconclusive"):
        code = 3  # the run completed, but its trace could not be checked (inconclusive)
    elif code == 0 and replayed is not None and replayed["verdict"] != "conforms":
        code = 1  # the run completed, but its trace does not follow the model (or a property fails)
    if arguments.json:
        replay_fields = ("verdict", "event", "property", "model", "longest_conforming_prefix")
        payload = {
            "schema_version": SCHEMA_VERSION,
            "protocol": config.protocol,
            "variant": config.variant,
            "scenario": config.scenario,
            "ranks": config.ranks,
            "backend": config.backend,
            "seed": config.seed,
            "hang_timeout": config.timeout,
            "timeout": deadline(arguments.timeout, config),
            **outcome.to_json(),
            "exit_code": code,
            "stopped": stopped,
            "replay": None if replayed is None else {key: replayed.get(key) for key in replay_fields},
        }
        write_stdout(json.dumps(payload) + "\n")
    return code
