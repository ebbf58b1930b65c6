"""Engines over any model, behind one entry point: ``check(instance_or_machine, engine=...)``.

``check`` returns a ``CheckResult`` and never prints. Explicit engines: ``bfs`` (the reference:
shortest counterexamples, generated Python over tuple states) and ``dfs``; ``bfs-vec`` (kernels
over packed states with numpy on one core) and ``bfs-gpu`` (the same kernels with torch, on
``device``); ``auto`` picks ``bfs-vec`` where it supports the model (no leads-to property checked,
every construct compiled) and ``bfs`` otherwise. ``workers`` > 1 partitions ``bfs-vec``/``bfs-gpu``
across processes with torch.distributed. ``compiled=False`` runs the reference interpreter
instead of the generated code (slower; used by differential tests and benchmarks).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

from lockstep.checkers.definedness import UndefinedOperation
from lockstep.checkers.explicit import ExplicitSearch, Progress
from lockstep.checkers.limits import Limits
from lockstep.checkers.result import CheckResult, Path, PropertyResult, Statistics, Step, Verdict
from lockstep.checkers.vector import Unsupported, VectorSearch, vectorisable
from lockstep.spec.compiler import CompiledSystem
from lockstep.spec.machine import Machine, PropertyKind
from lockstep.spec.protocol import Instance, UsageError
from lockstep.spec.semantics import InterpretedSystem, TransitionSystem

VECTOR_ENGINES = ("bfs-vec", "bfs-gpu")
EXPLICIT_ENGINES = ("bfs", "dfs", *VECTOR_ENGINES)
SYMBOLIC_ENGINES = ("bmc", "induction", "pdr")
CERTIFY = "certify"  # bfs, then its reachable set re-checked by Z3 as an inductive invariant
# measured best (README, "Z3 engines"): CaDiCaL (z3 where a per-query limit is asked); the reductions
# are sound, but within a minute at 3 ranks none reached a depth more than one beyond "off"
DEFAULT_BMC_SOLVER, DEFAULT_REDUCTION = "cadical", "off"
AUTO = "auto"
ENGINES = (AUTO, *EXPLICIT_ENGINES, *SYMBOLIC_ENGINES, CERTIFY)


def system_for(machine: Machine, compiled: bool = True) -> TransitionSystem:
    """The stepping interface of a finished machine: generated code, or the reference interpreter."""
    return CompiledSystem(machine) if compiled else InterpretedSystem(machine)


def check(
    target: Instance | Machine,
    engine: str = AUTO,
    *,
    symmetry: bool = False,
    limits: Limits | None = None,
    compiled: bool = True,
    progress: Progress | None = None,
    depth: int | None = None,
    solver_timeout: float | None = None,
    induction_k: int | None = None,
    properties: Collection[str] | None = None,
    device: str | None = None,
    compact: bool = False,
    stop_at_first: bool = False,
    workers: int = 1,
    bmc_solver: str | None = None,
    reduction: str | bool | None = None,
    mine_invariants: bool = False,
) -> CheckResult:
    """Check every property of ``target`` with ``engine``; the result carries verdicts and paths.

    ``engine`` defaults to ``auto``, as ``lockstep check`` does (``bfs-vec`` where the kernels
    compile the model, else ``bfs``; both give the same counts and counterexamples).

    ``bfs``/``dfs`` explore states (``limits``, ``symmetry``); ``bmc`` unrolls ``depth`` steps with
    Z3 and ``induction`` runs k-induction (``induction_k``, or k = 1..10), ``solver_timeout``
    seconds per Z3 query; ``pdr`` runs BMC to ``depth`` (default 10), then the provers (Houdini,
    ABC's pdr, Spacer) on each property left open, ``solver_timeout`` CPU seconds per property
    (default 60), while BMC goes on deeper in a process of its own; it proves a property only with
    an inductive invariant that lockstep re-checked (``PropertyResult.invariant``), and a property
    neither proved nor violated is inconclusive (pdr is a prover: only ``bmc`` answers
    holds-within-bound). ``certify`` runs bfs to the end and has Z3 re-check its reachable set as an
    inductive invariant of the encoding, proving each safety property it found holding
    (``symbolic.certificates``; ``solver_timeout``: CPU seconds per Z3 query).
    ``properties`` restricts the check (and the result) to the named properties; the Z3 engines then
    skip the others' queries altogether. ``compact`` (vectorised engines) keeps 64-bit fingerprints
    instead of full states; ``stop_at_first`` (explicit engines) ends the search at the first
    violation. ``bmc_solver`` (``z3`` or ``cadical``) and ``reduction`` (``off``, ``por``,
    ``symmetry``, ``both``; default off) configure ``bmc``. ``mine_invariants`` (pdr) adds to Houdini's
    candidates the facts of every reachable state the explicit engine enumerates (``mining``). z3 is
    imported only when a Z3 engine is asked for, torch only for ``bfs-gpu`` or ``workers`` > 1."""
    if engine not in ENGINES:
        raise UsageError(f"unknown engine {engine!r}; engines: {', '.join(ENGINES)}")
    machine = target.machine() if isinstance(target, Instance) else target.finish()
    only = _selected(machine, properties)
    _check_options(engine, device=device, compact=compact, stop_at_first=stop_at_first, workers=workers)
    if engine != "pdr" and mine_invariants:
        raise UsageError(f"--mine-invariants applies to --engine pdr, not to {engine}")
    if engine != "bmc" and (bmc_solver is not None or reduction is not None):
        raise UsageError(f"a BMC solver and reduction apply to --engine bmc, not to {engine}")
    if engine == AUTO:
        engine = "bfs-vec" if compiled and vectorisable(machine, only) is None else "bfs"
        if engine == "bfs-vec" and workers == 1:
            try:
                return _restricted(
                    _vector_check(machine, engine, symmetry, limits, progress, device, compact, stop_at_first, only),
                    only,
                )
            except Unsupported as error:  # a construct the kernels do not compile: the reference engine checks it
                search = ExplicitSearch(
                    system_for(machine, compiled),
                    order="bfs",
                    symmetry=symmetry,
                    limits=limits,
                    progress=progress,
                    stop_at_first=stop_at_first,
                    watched=only,
                )
                fallback = search.run()
                fallback.warnings.append(f"bfs-vec cannot compile this model ({error}); checked with bfs")
                return _restricted(fallback, only)
            except UndefinedOperation as error:
                return _undefined_fallback(machine, engine, error, symmetry, limits, progress, stop_at_first, only)
        if workers > 1 and engine == "bfs":
            raise UsageError(f"--workers: {vectorisable(machine, only) or 'the model cannot be vectorised'}")
    if engine == CERTIFY:
        if symmetry:
            raise UsageError("--symmetry: a certificate is the concrete reachable set, not its orbits")
        from lockstep.checkers.symbolic.certificates import certify

        return _restricted(certify(machine, only=only, limits=limits, progress=progress, timeout=solver_timeout), only)
    if engine in SYMBOLIC_ENGINES:
        if symmetry:
            raise UsageError("--symmetry applies to the explicit engines only")
        liveness = {i for i, prop in enumerate(machine.properties) if prop.kind is PropertyKind.LEADS_TO}
        safety = frozenset((set(range(len(machine.properties))) if only is None else set(only)) - liveness)
        if engine == "pdr":
            if induction_k is not None:
                raise UsageError("--k applies to --engine induction, not to pdr")
            from lockstep.checkers.symbolic.pdr import PropertyDirectedReachability

            prover = PropertyDirectedReachability(
                machine,
                depth=10 if depth is None else depth,
                timeout=None if limits is None else limits.seconds_left(),
                only=safety,
                progress=progress,
                property_timeout=60.0 if solver_timeout is None else solver_timeout,
                mine=mine_invariants,
                beside=True,
            )
            return _with_liveness(prover.run(), liveness & set(only or liveness))
        if engine == "induction":
            from lockstep.checkers.symbolic import Induction

            return _with_liveness(
                Induction(machine, k=induction_k, solver_timeout=solver_timeout, only=safety).run(),
                liveness & set(only or liveness),
            )
        if depth is None:
            raise UsageError(f"--engine {engine} needs --depth K (the number of steps to unroll)")
        from lockstep.checkers.symbolic import BoundedModelChecker

        timeout = None if limits is None else limits.seconds_left()
        if bmc_solver is None:
            bmc_solver = "z3" if solver_timeout is not None else DEFAULT_BMC_SOLVER
        checker = BoundedModelChecker(
            machine,
            depth,
            solver_timeout=solver_timeout,
            progress=progress,
            timeout=timeout,
            only=safety,
            solver=bmc_solver,
            reduction=DEFAULT_REDUCTION if reduction is None else reduction,
        )
        return _with_liveness(checker.run(), liveness & set(only or liveness))
    if engine in VECTOR_ENGINES:
        why = vectorisable(machine, only)
        if why is not None:
            raise UsageError(f"--engine {engine}: {why}")
        if workers > 1:
            from lockstep.checkers.vector.distributed import check_distributed

            try:
                distributed = check_distributed(
                    machine,
                    engine,
                    workers,
                    symmetry=symmetry,
                    compact=compact,
                    stop_at_first=stop_at_first,
                    watched=only,
                    limits=limits,
                    device=device,
                    progress=progress,
                )
            except UndefinedOperation as error:
                return _undefined_fallback(machine, engine, error, symmetry, limits, progress, stop_at_first, only)
            return _restricted(distributed, only)
        try:
            return _restricted(
                _vector_check(machine, engine, symmetry, limits, progress, device, compact, stop_at_first, only), only
            )
        except Unsupported as error:
            raise UsageError(f"--engine {engine} cannot check {machine.name}: {error}; use --engine bfs") from None
        except UndefinedOperation as error:
            return _undefined_fallback(machine, engine, error, symmetry, limits, progress, stop_at_first, only)
    search = ExplicitSearch(
        system_for(machine, compiled),
        order=engine,
        symmetry=symmetry,
        limits=limits,
        progress=progress,
        stop_at_first=stop_at_first,
        watched=only,
    )
    return _restricted(search.run(), only)


def _vector_check(
    machine: Machine,
    engine: str,
    symmetry: bool,
    limits: Limits | None,
    progress: Progress | None,
    device: str | None,
    compact: bool,
    stop_at_first: bool,
    watched: frozenset[int] | None,
) -> CheckResult:
    from lockstep.checkers.vector.backend import make_backend

    try:
        backend = make_backend(engine, device)
    except RuntimeError as error:
        raise UsageError(str(error)) from None
    search = VectorSearch(
        machine,
        backend,
        engine=engine,
        symmetry=symmetry,
        compact=compact,
        stop_at_first=stop_at_first,
        watched=watched,
        limits=limits,
        progress=progress,
    )
    return search.run()


def _undefined_fallback(
    machine: Machine,
    engine: str,
    error: UndefinedOperation,
    symmetry: bool,
    limits: Limits | None,
    progress: Progress | None,
    stop_at_first: bool,
    only: frozenset[int] | None,
) -> CheckResult:
    """The vectorised kernels met a state where ``evaluate`` raises: bfs checks the model again and
    reports it as ``well_defined`` violated, with the path to it (``definedness``)."""
    search = ExplicitSearch(
        system_for(machine),
        order="bfs",
        symmetry=symmetry,
        limits=limits,
        progress=progress,
        stop_at_first=stop_at_first,
        watched=only,
    )
    result = search.run()
    result.warnings.append(f"{engine} met an undefined operation ({error}); checked with bfs, which reports it")
    return _restricted(result, only)


def _check_options(engine: str, *, device: str | None, compact: bool, stop_at_first: bool, workers: int) -> None:
    """Options that only some engines take are errors elsewhere, not silently ignored."""
    vector = engine in (AUTO, *VECTOR_ENGINES)
    if device is not None and engine != "bfs-gpu":
        raise UsageError("--device applies to --engine bfs-gpu")
    if device is not None and not (device == "cpu" or device.startswith("cuda")):
        raise UsageError(f"--device must be cpu or cuda (or cuda:N), not {device!r}")
    if compact and not vector:
        raise UsageError(f"--compact applies to --engine bfs-vec and bfs-gpu, not to {engine}")
    if stop_at_first and engine in (*SYMBOLIC_ENGINES, CERTIFY):
        raise UsageError(
            f"--stop-at-first applies to the explicit engines; {engine} already stops at the shortest violation"
        )
    if workers < 1:
        raise UsageError(f"--workers must be at least 1, not {workers}")
    if workers > 1 and not vector:
        raise UsageError(f"--workers applies to --engine bfs-vec and bfs-gpu, not to {engine}")


def _restricted(result: CheckResult, only: frozenset[int] | None) -> CheckResult:
    """The result limited to the checked properties."""
    if only is None:
        return result
    return dataclasses.replace(result, properties=[item for i, item in enumerate(result.properties) if i in only])


def _with_liveness(result: CheckResult, positions: set[int]) -> CheckResult:
    """The Z3 engines check safety; leads-to properties are the explicit engines' (inconclusive here)."""
    if not positions:
        return result
    properties = result.machine.properties
    extra = [
        PropertyResult(
            properties[i].name,
            properties[i].kind,
            Verdict.INCONCLUSIVE,
            None,
            "leads-to is checked by the explicit engines (bfs, dfs)",
        )
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
    "AUTO",
    "ENGINES",
    "VECTOR_ENGINES",
    "EXPLICIT_ENGINES",
    "SYMBOLIC_ENGINES",
    "CERTIFY",
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
