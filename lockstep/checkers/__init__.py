"""Engines over any model, behind one entry point: ``check(instance_or_machine, engine, options)``.

``check`` looks the engine up in ``engines.ENGINES``, checks its options and whether it supports the
machine, and returns the engine's ``CheckResult``; it never prints. Explicit engines: ``bfs`` (the
reference: shortest counterexamples, generated Python over tuple states) and ``dfs``; ``bfs-vec``
(kernels over packed states with numpy on one core) and ``bfs-gpu`` (the same kernels with torch,
on ``device``); ``auto`` picks ``bfs-vec`` where it supports the model (no leads-to property
checked, every construct compiled) and ``bfs`` otherwise. The Z3 engines: ``bmc``, ``induction``,
``pdr``, and ``certify`` (bfs, then its reachable set re-checked by Z3). Each engine's options are a
dataclass of ``engines`` (``ExplicitOptions``, ``VectorOptions``, ``BmcOptions``, ...).
"""

from __future__ import annotations

from typing import Any

from lockstep.checkers.engines import ENGINES, Field, OptionError, Options, engine_named, options_for, selected
from lockstep.checkers.engines import system_for as system_for
from lockstep.checkers.explicit.search import Progress
from lockstep.checkers.limits import Limits
from lockstep.checkers.result import CheckResult, Path, PropertyResult, Statistics, Step, Verdict
from lockstep.spec.machine import Machine
from lockstep.spec.protocol import Instance

AUTO = "auto"  # the default engine, as ``lockstep check``'s


def check(
    target: Instance | Machine,
    engine: str = AUTO,
    options: Options | None = None,
    *,
    progress: Progress | None = None,
    **fields: Any,
) -> CheckResult:
    """Check every property of ``target`` (or those ``options.properties`` names) with ``engine``;
    the result carries verdicts and paths.

    ``options`` is the engine's options dataclass (``engines.ENGINES[engine].options``); keyword
    ``fields`` instead make it (``check(machine, "bmc", depth=4)``; a field the engine does not take
    is an ``OptionError`` naming it). ``engine`` defaults to ``auto``, as ``lockstep check`` does."""
    chosen = engine_named(engine)
    if options is None:
        options = options_for(engine, **fields)
    elif fields:
        raise TypeError(f"give check() the options or their fields, not both ({', '.join(fields)})")
    elif type(options) is not chosen.options:
        raise TypeError(f"engine {engine} takes {chosen.options.__name__}, not {type(options).__name__}")
    machine = target.machine() if isinstance(target, Instance) else target.finish()
    selected(machine, options.properties)  # an unknown property is refused before the engine starts
    reason = chosen.supports(machine, options)
    if reason is not None:
        raise OptionError(Field("engine"), f" {engine} cannot check {machine.name}: {reason}")
    return chosen.run(machine, options, progress)


__all__ = [
    "AUTO",
    "ENGINES",
    "CheckResult",
    "Limits",
    "Path",
    "PropertyResult",
    "Statistics",
    "Step",
    "Verdict",
    "check",
    "system_for",
]
