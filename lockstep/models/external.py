"""Models from outside lockstep: a model file given on the command line, and entry points.

A model module is any Python module that defines ``PROTOCOL`` (a ``lockstep.spec.protocol.Protocol``)
and optionally ``LEMMAS``. ``load_model_file`` imports one from a path; ``entry_point_protocols``
collects those that installed packages register under the ``lockstep.models`` entry-point group,
each entry point naming a module (``pkg.model``) or a ``Protocol`` object (``pkg.model:PROTOCOL``).
A model file that fails to load (an exception, or ``sys.exit``, while importing it, such as the
``DefinitionError`` of a ``Protocol`` written wrongly; or no ``PROTOCOL``, or one of another type)
is reported with its file and line and the problem, as a ``ModelFileError`` (a ``UsageError``
carrying the file and line: the CLI's error object names them); a path that is no Python file is a
plain ``UsageError``. A model file is code: importing it runs
it (see docs/trust.md). ``load_model_file(path, timeout=S)`` stops an import that
runs longer than ``S`` seconds with ``ModelLoadTimeout`` (in the main thread, with SIGALRM).
"""

from __future__ import annotations

import importlib.util
import signal
import sys
import threading
import traceback
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Any

from lockstep.spec.protocol import Protocol, UsageError
from lockstep.spec.terms import DefinitionError

ENTRY_POINT_GROUP = "lockstep.models"
PROTOCOL_CLASS = "lockstep.spec.protocol.Protocol"


class ModelFileError(UsageError):
    """A model file that does not load; ``file`` and ``line`` (None where unknown) say where."""

    def __init__(self, message: str, file: Path, line: int | None = None) -> None:
        super().__init__(message)
        self.file, self.line = str(file), line


def _a(value: object) -> str:
    """``an int``, ``a function``, ``None``: what a value is, for a message."""
    if value is None:
        return "None"
    name = "module" if isinstance(value, ModuleType) else type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _found(module: ModuleType | object) -> Protocol | str:
    """The ``Protocol`` that ``module`` (a module, or an entry point's object) gives, or why there is none."""
    if isinstance(module, Protocol):
        return module
    if not isinstance(module, ModuleType):
        return f"is {_a(module)}, not a {PROTOCOL_CLASS} or a module defining PROTOCOL"
    if not hasattr(module, "PROTOCOL"):
        return f"defines no PROTOCOL (a {PROTOCOL_CLASS}); see docs/adding-a-protocol.md"
    protocol = module.PROTOCOL
    if not isinstance(protocol, Protocol):
        return f"PROTOCOL is {_a(protocol)}, not a {PROTOCOL_CLASS}; see docs/adding-a-protocol.md"
    return protocol


def _protocol_of(module: ModuleType | object, origin: str) -> Protocol:
    found = _found(module)
    if isinstance(found, str):
        raise UsageError(f"{origin}: {found}")
    return found


def _line(error: BaseException, path: Path) -> int | None:
    """The line of the deepest frame of ``error`` inside ``path`` (a ``SyntaxError``'s own line), or None."""
    if isinstance(error, SyntaxError) and error.lineno is not None:
        return error.lineno
    line = None
    for frame in traceback.extract_tb(error.__traceback__):
        if Path(frame.filename).resolve() == path.resolve():
            line = frame.lineno
    return line


def _load_failure(error: BaseException, path: Path) -> ModelFileError:
    """Importing ``path`` raised ``error``: what went wrong, where (a ``DefinitionError`` says it in its own words)."""
    line = _line(error, path)
    where = f"{path}:{line}" if line is not None else str(path)
    problem = str(error) if isinstance(error, DefinitionError) else f"{type(error).__name__}: {error}"
    return ModelFileError(f"{where}: loading the model failed: {problem}", path, line)


class ModelLoadTimeout(Exception):
    """Importing a model file took longer than the timeout given."""


class _Alarm:
    """SIGALRM after ``seconds`` raises ``ModelLoadTimeout`` (a no-op off the main thread or without a limit)."""

    def __init__(self, seconds: float | None, file: Path, stated: float | None = None) -> None:
        self.seconds, self.file = seconds, file
        self.stated = seconds if stated is None else stated  # the --timeout the message names
        self.armed = False
        self.previous: Any = None

    def _expire(self, number: int, frame: object) -> None:
        raise ModelLoadTimeout(f"{self.file}: importing the model took longer than --timeout {self.stated:g} s")

    def __enter__(self) -> _Alarm:
        if (
            self.seconds is not None
            and threading.current_thread() is threading.main_thread()
            and hasattr(signal, "setitimer")
        ):
            self.previous = signal.signal(signal.SIGALRM, self._expire)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
            self.armed = True
        return self

    def __exit__(self, *exception: object) -> None:
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)


def load_model_file(path: str | Path, timeout: float | None = None, stated: float | None = None) -> Protocol:
    """Import the model module at ``path`` and return its ``PROTOCOL`` (``ModelLoadTimeout`` if
    importing takes longer than ``timeout`` seconds: what is left of the command's ``--timeout``,
    ``stated``, which the message names)."""
    file = Path(path)
    if file.is_dir():
        raise UsageError(f"{file}: is a directory, not a Python file (a model file is a module, *.py)")
    if not file.is_file():
        raise UsageError(f"{file}: no such model file")
    if file.suffix != ".py":
        raise UsageError(f"{file}: a model file is a Python module (*.py)")
    name = f"lockstep_user_model_{abs(hash(str(file.resolve())))}"
    specification = importlib.util.spec_from_file_location(name, file)
    if specification is None or specification.loader is None:
        raise UsageError(f"{file}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(specification)
    sys.modules[name] = module
    try:
        with _Alarm(timeout, file, stated):
            specification.loader.exec_module(module)
    except (UsageError, ModelLoadTimeout):
        sys.modules.pop(name, None)
        raise
    except (Exception, SystemExit) as error:  # a user's module: report where it failed, never a traceback
        sys.modules.pop(name, None)
        raise _load_failure(error, file) from None
    found = _found(module)
    if isinstance(found, str):
        raise ModelFileError(f"{file}: {found}", file)
    return found


def entry_point_protocols() -> dict[str, Protocol]:
    """Protocols that installed packages register under the ``lockstep.models`` group."""
    found: dict[str, Protocol] = {}
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        origin = f"entry point {entry.name} = {entry.value}"
        try:
            loaded = entry.load()
        except Exception as error:
            raise UsageError(f"{origin}: loading failed: {type(error).__name__}: {error}") from None
        protocol = _protocol_of(loaded, origin)
        found[protocol.name] = protocol
    return found
