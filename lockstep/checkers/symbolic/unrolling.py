"""The BMC unrolling as templates: one step encoded once, renamed per frame.

``Template`` translates the machine once over two template states (``pre`` and ``post``) and a
template selector: the transition step, the initial state, the per-state facts (sort domains, and
the proved lemmas ``bmc`` hands it), and, per property, the *goal* (the state predicate BMC asks at
a depth: a violation, a witness, a deadlock, an enabled out-of-sort step, an undefined operation).
A frame ``k`` is then a renaming (``z3.substitute``) of the template's constants to ``name@k``:
the step is never translated again. The state is *packed*: every bounded scalar of a frame is a bit-vector of the
fewest bits its sort needs (``value - low``), widened to the translation's width where it is
read, so a frame carries a few hundred free bits instead of one full-width word per scalar.
"""

from __future__ import annotations

from dataclasses import dataclass

import z3
from z3.z3 import _to_expr_ref

from lockstep.checkers.symbolic.encoding import Encoding, flatten, scalar_sorts
from lockstep.checkers.symbolic.values import (
    Symbolic,
    SymbolicSequence,
    conjoin,
    disjoin,
    integer_constant,
    negate,
    to_z3,
)
from lockstep.spec.machine import IN_BOUNDS, NO_DEADLOCK, WELL_DEFINED, PropertyKind
from lockstep.spec.sorts import EnumSort, IndexSort, IntSort, Sort

PRE, POST = "pre", "post"


def _packed_range(sort: Sort) -> tuple[int, int] | None:
    """(low, bits) of a bounded scalar sort; None where it is not packed (Bool, unbounded Int)."""
    if isinstance(sort, (EnumSort, IndexSort)):
        return 0, max(1, (sort.size - 1).bit_length())
    if isinstance(sort, IntSort) and sort.low is not None and sort.high is not None:
        return sort.low, max(1, (sort.high - sort.low).bit_length())
    return None


class Renaming:
    """A substitution built once and applied to many terms (``z3.substitute`` re-checks and
    re-packs its pairs on every call, which dominates when hundreds of constants are renamed)."""

    def __init__(self, pairs: list[tuple[z3.ExprRef, z3.ExprRef]]) -> None:
        self.pairs = pairs  # kept alive while the arrays point at them
        self.size = len(pairs)
        self.sources = (z3.Ast * self.size)()
        self.targets = (z3.Ast * self.size)()
        for position, (source, target) in enumerate(pairs):
            if not source.sort().eq(target.sort()):
                raise TypeError(f"renaming {source} to a term of another sort")
            self.sources[position], self.targets[position] = source.as_ast(), target.as_ast()

    def __call__(self, term: z3.ExprRef) -> z3.ExprRef:
        context = term.ctx
        renamed = z3.Z3_substitute(context.ref(), term.as_ast(), self.size, self.sources, self.targets)
        return _to_expr_ref(renamed, context)


@dataclass(frozen=True, eq=False)
class Goal:
    position: int
    kind: str  # invariant, witness, deadlock, bounds, undefined
    formula: z3.BoolRef  # over the template's pre state


class Template:
    """One machine's step, initial state, facts and goals, translated once (see the module doc)."""

    def __init__(self, encoding: Encoding, *, pack: bool = True, lemmas: list[z3.BoolRef] | None = None) -> None:
        self.encoding = encoding
        self.pack = pack
        self.pre, self.post = encoding.state(PRE), encoding.state(POST)
        self.selector = integer_constant(f"action@{PRE}")
        self.sorts = [
            (str(component), component_sort)
            for name, sort in encoding.sorts.items()
            for component, component_sort in zip(flatten(sort, self.pre[name]), scalar_sorts(sort), strict=True)
        ]
        steps = encoding.steps(self.pre)
        self.facts = z3.And(to_z3(encoding.domain(self.pre)), *(lemmas or []))
        self.initial = to_z3(encoding.initial(self.pre))
        self.step = z3.And(
            *[
                to_z3(part)
                for part in encoding.transition(self.pre, self.post, self.selector, PRE, name_arguments=False)
            ]
        )
        self.goals = [self._goal(position, steps) for position in range(len(encoding.machine.properties))]
        # the packed constants of the template frames, and the wide terms they stand for
        self._wide = {tag: self._components(tag) for tag in (PRE, POST)}
        self._renamings: dict[tuple[str, int | str], list[tuple[z3.ExprRef, z3.ExprRef]]] = {}
        self._renamers: dict[tuple[int, bool], Renaming] = {}

    def _goal(self, position: int, steps: list) -> Goal:  # type: ignore[type-arg]
        machine, encoding, state = self.encoding.machine, self.encoding, self.pre
        prop = machine.properties[position]
        if prop.name == IN_BOUNDS:
            return Goal(position, "bounds", to_z3(disjoin([conjoin([guard, out]) for guard, _, out in steps])))
        if prop.name == WELL_DEFINED:
            return Goal(position, "undefined", to_z3(negate(encoding.well_defined(state))))
        if prop.kind is PropertyKind.SOMETIMES:
            return Goal(position, "witness", to_z3(encoding.defined_predicate(prop.predicate, state)))
        deadlocked = encoding.deadlocked(state)
        if prop.name == NO_DEADLOCK:
            deadlock = conjoin([deadlocked, negate(encoding.defined_predicate(machine.final, state))])
            return Goal(position, "deadlock", to_z3(deadlock))
        goals: list[Symbolic] = [negate(encoding.defined_predicate(prop.predicate, state))]
        if prop.at_deadlock is not None:
            goals.append(conjoin([deadlocked, negate(encoding.defined_predicate(prop.at_deadlock, state))]))
        return Goal(position, "invariant", to_z3(disjoin(goals)))

    def _components(self, tag: str) -> list[z3.ExprRef]:
        state = self.pre if tag == PRE else self.post
        return [
            to_z3(component)
            for name, sort in self.encoding.sorts.items()
            for component in flatten(sort, state[name])
            if isinstance(component, z3.ExprRef)
        ]

    def frame(self, tag: str, frame: int | str) -> list[tuple[z3.ExprRef, z3.ExprRef]]:
        """The renaming of the template state ``tag`` to frame ``frame``: each wide constant to its
        frame's (packed, widened) term."""
        cached = self._renamings.get((tag, frame))
        if cached is not None:
            return cached
        pairs = []
        for constant, (_, sort) in zip(self._wide[tag], self.sorts, strict=True):
            name = constant.decl().name().replace(f"@{tag}", f"@{frame}", 1)
            packed = _packed_range(sort) if self.pack and z3.is_bv(constant) else None
            if z3.is_bool(constant):
                pairs.append((constant, z3.Bool(name)))
            elif packed is None:
                pairs.append((constant, z3.BitVec(name, constant.size())))
            else:
                low, bits = packed
                narrow = z3.BitVec(name, bits)
                widened = narrow if bits == constant.size() else z3.ZeroExt(constant.size() - bits, narrow)
                pairs.append((constant, widened + low if low else widened))
        self._renamings[(tag, frame)] = pairs
        return pairs

    def renaming(self, frame: int, *, step: bool = False) -> Renaming:
        """Template to frame ``frame`` (with ``step``: post state to ``frame + 1``, and the selector)."""
        key = (frame, step)
        found = self._renamers.get(key)
        if found is None:
            pairs = self.frame(PRE, frame)
            if step:
                pairs = [*pairs, *self.frame(POST, frame + 1), (self.selector, self.selector_at(frame))]
            found = self._renamers[key] = Renaming(pairs)
        return found

    def frame_facts(self, frame: int) -> z3.BoolRef:
        """Sort domains (and lemmas) of frame ``frame``."""
        return self.renaming(frame)(self.facts)

    def frame_step(self, frame: int) -> z3.BoolRef:
        """The step from frame ``frame`` to ``frame + 1``."""
        return self.renaming(frame, step=True)(self.step)

    def frame_goal(self, goal: Goal, frame: int) -> z3.BoolRef:
        return self.renaming(frame)(goal.formula)

    def frame_initial(self) -> z3.BoolRef:
        return self.renaming(0)(self.initial)

    def selector_at(self, frame: int) -> z3.ExprRef:
        return z3.BitVec(f"action@{frame}", self.selector.size())

    def state_at(self, frame: int) -> dict[str, Symbolic]:
        """The template's state structure with frame ``frame``'s terms (for decoding)."""
        renaming = self.renaming(frame)
        return {name: _renamed(value, renaming) for name, value in self.pre.items()}


def _renamed(value: Symbolic, renaming: Renaming) -> Symbolic:
    if isinstance(value, tuple):
        return tuple(_renamed(item, renaming) for item in value)
    if isinstance(value, SymbolicSequence):
        return SymbolicSequence(_renamed(value.length, renaming), _renamed(value.slots, renaming))
    if isinstance(value, z3.ExprRef):
        return renaming(value)
    return value
