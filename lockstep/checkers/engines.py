"""The engines behind ``check``: one ``Engine`` per family, each with its typed options, in one registry.

An engine has a ``name``, an ``options`` dataclass (the fields it takes, checked where the options
are made), ``supports(machine, options)`` (why it cannot check that machine's checked properties,
or None) and ``run(machine, options, progress)``, which returns the ``CheckResult``. ``ENGINES``
maps every engine name to its engine, in the order ``lockstep check --engine`` lists them;
``options_for`` makes an engine's options from named fields and refuses a field the engine does not
take. Errors about options are ``OptionError``: their message names option fields, which a caller
may spell its own way (the CLI names its flags). z3 is imported only by the Z3 engines' ``run``,
torch only by ``bfs-gpu``'s or a partitioned search's.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol, get_args, runtime_checkable

from lockstep.checkers.definedness import UndefinedOperation
from lockstep.checkers.explicit.search import ExplicitSearch, Progress
from lockstep.checkers.limits import Limits
from lockstep.checkers.result import CheckResult, PropertyResult, Verdict
from lockstep.checkers.vector import Unsupported, VectorSearch, vectorisable
from lockstep.spec.compiler import CompiledSystem
from lockstep.spec.layout import Layout, LayoutError
from lockstep.spec.machine import Machine, PropertyKind
from lockstep.spec.protocol import UsageError
from lockstep.spec.semantics import InterpretedSystem, TransitionSystem

Kernels = Literal["auto", "arrays", "c", "triton"]
KERNELS: tuple[str, ...] = get_args(Kernels)
# measured best (README, "Z3 engines"): CaDiCaL (z3 where a per-query limit is asked); the reductions
# are sound, but within a minute at 3 ranks none reached a depth more than one beyond "off"
DEFAULT_BMC_SOLVER, DEFAULT_REDUCTION = "cadical", "off"
BMC_SOLVERS = ("z3", "cadical")
REDUCTIONS = ("off", "por", "symmetry", "both", "on")
DEFAULT_PDR_DEPTH, DEFAULT_PDR_PROPERTY_SECONDS = 10, 60.0


@dataclass(frozen=True)
class Field:
    """An option field named in an error message (``limits.max_depth`` for a field of ``limits``)."""

    name: str


class OptionError(UsageError):
    """Options an engine cannot take. ``parts`` is the message, text and ``Field``s; ``str`` names the
    fields as they are spelled in Python, ``render`` as a caller spells them (the CLI: its flags)."""

    def __init__(self, *parts: str | Field) -> None:
        self.parts = parts
        super().__init__(self.render({}))

    def render(self, spelling: Mapping[str, str]) -> str:
        return "".join(part if isinstance(part, str) else spelling.get(part.name, part.name) for part in self.parts)

    @property
    def fields(self) -> list[str]:
        """The option fields the message names."""
        return [part.name for part in self.parts if isinstance(part, Field)]


# ------------------------------------------------------------------------------------- options
@dataclass(frozen=True, kw_only=True)
class Options:
    """What every engine takes: the properties to check (None: all) and the search's limits."""

    properties: Collection[str] | None = None
    limits: Limits | None = None


@dataclass(frozen=True, kw_only=True)
class ExplicitOptions(Options):
    """``bfs`` and ``dfs``: ``symmetry`` reduces by the model's declared symmetry, ``stop_at_first``
    ends the search at the first violation, ``compiled=False`` steps with the reference interpreter."""

    symmetry: bool = False
    stop_at_first: bool = False
    compiled: bool = True


@dataclass(frozen=True, kw_only=True)
class VectorOptions(Options):
    """``bfs-vec``: ``compact`` keeps 64-bit fingerprints instead of whole states, ``workers`` > 1
    partitions the search across processes (torch.distributed), ``kernels`` picks how successors are
    computed: ``arrays`` (the generated array kernels), ``c`` (their C spelling, compiled before the
    first level), ``auto`` (the C loops once a search is large enough and a compiler is there)."""

    kernel_choices: ClassVar[tuple[str, ...]] = ("auto", "arrays", "c")
    symmetry: bool = False
    stop_at_first: bool = False
    compact: bool = False
    workers: int = 1
    kernels: Kernels = "auto"

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise OptionError(Field("workers"), f" must be at least 1, not {self.workers}")
        if self.kernels not in KERNELS:
            raise OptionError(Field("kernels"), f" must be one of {', '.join(KERNELS)}, not {self.kernels!r}")
        if self.kernels not in self.kernel_choices:
            owners = _owners("kernels", lambda options: self.kernels in getattr(options, "kernel_choices", ()))
            here = " and ".join(engine.name for engine in ENGINES.values() if engine.options is type(self))
            raise OptionError(
                Field("kernels"), f" {self.kernels} applies to ", Field("engine"), f" {owners}, not to {here}"
            )


@dataclass(frozen=True, kw_only=True)
class GpuOptions(VectorOptions):
    """``bfs-gpu``: the vectorised search with torch on ``device`` (cuda, cuda:N or cpu; default
    cuda); ``kernels`` ``triton`` compiles each action's kernels with Triton (``auto``: on CUDA; on a
    CPU device only in Triton's interpreter, ``TRITON_INTERPRET=1``), ``arrays`` never does."""

    kernel_choices: ClassVar[tuple[str, ...]] = ("auto", "arrays", "triton")
    device: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.device is not None and not (self.device == "cpu" or self.device.startswith("cuda")):
            raise OptionError(Field("device"), f" must be cpu or cuda (or cuda:N), not {self.device!r}")


@dataclass(frozen=True, kw_only=True)
class AutoOptions(VectorOptions):
    """``auto``: ``bfs-vec``'s options, and ``compiled=False`` (the reference interpreter, so bfs)."""

    compiled: bool = True


@dataclass(frozen=True, kw_only=True)
class SwarmOptions(Options):
    """``swarm``: ``walks`` random walks (default 20,000) of at most ``depth`` steps each (default
    200; each walk draws its own bound from half of it up), every random choice fixed by ``seed``
    (None: a fresh one, reported); of ``limits`` only the time counts."""

    walks: int | None = None
    depth: int | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_states", "max_depth"):
            if self.limits is not None and getattr(self.limits, name) is not None:
                raise OptionError(
                    Field(f"limits.{name}"), " applies to the exhaustive engines; a swarm is bounded by ",
                    Field("walks"), " and ", Field("depth"),
                )  # fmt: skip
        for name in ("walks", "depth"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise OptionError(Field(name), f" must be at least 1, not {value}")


@dataclass(frozen=True, kw_only=True)
class SymbolicOptions(Options):
    """The Z3 engines: ``solver_timeout`` bounds each query (pdr: each property's CPU seconds); of
    ``limits`` only the time counts (their bound is ``depth`` or ``k``, never a state count)."""

    solver_timeout: float | None = None

    def __post_init__(self) -> None:
        for name in ("max_states", "max_depth"):
            if self.limits is not None and getattr(self.limits, name) is not None:
                raise OptionError(
                    Field(f"limits.{name}"), " applies to the explicit engines (bfs, dfs); the Z3 engines are bounded "
                    "by ", Field("depth"), " (bmc, pdr) or ", Field("k"), " (induction)",
                )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class BmcOptions(SymbolicOptions):
    """``bmc``: unroll ``depth`` steps; ``solver`` z3 or cadical (default cadical, z3 where
    ``solver_timeout`` is given); ``reduction`` off, por, symmetry, both (on means por; default off)."""

    depth: int | None = None
    solver: str | None = None
    reduction: str | bool | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.depth is None:
            raise OptionError(Field("engine"), " bmc needs ", Field("depth"), " K (the number of steps to unroll)")
        if self.solver is not None and self.solver not in BMC_SOLVERS:
            raise OptionError(Field("solver"), f" must be z3 or cadical, not {self.solver!r}")
        if self.reduction is not None and not isinstance(self.reduction, bool) and self.reduction not in REDUCTIONS:
            raise OptionError(Field("reduction"), f" must be one of {', '.join(REDUCTIONS)}, not {self.reduction!r}")
        if self.solver == "cadical" and self.solver_timeout is not None:
            raise OptionError(
                Field("solver_timeout"), " needs ", Field("solver"), " z3 (CaDiCaL queries cannot be interrupted)"
            )


@dataclass(frozen=True, kw_only=True)
class InductionOptions(SymbolicOptions):
    """``induction``: the ``k`` of k-induction (None: k = 1..10)."""

    k: int | None = None


@dataclass(frozen=True, kw_only=True)
class PdrOptions(SymbolicOptions):
    """``pdr``: BMC to ``depth`` (default 10) first; ``mine_invariants`` adds the facts of every
    reachable state the explicit engine enumerates to Houdini's candidates."""

    depth: int | None = None
    mine_invariants: bool = False


@dataclass(frozen=True, kw_only=True)
class CertifyOptions(SymbolicOptions):
    """``certify``: bfs to the end (``limits``), then Z3 re-checks its reachable set as an inductive
    invariant, ``solver_timeout`` CPU seconds per query."""

    def __post_init__(self) -> None:
        pass  # bfs explores: every limit applies


# ------------------------------------------------------------------------------------- engines
@runtime_checkable
class Engine(Protocol):
    """One way to check a machine: its name, its options' type, what it supports and its run."""

    @property
    def name(self) -> str: ...

    @property
    def options(self) -> type[Options]: ...

    def supports(self, machine: Machine, options: Any) -> str | None:
        """Why this engine cannot check ``machine``'s checked properties (None: it can)."""
        ...

    def run(self, machine: Machine, options: Any, progress: Progress | None) -> CheckResult:
        """Check the finished ``machine``; the result holds the checked properties only."""
        ...


def system_for(machine: Machine, compiled: bool = True) -> TransitionSystem:
    """The stepping interface of a finished machine: generated code, or the reference interpreter."""
    return CompiledSystem(machine) if compiled else InterpretedSystem(machine)


@dataclass(frozen=True)
class ExplicitEngine:
    """``bfs`` (shortest counterexamples; the reference) or ``dfs`` over tuple states."""

    name: Literal["bfs", "dfs"]
    options: type[ExplicitOptions] = ExplicitOptions

    def supports(self, machine: Machine, options: ExplicitOptions) -> str | None:
        return None

    def run(self, machine: Machine, options: ExplicitOptions, progress: Progress | None) -> CheckResult:
        only = selected(machine, options.properties)
        return _restricted(_explicit(machine, self.name, options, progress, only, options.compiled), only)


@dataclass(frozen=True)
class VectorEngine:
    """``bfs-vec`` (numpy on one core) or ``bfs-gpu`` (torch on a device): kernels over packed states."""

    name: Literal["bfs-vec", "bfs-gpu"]
    options: type[VectorOptions]

    def supports(self, machine: Machine, options: VectorOptions) -> str | None:
        return vectorisable(machine, selected(machine, options.properties))

    def run(self, machine: Machine, options: VectorOptions, progress: Progress | None) -> CheckResult:
        only = selected(machine, options.properties)
        try:
            if options.workers > 1:
                return _restricted(self._partitioned(machine, options, progress, only), only)
            return _restricted(_vector(machine, self.name, options, progress, only), only)
        except Unsupported as error:
            raise OptionError(
                Field("engine"), f" {self.name} cannot check {machine.name}: {error}; use ", Field("engine"), " bfs"
            ) from None
        except UndefinedOperation as error:
            return _undefined_fallback(machine, self.name, error, options, progress, only)

    def _partitioned(
        self, machine: Machine, options: VectorOptions, progress: Progress | None, only: frozenset[int] | None
    ) -> CheckResult:
        from lockstep.checkers.vector.distributed import check_distributed

        return check_distributed(
            machine,
            self.name,
            options.workers,
            symmetry=options.symmetry,
            compact=options.compact,
            stop_at_first=options.stop_at_first,
            watched=only,
            limits=options.limits,
            device=_device(options),
            progress=progress,
            kernels=options.kernels,
        )


@dataclass(frozen=True)
class AutoEngine:
    """``auto``: ``bfs-vec`` where its kernels compile the model (no leads-to property checked), else
    ``bfs``; both give the same counts and counterexamples."""

    name: Literal["auto"] = "auto"
    options: type[AutoOptions] = AutoOptions

    def supports(self, machine: Machine, options: AutoOptions) -> str | None:
        if options.workers > 1:
            why = vectorisable(machine, selected(machine, options.properties)) if options.compiled else None
            if why is not None or not options.compiled:
                return f"{why or 'the reference interpreter runs in one process'} (workers > 1 needs bfs-vec)"
        return None

    def run(self, machine: Machine, options: AutoOptions, progress: Progress | None) -> CheckResult:
        only = selected(machine, options.properties)
        if not options.compiled or vectorisable(machine, only) is not None:
            return _restricted(_explicit(machine, "bfs", options, progress, only, options.compiled), only)
        if options.workers > 1:
            return VECTOR.run(machine, options, progress)
        try:
            return _restricted(_vector(machine, "bfs-vec", options, progress, only), only)
        except Unsupported as error:  # a construct the kernels do not compile: the reference engine checks it
            fallback = _explicit(machine, "bfs", options, progress, only, compiled=True)
            fallback.warnings.append(f"bfs-vec cannot compile this model ({error}); checked with bfs")
            return _restricted(fallback, only)
        except UndefinedOperation as error:
            return _undefined_fallback(machine, "bfs-vec", error, options, progress, only)


@dataclass(frozen=True)
class SwarmEngine:
    """``swarm``: random walks in a batch through ``bfs-vec``'s kernels, stopping at the first
    violation, whose walk is replayed through ``evaluate`` and shortened; never "holds"."""

    name: Literal["swarm"] = "swarm"
    options: type[SwarmOptions] = SwarmOptions

    def supports(self, machine: Machine, options: SwarmOptions) -> str | None:
        try:
            Layout(machine)
        except LayoutError as error:
            return f"{error} (bfs checks it)"
        return None

    def run(self, machine: Machine, options: SwarmOptions, progress: Progress | None) -> CheckResult:
        import random

        from lockstep.checkers.vector.swarm import DEFAULT_DEPTH, DEFAULT_WALKS, Swarm

        only = selected(machine, options.properties)
        try:
            swarm = Swarm(
                machine,
                walks=DEFAULT_WALKS if options.walks is None else options.walks,
                depth=DEFAULT_DEPTH if options.depth is None else options.depth,
                seed=random.SystemRandom().randrange(1 << 32) if options.seed is None else options.seed,
                watched=only,
                limits=options.limits,
                progress=progress,
            )
        except Unsupported as error:
            raise OptionError(
                Field("engine"), f" swarm cannot check {machine.name}: {error}; use ", Field("engine"), " bfs"
            ) from None
        return _restricted(swarm.run(), only)


@dataclass(frozen=True)
class BmcEngine:
    """``bmc``: the Z3 (or CaDiCaL) unrolling to ``depth``; safety only (leads-to is inconclusive)."""

    name: Literal["bmc"] = "bmc"
    options: type[BmcOptions] = BmcOptions

    def supports(self, machine: Machine, options: BmcOptions) -> str | None:
        return None

    def run(self, machine: Machine, options: BmcOptions, progress: Progress | None) -> CheckResult:
        from lockstep.checkers.symbolic import BoundedModelChecker

        safety, liveness = _safety_and_liveness(machine, options)
        assert options.depth is not None  # BmcOptions refuses none
        checker = BoundedModelChecker(
            machine,
            options.depth,
            solver_timeout=options.solver_timeout,
            progress=progress,
            timeout=None if options.limits is None else options.limits.seconds_left(),
            only=safety,
            solver=options.solver or ("z3" if options.solver_timeout is not None else DEFAULT_BMC_SOLVER),
            reduction=DEFAULT_REDUCTION if options.reduction is None else options.reduction,
        )
        return _with_liveness(checker.run(), liveness)


@dataclass(frozen=True)
class InductionEngine:
    """``induction``: k-induction with Z3 (``k``, or k = 1..10)."""

    name: Literal["induction"] = "induction"
    options: type[InductionOptions] = InductionOptions

    def supports(self, machine: Machine, options: InductionOptions) -> str | None:
        return None

    def run(self, machine: Machine, options: InductionOptions, progress: Progress | None) -> CheckResult:
        from lockstep.checkers.symbolic import Induction

        safety, liveness = _safety_and_liveness(machine, options)
        return _with_liveness(
            Induction(machine, k=options.k, solver_timeout=options.solver_timeout, only=safety).run(), liveness
        )


@dataclass(frozen=True)
class PdrEngine:
    """``pdr``: BMC to ``depth``, then Houdini, ABC's pdr and Spacer on each property left open, BMC
    going on deeper beside them; a property is proved only with an inductive invariant lockstep
    re-checked, and one neither proved nor violated is inconclusive."""

    name: Literal["pdr"] = "pdr"
    options: type[PdrOptions] = PdrOptions

    def supports(self, machine: Machine, options: PdrOptions) -> str | None:
        return None

    def run(self, machine: Machine, options: PdrOptions, progress: Progress | None) -> CheckResult:
        from lockstep.checkers.symbolic.pdr import PropertyDirectedReachability

        safety, liveness = _safety_and_liveness(machine, options)
        prover = PropertyDirectedReachability(
            machine,
            depth=DEFAULT_PDR_DEPTH if options.depth is None else options.depth,
            timeout=None if options.limits is None else options.limits.seconds_left(),
            only=safety,
            progress=progress,
            property_timeout=DEFAULT_PDR_PROPERTY_SECONDS if options.solver_timeout is None else options.solver_timeout,
            mine=options.mine_invariants,
            beside=True,
        )
        return _with_liveness(prover.run(), liveness)


@dataclass(frozen=True)
class CertifyEngine:
    """``certify``: bfs to the end, then Z3 re-checks its reachable set as an inductive invariant of
    the encoding, proving each safety property bfs found holding (``symbolic.certificates``)."""

    name: Literal["certify"] = "certify"
    options: type[CertifyOptions] = CertifyOptions

    def supports(self, machine: Machine, options: CertifyOptions) -> str | None:
        return None

    def run(self, machine: Machine, options: CertifyOptions, progress: Progress | None) -> CheckResult:
        from lockstep.checkers.symbolic.certificates import certify

        only = selected(machine, options.properties)
        result = certify(machine, only=only, limits=options.limits, progress=progress, timeout=options.solver_timeout)
        return _restricted(result, only)


VECTOR = VectorEngine("bfs-vec", VectorOptions)
ENGINES: dict[str, Engine] = {
    engine.name: engine
    for engine in (
        AutoEngine(),
        ExplicitEngine("bfs"),
        ExplicitEngine("dfs"),
        VECTOR,
        VectorEngine("bfs-gpu", GpuOptions),
        BmcEngine(),
        InductionEngine(),
        PdrEngine(),
        CertifyEngine(),
        SwarmEngine(),
    )
}
_ALIASES = {"induction_k": "k", "bmc_solver": "solver"}  # check()'s older keyword names


def engine_named(name: str) -> Engine:
    """The engine called ``name``; an ``OptionError`` naming the choices for an unknown one."""
    if name not in ENGINES:
        raise OptionError("unknown ", Field("engine"), f" {name!r}; engines: {', '.join(ENGINES)}")
    return ENGINES[name]


def options_for(name: str, **fields: Any) -> Options:
    """The options of engine ``name`` made from ``fields``. A field at its default is left out; one
    the engine does not take is an ``OptionError`` naming the engines that take it."""
    engine = engine_named(name)
    taken = {field.name for field in dataclasses.fields(engine.options)}
    given = {}
    for key, value in fields.items():
        key = _ALIASES.get(key, key)
        if key not in _DEFAULTS:
            raise TypeError(f"no engine takes an option {key!r}; options: {', '.join(_DEFAULTS)}")
        if value is _DEFAULTS[key] or (value == _DEFAULTS[key] and type(value) is type(_DEFAULTS[key])):
            continue
        if key not in taken:
            owners = _owners(key, lambda options: True)
            raise OptionError(Field(key), " applies to ", Field("engine"), f" {owners}, not to {name}")
        given[key] = value
    return engine.options(**given)


def _owners(key: str, accepts: Any) -> str:
    """The engines whose options have the field ``key`` (and that ``accepts``), as words."""
    names = [
        engine.name
        for engine in ENGINES.values()
        if key in {field.name for field in dataclasses.fields(engine.options)} and accepts(engine.options)
    ]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


_DEFAULTS: dict[str, Any] = {
    field.name: field.default for engine in ENGINES.values() for field in dataclasses.fields(engine.options)
}


# -------------------------------------------------------------------------------------- helpers
def _device(options: VectorOptions) -> str | None:
    return options.device if isinstance(options, GpuOptions) else None


def _explicit(
    machine: Machine,
    order: str,
    options: ExplicitOptions | VectorOptions,
    progress: Progress | None,
    only: frozenset[int] | None,
    compiled: bool,
) -> CheckResult:
    began = time.monotonic()
    system = system_for(machine, compiled)
    generated = time.monotonic() - began  # the phase profile: the model's Python code generated and compiled
    search = ExplicitSearch(
        system,
        order=order,
        symmetry=options.symmetry,
        limits=options.limits,
        progress=progress,
        stop_at_first=options.stop_at_first,
        watched=only,
    )
    result = search.run()
    result.stats.phases = {"kernels": generated, **result.stats.phases}
    return result


def _vector(
    machine: Machine, engine: str, options: VectorOptions, progress: Progress | None, only: frozenset[int] | None
) -> CheckResult:
    from lockstep.checkers.vector.backend import make_backend

    try:
        backend = make_backend(engine, _device(options))
    except RuntimeError as error:
        raise UsageError(str(error)) from None
    search = VectorSearch(
        machine,
        backend,
        engine=engine,
        symmetry=options.symmetry,
        compact=options.compact,
        stop_at_first=options.stop_at_first,
        watched=only,
        limits=options.limits,
        progress=progress,
        kernels=options.kernels,
    )
    return search.run()


def _undefined_fallback(
    machine: Machine,
    engine: str,
    error: UndefinedOperation,
    options: VectorOptions,
    progress: Progress | None,
    only: frozenset[int] | None,
) -> CheckResult:
    """The vectorised kernels met a state where ``evaluate`` raises: bfs checks the model again and
    reports it as ``well_defined`` violated, with the path to it (``definedness``)."""
    result = _explicit(machine, "bfs", options, progress, only, compiled=True)
    result.warnings.append(f"{engine} met an undefined operation ({error}); checked with bfs, which reports it")
    return _restricted(result, only)


def _safety_and_liveness(machine: Machine, options: Options) -> tuple[frozenset[int], set[int]]:
    """The checked safety properties' positions (the Z3 engines' queries) and the leads-to ones'."""
    only = selected(machine, options.properties)
    liveness = {i for i, prop in enumerate(machine.properties) if prop.kind is PropertyKind.LEADS_TO}
    safety = frozenset((set(range(len(machine.properties))) if only is None else set(only)) - liveness)
    return safety, liveness & set(only or liveness)


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


def selected(machine: Machine, names: Collection[str] | None) -> frozenset[int] | None:
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
    "KERNELS",
    "AutoOptions",
    "BmcOptions",
    "CertifyOptions",
    "Engine",
    "ExplicitOptions",
    "Field",
    "GpuOptions",
    "InductionOptions",
    "Kernels",
    "OptionError",
    "Options",
    "PdrOptions",
    "SwarmOptions",
    "SymbolicOptions",
    "VectorOptions",
    "engine_named",
    "options_for",
    "selected",
    "system_for",
]
