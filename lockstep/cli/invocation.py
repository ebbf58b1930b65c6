"""What a parsed command line asks for, and running it with the command's error handling.

Click only parses: a command's callback returns (``call``) an ``Invocation``, the function to call
(``"module:function"``, imported only now) and the options as an ``argparse.Namespace``, the
object every command body takes. ``Invocation.run`` calls it with a rich console on stderr and
turns whatever it raises into a message and an exit code (``lockstep.cli.failures``), so a
traceback never reaches the user and ``--help`` never imports a command's body. It starts the
command's one clock first (``clock``: what ``--timeout`` bounds, ``lockstep.clock``), and refuses
an input of ``-`` when standard input is closed (``<&-``: exit 2, not an internal error).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from dataclasses import dataclass
from typing import Any

from lockstep.clock import Clock

STDIN = "-"  # an input argument that reads standard input (as lockstep.traces.merge.STDIN)


@dataclass(frozen=True)
class Invocation:
    target: str  # "module:function"; the function takes (arguments, console) and returns the exit code
    arguments: argparse.Namespace

    def run(self) -> int:
        from rich.console import Console

        from lockstep.cli import failures

        clock(self.arguments)  # --timeout counts from here: every phase of the command reads this clock
        console = Console(stderr=True, width=None if sys.stderr.isatty() else 160, emoji=False)
        if closed_stdin() and reads_stdin(self.arguments):
            message = (
                f"<stdin>: standard input is closed: nothing to read for {STDIN!r} (pipe a trace in, or name a file)"
            )
            return failures.usage_error(console, message, self.arguments)
        previous = failures.install_termination_handler()
        with warnings.catch_warnings():
            noted = failures.notes(console)
            warnings.showwarning = noted  # lockstep's own notes (a cache entry made again): one line each
            try:
                module, _, name = self.target.partition(":")
                command = getattr(importlib.import_module(module), name)
                return int(command(self.arguments, console))
            except BaseException as error:  # a model's code or lockstep itself: never a traceback
                return failures.handle(error, self.arguments, console)
            finally:
                failures.restore(previous)


def closed_stdin() -> bool:
    """Whether descriptor 0 was closed (``lockstep replay - <&-``); if so, ``/dev/null`` now takes it, so
    no file the command opens becomes descriptor 0 (which a process it starts would read as stdin)."""
    try:
        os.fstat(0)
        return False
    except OSError:
        pass
    descriptor = os.open(os.devnull, os.O_RDONLY)
    if descriptor != 0:
        os.dup2(descriptor, 0)
        os.close(descriptor)
    return True


def reads_stdin(arguments: argparse.Namespace) -> bool:
    """Whether an argument names standard input (``-``) as an input."""
    for value in vars(arguments).values():
        items = value if isinstance(value, (list, tuple)) else [value]
        if any(isinstance(item, (str, os.PathLike)) and os.fspath(item) == STDIN for item in items):
            return True
    return False


def clock(arguments: argparse.Namespace) -> Clock:
    """The command's one clock (``lockstep.clock``) for its ``--timeout``: started by ``Invocation.run``
    (a command body called without it starts it on first use)."""
    found = getattr(arguments, "clock", None)
    if not isinstance(found, Clock):
        found = Clock(getattr(arguments, "timeout", None))
        arguments.clock = found
    return found


def namespace(command: str, parameters: dict[str, Any], **fixed: Any) -> argparse.Namespace:
    """The options as command bodies read them: repeatable options and ``nargs=-1`` arguments as lists."""
    values = {name: list(value) if isinstance(value, tuple) else value for name, value in parameters.items()}
    return argparse.Namespace(command=command, **fixed, **values)


def call(target: str, command: str, options: dict[str, Any], **fixed: Any) -> Invocation:
    """The ``Invocation`` of ``target`` with click's ``options`` (``fixed``: extra attributes)."""
    return Invocation(target, namespace(command, options, **fixed))
