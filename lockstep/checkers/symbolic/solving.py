"""Asking Z3: timeouts in whole milliseconds or CPU seconds, and answers whose models are checked before use.

Under a timeout Z3 can be cancelled part-way and still answer ``sat`` with a model that does not
satisfy what was asserted (seen with ``--solver-timeout 0.001`` on the incremental QF_BV solver).
``ask`` therefore evaluates every assertion under the model and reports such an answer as
``unknown``: an engine never decodes a model that the solver did not stand behind. ``ask``'s
``cpu`` limits the check to that many CPU seconds of this process (``budget.z3_cpu_limit``): a
loaded machine gives the query the same work, later.
"""

from __future__ import annotations

import math

import z3

from lockstep.checkers.symbolic.budget import z3_cpu_limit


def milliseconds(seconds: float) -> int:
    """A Z3 ``timeout`` value: at least 1 ms (0 would mean no limit to some Z3 components)."""
    return max(1, math.ceil(seconds * 1000))


def ask(solver: z3.Solver, cpu: float | None = None) -> tuple[z3.CheckSatResult, z3.ModelRef | None]:
    """The solver's answer (within ``cpu`` seconds of CPU, if given) and, for ``sat``, its model; a
    model that falsifies an assertion (a cancelled search) turns the answer into ``unknown``."""
    with z3_cpu_limit(cpu):
        answer = solver.check()
    if answer != z3.sat:
        return answer, None
    try:
        model = solver.model()
        satisfied = z3.is_true(model.eval(z3.And(*solver.assertions()), model_completion=True))
    except z3.Z3Exception:  # no model to read back after a cancelled check
        return z3.unknown, None
    return (answer, model) if satisfied else (z3.unknown, None)
