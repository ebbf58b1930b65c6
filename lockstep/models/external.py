"""Models from outside lockstep: a model file given on the command line, and entry points.

A model module is any Python module that defines ``PROTOCOL`` (a ``lockstep.spec.protocol.Protocol``)
and optionally ``LEMMAS``. ``load_model_file`` imports one from a path; ``entry_point_protocols``
collects those that installed packages register under the ``lockstep.models`` entry-point group,
each entry point naming a module (``pkg.model``) or a ``Protocol`` object (``pkg.model:PROTOCOL``).
A model that fails to load is reported with its file and the problem, as a ``UsageError``.
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType

from lockstep.spec.protocol import Protocol, UsageError

ENTRY_POINT_GROUP = "lockstep.models"


def _protocol_of(module: ModuleType | object, origin: str) -> Protocol:
    if isinstance(module, Protocol):
        return module
    protocol = getattr(module, "PROTOCOL", None)
    if not isinstance(protocol, Protocol):
        raise UsageError(f"{origin}: defines no PROTOCOL (a lockstep.spec.protocol.Protocol); see docs/adding-a-protocol.md")
    return protocol


def _where(error: BaseException, path: Path) -> str:
    """``file:line`` of the deepest frame of ``error`` inside ``path`` (or just the file)."""
    if isinstance(error, SyntaxError) and error.lineno is not None:
        return f"{path}:{error.lineno}"
    line = None
    for frame in traceback.extract_tb(error.__traceback__):
        if Path(frame.filename).resolve() == path.resolve():
            line = frame.lineno
    return f"{path}:{line}" if line is not None else str(path)


def load_model_file(path: str | Path) -> Protocol:
    """Import the model module at ``path`` and return its ``PROTOCOL``."""
    file = Path(path)
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
        specification.loader.exec_module(module)
    except UsageError:
        raise
    except (Exception, SystemExit) as error:  # a user's module: report where it failed, never a traceback
        sys.modules.pop(name, None)
        raise UsageError(f"{_where(error, file)}: loading the model failed: {type(error).__name__}: {error}") from None
    return _protocol_of(module, str(file))


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
