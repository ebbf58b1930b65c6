"""The one result type of every engine: verdicts per property, paths, statistics.

Engines return a ``CheckResult`` and never print; the CLI and the reporter render it. A ``Path``
is the initial state and the steps that follow it, each naming the action, its actor and its
arguments, so it can be written as a trace, shown as swimlanes, and replayed by the model.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from lockstep.spec.machine import Machine, PropertyKind
from lockstep.spec.semantics import State
from lockstep.spec.sorts import MapSort, Value


class Verdict(enum.Enum):
    HOLDS = "holds"
    HOLDS_WITHIN_BOUND = "holds-within-bound"
    VIOLATED = "violated"
    INCONCLUSIVE = "inconclusive"


# The exit code of a run whose overall verdict is this (see the README's exit-code table).
EXIT_CODES = {Verdict.HOLDS: 0, Verdict.HOLDS_WITHIN_BOUND: 0, Verdict.VIOLATED: 1, Verdict.INCONCLUSIVE: 3}


@dataclass(frozen=True)
class Step:
    action: str
    actor: str
    arguments: dict[str, Value]
    state: State  # the state after the step


@dataclass(frozen=True)
class Path:
    initial: State
    steps: tuple[Step, ...]
    # A lasso (liveness counterexample): the steps from this index on form a cycle that returns to
    # the state before it; equal to the length for a run that stops. None for a finite path.
    loop_start: int | None = None

    @property
    def length(self) -> int:
        """The number of actions."""
        return len(self.steps)

    @property
    def final_state(self) -> State:
        return self.steps[-1].state if self.steps else self.initial


@dataclass
class PropertyResult:
    name: str
    kind: PropertyKind
    verdict: Verdict
    path: Path | None = None  # the counterexample (always) or the witness (sometimes)
    detail: str = ""  # e.g. which variable left its sort, or "no action enabled"
    builtin: bool = False
    # The proof of a proved property (pdr): an inductive invariant over the model's variables,
    # re-checked by lockstep before the verdict was given. None for the other engines.
    invariant: str | None = None
    # The same invariant as a few lines a person reads (``symbolic.invariants.summarize``).
    invariant_summary: tuple[str, ...] = ()

    @property
    def counterexample(self) -> Path | None:
        return self.path if self.verdict is Verdict.VIOLATED else None


@dataclass
class Statistics:
    states: int | None = 0  # distinct states stored
    transitions: int | None = 0  # successors generated
    depth: int = 0
    seconds: float = 0.0
    frontier: int | None = None  # in a progress report: states waiting to be expanded
    walks: int | None = None  # swarm: the random walks run (``transitions``: their steps)
    distinct_estimate: int | None = None  # swarm: distinct states seen, estimated (HyperLogLog)
    peak_memory_bytes: int | None = None  # vectorised engines: the process's peak resident size
    # seconds per phase of the engine's run (kernels, search, counterexample...), in the order run
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def states_per_second(self) -> float:
        if not self.states or self.seconds <= 0:
            return 0.0
        return self.states / self.seconds


@dataclass
class CheckResult:
    machine: Machine
    engine: str
    properties: list[PropertyResult]
    stats: Statistics
    stopped: str | None = None  # why the search stopped early: "max-states", "timeout", "interrupted"...
    warnings: list[str] = field(default_factory=list)
    # explicit engines: the actions never enabled in the explored states (each also a warning here;
    # the report tells those the instance's parameters turn off from the others)
    never_enabled: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> Verdict:
        verdicts = {result.verdict for result in self.properties}
        for verdict in (Verdict.VIOLATED, Verdict.INCONCLUSIVE, Verdict.HOLDS_WITHIN_BOUND):
            if verdict in verdicts:
                return verdict
        return Verdict.HOLDS

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def property_result(self, name: str) -> PropertyResult:
        for result in self.properties:
            if result.name == name:
                return result
        raise KeyError(name)

    @property
    def counterexample(self) -> PropertyResult | None:
        """The violated property with the shortest counterexample (ties: the first declared)."""
        best: PropertyResult | None = None
        for result in self.properties:
            if result.verdict is Verdict.VIOLATED and result.path is not None:
                if best is None or best.path is None or result.path.length < best.path.length:
                    best = result
        return best


def never_enabled_warning(action: str) -> str:
    """The warning for an action that no explored state enabled."""
    return f"action {action} was never enabled in the explored states"


def bounds_detail(machine: Machine, name: str, target: State) -> str:
    """Which variable (or map entry) a step pushed out of its sort, as ``in_bounds`` reports it."""
    sort = machine.variables[name].sort
    value = target[list(machine.variables).index(name)]
    if isinstance(sort, MapSort) and isinstance(value, tuple) and len(value) == len(sort.keys):
        for key, entry in zip(sort.keys, value, strict=True):
            if not sort.value.contains(entry):
                return f"{name}[{sort.key.render(key)}] would become {entry!r}, outside {sort.value.name}"
    return f"{name} would become {value!r}, outside {sort.name}"
