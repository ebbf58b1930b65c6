"""The solvers behind BMC: one incremental solver over the unrolled frames, asked per depth.

A backend owns the unrolling of a ``Template``: ``extend`` adds the step from frame k to k+1 (and
the facts of frame k+1, and each ordering's constraint on the selector of frame k and its flags at
frames k and k+1: the partial-order reduction, symmetry breaking), and
``query`` asks whether some of the given goals holds at frame ``depth`` (one check for all of
them: an activation literal guards their disjunction; once it is unsat, that no asked goal holds
at ``depth`` is kept as a lemma for the deeper queries). A ``sat`` answer comes with a
``Valuation``: which goals hold, and each frame's state and selector, to decode the path. ``Z3``
is the incremental bit-vector solver; ``lockstep.checkers.symbolic.cnf`` has the CaDiCaL one.
"""

from __future__ import annotations

from typing import Any, Protocol

import z3

from lockstep.checkers.symbolic.solving import ask, milliseconds
from lockstep.checkers.symbolic.unrolling import Goal, Template
from lockstep.checkers.symbolic.values import Symbolic


class Ordering(Protocol):
    """A constraint on the sequence of selectors, through Boolean flags carried from frame to frame."""

    @property
    def flags(self) -> list[str]: ...

    def initial(self, flags: dict[str, z3.BoolRef]) -> z3.BoolRef: ...

    def step(self, selector: z3.ExprRef, before: dict[str, z3.BoolRef], after: dict[str, z3.BoolRef]) -> z3.BoolRef: ...


class Valuation(Protocol):
    def holds(self, goal: Goal, frame: int) -> bool: ...

    def state(self, frame: int) -> tuple[dict[str, Symbolic], Any]:
        """Frame ``frame``'s state structure and an object whose ``eval(term, model_completion=True)``
        gives the value of its terms."""
        ...

    def selector(self, frame: int) -> int: ...


class Backend(Protocol):
    def extend(self, frame: int) -> None: ...

    def query(self, goals: list[Goal], depth: int, seconds: float | None) -> tuple[str, Valuation | None]:
        """ "sat" (with a valuation), "unsat" or "unknown"."""
        ...


class Z3Valuation:
    def __init__(self, template: Template, model: z3.ModelRef) -> None:
        self.template, self.model = template, model

    def holds(self, goal: Goal, frame: int) -> bool:
        return bool(z3.is_true(self.model.eval(self.template.frame_goal(goal, frame), model_completion=True)))

    def state(self, frame: int) -> tuple[dict[str, Symbolic], Any]:
        return self.template.state_at(frame), self.model

    def selector(self, frame: int) -> int:
        value = self.model.eval(self.template.selector_at(frame), model_completion=True)
        return int(value.as_long())


class Z3Backend:
    """Z3's incremental QF_BV solver; every frame is a renaming of the template."""

    def __init__(self, template: Template, orderings: list[Ordering]) -> None:
        self.template, self.orderings = template, orderings
        self.solver = z3.SolverFor("QF_BV")
        self.solver.add(template.frame_facts(0), template.frame_initial())
        for ordering in orderings:
            self.solver.add(ordering.initial(self._flags(ordering, 0)))

    @staticmethod
    def _flags(ordering: Ordering, frame: int) -> dict[str, z3.BoolRef]:
        return {name: z3.Bool(f"{name}@{frame}") for name in ordering.flags}

    def extend(self, frame: int) -> None:
        template = self.template
        self.solver.add(template.frame_step(frame), template.frame_facts(frame + 1))
        for ordering in self.orderings:
            before, after = self._flags(ordering, frame), self._flags(ordering, frame + 1)
            self.solver.add(ordering.step(template.selector_at(frame), before, after))

    def query(self, goals: list[Goal], depth: int, seconds: float | None) -> tuple[str, Valuation | None]:
        solver = self.solver
        if seconds is not None:
            solver.set("timeout", milliseconds(seconds))
        solver.push()
        solver.add(z3.Or(*[self.template.frame_goal(goal, depth) for goal in goals]))
        answer, model = ask(solver)
        solver.pop()
        if answer == z3.unsat:  # a lemma: no goal asked holds at this depth, in every longer unrolling too
            solver.add(*[z3.Not(self.template.frame_goal(goal, depth)) for goal in goals])
        if model is not None:
            return "sat", Z3Valuation(self.template, model)
        return ("unsat" if answer == z3.unsat else "unknown"), None
