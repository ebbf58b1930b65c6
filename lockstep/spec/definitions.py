"""The records a ``Machine`` is made of: state variables, actions, properties and ``Step``.

Frozen data the engines read (``StateVariable``, ``Action``, ``Property`` with its
``PropertyKind``), the names of the built-in properties, and ``Step``, what an action function
returns. ``lockstep.spec.machine`` builds them and re-exports every name here.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from lockstep.spec.expressions import Expression, Parameter
from lockstep.spec.sorts import Sort, Value
from lockstep.spec.terms import Term, TermLike

IN_BOUNDS = "in_bounds"
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


@dataclass(frozen=True)
class Step:
    """What an action function returns: a guard and the updates it makes when the guard holds."""

    guard: TermLike
    updates: Mapping[Term, TermLike] = field(default_factory=dict)
