"""What a parsed command line asks for, and running it with the command's error handling.

Click only parses: a command's callback returns (``call``) an ``Invocation``, the function to call
(``"module:function"``, imported only now) and the options as an ``argparse.Namespace``, the
object every command body takes. ``Invocation.run`` calls it with a rich console on stderr and
turns whatever it raises into a message and an exit code (``lockstep.cli.failures``), so a
traceback never reaches the user and ``--help`` never imports a command's body. It starts the
command's one clock first (``clock``: what ``--timeout`` bounds, ``lockstep.clock``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from dataclasses import dataclass
from typing import Any

from lockstep.clock import Clock


@dataclass(frozen=True)
class Invocation:
    target: str  # "module:function"; the function takes (arguments, console) and returns the exit code
    arguments: argparse.Namespace

    def run(self) -> int:
        from rich.console import Console

        from lockstep.cli import failures

        clock(self.arguments)  # --timeout counts from here: every phase of the command reads this clock
        console = Console(stderr=True, width=None if sys.stderr.isatty() else 160, emoji=False)
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
