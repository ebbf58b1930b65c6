"""Engines over any model, behind one entry point: ``check(instance_or_machine, engine=...)``.

``check`` returns a ``CheckResult`` and never prints. Engines: ``bfs`` (shortest
counterexamples) and ``dfs`` (explicit-state search). ``compiled=False`` runs the reference
interpreter instead of the generated code (slower; used by differential tests and benchmarks).
"""

from __future__ import annotations

from lockstep.checkers.explicit import ExplicitSearch, Progress
from lockstep.checkers.limits import Limits
from lockstep.checkers.result import CheckResult, Path, PropertyResult, Statistics, Step, Verdict
from lockstep.spec.compiler import CompiledSystem
from lockstep.spec.machine import Machine
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
) -> CheckResult:
    """Check every property of ``target`` with ``engine``; the result carries verdicts and paths.

    ``bfs``/``dfs`` explore states (``limits``, ``symmetry``); ``bmc`` unrolls ``depth`` steps with
    Z3 and ``induction`` runs k-induction (``induction_k``, or k = 1..10), ``solver_timeout``
    seconds per Z3 query. z3 is imported only when a Z3 engine is asked for."""
    if engine not in ENGINES:
        raise UsageError(f"unknown engine {engine!r}; engines: {', '.join(ENGINES)}")
    machine = target.machine() if isinstance(target, Instance) else target.finish()
    if engine in SYMBOLIC_ENGINES:
        if symmetry:
            raise UsageError("--symmetry applies to the explicit engines only")
        if engine == "induction":
            from lockstep.checkers.symbolic import Induction

            return Induction(machine, k=induction_k, solver_timeout=solver_timeout).run()
        if depth is None:
            raise UsageError(f"--engine {engine} needs --depth K (the number of steps to unroll)")
        from lockstep.checkers.symbolic import BoundedModelChecker

        timeout = None if limits is None else limits.timeout_seconds
        return BoundedModelChecker(machine, depth, solver_timeout=solver_timeout, progress=progress, timeout=timeout).run()
    search = ExplicitSearch(system_for(machine, compiled), order=engine, symmetry=symmetry, limits=limits, progress=progress)
    return search.run()


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
