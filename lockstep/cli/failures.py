"""How the ``lockstep`` command ends when no verdict does: usage errors, Ctrl-C, SIGTERM, exceptions.

- A usage or input error: one message on stderr, exit 2 (``EXIT_USAGE``).
- A model written wrongly (a ``DefinitionError``, a ``ModelError``, or a ``--model-file`` that
  does not load: ``lockstep.models.external.ModelFileError``): a **model error**, exit 2, naming
  the model file and line where they are known (``input_error``, ``definition_error``).
- Ctrl-C (``KeyboardInterrupt`` reaching the command): one message, exit 3 (inconclusive), as
  ``check`` and ``fuzz`` report an interrupted search.
- ``--timeout`` running out where a command has no partial result to show (``TimeoutReached``
  from ``lockstep.clock``: a model's ``build()``; ``ModelLoadTimeout``: a model file's import):
  one message, "stopped: timeout ...", exit 3.
- SIGTERM: ``install_termination_handler`` turns it into ``Terminated``, so every ``finally``
  runs (the runtime kills its processes and removes its run directory); one message, exit 143
  (128 + SIGTERM, as a shell reports it).
- A process the command started died without a result (``check --workers``: a search process
  killed by a signal, ``WorkerLost``): one message naming it, exit 4 (``EXIT_CRASHED``).
- An I/O error no command turned into a message (``ENOSPC``, ``EACCES``, ``EIO``): one message
  naming the file (``io_message``: the one the error names, ``<stdout>`` when writing standard
  output failed), exit 2; with ``--json`` the error object, unless stdout is what failed.
- An exception no command turned into a message, or ``SystemExit`` raised by a model's code
  while it runs: a **model error** when the deepest frame in a user's model file (``--model-file``)
  is where it happened, else an **internal error**. Both are exit 5 (``EXIT_ERROR``, a code no
  verdict uses) with one line naming the file and line and the exception.

With ``--json``, each of these also prints one JSON object on stdout (``error_json``; schema
``lockstep/schemas/error.schema.json``): ``{"schema_version", "error", "kind", "file", "line",
"exit_code"}``, so a program reading stdout always gets one object.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
import warnings
from pathlib import Path
from types import FrameType
from typing import Any

from rich.console import Console
from rich.markup import escape

EXIT_USAGE, EXIT_INCONCLUSIVE, EXIT_CRASHED, EXIT_ERROR, EXIT_TERMINATED = 2, 3, 4, 5, 128 + signal.SIGTERM
EXIT_BROKEN_PIPE = (
    128 + signal.SIGPIPE
)  # the reader of stdout went away (`lockstep show T | head`), as shells report it
ERROR_SCHEMA_VERSION = 1  # of the error object (error.schema.json)


class Terminated(BaseException):
    """SIGTERM arrived: unwind (running every ``finally``) and exit 143."""


def _terminate(number: int, frame: FrameType | None) -> None:
    raise Terminated()


def install_termination_handler() -> Any:
    """Make SIGTERM raise ``Terminated`` (main thread only); the handler it replaced, for ``restore``."""
    try:
        return signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # not the main thread (the CLI called from a thread): keep the default
        return None


def restore(previous: Any) -> None:
    """Put back the SIGTERM handler ``install_termination_handler`` replaced (``main`` called in a
    test or another program leaves that process's handling as it was)."""
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


def error_json(message: str, kind: str, exit_code: int, file: str | None = None, line: int | None = None) -> str:
    """The one JSON line a ``--json`` command prints on stdout when it ends without a result."""
    return (
        json.dumps(
            {
                "schema_version": ERROR_SCHEMA_VERSION,
                "error": message,
                "kind": kind,
                "file": file,
                "line": line,
                "exit_code": exit_code,
            }
        )
        + "\n"
    )


def wants_json(arguments: Any) -> bool:
    return bool(getattr(arguments, "json", False))


def print_json(text: str) -> None:
    """The error object on stdout; nothing when stdout itself is what failed (the message is on stderr)."""
    from lockstep.traces.output import write_stdout  # noqa: PLC0415 - kept out of every command's start-up

    try:
        write_stdout(text)
    except OSError:  # a full or broken stdout (ENOSPC on /dev/full): the stderr message stands alone
        pass


STDOUT = "<stdout>"  # the file an I/O error names when writing standard output failed


def io_file(error: OSError, default: str | None = None) -> str:
    """The file an I/O error is about: the one it names, else standard output when writing stdout
    failed (``write_stdout`` in its traceback), else ``default`` (what the command read or wrote),
    else the place in lockstep that did the I/O."""
    if error.filename is not None:
        return os.fsdecode(error.filename)
    frames = traceback.extract_tb(error.__traceback__)
    if any(frame.name == "write_stdout" for frame in frames):
        return STDOUT
    if default is not None:
        return default
    return f"a file written at {frames[-1].filename}:{frames[-1].lineno}" if frames else "an unnamed file"


def io_message(error: OSError, default: str | None = None) -> str:
    """``FILE: problem`` for an I/O error (``ENOSPC``, ``EACCES``, ``EIO``...): its file always named."""
    return f"{io_file(error, default)}: {error.strerror or error}"


def usage_error(
    console: Console,
    message: str,
    arguments: Any,
    label: str = "error",
    file: str | None = None,
    line: int | None = None,
) -> int:
    """Report a usage or input error (``lockstep: error: ...``; with ``--json`` the error object too,
    of kind "model" for a model error, with ``file`` and ``line`` where they are known)."""
    console.print(f"[bold red]lockstep: {label}:[/bold red] {escape(message)}", soft_wrap=True, highlight=False)
    if wants_json(arguments):
        print_json(error_json(message, "model" if label == "model error" else "usage", EXIT_USAGE, file, line))
    return EXIT_USAGE


def input_error(console: Console, error: BaseException, arguments: Any) -> int:
    """Report a ``UsageError``: a model file that did not load (``ModelFileError``) is a model error
    with its file and line, anything else a usage error."""
    if _is(error, ("lockstep.models.external", "ModelFileError")):
        file, line = getattr(error, "file", None), getattr(error, "line", None)
        return usage_error(console, str(error), arguments, label="model error", file=file, line=line)
    return usage_error(console, str(error), arguments)


def definition_error(console: Console, error: BaseException, arguments: Any) -> int:
    """Report a ``DefinitionError`` or ``ModelError`` (exit 2) as a model error, prefixed with the
    model file and line when the deepest frame of the user's ``--model-file`` is where it was raised
    (a ``BuildError`` names the file and line of the ``build`` that returned no ``Machine`` itself)."""
    message = str(error)
    file, line = getattr(error, "file", None), getattr(error, "line", None)
    if file is not None:  # a BuildError: its message names the file and line
        return usage_error(console, message, arguments, label="model error", file=file, line=line)
    model_file = getattr(arguments, "model_file", None)
    kind, file, line = where(error, Path(model_file) if model_file is not None else None)
    if kind != "model":
        return usage_error(console, message, arguments, label="model error")
    return usage_error(console, f"{file}:{line}: {message}", arguments, label="model error", file=file, line=line)


def inconclusive(console: Console, message: str, arguments: Any) -> int:
    """A limit stopped the command before it had a result (exit 3)."""
    console.print(f"lockstep: inconclusive: {message}", markup=False, highlight=False, soft_wrap=True)
    if wants_json(arguments):
        print_json(error_json(message, "inconclusive", EXIT_INCONCLUSIVE))
    return EXIT_INCONCLUSIVE


def interrupted(console: Console, arguments: Any = None) -> int:
    console.print("[yellow]lockstep: interrupted (Ctrl-C)[/yellow]")
    if wants_json(arguments):
        print_json(error_json("interrupted (Ctrl-C)", "interrupted", EXIT_INCONCLUSIVE))
    return EXIT_INCONCLUSIVE


def terminated(console: Console, arguments: Any = None) -> int:
    console.print("[yellow]lockstep: terminated (SIGTERM)[/yellow]")
    if wants_json(arguments):
        print_json(error_json("terminated (SIGTERM)", "terminated", EXIT_TERMINATED))
    return EXIT_TERMINATED


def crashed(console: Console, message: str, arguments: Any = None) -> int:
    """A process the command started died, so there is no result (exit 4)."""
    console.print(f"[bold red]lockstep: process crashed:[/bold red] {escape(message)}", soft_wrap=True, highlight=False)
    if wants_json(arguments):
        print_json(error_json(message, "crashed", EXIT_CRASHED))
    return EXIT_CRASHED


def closed_output() -> int:
    """stdout's reader closed it (rich turns that into ``SystemExit(1)``): stop quietly, as ``cat`` would,
    with stdout pointed at /dev/null so that the interpreter's final flush does not fail again."""
    try:
        descriptor = os.open(os.devnull, os.O_WRONLY)
        os.dup2(descriptor, sys.stdout.fileno())
    except (OSError, ValueError):  # no real stdout to point elsewhere
        pass
    return EXIT_BROKEN_PIPE


def _loaded(module: str, name: str) -> type[BaseException] | None:
    """The exception class ``module.name`` if that module was imported (an error of a module not
    imported cannot have been raised, and importing it only to ask would slow every command)."""
    found = sys.modules.get(module)
    kind = getattr(found, name, None)
    return kind if isinstance(kind, type) and issubclass(kind, BaseException) else None


def _is(error: BaseException, *names: tuple[str, str]) -> bool:
    return any(kind is not None and isinstance(error, kind) for kind in (_loaded(*name) for name in names))


def handle(error: BaseException, arguments: Any, console: Console) -> int:
    """The exit code of a command that raised ``error`` (see the module doc); the message printed."""
    if isinstance(error, KeyboardInterrupt):
        return interrupted(console, arguments)
    if isinstance(error, BrokenPipeError) or isinstance(error.__context__, BrokenPipeError):
        return closed_output()
    if isinstance(error, Terminated):
        return terminated(console, arguments)
    if _is(error, ("lockstep.checkers.vector.distributed", "WorkerLost")):
        return crashed(console, str(error), arguments)
    if _is(
        error,
        ("lockstep.spec.protocol", "UsageError"),
        ("lockstep.checkers.symmetry", "SymmetryError"),
        ("lockstep.cache", "CacheError"),  # a cache folder that cannot be trusted
    ):
        return input_error(console, error, arguments)
    if _is(error, ("lockstep.spec.semantics", "ModelError"), ("lockstep.spec.terms", "DefinitionError")):
        return definition_error(console, error, arguments)
    if _is(error, ("lockstep.models.external", "ModelLoadTimeout"), ("lockstep.clock", "TimeoutReached")):
        return inconclusive(console, str(error), arguments)  # --timeout ran out: a model file's import, a build
    if isinstance(error, OSError):  # a file that cannot be read or written, stdout on a full disk
        return usage_error(console, io_message(error), arguments, file=io_file(error))
    return failed(error, arguments, console)


def notes(console: Console) -> Any:
    """A ``warnings.showwarning`` that prints lockstep's own warnings (``lockstep.cache``'s
    ``CacheEntryRejected``) as one ``lockstep: note:`` line and others as Python would."""
    original = warnings.showwarning

    def show(message: Warning | str, category: type[Warning], *rest: Any, **named: Any) -> None:
        if category.__module__.startswith("lockstep"):
            console.print(f"lockstep: note: {message}", markup=False, highlight=False, soft_wrap=True)
        else:
            original(message, category, *rest, **named)

    return show


def where(error: BaseException, model_file: Path | None) -> tuple[str, str | None, int | None]:
    """("model" or "internal", file, line): the deepest frame in the model file, else the deepest."""
    frames = traceback.extract_tb(error.__traceback__)
    if model_file is not None:
        target = model_file.resolve()
        inside = [frame for frame in frames if Path(frame.filename).resolve() == target]
        if inside:
            return "model", str(model_file), inside[-1].lineno
    if frames:
        return "internal", frames[-1].filename, frames[-1].lineno
    return "internal", None, None


def failed(error: BaseException, arguments: Any, console: Console) -> int:
    """Report ``error`` (a model error or an internal error, see the module doc) and return ``EXIT_ERROR``."""
    model_file = getattr(arguments, "model_file", None)
    kind, file, line = where(error, Path(model_file) if model_file is not None else None)
    if isinstance(error, SystemExit):
        problem = f"the code called sys.exit({error.code!r})"
    else:
        problem = f"{type(error).__name__}: {error}"
    location = f"{file}:{line}" if file is not None else "lockstep"
    if kind == "model":
        message = f"{location}: model error: {problem}"
    else:
        message = f"internal error: {problem} (at {location}; please report it)"
    console.print(f"[bold red]lockstep:[/bold red] {escape(message)}", soft_wrap=True, highlight=False)
    if wants_json(arguments):
        print_json(error_json(message, kind, EXIT_ERROR, file, line))
    return EXIT_ERROR
