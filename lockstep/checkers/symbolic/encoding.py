"""A finished ``Machine`` as Z3 constraints: symbolic states, domains, grounded transitions.

Each step k has its own copy of the state (``name@k`` constants, laid out by sort: maps and
records as one constant per entry, sequences as a length and ``capacity`` slots). Actions are
*grounded*: one transition per action and concrete argument tuple, so guards and updates fold
to simple terms; a selector ``action@k`` picks the transition taken at step k, and per-step
parameter constants (``action.parameter@k``) equal its arguments, so a Z3 model names each
step's action and arguments. The post-state is one ITE chain per scalar component over the
transitions that change it. Out-of-sort updates never take a step (as in the explicit engine);
``in_bounds`` asks separately whether one is enabled. A state where ``evaluate`` cannot compute
the successors (a guard or update divides by zero, reads past a sequence's end...) has no step
either (the explicit engine stops there): ``well_defined`` asks whether such a state, or one
where a property's predicate is undefined, is reachable (``Translator.defined``); a property
holds in a state only where its predicate is defined.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import z3

from lockstep.checkers.symbolic.ranges import largest_magnitude, required_width
from lockstep.checkers.symbolic.translate import Translator
from lockstep.checkers.symbolic.values import (
    Symbolic,
    SymbolicSequence,
    conjoin,
    declare,
    default_value,
    disjoin,
    equal,
    implies,
    integer_constant,
    integer_of,
    ite,
    known_scalar,
    lift_value,
    negate,
    to_z3,
)
from lockstep.spec.compiler import stays_in_sort
from lockstep.spec.machine import IN_BOUNDS, NO_DEADLOCK, WELL_DEFINED, Machine
from lockstep.spec.semantics import State
from lockstep.spec.sorts import BoolSort, EnumSort, IndexSort, IntSort, MapSort, RecordSort, SequenceSort, Sort, Value

ANALYSES_KEPT = 8  # states whose steps ``Encoding`` keeps translated
Step = tuple[Symbolic, dict[str, Symbolic], Symbolic]  # a grounded transition's guard, updates, "leaves a sort"


@dataclass(frozen=True)
class Grounded:
    """One action with concrete arguments."""

    action: int
    arguments: tuple[Value, ...]


def in_sort(sort: Sort, value: Symbolic) -> Symbolic:
    """``value`` lies in ``sort``; for sequences also: unused slots hold the default (canonical)."""
    if isinstance(sort, BoolSort):
        return True
    if isinstance(sort, IntSort):
        parts: list[Symbolic] = []
        if sort.low is not None:
            parts.append(_at_least(value, sort.low))
        if sort.high is not None:
            parts.append(_at_least(sort.high, value))
        return conjoin(parts)
    if isinstance(sort, (EnumSort, IndexSort)):
        return conjoin([_at_least(value, 0), _at_least(sort.size - 1, value)])
    if isinstance(sort, MapSort):
        assert isinstance(value, tuple)
        if len(value) != len(sort.keys):
            return False
        return conjoin([in_sort(sort.value, item) for item in value])
    if isinstance(sort, RecordSort):
        assert isinstance(value, tuple)
        return conjoin([in_sort(field_sort, item) for item, (_, field_sort) in zip(value, sort.fields, strict=True)])
    if isinstance(sort, SequenceSort):
        assert isinstance(value, SymbolicSequence)
        default = lift_value(default_value(sort.element), sort.element)
        parts = [_at_least(value.length, 0), _at_least(sort.capacity, value.length)]
        for position, slot in enumerate(value.slots[: sort.capacity]):
            used = _less(position, value.length)
            parts.append(ite(used, in_sort(sort.element, slot), equal(slot, default)))
        return conjoin(parts)
    raise TypeError(f"no domain for sort {sort.name}")


def _at_least(high: Symbolic, low: Symbolic) -> Symbolic:
    if isinstance(high, int) and isinstance(low, int):
        return high >= low
    return to_z3(high) >= to_z3(low)


def _less(low: Symbolic, high: Symbolic) -> Symbolic:
    if isinstance(high, int) and isinstance(low, int):
        return low < high
    return to_z3(low) < to_z3(high)


def flatten(sort: Sort, value: Symbolic) -> Iterator[Any]:
    """The scalar components of a value in layout order (sequences: length, then capacity slots)."""
    if isinstance(sort, MapSort):
        assert isinstance(value, tuple)
        for item in value:
            yield from flatten(sort.value, item)
    elif isinstance(sort, RecordSort):
        assert isinstance(value, tuple)
        for item, (_, field_sort) in zip(value, sort.fields, strict=True):
            yield from flatten(field_sort, item)
    elif isinstance(sort, SequenceSort):
        assert isinstance(value, SymbolicSequence)
        yield value.length
        for slot in value.slots[: sort.capacity]:
            yield from flatten(sort.element, slot)
    else:
        yield value


def scalar_sorts(sort: Sort) -> Iterator[Sort]:
    """The sort of each scalar component of a value of ``sort``, in ``flatten``'s order (a
    sequence's length as ``Int[0..capacity]``)."""
    if isinstance(sort, MapSort):
        for _ in sort.keys:
            yield from scalar_sorts(sort.value)
    elif isinstance(sort, RecordSort):
        for _, field_sort in sort.fields:
            yield from scalar_sorts(field_sort)
    elif isinstance(sort, SequenceSort):
        yield IntSort(0, sort.capacity)
        for _ in range(sort.capacity):
            yield from scalar_sorts(sort.element)
    else:
        yield sort


def decode(sort: Sort, value: Symbolic, model: z3.ModelRef) -> Value:
    """The concrete value of a symbolic one under a Z3 model."""
    if isinstance(sort, MapSort):
        assert isinstance(value, tuple)
        return tuple(decode(sort.value, item, model) for item in value)
    if isinstance(sort, RecordSort):
        assert isinstance(value, tuple)
        return tuple(decode(field_sort, item, model) for item, (_, field_sort) in zip(value, sort.fields, strict=True))
    if isinstance(sort, SequenceSort):
        assert isinstance(value, SymbolicSequence)
        length = decode(IntSort(None, None), value.length, model)
        assert isinstance(length, int)
        return tuple(decode(sort.element, slot, model) for slot in value.slots[: max(0, min(length, len(value.slots)))])
    if isinstance(value, bool | int):
        return value
    evaluated = model.eval(value, model_completion=True)
    if isinstance(sort, BoolSort):
        return bool(z3.is_true(evaluated))
    return integer_of(evaluated)


class Encoding:
    """The symbolic reading of one machine, shared by BMC and k-induction."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine.finish()
        self.sorts = {name: variable.sort for name, variable in self.machine.variables.items()}
        self.grounded = [
            Grounded(position, arguments)
            for position, action in enumerate(self.machine.actions)
            for arguments in itertools.product(*[list(parameter.sort.values()) for parameter in action.parameters])
        ]
        # the last states ``steps`` translated, with their steps and definedness (``holds`` and
        # ``well_defined`` ask again for the same state)
        self._analyses: list[tuple[dict[str, Symbolic], tuple[list[Step], Symbolic, list[Step]]]] = []

    def integer_width(self) -> int:
        """A bit-vector width in which no integer the translation computes can wrap: the widest
        interval of any guard, update or property (``ranges``), and headroom over the sorts, the
        selector and the sequence positions the encoding adds."""
        magnitude = len(self.grounded) + 1
        for sort in [*self.sorts.values(), *(p.sort for a in self.machine.actions for p in a.parameters)]:
            magnitude = max(magnitude, _magnitude(sort))
        return max(8, magnitude.bit_length() + 6, required_width(max(magnitude, largest_magnitude(self.machine))))

    def state(self, step: int | str) -> dict[str, Symbolic]:
        return {name: declare(sort, f"{name}@{step}") for name, sort in self.sorts.items()}

    def domain(self, state: dict[str, Symbolic]) -> Symbolic:
        return conjoin([in_sort(self.sorts[name], value) for name, value in state.items()])

    def initial(self, state: dict[str, Symbolic]) -> Symbolic:
        return conjoin(
            [
                equal(state[name], lift_value(variable.initial, variable.sort))
                for name, variable in self.machine.variables.items()
            ]
        )

    def predicate(self, expression: Any, state: dict[str, Symbolic]) -> Symbolic:
        return Translator(state).translate(expression)

    def defined_predicate(self, expression: Any, state: dict[str, Symbolic]) -> Symbolic:
        """``expression`` is defined (``Translator.defined``) and true: how a property holds."""
        translator = Translator(state)
        return conjoin([translator.defined(expression), translator.translate(expression)])

    def steps(self, state: dict[str, Symbolic]) -> list[tuple[Symbolic, dict[str, Symbolic], Symbolic]]:
        """Per grounded transition: its guard, its updated variables, and "an update leaves its sort".
        Every guard includes ``defined_steps``: no step leaves a state where ``evaluate`` cannot
        compute the successors (it raises there; the state violates ``well_defined``)."""
        return self._analysed(state)[0]

    def steps_as_written(self, state: dict[str, Symbolic]) -> list[tuple[Symbolic, dict[str, Symbolic], Symbolic]]:
        """``steps`` without ``defined_steps`` in the guards: more steps (from a state where
        ``evaluate`` raises, whatever the unconstrained values allow), so an invariant inductive
        for these is inductive for ``steps``, and a path over them that ``evaluate`` does not
        replay is no path of the model. ABC's circuit reads these (every answer is re-checked on
        ``steps``); they make its proofs of the other properties no harder."""
        return self._analysed(state)[2]

    def defined_steps(self, state: dict[str, Symbolic]) -> Symbolic:
        """``evaluate`` computes the state's successors without raising: for every grounded
        transition, its guard's conjuncts in order (each where those before it hold) and, where the
        guard holds, every update."""
        return self._analysed(state)[1]

    def _analysed(self, state: dict[str, Symbolic]) -> tuple[list[Step], Symbolic, list[Step]]:
        for cached, analysed in self._analyses:
            if cached is state:
                return analysed
        raw: list[Step] = []
        definedness: list[Symbolic] = []
        for grounded in self.grounded:
            action = self.machine.actions[grounded.action]
            bindings = {
                parameter.name: value for parameter, value in zip(action.parameters, grounded.arguments, strict=True)
            }
            translator = Translator(state, bindings)
            conjuncts: list[Symbolic] = []
            for conjunct in action.guard:  # evaluate stops at the first false conjunct
                definedness.append(implies(conjoin(conjuncts), translator.defined(conjunct)))
                conjuncts.append(translator.translate(conjunct))
                if known_scalar(conjuncts[-1]) is False:
                    break
            guard = conjoin(conjuncts)
            if guard is False:
                raw.append((False, {}, False))
                continue
            updates = {name: translator.translate(expression) for name, expression in action.updates}
            definedness.append(
                implies(guard, conjoin([translator.defined(expression) for _, expression in action.updates]))
            )
            out_of_bounds = disjoin(
                [
                    negate(in_sort(self.sorts[name], updates[name]))
                    for name, expression in action.updates
                    if not stays_in_sort(expression, self.sorts[name])  # proved in sort once for all states
                ]
            )
            raw.append((guard, updates, out_of_bounds))
        defined = conjoin(definedness)
        result = [
            (guard if guard is False else conjoin([defined, guard]), updates, out_of_bounds)
            for guard, updates, out_of_bounds in raw
        ]
        self._analyses = [(state, (result, defined, raw)), *self._analyses[: ANALYSES_KEPT - 1]]
        return result, defined, raw

    def transition(
        self,
        pre: dict[str, Symbolic],
        post: dict[str, Symbolic],
        selector: z3.ExprRef,
        step: int | str,
        *,
        name_arguments: bool = True,
    ) -> list[Symbolic]:
        """Constraints: ``post`` follows ``pre`` by the grounded transition ``selector`` names (with
        ``name_arguments``, per-step parameter constants equal its arguments)."""
        constraints: list[Symbolic] = [selector >= 0, selector < len(self.grounded)]
        steps = self.steps(pre)
        for index, (guard, _, out_of_bounds) in enumerate(steps):
            if guard is False:
                constraints.append(selector != index)
                continue
            constraints.append(z3.Implies(selector == index, to_z3(conjoin([guard, negate(out_of_bounds)]))))
        after = self.successor(pre, selector, steps)
        for name, sort in self.sorts.items():
            for new, chained in zip(flatten(sort, post[name]), after[name], strict=True):
                constraints.append(equal(new, chained))
        if not name_arguments:  # the caller decodes the arguments from the selector
            return constraints
        for index, grounded in enumerate(self.grounded):  # name the arguments in the model
            action = self.machine.actions[grounded.action]
            for parameter, argument in zip(action.parameters, grounded.arguments, strict=True):
                name = f"{action.name}.{parameter.name}@{step}"
                value = to_z3(lift_value(argument, parameter.sort))
                constant = z3.Bool(name) if z3.is_bool(value) else integer_constant(name)  # Bool parameters too
                constraints.append(z3.Implies(selector == index, constant == value))
        return constraints

    def successor(
        self,
        pre: dict[str, Symbolic],
        selector: z3.ExprRef | int,
        steps: list[tuple[Symbolic, dict[str, Symbolic], Symbolic]],
    ) -> dict[str, list[Symbolic]]:
        """Each variable's scalar components (``flatten``'s order) after the grounded transition
        ``selector`` names: per component, an ITE chain over the transitions that change it (its old
        value where none does). With ``pre`` and ``selector`` concrete, the values themselves."""
        changes: dict[str, list[tuple[int, list[Any]]]] = {name: [] for name in self.sorts}
        for index, (guard, updates, _) in enumerate(steps):
            if guard is False:
                continue
            for name, value in updates.items():
                changes[name].append((index, list(flatten(self.sorts[name], value))))
        after: dict[str, list[Symbolic]] = {}
        for name, sort in self.sorts.items():
            chains: list[Symbolic] = []
            for component, old in enumerate(flatten(sort, pre[name])):
                chained: Symbolic = old
                for index, components in changes[name]:
                    candidate = components[component]
                    if candidate is old or (
                        isinstance(candidate, z3.ExprRef) and isinstance(old, z3.ExprRef) and candidate.eq(old)
                    ):
                        continue
                    chained = ite(selector == index, candidate, chained)
                chains.append(chained)
            after[name] = chains
        return after

    def enabled(self, steps: list[tuple[Symbolic, dict[str, Symbolic], Symbolic]]) -> Symbolic:
        return disjoin([guard for guard, _, _ in steps])

    def deadlocked(self, state: dict[str, Symbolic]) -> Symbolic:
        """No action is enabled, in a state whose successors ``evaluate`` computes (a state where it
        raises has none either, but violates ``well_defined``, not a deadlock condition)."""
        return conjoin([self.defined_steps(state), negate(self.enabled(self.steps(state)))])

    def well_defined(self, state: dict[str, Symbolic]) -> Symbolic:
        """The built-in ``well_defined`` property: ``evaluate`` computes, without raising, the
        state's successors, every property's predicate, and where nothing is enabled the final
        condition and every deadlock condition."""
        translator = Translator(state)
        machine = self.machine
        at_deadlock = [translator.defined(machine.final)]
        at_deadlock += [translator.defined(prop.at_deadlock) for prop in machine.properties if prop.at_deadlock]
        return conjoin(
            [
                self.defined_steps(state),
                *[translator.defined(prop.predicate) for prop in machine.properties],
                implies(self.deadlocked(state), conjoin(at_deadlock)),
            ]
        )

    def holds(self, position: int, state: dict[str, Symbolic]) -> Symbolic:
        """The state predicate an ``always`` property asks of every reachable state: its predicate,
        and its deadlock condition where it has one, each defined and true; ``in_bounds``: no
        enabled step leaves its sort; ``well_defined``: ``well_defined``; ``no_deadlock``: some
        action is enabled, or the state is final."""
        prop = self.machine.properties[position]
        steps = self.steps(state)
        if prop.name == IN_BOUNDS:
            return negate(disjoin([conjoin([guard, out]) for guard, _, out in steps]))
        if prop.name == WELL_DEFINED:
            return self.well_defined(state)
        deadlocked = self.deadlocked(state)
        parts = [self.defined_predicate(prop.predicate, state)]
        if prop.name == NO_DEADLOCK:
            parts.append(disjoin([negate(deadlocked), self.defined_predicate(self.machine.final, state)]))
        elif prop.at_deadlock is not None:
            parts.append(disjoin([negate(deadlocked), self.defined_predicate(prop.at_deadlock, state)]))
        return conjoin(parts)

    def decode_state(self, state: dict[str, Symbolic], model: z3.ModelRef) -> State:
        return tuple(decode(self.sorts[name], state[name], model) for name in self.sorts)


def _magnitude(sort: Sort) -> int:
    """The largest absolute integer a value of ``sort`` holds (bounds, sizes, capacities)."""
    if isinstance(sort, IntSort):
        return max(abs(sort.low or 0), abs(sort.high or 0))
    if isinstance(sort, (EnumSort, IndexSort)):
        return sort.size
    if isinstance(sort, MapSort):
        return max(len(sort.keys), _magnitude(sort.value))
    if isinstance(sort, RecordSort):
        return max((_magnitude(field_sort) for _, field_sort in sort.fields), default=0)
    if isinstance(sort, SequenceSort):
        return max(sort.capacity + 1, _magnitude(sort.element))
    return 1
