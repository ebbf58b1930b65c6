"""The ``lockstep`` command: list the built-in models and check them.

Exit codes (every command): 0 everything asked holds / conforms / is as pinned; 1 a property is
violated (or, for ``check --all``, a verdict differs from its pin); 2 usage or input error (a
message, never a traceback); 3 inconclusive (a limit or Ctrl-C stopped the search, or the
runtime gave no verdict); 4 a process of a runtime run crashed (died without finishing: not a
hang, not a verdict); 5 a model error (the model's own code raised while it ran) or an internal
error: one line naming the file and line, with ``--json`` one JSON object with an ``error`` field
(``lockstep.cli_failures``); 143 SIGTERM (the run's processes and temporary files removed).
A violation wins over a limit. Human output goes to stderr; with ``--json`` stdout carries one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from lockstep.checkers import AUTO, ENGINES, SYMBOLIC_ENGINES, CheckResult, Limits, Statistics, check
from lockstep.checkers.counterexample import write_counterexample
from lockstep.checkers.report import PinnedRow, markdown_tables, render, result_json, summary_table
from lockstep.checkers.symmetry import SymmetryError
from lockstep.cli_numbers import non_negative, positive
from lockstep.models import PROTOCOLS, get_protocol
from lockstep.models.external import ModelLoadTimeout, load_model_file
from lockstep.spec.protocol import Instance, Protocol, UsageError, parse_assignment
from lockstep.spec.semantics import ModelError
from lockstep.spec.terms import DefinitionError

EXIT_OK, EXIT_VIOLATED, EXIT_USAGE, EXIT_INCONCLUSIVE = 0, 1, 2, 3


class _Parser(argparse.ArgumentParser):
    """argparse with exit code 2 and a one-line hint, as for every other usage error; options are
    never abbreviated (``--max`` is an error, not ``--max-states``), on every subcommand."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        sys.stderr.write(f"lockstep: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    from lockstep import __version__

    parser = _Parser(prog="lockstep", description="Formal checking of LLM inference-engine protocols (vLLM first).")
    parser.add_argument("--version", action="version", version=f"lockstep {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    lister = commands.add_parser("list", help="protocols, variants (with the vLLM release each stands for) and instances")
    lister.add_argument("--model-file", type=Path, metavar="PATH", help="list the model a Python file defines instead of the built-in ones")
    lister.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    lemmas = commands.add_parser("prove-lemmas", help="prove the built-in lemmas for all sizes with Z3")
    lemmas.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    lemmas.add_argument("--solver-timeout", type=positive(float), default=30.0, metavar="SECONDS", help="limit per Z3 query")
    checker = commands.add_parser(
        "check",
        help="model-check a protocol instance, or every built-in one against its pinned verdict (--all)",
        description="Explore every interleaving of a protocol instance and check its properties.",
    )
    checker.add_argument("protocol", nargs="?", help="protocol name (see `lockstep list`)")
    checker.add_argument("--all", action="store_true", help="every built-in instance × variant against its pinned verdict")
    checker.add_argument("--markdown", action="store_true", help="with --all: print the README's generated tables (markdown) on stdout; with --json too, as its 'markdown' field")
    checker.add_argument("--model-file", type=Path, metavar="PATH", help="check the model a Python file defines (its PROTOCOL) instead of a built-in one")
    checker.add_argument("--variant", help="pre-fix, post-fix or a mutant (default: post-fix)")
    checker.add_argument("--instance", help="named instance (default: seed)")
    checker.add_argument("--ranks", type=positive(int), help="the model's rank parameter")
    checker.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="override a parameter (repeatable)")
    checker.add_argument(
        "--engine", choices=ENGINES, default=AUTO,
        help="auto (default): bfs-vec where it supports the model, else bfs; bfs: the reference search, shortest counterexamples; "
        "dfs; bfs-vec: compiled array kernels over packed states (numpy, one core); bfs-gpu: the same kernels with torch "
        "(--device); bmc: Z3 bounded model checking; induction: Z3 k-induction",
    )
    checker.add_argument("--device", metavar="DEVICE", help="bfs-gpu: cuda (default), cuda:N or cpu")
    checker.add_argument("--compact", action="store_true", help="bfs-vec/bfs-gpu: store 64-bit fingerprints, not whole states (the omission probability is reported)")
    checker.add_argument("--stop-at-first", action="store_true", help="explicit engines: stop at the first violation (shortest with the BFS engines)")
    checker.add_argument("--workers", type=positive(int), default=1, metavar="N", help="bfs-vec/bfs-gpu: partition the search across N processes (torch.distributed)")
    checker.add_argument("--depth", type=non_negative, metavar="K", help="bmc: steps to unroll")
    checker.add_argument("--k", type=positive(int), dest="induction_k", metavar="K", help="induction: the k of k-induction (default: 1..10)")
    checker.add_argument("--solver-timeout", type=positive(float), metavar="SECONDS", help="bmc: limit per Z3 query (unknown = inconclusive)")
    checker.add_argument("--symmetry", action="store_true", help="reduce by the model's declared symmetry")
    checker.add_argument("--max-states", type=positive(int), help="stop after this many states (inconclusive)")
    checker.add_argument("--max-depth", type=positive(int), help="explore at most this many steps deep (holds-within-bound)")
    checker.add_argument("--max-memory", type=positive(float), metavar="GIB", help="stop above this resident memory (default: 75%% of RAM)")
    checker.add_argument("--timeout", type=positive(float), metavar="SECONDS", help="wall-clock limit of the whole check")
    checker.add_argument("--property", action="append", dest="properties", metavar="NAME", help="check only this property (repeatable)")
    checker.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    checker.add_argument("--trace-out", type=Path, metavar="FILE", help="where to write the counterexample trace")
    checker.add_argument("--interpreted", action="store_true", help="use the reference interpreter instead of compiled code")
    _add_command_modules(commands)
    return parser


def _add_command_modules(commands: Any) -> None:
    """The commands that live in their own modules (the runtime, traces, pictures)."""
    from lockstep.export_cli import add_export_parsers
    from lockstep.fuzz_cli import add_fuzz_parser
    from lockstep.reproduce_cli import add_reproduce_parser
    from lockstep.runtime_cli import add_run_parser
    from lockstep.trace_cli import add_trace_parsers

    add_run_parser(commands)
    add_reproduce_parser(commands)
    add_fuzz_parser(commands)
    add_trace_parsers(commands)
    add_export_parsers(commands)


def _run_command_module(arguments: argparse.Namespace, console: Console) -> int | None:
    if arguments.command == "fuzz":
        from lockstep.fuzz_cli import command_fuzz

        return command_fuzz(arguments, console)
    if arguments.command == "run":
        from lockstep.runtime_cli import command_run

        return command_run(arguments, console)
    if arguments.command == "reproduce":
        from lockstep.reproduce_cli import command_reproduce

        return command_reproduce(arguments, console)
    if arguments.command in ("replay", "trace"):
        from lockstep.trace_cli import command_replay, command_trace

        return command_replay(arguments, console) if arguments.command == "replay" else command_trace(arguments, console)
    if arguments.command in ("show", "export", "graph"):
        from lockstep.export_cli import run_export_command

        return run_export_command(arguments, console)
    return None


def _limits(arguments: argparse.Namespace) -> Limits:
    memory = None if arguments.max_memory is None else int(arguments.max_memory * 1024**3)
    return Limits(arguments.max_states, arguments.max_depth, memory, arguments.timeout)


PROGRESS_SECONDS = 30.0  # without a terminal (CI logs), one progress line on stderr this often


def _run(instance: Instance, arguments: argparse.Namespace, console: Console) -> CheckResult:
    printed = [0.0]  # the engine's seconds at the last progress line (no terminal: no spinner)
    with console.status(f"checking {instance.label}…") as status:

        def progress(stats: Statistics) -> None:
            if stats.states is None:
                text = f"checking {instance.label}: depth {stats.depth} unrolled"
            else:
                text = (f"checking {instance.label}: {stats.states:,} states, depth {stats.depth}, "
                        f"{stats.states_per_second:,.0f} states/s")
            status.update(f"{text}, {stats.seconds:.1f} s" if stats.states is None else text)
            if not console.is_terminal and stats.seconds - printed[0] >= PROGRESS_SECONDS:
                printed[0] = stats.seconds
                console.print(f"{text}, {stats.seconds:,.0f} s elapsed", markup=False, highlight=False, soft_wrap=True)

        return check(
            instance,
            arguments.engine,
            symmetry=arguments.symmetry,
            limits=_limits(arguments),
            compiled=not arguments.interpreted,
            progress=progress,
            depth=arguments.depth,
            solver_timeout=arguments.solver_timeout,
            induction_k=arguments.induction_k,
            properties=arguments.properties,
            device=arguments.device,
            compact=arguments.compact,
            stop_at_first=arguments.stop_at_first,
            workers=arguments.workers,
        )


def _validate_engine_options(arguments: argparse.Namespace) -> None:
    """Options that belong to the other family of engines are errors, not silently ignored."""
    engine = arguments.engine
    if engine in SYMBOLIC_ENGINES:
        for option, value in (("--max-depth", arguments.max_depth), ("--max-states", arguments.max_states), ("--symmetry", arguments.symmetry or None)):
            if value is not None:
                hint = "--depth" if engine == "bmc" else "--k"
                raise UsageError(f"{option} applies to the explicit engines (bfs, dfs); with --engine {engine} use {hint}")
        if engine == "bmc" and arguments.depth is None:
            raise UsageError("--engine bmc needs --depth K")
        if engine == "bmc" and arguments.induction_k is not None:
            raise UsageError("--k applies to --engine induction, not to bmc (use --depth)")
        if engine == "induction" and arguments.depth is not None:
            raise UsageError("--depth applies to --engine bmc, not to induction (use --k)")
    else:
        for option, value in (("--depth", arguments.depth), ("--k", arguments.induction_k), ("--solver-timeout", arguments.solver_timeout)):
            if value is not None:
                owner = "--engine induction" if option == "--k" else "--engine bmc"
                raise UsageError(f"{option} applies to {owner}, not to {engine}")
        if arguments.interpreted and engine not in ("bfs", "dfs", AUTO):
            raise UsageError(f"--interpreted applies to --engine bfs and dfs, not to {engine}")


def _write_trace(instance: Instance, result: CheckResult, target: Path | None, console: Console,
                 inputs: Sequence[Path] = ()) -> Path | None:
    """Write the shortest counterexample; a file that cannot be written is reported, and the result
    of the (possibly long) check is still shown rather than lost."""
    shortest = result.counterexample
    if shortest is None or shortest.path is None:
        return None
    from lockstep.traces.output import OutputError, refuse_inputs, safe_name

    file = target or Path("lockstep-out") / (safe_name(instance.protocol.name, instance.variant, instance.name) + ".jsonl")
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


def command_list(arguments: argparse.Namespace, console: Console) -> int:
    """The models, on stdout (a listing is a result: ``lockstep list | grep dp-pause``)."""
    from rich.table import Table

    protocols = _protocols(arguments)
    if arguments.json:
        sys.stdout.write(json.dumps({"protocols": [_protocol_json(protocol) for protocol in protocols]}) + "\n")
        return EXIT_OK
    console = Console(width=None if sys.stdout.isatty() else 160, emoji=False)
    table = Table(title="lockstep models", title_justify="left")
    for column in ("protocol", "change", "variant", "stands for", "instances (default *)", "parameters"):
        table.add_column(column)
    for protocol in protocols:
        instances = ", ".join(
            f"{instance.name}{'*' if instance.name == protocol.default_instance else ''}" for instance in protocol.instances
        )
        parameters = ", ".join(f"{parameter.name}={parameter.default}" for parameter in protocol.parameters)
        for position, variant in enumerate(protocol.variants):
            default = "*" if variant.name == protocol.default_variant else ""
            first = position == 0
            table.add_row(
                protocol.name if first else "",
                protocol.change if first else "",
                f"{variant.name}{default}",
                f"{variant.release}: {variant.description}",
                instances if first else "",
                parameters if first else "",
            )
    console.print(table)
    pins = Table(title="instances and their pinned verdicts", title_justify="left")
    for column in ("protocol", "instance", "expected", "scenario"):
        pins.add_column(column)
    for protocol in protocols:
        for instance in protocol.instances:
            expected = ", ".join(f"{variant}: {verdict}" for variant, verdict in instance.expected.items())
            pins.add_row(protocol.name, instance.name, expected, instance.description)
    console.print(pins)
    return EXIT_OK


def _protocol_json(protocol: Protocol) -> dict[str, Any]:
    return {
        "name": protocol.name,
        "title": protocol.title,
        "change": protocol.change,
        "default_variant": protocol.default_variant,
        "default_instance": protocol.default_instance,
        "variants": [{"name": variant.name, "release": variant.release, "description": variant.description} for variant in protocol.variants],
        "parameters": [
            {"name": parameter.name, "default": parameter.default, "minimum": parameter.minimum, "maximum": parameter.maximum, "description": parameter.description}
            for parameter in protocol.parameters
        ],
        "instances": [
            {"name": instance.name, "description": instance.description, "parameters": dict(instance.parameters), "expected": dict(instance.expected)}
            for instance in protocol.instances
        ],
    }


def command_check(arguments: argparse.Namespace, console: Console) -> int:
    if arguments.all:
        _validate_engine_options(arguments)
        if arguments.protocol or arguments.variant or arguments.instance or arguments.set or arguments.ranks or arguments.properties:
            raise UsageError(
                "--all checks every built-in instance (or the --model-file model's) against its pin; it takes no protocol, variant, "
                "instance, --ranks, --set or --property"
            )
        return _check_all(arguments, console)
    _validate_engine_options(arguments)
    if arguments.markdown:
        raise UsageError("--markdown applies to check --all")
    if not arguments.protocol and arguments.model_file is None:
        raise UsageError("name a protocol (see `lockstep list`), give --model-file PATH, or use --all")
    (protocol,) = _protocols(arguments)
    overrides = dict(parse_assignment(text) for text in arguments.set)
    instance = protocol.instance(arguments.variant, arguments.instance, overrides, arguments.ranks)
    result = _run(instance, arguments, console)
    if arguments.workers > 1 and os.environ.get("RANK", "0") != "0":
        return result.exit_code  # a torchrun process other than rank 0: the same verdict, reported by rank 0
    trace_file = _write_trace(instance, result, arguments.trace_out, console, [arguments.model_file] if arguments.model_file else [])
    if arguments.json:
        sys.stdout.write(json.dumps(result_json(result, instance, trace_file)) + "\n")
    else:
        render(console, result, label=instance.label, expected=instance.expected, trace_file=trace_file)
    return result.exit_code


def pinned_instances(protocols: Sequence[Protocol] | None = None) -> list[Instance]:
    """Every instance × variant that carries a pinned verdict (default: the built-in models), in order."""
    return [
        protocol.instance(variant.name, spec.name)
        for protocol in (PROTOCOLS.values() if protocols is None else protocols)
        for spec in protocol.instances
        for variant in protocol.variants
        if variant.name in spec.expected
    ]


def _protocols(arguments: argparse.Namespace) -> list[Protocol]:
    """The protocols a command works on: the model file's, the named one, or every built-in one."""
    if arguments.model_file is not None:
        protocol = load_model_file(arguments.model_file, timeout=getattr(arguments, "timeout", None))
        named = getattr(arguments, "protocol", None)
        if named and named != protocol.name:
            raise UsageError(f"{arguments.model_file} defines protocol {protocol.name!r}, not {named!r}")
        return [protocol]
    named = getattr(arguments, "protocol", None)
    return [get_protocol(named)] if named else list(PROTOCOLS.values())


def _check_all(arguments: argparse.Namespace, console: Console) -> int:
    rows: list[PinnedRow] = []
    payloads = []
    for instance in pinned_instances(_protocols(arguments)):
        result = _run(instance, arguments, console)
        trace_file = _write_trace(instance, result, None, console)
        rows.append(PinnedRow.of(instance, result))
        payloads.append(result_json(result, instance, trace_file))
    all_as_pinned = all(row.as_pinned for row in rows)
    if arguments.json:
        summary: dict[str, object] = {"as_pinned": all_as_pinned, "checks": payloads}
        if arguments.markdown:  # both: the tables ride along in the JSON
            summary["markdown"] = markdown_tables(rows)
        sys.stdout.write(json.dumps(summary) + "\n")
    elif arguments.markdown:
        sys.stdout.write(markdown_tables(rows))
    if not arguments.json:
        console.print(summary_table(rows))
        console.print("every verdict is as pinned" if all_as_pinned else "[bold red]some verdicts differ from their pins[/bold red]")
    return EXIT_OK if all_as_pinned else EXIT_VIOLATED


def command_prove_lemmas(arguments: argparse.Namespace, console: Console) -> int:
    """Exit 0 iff every lemma's outcome is its expected one; 3 if any is unknown; 1 otherwise."""
    from rich.table import Table

    from lockstep.checkers.symbolic.lemmas import prove
    from lockstep.models import LEMMAS

    outcomes = [prove(lemma, solver_timeout=arguments.solver_timeout) for lemma in LEMMAS]
    if arguments.json:
        rows = [
            {
                "lemma": item.lemma.name,
                "expected": item.lemma.expected,
                "outcome": item.outcome,
                "seconds": round(item.seconds, 3),
                "detail": item.detail,
                "counterexample": None if item.counterexample is None else repr(item.counterexample),
            }
            for item in outcomes
        ]
        sys.stdout.write(json.dumps({"lemmas": rows, "as_expected": all(item.as_expected for item in outcomes)}) + "\n")
    else:
        table = Table(title="lockstep prove-lemmas", title_justify="left")
        for column in ("lemma", "expected", "outcome", "seconds", "detail"):
            table.add_column(column)
        for item in outcomes:
            style = "green" if item.as_expected else "bold red"
            table.add_row(item.lemma.name, item.lemma.expected, f"[{style}]{item.outcome}[/{style}]", f"{item.seconds:.2f}", item.detail)
        console.print(table)
    if all(item.as_expected for item in outcomes):
        return EXIT_OK
    if any(item.outcome == "unknown" for item in outcomes):
        return EXIT_INCONCLUSIVE
    return EXIT_VIOLATED


def main(argv: Sequence[str] | None = None) -> int:
    from lockstep import cli_failures

    parser = build_parser()
    arguments = parser.parse_args(argv)
    console = Console(stderr=True, width=None if sys.stderr.isatty() else 160, emoji=False)
    previous = cli_failures.install_termination_handler()
    try:
        if arguments.command == "list":
            return command_list(arguments, console)
        if arguments.command == "check":
            return command_check(arguments, console)
        if arguments.command == "prove-lemmas":
            return command_prove_lemmas(arguments, console)
        code = _run_command_module(arguments, console)
        if code is not None:
            return code
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    except (UsageError, SymmetryError) as error:
        console.print(f"[bold red]lockstep: error:[/bold red] {error}")
        return EXIT_USAGE
    except (ModelError, DefinitionError) as error:
        console.print(f"[bold red]lockstep: model error:[/bold red] {error}")
        return EXIT_USAGE
    except OSError as error:
        console.print(f"[bold red]lockstep: error:[/bold red] {error.strerror or error}: {error.filename or ''}")
        return EXIT_USAGE
    except ModelLoadTimeout as error:  # --timeout covers importing the model file
        console.print(f"lockstep: inconclusive: {error}", markup=False, highlight=False)
        return EXIT_INCONCLUSIVE
    except KeyboardInterrupt:
        return cli_failures.interrupted(console)
    except cli_failures.Terminated:
        return cli_failures.terminated(console)
    except (Exception, SystemExit) as error:  # a model's code or lockstep itself: exit 5, never a traceback
        return cli_failures.failed(error, arguments, console)
    finally:
        cli_failures.restore(previous)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
