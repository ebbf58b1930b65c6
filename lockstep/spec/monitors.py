"""Bounded-response monitors: the counter a ``respond_within`` property adds to the state.

A ``Response`` remembers a monitor's trigger, response, bound and counter; ``monitor_update`` is
the counter's update in one action (restart on a response action, -1 once answered, +1 while
pending, 0 when triggered), which ``Machine.finish`` adds to every action.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lockstep.spec.expressions import Expression, substitute_variables
from lockstep.spec.sorts import IntSort, SortError
from lockstep.spec.terms import Term, if_then_else, minimum


@dataclass
class Response:
    name: str
    trigger: Term
    response: Term
    bound: int
    response_actions: frozenset[str]
    counter: Term


def monitor_update(response: Response, action_name: str, post: Mapping[str, Expression]) -> Expression:
    """counter' = restart on a response action; -1 once answered; +1 while pending; 0 when triggered."""
    counter = response.counter
    bound = response.bound
    after_trigger = Term(substitute_variables(response.trigger.expression, post))
    after_response = Term(substitute_variables(response.response.expression, post))
    restart = if_then_else(after_response, -1, if_then_else(after_trigger, 0, -1))
    if action_name in response.response_actions:
        return _as_int(restart)
    pending = if_then_else(counter >= 0, minimum(counter + 1, bound), restart)
    return _as_int(if_then_else(after_response, -1, pending))


def _as_int(term: Term) -> Expression:
    expression = term.expression
    if not isinstance(expression.sort, IntSort):
        raise SortError("monitor update must be an integer")  # pragma: no cover - by construction
    return expression
