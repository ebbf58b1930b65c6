"""The records a ``Machine`` is made of: state variables, actions, properties and ``Step``.

Frozen data the engines read (``StateVariable``, ``Action``, ``Property`` with its
``PropertyKind`` and the vLLM ``Source`` lines that state it), the names of the built-in properties,
and ``Step``, what an action function returns. ``lockstep.spec.machine`` builds them and re-exports every name here.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from lockstep.spec.expressions import Expression, Parameter, Variable, render
from lockstep.spec.sorts import Sort, Value
from lockstep.spec.terms import DefinitionError, Term, TermLike, lift

IN_BOUNDS = "in_bounds"
WELL_DEFINED = "well_defined"
NO_DEADLOCK = "no_deadlock"
NO_COLLECTIVE_MISMATCH = "no_collective_mismatch"
NO_HANG = "no_hang"


class PropertyKind(enum.Enum):
    ALWAYS = "always"
    SOMETIMES = "sometimes"
    LEADS_TO = "leads-to"  # liveness under weak fairness: checked by the explicit engine


@dataclass(frozen=True)
class StateVariable:
    name: str
    sort: Sort
    initial: Value
    description: str = ""
    monitor: bool = False  # auxiliary counter of a bounded-response property


@dataclass(frozen=True)
class Action:
    name: str
    actor: str  # a template such as "rank:{rank}", filled with the rendered parameters
    parameters: tuple[Parameter, ...]
    guard: tuple[Expression, ...]  # conjuncts, kept apart so a failed step can be explained
    updates: tuple[tuple[str, Expression], ...]
    description: str = ""
    mirrors: str = ""  # the source function(s) the action stands for, shown with each counterexample step

    def actor_for(self, arguments: Mapping[str, Value]) -> str:
        rendered = {parameter.name: parameter.sort.render(arguments[parameter.name]) for parameter in self.parameters}
        return self.actor.format(**rendered)


SOURCE_KINDS = ("assert", "raise", "comment", "docstring", "code", "test")
"""What a ``Source`` line is: an ``assert``, a ``raise``, an invariant stated in a comment or a docstring, the
code that establishes it, or the oracle of one of vLLM's tests."""


@dataclass(frozen=True)
class Source:
    """Where vLLM states a property: lines ``line``..``last_line`` of ``file`` in ``function``, as the PyPI wheel
    of ``release`` has them (``"0.33.0"``); for a vLLM test's oracle, ``file`` is under ``tests/``, as the
    release's source distribution has it, and ``function`` is the test. ``kind`` is one of ``SOURCE_KINDS``."""

    release: str
    file: str
    line: int
    function: str
    kind: str
    last_line: int | None = None

    def __post_init__(self) -> None:
        problems = [
            problem
            for problem, bad in (
                ("release is empty", not self.release.strip()),
                ("file is empty", not self.file.strip()),
                ("function is empty", not self.function.strip()),
                ("line must be a positive integer", not isinstance(self.line, int) or self.line < 1),
                (
                    "last_line must not be before line",
                    self.last_line is not None and (not isinstance(self.last_line, int) or self.last_line < self.line),
                ),
                (f"kind must be one of {', '.join(SOURCE_KINDS)}", self.kind not in SOURCE_KINDS),
            )
            if bad
        ]
        if problems:
            raise DefinitionError(f"source {self.file}:{self.line} ({self.function}): {'; '.join(problems)}")

    def __str__(self) -> str:
        lines = f"{self.line}" if self.last_line in (None, self.line) else f"{self.line}-{self.last_line}"
        return f"{self.file}:{lines} {self.function} ({self.kind}, {self.release})"


SourceLike = Source | Sequence[Source]
"""What ``source=`` of a property declaration takes: one ``Source`` or several."""


def sources_of(given: SourceLike | None, where: str) -> tuple[Source, ...]:
    """``given`` as a tuple of ``Source``; a ``DefinitionError`` naming ``where`` for anything else."""
    items = () if given is None else (given,) if isinstance(given, Source) else tuple(given)
    wrong = [item for item in items if not isinstance(item, Source)]
    if wrong:
        raise DefinitionError(f"{where}: source= takes Source records, not {wrong[0]!r}")
    return items


@dataclass(frozen=True)
class Property:
    name: str
    kind: PropertyKind
    predicate: Expression
    description: str = ""
    at_deadlock: Expression | None = None  # must also hold in states where no action is enabled
    builtin: bool = False
    trigger: Expression | None = None  # leads-to: once this holds, ``predicate`` must eventually hold
    fair: tuple[str, ...] | None = None  # leads-to: the weakly fair actions (None: every action)
    sources: tuple[Source, ...] = ()  # the vLLM lines that state it (no effect on any check)


class DoubleWrite(DefinitionError):
    """A variable written twice in one step (``Machine.add`` names the action it happened in)."""


Updates = Mapping[Term, TermLike] | Sequence[tuple[Term, TermLike]]
"""One group of an action's writes: a mapping ``{variable: value}``, or a list of ``(variable, value)`` pairs."""


@dataclass(frozen=True, init=False)
class Step:
    """What an action function returns: a guard and the updates it makes when the guard holds.

    ``Step(guard, {phase: ...}, group.post(rank, "step", vote))``: the updates may come in several
    groups (mappings or ``(variable, value)`` pairs), typically one per helper that returns some;
    a variable written twice across them, or twice in one list of pairs, is a ``DefinitionError``
    naming both writes. (Inside one ``{...}`` literal Python itself keeps only the last of two
    entries for one key, ``**helper(...)`` included, before lockstep can see them: pass a helper's
    updates as a group of their own instead.) ``updates`` is the merged mapping."""

    guard: TermLike
    updates: Mapping[Term, TermLike]

    def __init__(self, guard: TermLike, *groups: Updates, updates: Updates | None = None) -> None:
        object.__setattr__(self, "guard", guard)
        object.__setattr__(self, "updates", merge_updates(*groups, *(() if updates is None else (updates,))))


def merge_updates(*groups: Updates) -> dict[Term, TermLike]:
    """The writes of ``groups``, in order, as one mapping; a variable written twice is a
    ``DefinitionError`` naming both writes and what each assigns."""
    merged: dict[Term, TermLike] = {}
    written: dict[str, tuple[Term, TermLike]] = {}
    for group in groups:
        if isinstance(group, Term) or not isinstance(group, Iterable):
            raise DefinitionError(
                f"a step's updates are mappings {{variable: value}} or lists of (variable, value) pairs, not {group!r}"
            )
        pairs = group.items() if isinstance(group, Mapping) else group
        for pair in pairs:
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise DefinitionError(
                    f"a step's updates are {{variable: value}} or (variable, value) pairs, not {pair!r}"
                )
            target, value = pair
            name = (
                target.expression.name if isinstance(target, Term) and isinstance(target.expression, Variable) else None
            )
            if name is not None:
                if name in written:
                    raise DoubleWrite(double_write(name, written[name], (target, value)))
                written[name] = (target, value)
            merged[target] = value
    return merged


def double_write(name: str, first: tuple[Term, TermLike], second: tuple[Term, TermLike]) -> str:
    """The message for variable ``name`` written twice in one step: both writes, with their values."""
    return (
        f"variable {name!r} is written twice in one step: {name} := {_shown(*first)} and {name} := "
        f"{_shown(*second)}; a variable takes one value per step: write it once (if_then_else chooses "
        "between two values)"
    )


def _shown(target: Term, value: TermLike) -> str:
    try:
        text = render(lift(value, target.sort).expression)
    except DefinitionError:
        text = repr(value)
    return text if len(text) <= 160 else text[:157] + "..."
