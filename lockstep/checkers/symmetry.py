"""Symmetry reduction: canonical representatives of states under permutations of a sort.

A machine may declare an index sort (or a subset of its values) interchangeable. The checker
then stores one representative per orbit: the least of the state's images under every
permutation of the declared values. ``validate`` refuses a declaration that the machine breaks
(a constant naming one of the permuted values, an ordering or arithmetic on the sort, an
initial state that is not itself symmetric), with a message saying where.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable
from typing import Any

from lockstep.spec.expressions import (
    Comprehension,
    Constant,
    Expression,
    Operation,
    Operator,
    Quantifier,
    render,
    walk,
)
from lockstep.spec.machine import Machine
from lockstep.spec.semantics import State
from lockstep.spec.sorts import IndexSort, MapSort, RecordSort, SequenceSort, Sort


class SymmetryError(ValueError):
    """The declared symmetry does not hold for this machine."""


_ORDERED = {
    Operator.LESS,
    Operator.LESS_EQUAL,
    Operator.GREATER,
    Operator.GREATER_EQUAL,
    Operator.ADD,
    Operator.SUBTRACT,
    Operator.MULTIPLY,
    Operator.FLOOR_DIVIDE,
    Operator.MODULO,
    Operator.NEGATE,
    Operator.MINIMUM,
    Operator.MAXIMUM,
}


def _expressions(machine: Machine) -> list[tuple[str, Expression]]:
    found: list[tuple[str, Expression]] = []
    for action in machine.actions:
        found.extend((f"action {action.name}", conjunct) for conjunct in action.guard)
        found.extend((f"action {action.name} (update of {name})", value) for name, value in action.updates)
    for prop in machine.properties:
        found.append((f"property {prop.name}", prop.predicate))
        if prop.at_deadlock is not None:
            found.append((f"property {prop.name}", prop.at_deadlock))
    found.append(("the final predicate", machine.final))
    return found


def validate(machine: Machine, sort: IndexSort, members: frozenset[int]) -> None:
    for action in machine.actions:
        for name, value in action.updates:
            target = machine.variables[name].sort
            if value.sort == sort and target != sort:
                raise SymmetryError(
                    f"symmetry over {sort.name} is broken by action {action.name}: it stores a {sort.name} value in "
                    f"{name} of sort {target.name}; permuting {sort.name} would not permute that value"
                )
    for where, expression in _expressions(machine):
        for node in walk(expression):
            if isinstance(node, Constant) and node.sort == sort and node.value in members:
                raise SymmetryError(
                    f"symmetry over {sort.name} {sorted(members)} is broken by {where}: it names {sort.name} "
                    f"{node.value} ({render(expression)}); declare the symmetry over the other values only"
                )
            if (
                isinstance(node, Operation)
                and node.operator in _ORDERED
                and any(argument.sort == sort for argument in node.arguments)
            ):
                raise SymmetryError(
                    f"symmetry over {sort.name} is broken by {where}: {node.operator.value} orders or computes "
                    f"with {sort.name} values ({render(node)})"
                )
            leak = _escape(node, sort)
            if leak is not None:
                raise SymmetryError(
                    f"symmetry over {sort.name} is broken by {where}: {leak} ({render(node)}); permuting "
                    f"{sort.name} would not permute that value"
                )


def _escape(node: Expression, sort: IndexSort) -> str | None:
    """Where a value of the symmetric sort flows into (or is compared with) a place of another sort."""
    if isinstance(node, Comprehension):
        if node.quantifier in (Quantifier.SUM, Quantifier.MAXIMUM, Quantifier.MINIMUM) and node.body.sort == sort:
            return f"it computes with {sort.name} values"
        if (
            node.quantifier is Quantifier.MAP
            and isinstance(node.sort, MapSort)
            and node.body.sort == sort
            and node.sort.value != sort
        ):
            return f"a {sort.name} value is stored in a map of {node.sort.value.name}"
        return None
    if not isinstance(node, Operation):
        return None
    operator, arguments = node.operator, node.arguments
    sorts = [argument.sort for argument in arguments]
    if operator in (Operator.EQUAL, Operator.NOT_EQUAL) and (sorts[0] == sort) != (sorts[1] == sort):
        return f"it compares {sort.name} with {(sorts[1] if sorts[0] == sort else sorts[0]).name}"
    if operator is Operator.IF_THEN_ELSE and (sorts[1] == sort) != (sorts[2] == sort):
        return f"its branches mix {sort.name} with another sort"
    if operator is Operator.AT and sorts[1] == sort:
        return f"it uses a {sort.name} value as a sequence position"
    if operator in (Operator.SELECT, Operator.STORE) and isinstance(sorts[0], MapSort):
        if (sorts[1] == sort) != (sorts[0].key == sort):
            return f"it indexes a map keyed by {sorts[0].key.name} with {sorts[1].name}"
        if operator is Operator.STORE and sorts[2] == sort and sorts[0].value != sort:
            return f"a {sort.name} value is stored in a map of {sorts[0].value.name}"
    if (
        operator is Operator.APPEND
        and isinstance(sorts[0], SequenceSort)
        and sorts[1] == sort
        and sorts[0].element != sort
    ):
        return f"a {sort.name} value is appended to a sequence of {sorts[0].element.name}"
    if operator is Operator.RECORD and isinstance(node.sort, RecordSort):
        for (field, field_sort), argument_sort in zip(node.sort.fields, sorts):
            if argument_sort == sort and field_sort != sort:
                return f"a {sort.name} value is stored in field {field} of sort {field_sort.name}"
    if operator is Operator.WITH_FIELD and isinstance(node.sort, RecordSort):
        position = arguments[1]
        if isinstance(position, Constant) and isinstance(position.value, int):
            field, field_sort = node.sort.fields[position.value]
            if sorts[2] == sort and field_sort != sort:
                return f"a {sort.name} value is stored in field {field} of sort {field_sort.name}"
    return None


Permute = Callable[[Any], Any]


def _permuter(sort: Sort, target: IndexSort, mapping: tuple[int, ...]) -> Permute | None:
    """A function applying ``mapping`` to values of ``sort``; None where the sort cannot contain ``target``."""
    if sort == target:
        return mapping.__getitem__
    if isinstance(sort, MapSort):
        inner = _permuter(sort.value, target, mapping)
        if sort.key == target:
            inverse = [0] * len(mapping)
            for source, destination in enumerate(mapping):
                inverse[destination] = source
            reorder = _reorder(inverse)
            if inner is None:
                return reorder
            entry = inner
            return lambda value: tuple(map(entry, reorder(value)))
        if inner is None:
            return None
        element = inner
        return lambda value: tuple(map(element, value))
    if isinstance(sort, SequenceSort):
        inner = _permuter(sort.element, target, mapping)
        if inner is None:
            return None
        element = inner
        return lambda value: tuple(map(element, value))
    if isinstance(sort, RecordSort):
        parts = [_permuter(field_sort, target, mapping) for _, field_sort in sort.fields]
        if all(part is None for part in parts):
            return None
        return lambda value: tuple(item if part is None else part(item) for part, item in zip(parts, value))
    return None


def _reorder(order: list[int]) -> Permute:
    """A tuple's items taken in ``order`` (``operator.itemgetter``, which gives a bare item for one)."""
    if len(order) == 1:
        return lambda value: (value[order[0]],)
    return operator.itemgetter(*order)


class Canonicalizer:
    """Maps a state to the least of its images under the declared permutations."""

    def __init__(self, machine: Machine, validated: bool = False) -> None:
        """``validated``: the declaration was validated already (its kernels were generated)."""
        if not machine.symmetric:
            raise SymmetryError(f"machine {machine.name} declares no symmetric sort; --symmetry has nothing to reduce")
        sorts = [variable.sort for variable in machine.variables.values()]
        self.permutations: list[Callable[[State], State]] = []
        groups = []
        for sort, members in machine.symmetric:
            if not validated:
                validate(machine, sort, members)
            chosen = sorted(members)
            mappings: list[tuple[IndexSort, tuple[int, ...]]] = []
            for image in itertools.permutations(chosen):
                images = list(range(sort.count))
                for source, destination in zip(chosen, image):
                    images[source] = destination
                mappings.append((sort, tuple(images)))
            groups.append(mappings)
        by_permutation: list[list[Permute | None]] = []  # per permutation, each variable's function
        # per permutation, the mapping of each symmetric sort (the identity first)
        self.combinations: list[tuple[tuple[IndexSort, tuple[int, ...]], ...]] = []
        for combination in itertools.product(*groups):
            self.combinations.append(combination)
            if all(mapping == tuple(range(len(mapping))) for _, mapping in combination):
                by_permutation.append([None] * len(sorts))
                self.permutations.append(_identity)  # the state itself: no copy
                continue
            functions = [_combined(variable_sort, combination) for variable_sort in sorts]
            by_permutation.append(functions)
            self.permutations.append(_state_permuter(functions))
        # the variables some permutation moves, in order, each with every permutation's function
        self._columns = [
            (position, tuple(functions[position] for functions in by_permutation))
            for position in range(len(sorts))
            if any(functions[position] is not None for functions in by_permutation)
        ]
        self._all = list(range(len(self.permutations)))
        initial = tuple(variable.initial for variable in machine.variables.values())
        for permute in self.permutations:
            if permute(initial) != initial:
                raise SymmetryError(f"symmetry of machine {machine.name}: the initial state is not symmetric")

    def __call__(self, state: State) -> State:
        """The least image of ``state`` (``min`` of every permutation's image, as tuples compare),
        found lazily: images are compared variable by variable, in order, computing only the
        variables that some permutation moves and only until one image is least; then that image
        alone is built (most states are told apart by their first moved variables, where building
        every image whole would cost most of ``bfs --symmetry``'s time)."""
        alive = self._all
        for position, functions in self._columns:
            value = state[position]
            least: Any = None
            kept: list[int] = []
            for index in alive:
                function = functions[index]
                image = value if function is None else function(value)
                if not kept or image < least:
                    least, kept = image, [index]
                elif image == least:
                    kept.append(index)
            alive = kept
            if len(alive) == 1:
                break
        return self.permutations[alive[0]](state)


def argument_permuters(machine: Machine, combination: tuple[tuple[IndexSort, tuple[int, ...]], ...]) -> list[Permute]:
    """Per action of ``machine``, the function that applies permutation ``combination`` (one of
    ``Canonicalizer.combinations``) to a tuple of that action's arguments: by symmetry, the image of
    a step's target is the target of the step with the permuted arguments from the permuted state."""
    return [
        _arguments_permuter([_combined(parameter.sort, combination) for parameter in action.parameters])
        for action in machine.actions
    ]


def _combined(sort: Sort, combination: tuple[tuple[IndexSort, tuple[int, ...]], ...]) -> Permute | None:
    """A function applying every symmetric sort's mapping of ``combination`` to values of ``sort``
    (composed in order); None where the sort contains none of them."""
    combined: Permute | None = None
    for symmetric_sort, mapping in combination:
        permute = _permuter(sort, symmetric_sort, mapping)
        if permute is not None:
            combined = permute if combined is None else _compose(combined, permute)
    return combined


def _arguments_permuter(parts: list[Permute | None]) -> Permute:
    def permute(arguments: Any) -> Any:
        return tuple(value if part is None else part(value) for part, value in zip(parts, arguments))

    return permute


def _identity(state: State) -> State:
    return state


def _compose(first: Permute, second: Permute) -> Permute:
    return lambda value: second(first(value))


def _state_permuter(functions: list[Permute | None]) -> Callable[[State], State]:
    active = [(position, function) for position, function in enumerate(functions) if function is not None]

    def permute(state: State) -> State:
        values = list(state)
        for position, function in active:
            values[position] = function(values[position])
        return tuple(values)

    return permute
