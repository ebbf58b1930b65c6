"""Bounded message delay: ``bound_delay`` gives every message in a channel an age and a deadline.

A channel is a state variable holding a FIFO sequence (``SequenceSort``) or a map of them
(``MapSort(key, SequenceSort)``, one channel per key). Unbounded by default, the delay of a
channel is bounded by ``bound_delay(machine, max_delay, names)``: each channel gets an auxiliary
variable ``delay.<name>`` holding the age of each message in it, in model steps (0 in the step
that sends it, +1 for every later step of the machine, whoever takes it, saturating at the
bound). A message ``max_delay`` steps old is overdue: while any message is overdue, the only steps
allowed are those that take an overdue message out of its channel (the receiver's delivery or
handling step). So with ``max_delay = k`` no message waits more than k steps while a step that
would take it is possible; several messages overdue at once leave in any order. Where no such
step is enabled (the receiver is busy), nothing is: the checker reports ``no_deadlock``, which
then means "this bound cannot be met here", not a protocol deadlock. ``max_delay = 0`` means a
message leaves its channel in the step after the one that sent it.

The mechanism is structural and cheap: for each action it reads how the action's update of a
channel is built (``tail`` removes the front, ``append`` adds at the back, ``if_then_else``
chooses, a map ``set``/``map_of`` picks a channel by key, an empty constant drops everything) and
derives the number of messages removed from the front; anything else is refused at definition
time, naming the action and the channel. The ages and the guard are ordinary IR, so every engine
(explicit, vectorised, Z3) checks the bounded machine unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

from lockstep.spec.expressions import (
    Comprehension,
    Constant,
    Expression,
    Operation,
    Operator,
    Quantifier,
    Variable,
    render,
    substitute,
)
from lockstep.spec.machine import Action, Machine
from lockstep.spec.protocol import ParameterSpec
from lockstep.spec.sorts import IndexSort, IntSort, MapSort, SequenceSort, Sort
from lockstep.spec.terms import DefinitionError, Term, disjunction, if_then_else, lift, minimum

UNBOUNDED = -1
"""The default of every model's ``max_delay`` parameter: messages may stay in flight for ever."""


def bound_delay(machine: Machine, max_delay: int, names: Sequence[str]) -> None:
    """Bound the delay of the channels ``names`` of ``machine`` by ``max_delay`` steps (call before ``finish``).

    ``UNBOUNDED`` leaves the machine as it is."""
    if max_delay == UNBOUNDED:
        return
    if max_delay < 0:
        raise DefinitionError(f"max_delay must be {UNBOUNDED} (unbounded) or at least 0, got {max_delay}")
    ages: list[tuple[str, Term, Sort]] = []
    for name in names:
        if name not in machine.variables:
            raise DefinitionError(f"max_delay: {machine.name} has no channel variable {name!r}")
        sort = machine.variables[name].sort
        ages.append((name, _declare_ages(machine, name, sort, max_delay), sort))
    rebuilt: list[Action] = []
    for action in machine.actions:
        updates = dict(action.updates)
        overdue: list[Term] = []
        delivered: list[Term] = []
        extra: list[tuple[str, Expression]] = []
        for name, age, sort in ages:
            channel = Variable(name, sort)
            late, taken, update = _aged(action.name, name, channel, updates.get(name, channel), age, max_delay)
            overdue.append(late)
            delivered.append(taken)
            extra.append((f"delay.{name}", update.expression))
        guard = (~disjunction(*overdue) | disjunction(*delivered)).expression
        rebuilt.append(
            Action(
                action.name,
                action.actor,
                action.parameters,
                action.guard + (guard,),
                action.updates + tuple(extra),
                action.description,
                action.mirrors,
            )
        )
    machine.actions = rebuilt


def _declare_ages(machine: Machine, name: str, sort: Sort, max_delay: int) -> Term:
    element = _sequence_sort(name, sort)
    positions = IndexSort(f"delay.{name}.position", max(element.capacity, 1))
    ages = MapSort(positions, IntSort(0, max_delay))
    zero = tuple(0 for _ in range(positions.count))
    if isinstance(sort, MapSort):
        assert isinstance(sort.key, IndexSort)
        return machine.variable(
            f"delay.{name}",
            MapSort(sort.key, ages),
            tuple(zero for _ in range(sort.key.count)),
            f"age in steps of each message of {name}",
        )
    return machine.variable(f"delay.{name}", ages, zero, f"age in steps of each message of {name}")


def _sequence_sort(name: str, sort: Sort) -> SequenceSort:
    if isinstance(sort, SequenceSort):
        return sort
    if isinstance(sort, MapSort) and isinstance(sort.value, SequenceSort) and isinstance(sort.key, IndexSort):
        return sort.value
    raise DefinitionError(f"max_delay: {name!r} of sort {sort.name} is not a channel (a sequence or a map of them)")


def _aged(
    action: str, name: str, channel: Variable, after: Expression, age: Term, max_delay: int
) -> tuple[Term, Term, Term]:
    """For one action and channel: whether a message is overdue before the step, whether the step
    takes an overdue message out, and the ages after the step."""
    sort = channel.sort
    if isinstance(sort, SequenceSort):
        return _aged_sequence(action, name, Term(channel), after, channel, age, max_delay)
    assert isinstance(sort, MapSort) and isinstance(sort.key, IndexSort)
    overdue, delivered, values = [], [], []
    for key in range(sort.key.count):
        late, taken, value = _aged_sequence(
            action, name, Term(channel)[key], _at_key(action, name, after, key), channel, age[key], max_delay
        )
        overdue.append(late)
        delivered.append(taken)
        values.append(value.expression)
    return disjunction(*overdue), disjunction(*delivered), Term(Operation(Operator.MAP, tuple(values), age.sort))


def _aged_sequence(
    action: str, name: str, before: Term, after: Expression, channel: Variable, age: Term, max_delay: int
) -> tuple[Term, Term, Term]:
    removed = _removed(action, name, after, channel, before)
    after_term = Term(after)
    assert isinstance(age.sort, MapSort) and isinstance(age.sort.key, IndexSort)
    count = age.sort.key.count
    overdue = ~before.is_empty() & (age[0] >= max_delay)  # the front message is the oldest
    values = []
    for position in range(count):
        source = removed + position  # where the message now at ``position`` was before the step
        old = age[minimum(source, count - 1)]
        carried = (after_term.length() > position) & (source < before.length())
        values.append(if_then_else(carried, minimum(old + 1, max_delay), 0).expression)
    return overdue, overdue & (removed > 0), Term(Operation(Operator.MAP, tuple(values), age.sort))


def _at_key(action: str, name: str, after: Expression, key: int) -> Expression:
    """The channel at ``key`` in the map expression ``after``."""
    if isinstance(after, Variable):
        return Operation(Operator.SELECT, (after, Constant(key, after.sort.key)), after.sort.value)  # type: ignore[attr-defined]
    if isinstance(after, Operation):
        arguments = after.arguments
        if after.operator is Operator.STORE:
            stored_key, channel = arguments[1], _channel_of(arguments[0])
            chosen = Term(stored_key) == lift(key, stored_key.sort)
            # under ``chosen``, the channel read at the stored key is the channel at ``key``
            at_stored = Operation(Operator.SELECT, (channel, stored_key), after.sort.value)  # type: ignore[attr-defined]
            at_key = Operation(Operator.SELECT, (channel, Constant(key, stored_key.sort)), at_stored.sort)
            value = substitute(arguments[2], lambda node: at_key if node == at_stored else None)
            return if_then_else(chosen, Term(value), Term(_at_key(action, name, arguments[0], key))).expression
        if after.operator is Operator.IF_THEN_ELSE:
            return if_then_else(
                Term(arguments[0]),
                Term(_at_key(action, name, arguments[1], key)),
                Term(_at_key(action, name, arguments[2], key)),
            ).expression
        if after.operator is Operator.MAP:
            return arguments[key]
    if isinstance(after, Comprehension) and after.quantifier is Quantifier.MAP:
        bound = after.variable
        return substitute(after.body, lambda node: Constant(key, bound.sort) if node == bound else None)
    if isinstance(after, Constant):
        return Constant(after.value[key], after.sort.value)  # type: ignore[index, attr-defined]
    raise _untracked(action, name, after)


def _removed(action: str, name: str, after: Expression, channel: Variable, before: Term) -> Term:
    """How many messages the step took from the front of the channel ``before`` to make ``after``."""
    if after == before.expression or after == channel:
        return lift(0)
    if isinstance(after, Operation):
        operator, arguments = after.operator, after.arguments
        if operator is Operator.TAIL:
            return _removed(action, name, arguments[0], channel, before) + 1
        if operator is Operator.APPEND:
            return _removed(action, name, arguments[0], channel, before)
        if operator is Operator.IF_THEN_ELSE:
            return if_then_else(
                Term(arguments[0]),
                _removed(action, name, arguments[1], channel, before),
                _removed(action, name, arguments[2], channel, before),
            )
    if isinstance(after, (Constant, Operation)) and _empty_literal(after):
        return before.length()
    raise _untracked(action, name, after)


def _channel_of(expression: Expression) -> Expression:
    """The channel variable under a chain of map updates (the map a STORE writes into)."""
    while isinstance(expression, Operation) and expression.operator in (Operator.STORE, Operator.IF_THEN_ELSE):
        expression = expression.arguments[0] if expression.operator is Operator.STORE else expression.arguments[1]
    return expression


def _empty_literal(expression: Expression) -> bool:
    if isinstance(expression, Constant):
        return expression.value == ()
    return isinstance(expression, Operation) and expression.operator is Operator.SEQUENCE and not expression.arguments


def _untracked(action: str, name: str, after: Expression) -> DefinitionError:
    return DefinitionError(
        f"max_delay: action {action!r} updates channel {name!r} as {render(after)[:200]}; only tail(), append(), "
        "if_then_else, a map set()/map_of per key and the empty sequence can be tracked"
    )


def max_delay_parameter() -> ParameterSpec:
    """The ``max_delay`` parameter every model with channels declares (unbounded by default)."""
    return ParameterSpec(
        "max_delay",
        UNBOUNDED,
        "steps a message may stay in a channel (-1: unbounded)",
        minimum=UNBOUNDED,
        maximum=64,
    )
