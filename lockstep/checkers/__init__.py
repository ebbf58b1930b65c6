"""Engines over any model, behind one entry point: ``check(instance_or_machine, engine=...)``.

``check`` returns a ``CheckResult`` and never prints. Engines: ``bfs`` (shortest
counterexamples) and ``dfs`` (explicit-state search). ``compiled=False`` runs the reference
interpreter instead of the generated code (slower; used by differential tests and benchmarks).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

from lockstep.checkers.explicit import ExplicitSearch, Progress
from lockstep.checkers.limits import Limits
from lockstep.checkers.result import CheckResult, Path, PropertyResult, Statistics, Step, Verdict
from lockstep.spec.compiler import CompiledSystem
from lockstep.spec.machine import Machine, PropertyKind
from lockstep.spec.protocol import Instance, UsageError
from lockstep.spec.semantics import InterpretedSystem, TransitionSystem

EXPLICIT_ENGINES = ("bfs", "dfs")
SYMBOLIC_ENGINES = ("bmc", "induction")
ENGINES = EXPLICIT_ENGINES + SYMBOLIC_ENGINES


def system_for(machine: Machine, compiled: bool = True) -> TransitionSystem:
    """The stepping interface of a finished machine: generated code, or the reference interpreter."""
    return CompiledSystem(machine) if compiled else InterpretedSystem(machine)


def check(
    target: Instance | Machine,
    engine: str = "bfs",
    *,
    symmetry: bool = False,
    limits: Limits | None = None,
    compiled: bool = True,
    progress: Progress | None = None,
    depth: int | None = None,
    solver_timeout: float | None = None,
    induction_k: int | None = None,
    properties: Collection[str] | None = None,
) -> CheckResult:
    """Check every property of ``target`` with ``engine``; the result carries verdicts and paths.

    ``bfs``/``dfs`` explore states (``limits``, ``symmetry``); ``bmc`` unrolls ``depth`` steps with
    Z3 and ``induction`` runs k-induction (``induction_k``, or k = 1..10), ``solver_timeout``
    seconds per Z3 query. ``properties`` restricts the check (and the result) to the named
    properties; the Z3 engines then skip the others' queries altogether.
    z3 is imported only when a Z3 engine is asked for."""
    if engine not in ENGINES:
        raise UsageError(f"unknown engine {engine!r}; engines: {', '.join(ENGINES)}")
    machine = target.machine() if isinstance(target, Instance) else target.finish()
    only = _selected(machine, properties)
    if engine in SYMBOLIC_ENGINES:
        if symmetry:
            raise UsageError("--symmetry applies to the explicit engines only")
        liveness = {i for i, prop in enumerate(machine.properties) if prop.kind is PropertyKind.LEADS_TO}
        safety = frozenset((set(range(len(machine.properties))) if only is None else set(only)) - liveness)
        if engine == "induction":
            from lockstep.checkers.symbolic import Induction

            return _with_liveness(Induction(machine, k=induction_k, solver_timeout=solver_timeout, only=safety).run(), liveness & set(only or liveness))
        if depth is None:
            raise UsageError(f"--engine {engine} needs --depth K (the number of steps to unroll)")
        from lockstep.checkers.symbolic import BoundedModelChecker

        timeout = None if limits is None else limits.timeout_seconds
        checker = BoundedModelChecker(machine, depth, solver_timeout=solver_timeout, progress=progress, timeout=timeout, only=safety)
        return _with_liveness(checker.run(), liveness & set(only or liveness))
    search = ExplicitSearch(system_for(machine, compiled), order=engine, symmetry=symmetry, limits=limits, progress=progress)
    result = search.run()
    if only is not None:
        result = dataclasses.replace(result, properties=[item for i, item in enumerate(result.properties) if i in only])
    return result


def _with_liveness(result: CheckResult, positions: set[int]) -> CheckResult:
    """The Z3 engines check safety; leads-to properties are the explicit engines' (inconclusive here)."""
    if not positions:
        return result
    properties = result.machine.properties
    extra = [
        PropertyResult(properties[i].name, properties[i].kind, Verdict.INCONCLUSIVE, None, "leads-to is checked by the explicit engines (bfs, dfs)")
        for i in sorted(positions)
    ]
    return dataclasses.replace(result, properties=[*result.properties, *extra])


def _selected(machine: Machine, names: Collection[str] | None) -> frozenset[int] | None:
    """Positions of the named properties; a UsageError naming the choices for an unknown one."""
    if names is None:
        return None
    known = {prop.name: position for position, prop in enumerate(machine.properties)}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise UsageError(f"machine {machine.name} has no property {unknown[0]!r}; properties: {', '.join(known)}")
    return frozenset(known[name] for name in names)


__all__ = [
    "ENGINES",
    "EXPLICIT_ENGINES",
    "SYMBOLIC_ENGINES",
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
