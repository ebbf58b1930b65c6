"""How the ``lockstep`` command ends when no verdict does: Ctrl-C, SIGTERM, and exceptions.

- Ctrl-C (``KeyboardInterrupt`` reaching the command): one message, exit 3 (inconclusive), as
  ``check`` and ``fuzz`` report an interrupted search.
- SIGTERM: ``install_termination_handler`` turns it into ``Terminated``, so every ``finally``
  runs (the runtime kills its processes and removes its run directory); one message, exit 143
  (128 + SIGTERM, as a shell reports it).
- An exception no command turned into a message, or ``SystemExit`` raised by a model's code
  while it runs: a **model error** when the deepest frame in a user's model file (``--model-file``)
  is where it happened, else an **internal error**. Both are exit 5 (``EXIT_ERROR``, a code no
  verdict uses) with one line naming the file and line and the exception; with ``--json`` stdout
  carries one JSON object ``{"error", "kind", "file", "line", "exit_code"}``.
"""

from __future__ import annotations

import json
import signal
import sys
import traceback
from pathlib import Path
from types import FrameType
from typing import Any

from rich.console import Console
from rich.markup import escape

EXIT_INCONCLUSIVE, EXIT_ERROR, EXIT_TERMINATED = 3, 5, 128 + signal.SIGTERM


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


def interrupted(console: Console) -> int:
    console.print("[yellow]lockstep: interrupted (Ctrl-C)[/yellow]")
    return EXIT_INCONCLUSIVE


def terminated(console: Console) -> int:
    console.print("[yellow]lockstep: terminated (SIGTERM)[/yellow]")
    return EXIT_TERMINATED


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
    """Report ``error`` (see the module doc) and return ``EXIT_ERROR``."""
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
    if getattr(arguments, "json", False):
        sys.stdout.write(json.dumps({"error": message, "kind": kind, "file": file, "line": line,
                                     "exit_code": EXIT_ERROR}) + "\n")
        sys.stdout.flush()
    return EXIT_ERROR
