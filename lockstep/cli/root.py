"""The root of the ``lockstep`` command: the command table, ``--version`` and ``main``.

``COMMANDS`` names every command, where its click object lives and its one-line help; the group
imports a command's module only when that command is used (``lockstep --help`` and shell
completion of command names import none of them). A misspelt command is refused with the closest
names (``lockstep chek`` → "did you mean check?").

``main(argv)`` parses with click and runs the command (``Invocation.run``); it returns the
command's exit code. A command line that does not parse prints the usage, ``lockstep: error:``
and the problem on stderr (with ``--json``, also the error object on stdout) and raises
``SystemExit(2)``; ``--help`` and ``--version`` raise ``SystemExit(0)`` after printing, as
argparse did. With ``_LOCKSTEP_COMPLETE`` set, ``main`` answers a shell's completion request.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import click

from lockstep import __version__
from lockstep.cli.invocation import Invocation

EXIT_USAGE = 2


@dataclass(frozen=True)
class Entry:
    target: str  # "module:attribute" of the click command
    help: str  # one line, for `lockstep --help` and completion of command names


COMMANDS = {
    "list": Entry(
        "lockstep.cli.commands:list_command",
        "protocols, variants (with the vLLM release each stands for) and instances",
    ),
    "prove-lemmas": Entry("lockstep.cli.commands:prove_lemmas", "prove the built-in lemmas for all sizes with Z3"),
    "prove": Entry(
        "lockstep.cli.commands:prove_command",
        "prove a protocol's safety properties for every number of ranks (--all-ranks)",
    ),
    "check": Entry(
        "lockstep.cli.commands:check",
        "model-check a protocol instance, or every built-in one against its pinned verdict (--all)",
    ),
    "run": Entry(
        "lockstep.cli.runtime:run", "run a protocol in the torch reference runtime (real processes and collectives)"
    ),
    "reproduce": Entry(
        "lockstep.cli.commands:reproduce", "run a model counterexample's choices in the torch reference runtime"
    ),
    "test-runtime": Entry(
        "lockstep.cli.commands:test_runtime",
        "drive the torch reference runtime through model paths to every coverage goal, replaying each run",
    ),
    "fuzz": Entry(
        "lockstep.cli.commands:fuzz",
        "random interleavings of a protocol instance with Hypothesis (reaches instances too large to check)",
    ),
    "replay": Entry(
        "lockstep.cli.trace_commands:replay",
        "check that recorded traces follow a model (protocol, variant and bounds from the header)",
    ),
    "trace": Entry("lockstep.cli.trace_commands:trace", "trace file tools (merge)"),
    "show": Entry("lockstep.cli.trace_commands:show", "draw a trace as per-actor swimlanes in the terminal"),
    "export": Entry(
        "lockstep.cli.trace_commands:export", "write a trace as Perfetto trace events, ITF, DOT or GraphML"
    ),
    "graph": Entry("lockstep.cli.trace_commands:graph", "export an instance's reachable state graph (DOT or GraphML)"),
    "explore": Entry(
        "lockstep.cli.commands:explore",
        "step through a model instance or a trace in the browser: swimlanes, state, properties, enabled actions",
    ),
    "changes": Entry(
        "lockstep.cli.commands:changes", "which model actions a vLLM diff touches, and the checks to run (--run)"
    ),
    "vllm": Entry(
        "lockstep.cli.commands:vllm",
        "check a real vLLM (installed beside lockstep) against its release's model: run, record, replay",
    ),
    "completion": Entry(
        "lockstep.cli.commands:completion_command",
        "print the shell completion script (bash, zsh, fish) of protocol, variant and instance names",
    ),
}


class LazyGroup(click.Group):
    """A group whose commands are imported on first use (``COMMANDS``)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module, _, attribute = entry.target.partition(":")
        command = getattr(importlib.import_module(module), attribute)
        assert isinstance(command, click.Command), entry.target
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0]
        if name not in COMMANDS and not ctx.resilient_parsing and not name.startswith("-"):
            close = difflib.get_close_matches(name, COMMANDS)
            hint = f"did you mean {' or '.join(close)}?" if close else f"commands: {', '.join(COMMANDS)}"
            raise click.UsageError(f"no command {name!r}; {hint}", ctx)
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, entry.help) for name, entry in COMMANDS.items()])

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[Any]:
        from click.shell_completion import CompletionItem

        found = [
            CompletionItem(name, help=entry.help) for name, entry in COMMANDS.items() if name.startswith(incomplete)
        ]
        return [*found, *click.Command.shell_complete(self, ctx, incomplete)]


@click.group(
    "lockstep", cls=LazyGroup, invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.version_option(__version__, "--version", prog_name="lockstep", message="%(prog)s %(version)s")
@click.pass_context
def lockstep(ctx: click.Context) -> None:
    """Formal checking of LLM inference-engine protocols (vLLM first).

    Exit codes: 0 holds / conforms / as pinned, 1 violated, 2 usage or input error, 3 inconclusive,
    4 a runtime process crashed, 5 a model or internal error, 141 stdout closed by its reader, 143 SIGTERM. With
    --json, stdout
    carries exactly one JSON object.
    """
    if ctx.invoked_subcommand is None:  # `lockstep` alone: what there is to run
        click.echo(ctx.get_help(), err=True)
        ctx.exit(EXIT_USAGE)


def _report(error: click.UsageError, as_json: bool) -> None:
    """A command line that does not parse: the usage, the problem, and where help is."""
    context = error.ctx
    if context is not None:
        click.echo(context.get_usage(), err=True)
    click.echo(f"lockstep: error: {error.format_message()}", err=True)
    if context is not None:
        click.echo(f"Try '{context.command_path} --help' for help.", err=True)
    if as_json:
        from lockstep.cli.failures import EXIT_USAGE as CODE
        from lockstep.cli.failures import error_json, print_json

        print_json(error_json(error.format_message(), "usage", CODE))


def parse(words: Sequence[str]) -> Invocation:
    """The command ``words`` ask for (``SystemExit`` for --help, --version and what does not parse)."""
    try:
        with lockstep.make_context("lockstep", list(words)) as context:
            invocation = lockstep.invoke(context)
    except click.exceptions.Exit as stop:  # --help, --version, `lockstep` alone
        raise SystemExit(stop.exit_code) from None
    except click.UsageError as error:  # a bad value, an unknown or missing option or argument
        _report(error, "--json" in words)
        raise SystemExit(EXIT_USAGE) from None
    except click.ClickException as error:
        error.show()
        raise SystemExit(error.exit_code) from None
    assert isinstance(invocation, Invocation), invocation
    return invocation


def main(argv: Sequence[str] | None = None) -> int:
    """The ``lockstep`` command (console script ``lockstep.cli:main``); see the module doc."""
    from lockstep.cli.completion import VARIABLE

    if os.environ.get(VARIABLE):
        from lockstep.cli.completion import answer

        code = answer(lockstep)
        return 0 if code is None else code
    return parse(sys.argv[1:] if argv is None else argv).run()
