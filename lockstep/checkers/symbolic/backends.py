"""The solvers behind BMC: one incremental solver over the unrolled frames, asked per depth.

A backend owns the unrolling of a ``Template``: ``extend`` adds the step from frame k to k+1 (and
the facts of frame k+1, and the reduction's constraint on the selectors of frames k and k+1), and
``query`` asks whether some of the given goals holds at frame ``depth`` (one check for all of
them: an activation literal guards their disjunction). A ``sat`` answer comes with a
``Valuation``: which goals hold, and each frame's state and selector, to decode the path. ``Z3``
is the incremental bit-vector solver; ``lockstep.checkers.symbolic.cnf`` has the CaDiCaL one.
"""

from __future__ import annotations

from typing import Any, Protocol

import z3

from lockstep.checkers.symbolic.reduction import Reduction
from lockstep.checkers.symbolic.solving import ask, milliseconds
from lockstep.checkers.symbolic.unrolling import Goal, Template
from lockstep.checkers.symbolic.values import Symbolic


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

    def __init__(self, template: Template, reduction: Reduction | None) -> None:
        self.template, self.reduction = template, reduction
        self.solver = z3.SolverFor("QF_BV")
        self.solver.add(template.frame_facts(0), template.frame_initial())

    def extend(self, frame: int) -> None:
        template = self.template
        self.solver.add(template.frame_step(frame), template.frame_facts(frame + 1))
        if self.reduction is not None and frame > 0:
            self.solver.add(self.reduction.constraint(template.selector_at(frame - 1), template.selector_at(frame)))

    def query(self, goals: list[Goal], depth: int, seconds: float | None) -> tuple[str, Valuation | None]:
        solver = self.solver
        if seconds is not None:
            solver.set("timeout", milliseconds(seconds))
        solver.push()
        solver.add(z3.Or(*[self.template.frame_goal(goal, depth) for goal in goals]))
        answer, model = ask(solver)
        solver.pop()
        if model is not None:
            return "sat", Z3Valuation(self.template, model)
        return ("unsat" if answer == z3.unsat else "unknown"), None
