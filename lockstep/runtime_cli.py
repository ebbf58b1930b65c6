"""The ``run`` command of ``lockstep``: run a protocol in the torch reference runtime.

``lockstep run PROTOCOL [--variant V] [--scenario NAME] [--ranks N] [--backend gloo|nccl]
[--seed S] [--timeout S] [--trace-dir DIR] [--json]`` spawns the run's processes on 127.0.0.1
(``lockstep.impl.launcher``), prints a summary (steps, events, outcome) and the trace directory
to stderr, or with ``--json`` one JSON object on stdout. With ``--trace-dir`` it then replays the
run's own traces against the model of its variant (``--no-replay`` skips that) and prints the
verdict. Exit codes: 0 completed (and, when replayed, conforming), 1 hang diagnosed or a completed
run whose trace does not conform, 2 usage error (a message, never a traceback), 3 inconclusive or
a runtime error, 4 a process of the run crashed (``launcher.CRASHED``: not a hang).

``add_run_parser(commands)`` adds the subcommand to the CLI's subparsers; ``command_run`` runs
it. ``add_run_arguments`` is shared with ``python -m lockstep.impl.rank`` under torchrun.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lockstep.impl.arguments import RunUsageError, add_run_arguments, config_from_arguments

EXIT_USAGE = 2


def add_run_parser(commands: Any) -> argparse.ArgumentParser:
    """Add ``run`` to the CLI's subparsers object and return its parser."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "run", help="run a protocol in the torch reference runtime (real processes and collectives)")
    add_run_arguments(parser)
    parser.add_argument("--no-replay", action="store_true",
                        help="do not replay the recorded traces against the model after the run")
    return parser


def _replay(config: Any, console: Any) -> dict[str, Any] | None:
    """Replay the run's own traces against the model of its variant (None without traces)."""
    if config.trace_dir is None:
        return None
    from lockstep.testing import replay_traces
    from lockstep.traces.reader import TraceInputError

    try:
        result = replay_traces(config.trace_dir)
    except (TraceInputError, ValueError, OSError) as error:
        console.print(f"replay of the run's traces failed: {error}", markup=False, highlight=False, soft_wrap=True)
        return {"verdict": "error", "detail": str(error)}
    verdict = result["verdict"]
    detail = {"conforms": f"{result.get('longest_conforming_prefix')} events follow {result['model']}",
              "violated": f"{result.get('property')} fails after event {result.get('event')} of {result['model']}",
              "diverges": f"at event {result.get('event')} from {result['model']}: "
                          f"{(result.get('explanation') or {}).get('reason', '')}"}.get(verdict, "")
    console.print(f"replay against the model: {verdict} {detail}".rstrip(), markup=False, highlight=False, soft_wrap=True)
    return result


def _check_backend(config: Any) -> None:
    if config.backend != "nccl":
        return
    import torch  # lazily: only the NCCL check needs it in this process

    if not torch.cuda.is_available() or torch.cuda.device_count() < config.ranks:
        found = torch.cuda.device_count() if torch.cuda.is_available() else 0
        raise RunUsageError(f"--backend nccl needs {config.ranks} CUDA devices, found {found}")


def command_run(arguments: argparse.Namespace, console: Any) -> int:
    """Run the protocol; the exit code of the outcome (2 for a usage error)."""
    from lockstep.impl.launcher import launch

    try:
        config = config_from_arguments(arguments)
        _check_backend(config)
    except RunUsageError as error:
        console.print(f"[bold red]lockstep: error:[/bold red] {error}")
        return EXIT_USAGE
    if config.trace_dir is not None:
        Path(config.trace_dir).mkdir(parents=True, exist_ok=True)
    outcome = launch(config, deadline=max(60.0, 6 * config.timeout))
    label = f"{config.protocol}/{config.variant} scenario {config.scenario}, {config.ranks} ranks, {config.backend}, seed {config.seed}"
    colour = {"completed": "green", "hang diagnosed": "red"}.get(outcome.outcome, "yellow")
    console.print(f"lockstep run {label}: [bold {colour}]{outcome.outcome}[/bold {colour}] in {outcome.seconds:.2f} s "
                  f"({outcome.steps} steps, {outcome.events} events)", soft_wrap=True, markup=True, highlight=False)
    if outcome.outcome != "completed":
        console.print(outcome.message, soft_wrap=True, markup=False, highlight=False)
    console.print(f"traces: {config.trace_dir if config.trace_dir else 'not recorded (no --trace-dir)'}",
                  markup=False, highlight=False)
    replayed = None if getattr(arguments, "no_replay", False) else _replay(config, console)
    code = outcome.exit_code
    if code == 0 and replayed is not None and replayed["verdict"] == "error":
        code = 3  # the run completed, but its trace could not be checked (inconclusive)
    elif code == 0 and replayed is not None and replayed["verdict"] != "conforms":
        code = 1  # the run completed, but its trace does not follow the model (or a property fails)
    if arguments.json:
        payload = {"protocol": config.protocol, "variant": config.variant, "scenario": config.scenario,
                   "ranks": config.ranks, "backend": config.backend, "seed": config.seed, "timeout": config.timeout,
                   **outcome.to_json(), "exit_code": code,
                   "replay": None if replayed is None else {key: replayed.get(key) for key in
                                                            ("verdict", "event", "property", "model", "longest_conforming_prefix")}}
        sys.stdout.write(json.dumps(payload) + "\n")
        sys.stdout.flush()
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone use (``python -m lockstep.runtime_cli run ...``) until the CLI wires ``run`` in."""
    from rich.console import Console

    parser = argparse.ArgumentParser(prog="lockstep", allow_abbrev=False)
    add_run_parser(parser.add_subparsers(dest="command", required=True))
    arguments = parser.parse_args(argv)
    return command_run(arguments, Console(stderr=True, width=160, emoji=False))


if __name__ == "__main__":
    sys.exit(main())
