"""A model as one family over its number of ranks, and its Z3 encoding for a symbolic rank count N.

A protocol's ``build`` makes one machine per rank count. ``family`` builds it at two probe sizes
(``PROBE`` and ``PROBE + 1``) and anti-unifies them: the two must have the same actions,
parameters, guards, updates and properties node for node; where a constant differs, both must be
the rank count plus the same offset (the constant is then ``N + offset``); where an integer sort's
bound differs, likewise; the rank sort's size is N; a per-rank initial value must be the same for
every rank. Anything else (an expression built by a loop over the ranks, a rank-specific initial
value) is ``NotUniform``, naming where. The family is then compared node for node with the machine
``build`` makes at every rank count the protocol admits (``sizes``), so the template is exactly
the model at each of them; beyond them it is the family the template defines.

``FamilyEncoding`` reads the template with N a Z3 integer (N >= 2). A rank is an integer in
``[0, N)``; a map over ranks is one Z3 array per scalar component of its values (``RankMap``); a
comprehension over ranks is a quantifier (``all_of``, ``any_of``), a lambda (``map_of``), or, for
``max_of``/``min_of``, an extremum stated with quantifiers. ``sum_of`` and ``count_of`` over ranks
are fresh integers constrained by the facts of the 0/1 fold lemma (``COUNTING_LEMMA``, proved by
``lemmas.prove`` before it is used): the sum of N values in ``[0, 1]`` lies in ``[0, N]``, is 0
exactly when every value is 0 and N exactly when every value is 1; a sum of other values is
refused. An action parameter over ranks is an existential integer in ``[0, N)``; other parameters
are enumerated. Monitor variables (bounded responses, ``no_hang``) are left out: the properties
this encoding serves read none of them, and no guard or update of the model may.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import z3

from lockstep.checkers.symbolic.encoding import flatten, scalar_sorts
from lockstep.checkers.symbolic.translate import Translator
from lockstep.checkers.symbolic.values import (
    Symbolic,
    SymbolicSequence,
    conjoin,
    default_value,
    equal,
    ite,
    lift_value,
    to_z3,
)
from lockstep.spec.definitions import Action, Property
from lockstep.spec.expressions import (
    Bound,
    Comprehension,
    Constant,
    Expression,
    Operation,
    Operator,
    Quantifier,
    Variable,
    children,
    walk,
)
from lockstep.spec.machine import Machine
from lockstep.spec.protocol import Protocol
from lockstep.spec.sorts import BoolSort, EnumSort, IndexSort, IntSort, MapSort, RecordSort, SequenceSort, Sort, Value

PROBE = 5  # the first probe size: large enough that no small constant of a model coincides with it
RANK_COUNT = "N"


class NotUniform(ValueError):
    """The builder is not one family over the rank count (or uses a form this encoding refuses)."""


@dataclass(frozen=True)
class Family:
    """The template machine (built at ``PROBE`` ranks) and where the rank count N enters it."""

    protocol: Protocol
    variant: str
    parameters: Mapping[str, int]  # the instance's, the rank parameter at PROBE
    rank_parameter: str
    machine: Machine
    rank_sort: IndexSort
    offsets: Mapping[int, int]  # id of a Constant node of the template -> its value is N + offset
    sorts_next: Mapping[str, Sort]  # each variable's sort at PROBE + 1 (integer bounds that follow N)
    sizes: tuple[int, ...]  # the rank counts at which build() was compared with the template

    @property
    def variables(self) -> list[str]:
        """The state variables the encoding keeps (monitors left out)."""
        return [name for name, variable in self.machine.variables.items() if not variable.monitor]


def family(protocol: Protocol, variant: str, parameters: Mapping[str, int]) -> Family:
    """The model of ``protocol``/``variant`` at ``parameters`` as one family over its rank count."""
    rank_parameter = protocol.rank_parameter
    if rank_parameter is None:
        raise NotUniform(f"protocol {protocol.name} has no rank parameter")

    def built(size: int) -> Machine:
        return protocol.machine(variant, {**parameters, rank_parameter: size})

    template, following = built(PROBE), built(PROBE + 1)
    rank_sort = _rank_sort(template)
    matcher = _Matcher(rank_sort.name, PROBE, PROBE + 1, {}, record=True)
    matcher.machines(template, following)
    spec = protocol.parameter(rank_parameter)
    low = max(2, spec.minimum if spec.minimum is not None else 2)
    high = spec.maximum if spec.maximum is not None else PROBE + 1
    sizes = tuple(range(low, high + 1))
    for size in sizes:
        if size not in (PROBE, PROBE + 1):
            _Matcher(rank_sort.name, PROBE, size, matcher.offsets, record=False).machines(template, built(size))
    _check_monitors_unread(template)
    return Family(
        protocol,
        variant,
        {**parameters, rank_parameter: PROBE},
        rank_parameter,
        template,
        rank_sort,
        dict(matcher.offsets),
        {name: variable.sort for name, variable in following.variables.items()},
        sizes,
    )


def _rank_sort(machine: Machine) -> IndexSort:
    sorts = {
        variable.sort.key
        for variable in machine.variables.values()
        if isinstance(variable.sort, MapSort)
        and isinstance(variable.sort.key, IndexSort)
        and variable.sort.key.size == PROBE
    }
    if len(sorts) != 1:
        raise NotUniform(f"{machine.name}: no single index sort of {PROBE} members keys the per-rank variables")
    return sorts.pop()


def _check_monitors_unread(machine: Machine) -> None:
    monitors = {name for name, variable in machine.variables.items() if variable.monitor}
    for action in machine.actions:
        for expression in (*action.guard, *(value for name, value in action.updates if name not in monitors)):
            read = {node.name for node in walk(expression) if isinstance(node, Variable)} & monitors
            if read:
                raise NotUniform(f"action {action.name} reads the monitor {sorted(read)[0]}")


@dataclass
class _Matcher:
    """Compares a template machine (``size``) node for node with one built at ``other`` ranks."""

    rank: str
    size: int
    other: int
    offsets: dict[int, int]
    record: bool
    seen: set[tuple[int, int]] = field(default_factory=set)
    renamed: dict[str, str] = field(default_factory=dict)  # a bound variable's name -> its twin's

    def machines(self, template: Machine, other: Machine) -> None:
        if list(template.variables) != list(other.variables):
            raise NotUniform(f"the state variables differ between {self.size} and {self.other} ranks")
        for name, variable in template.variables.items():
            twin = other.variables[name]
            self.sorts(variable.sort, twin.sort, f"variable {name}")
            self.initial(variable.sort, variable.initial, twin.initial, f"variable {name}")
        if [action.name for action in template.actions] != [action.name for action in other.actions]:
            raise NotUniform(f"the actions differ between {self.size} and {self.other} ranks")
        for action, twin_action in zip(template.actions, other.actions, strict=True):
            self.action(action, twin_action)
        if [prop.name for prop in template.properties] != [prop.name for prop in other.properties]:
            raise NotUniform(f"the properties differ between {self.size} and {self.other} ranks")
        for prop, twin_prop in zip(template.properties, other.properties, strict=True):
            self.property(prop, twin_prop)

    def action(self, action: Action, other: Action) -> None:
        where = f"action {action.name}"
        if [parameter.name for parameter in action.parameters] != [parameter.name for parameter in other.parameters]:
            raise NotUniform(f"{where}: its parameters differ between {self.size} and {self.other} ranks")
        for parameter, twin in zip(action.parameters, other.parameters, strict=True):
            self.sorts(parameter.sort, twin.sort, f"{where}, parameter {parameter.name}")
        if len(action.guard) != len(other.guard) or [n for n, _ in action.updates] != [n for n, _ in other.updates]:
            raise NotUniform(
                f"{where}: its guard or updates differ in shape between {self.size} and {self.other} ranks"
            )
        for guard, twin_guard in zip(action.guard, other.guard, strict=True):
            self.expression(guard, twin_guard, f"{where}, guard")
        for (name, update), (_, twin_update) in zip(action.updates, other.updates, strict=True):
            self.expression(update, twin_update, f"{where}, update of {name}")

    def property(self, prop: Property, other: Property) -> None:
        self.expression(prop.predicate, other.predicate, f"property {prop.name}")

    def follows(self, value: int, twin: int) -> int | None:
        """The offset d with value = size + d and twin = other + d, if there is one."""
        return value - self.size if value - self.size == twin - self.other else None

    def sorts(self, sort: Sort, other: Sort, where: str) -> None:
        if sort == other:
            return
        if isinstance(sort, IndexSort) and isinstance(other, IndexSort) and sort.name == other.name == self.rank:
            if sort.size == self.size and other.size == self.other:
                return
        if isinstance(sort, IntSort) and isinstance(other, IntSort):
            for bound, twin in ((sort.low, other.low), (sort.high, other.high)):
                if bound != twin and (bound is None or twin is None or self.follows(bound, twin) is None):
                    break
            else:
                return
        if isinstance(sort, MapSort) and isinstance(other, MapSort):
            self.sorts(sort.key, other.key, where)
            self.sorts(sort.value, other.value, where)
            return
        if isinstance(sort, SequenceSort) and isinstance(other, SequenceSort) and sort.capacity == other.capacity:
            self.sorts(sort.element, other.element, where)
            return
        if isinstance(sort, RecordSort) and isinstance(other, RecordSort) and sort.name == other.name:
            if [name for name, _ in sort.fields] == [name for name, _ in other.fields]:
                for (_, field_sort), (_, twin_field) in zip(sort.fields, other.fields, strict=True):
                    self.sorts(field_sort, twin_field, where)
                return
        raise NotUniform(f"{where}: sort {sort.name} at {self.size} ranks is {other.name} at {self.other}")

    def initial(self, sort: Sort, value: Value, other: Value, where: str) -> None:
        if isinstance(sort, MapSort) and isinstance(sort.key, IndexSort) and sort.key.name == self.rank:
            assert isinstance(value, tuple) and isinstance(other, tuple)
            if len(set(value)) > 1 or len(set(other)) > 1 or value[:1] != other[:1]:
                raise NotUniform(f"{where}: its initial value is not the same for every rank")
            return
        if value != other:
            raise NotUniform(f"{where}: its initial value differs between {self.size} and {self.other} ranks")

    def expression(self, node: Expression, other: Expression, where: str) -> None:
        key = (id(node), id(other))
        if key in self.seen:
            return
        self.seen.add(key)
        if type(node) is not type(other):
            raise NotUniform(f"{where}: the expression's shape differs between {self.size} and {self.other} ranks")
        if isinstance(node, Constant):
            assert isinstance(other, Constant)
            self._constant(node, other, where)
            return
        if isinstance(node, Operation):
            assert isinstance(other, Operation)
            if node.operator is not other.operator or len(node.arguments) != len(other.arguments):
                raise NotUniform(
                    f"{where}: an expression over the ranks is built by a loop ({node.operator.value} with "
                    f"{len(node.arguments)} operands at {self.size} ranks, {len(other.arguments)} at {self.other})"
                )
        elif isinstance(node, Comprehension):
            assert isinstance(other, Comprehension)
            if node.quantifier is not other.quantifier:
                raise NotUniform(f"{where}: a comprehension differs between {self.size} and {self.other} ranks")
            self.sorts(node.variable.sort, other.variable.sort, where)
            self.renamed[node.variable.name] = other.variable.name
        elif isinstance(node, Bound):
            assert isinstance(other, Bound)
            if self.renamed.get(node.name) != other.name:
                raise NotUniform(f"{where}: the bound {node.name} at {self.size} ranks is {other.name} at {self.other}")
        elif isinstance(node, Variable):
            assert isinstance(other, Variable)
            if node.name != other.name:
                raise NotUniform(f"{where}: {node.name} at {self.size} ranks is {other.name} at {self.other}")
        for child, twin in zip(children(node), children(other), strict=True):
            self.expression(child, twin, where)

    def _constant(self, node: Constant, other: Constant, where: str) -> None:
        if isinstance(node.sort, MapSort) and isinstance(node.sort.key, IndexSort) and node.sort.key.name == self.rank:
            self.initial(node.sort, node.value, other.value, where)
            return
        expected = self.offsets.get(id(node))
        if expected is not None:
            if other.value != self.other + expected:
                raise NotUniform(f"{where}: the constant {node.value} is not N{expected:+d} at {self.other} ranks")
            return
        if node.value == other.value:
            return
        offset = None
        if isinstance(node.value, int) and isinstance(other.value, int) and not isinstance(node.value, bool):
            offset = self.follows(node.value, other.value)
        if offset is None or not self.record:
            raise NotUniform(
                f"{where}: the constant {node.value} at {self.size} ranks is {other.value} at {self.other}"
            )
        self.offsets[id(node)] = offset


# ------------------------------------------------------------------------------- the encoding
@dataclass(frozen=True)
class RankMap:
    """A map over ranks: one Z3 array (rank -> scalar) per scalar component of its values."""

    element: Sort
    leaves: tuple[Any, ...]

    def select(self, rank: Symbolic) -> Symbolic:
        return rebuild(self.element, iter([z3.Select(leaf, to_z3(rank)) for leaf in self.leaves]))

    def store(self, rank: Symbolic, value: Symbolic) -> RankMap:
        flat = list(flatten(self.element, value))
        return RankMap(
            self.element,
            tuple(z3.Store(leaf, to_z3(rank), to_z3(item)) for leaf, item in zip(self.leaves, flat, strict=True)),
        )


def rebuild(sort: Sort, scalars: Iterator[Any]) -> Symbolic:
    """A symbolic value of ``sort`` from its scalar components in ``flatten``'s order."""
    if isinstance(sort, RecordSort):
        return tuple(rebuild(field_sort, scalars) for _, field_sort in sort.fields)
    if isinstance(sort, MapSort):
        return tuple(rebuild(sort.value, scalars) for _ in sort.keys)
    if isinstance(sort, SequenceSort):
        length = next(scalars)
        return SymbolicSequence(length, tuple(rebuild(sort.element, scalars) for _ in range(sort.capacity)))
    return next(scalars)


def _z3_sort(sort: Sort) -> z3.SortRef:
    return z3.BoolSort() if isinstance(sort, BoolSort) else z3.IntSort()


@dataclass(frozen=True)
class FamilyStep:
    """One action with its non-rank arguments fixed: its rank arguments are free constants."""

    label: str
    action: int  # position in the template's actions
    arguments: Mapping[str, Value]  # the non-rank arguments
    ranks: Mapping[str, Any]  # the rank arguments' Z3 constants
    formula: Any


def instantiate(formula: Any, terms: Sequence[Any]) -> Any:
    """``formula`` with each universal quantifier over ranks in a positive position (under
    conjunctions, disjunctions and consequents) replaced by its instances at ``terms``: weaker than
    the formula, so a query that is unsat with the instances is unsat with the formula."""
    if z3.is_quantifier(formula) and formula.is_forall():
        count = formula.num_vars()
        instances = [
            instantiate(z3.substitute_vars(formula.body(), *reversed(chosen)), terms)
            for chosen in itertools.product(terms, repeat=count)
        ]
        return z3.And(*instances) if instances else z3.BoolVal(True)
    if z3.is_and(formula):
        return z3.And(*[instantiate(child, terms) for child in formula.children()])
    if z3.is_or(formula):
        return z3.Or(*[instantiate(child, terms) for child in formula.children()])
    if z3.is_implies(formula):
        antecedent, consequent = formula.children()
        return z3.Implies(antecedent, instantiate(consequent, terms))
    return formula


def negated(formula: Any, constants: list[Any], hint: str = "k") -> Any:
    """``not formula`` with its outer universal quantifiers made existential constants (appended
    to ``constants``): satisfiable exactly when ``not formula`` is."""
    if z3.is_quantifier(formula) and formula.is_forall():
        fresh = [
            z3.Const(f"{hint}!{len(constants) + position}", formula.var_sort(position))
            for position in range(formula.num_vars())
        ]
        constants.extend(fresh)
        return negated(z3.substitute_vars(formula.body(), *reversed(fresh)), constants, hint)
    if z3.is_implies(formula):
        antecedent, consequent = formula.children()
        return z3.And(antecedent, negated(consequent, constants, hint))
    if z3.is_and(formula):
        return z3.Or(*[negated(child, constants, hint) for child in formula.children()])
    if z3.is_or(formula):
        return z3.And(*[negated(child, constants, hint) for child in formula.children()])
    if z3.is_not(formula):
        return formula.children()[0]
    return z3.Not(formula)


class FamilyEncoding:
    """The template read for a symbolic rank count ``N`` (see the module doc)."""

    def __init__(self, family: Family, counting_proved: bool) -> None:
        self.family = family
        self.counting_proved = counting_proved  # the 0/1 fold lemma was proved: sums may be abstracted
        self.N = z3.Int(RANK_COUNT)
        self.rank = family.rank_sort
        self._fresh = itertools.count()
        self.sorts = {name: family.machine.variables[name].sort for name in family.variables}

    # -- ranks and sorts
    def is_rank(self, sort: Sort) -> bool:
        return isinstance(sort, IndexSort) and sort.name == self.rank.name

    def is_rank_map(self, sort: Sort) -> bool:
        return isinstance(sort, MapSort) and self.is_rank(sort.key)

    def in_range(self, rank: Any) -> z3.BoolRef:
        return z3.And(to_z3(rank) >= 0, to_z3(rank) < self.N)

    def fresh_rank(self, hint: str) -> z3.ArithRef:
        return z3.Int(f"{hint}!{next(self._fresh)}")

    def bound(self, value: int | None, twin: int | None) -> Any:
        """A sort bound: N + offset where it follows the rank count, else the constant."""
        if value is None or value == twin:
            return value
        return self.N + (value - PROBE)

    def in_sort(self, sort: Sort, twin: Sort, value: Symbolic) -> Symbolic:
        """``value`` lies in ``sort`` (``twin``: the same sort at PROBE + 1 ranks, for bounds that follow N)."""
        if isinstance(sort, BoolSort):
            return True
        if isinstance(sort, IndexSort) and self.is_rank(sort):
            return self.in_range(value)
        if isinstance(sort, (EnumSort, IndexSort)):
            return z3.And(to_z3(value) >= 0, to_z3(value) <= sort.size - 1)
        if isinstance(sort, IntSort):
            assert isinstance(twin, IntSort)
            parts = []
            low, high = self.bound(sort.low, twin.low), self.bound(sort.high, twin.high)
            if low is not None:
                parts.append(to_z3(value) >= low)
            if high is not None:
                parts.append(to_z3(value) <= high)
            return conjoin(parts)
        if isinstance(sort, MapSort) and self.is_rank(sort.key):
            assert isinstance(value, RankMap) and isinstance(twin, MapSort)
            rank = self.fresh_rank("r")
            return z3.ForAll(
                [rank], z3.Implies(self.in_range(rank), to_z3(self.in_sort(sort.value, twin.value, value.select(rank))))
            )
        if isinstance(sort, MapSort):
            assert isinstance(twin, MapSort)
            return conjoin([self.in_sort(sort.value, twin.value, item) for item in value])
        if isinstance(sort, RecordSort):
            assert isinstance(twin, RecordSort)
            return conjoin(
                [self.in_sort(s, t, item) for item, (_, s), (_, t) in zip(value, sort.fields, twin.fields, strict=True)]
            )
        if isinstance(sort, SequenceSort):
            assert isinstance(value, SymbolicSequence) and isinstance(twin, SequenceSort)
            default = lift_value(default_value(sort.element), sort.element)
            length = to_z3(value.length)
            parts = [length >= 0, length <= sort.capacity]
            for position, slot in enumerate(value.slots[: sort.capacity]):
                used = to_z3(position < length) if isinstance(length, int) else position < length
                parts.append(ite(used, self.in_sort(sort.element, twin.element, slot), equal(slot, default)))
            return conjoin(parts)
        raise NotUniform(f"no domain for sort {sort.name}")

    # -- states
    def state(self, label: str) -> dict[str, Symbolic]:
        return {name: self.declare(sort, f"{name}@{label}") for name, sort in self.sorts.items()}

    def declare(self, sort: Sort, name: str) -> Symbolic:
        if self.is_rank_map(sort):
            assert isinstance(sort, MapSort)
            leaves = tuple(
                z3.Array(f"{name}#{position}", z3.IntSort(), _z3_sort(leaf))
                for position, leaf in enumerate(scalar_sorts(sort.value))
            )
            return RankMap(sort.value, leaves)
        from lockstep.checkers.symbolic.values import declare as declare_value

        return declare_value(sort, name)

    def domain(self, state: Mapping[str, Symbolic]) -> Symbolic:
        return conjoin(
            [self.in_sort(self.sorts[name], self.family.sorts_next[name], value) for name, value in state.items()]
        )

    def initial(self, state: Mapping[str, Symbolic]) -> Symbolic:
        parts = []
        for name in self.sorts:
            variable = self.family.machine.variables[name]
            parts.append(self.equal(state[name], self.constant(variable.initial, variable.sort)))
        return conjoin(parts)

    def constant(self, value: Value, sort: Sort) -> Symbolic:
        if self.is_rank_map(sort):
            assert isinstance(sort, MapSort) and isinstance(value, tuple)
            element = lift_value(value[0], sort.value)
            return RankMap(
                sort.value,
                tuple(z3.K(z3.IntSort(), to_z3(item)) for item in flatten(sort.value, element)),
            )
        return lift_value(value, sort)

    def equal(self, left: Symbolic, right: Symbolic) -> Symbolic:
        if isinstance(left, RankMap) and isinstance(right, RankMap):
            return z3.And(*[a == b for a, b in zip(left.leaves, right.leaves, strict=True)]) if left.leaves else True
        return equal(left, right)

    # -- translation
    def translator(
        self, state: Mapping[str, Symbolic], parameters: Mapping[str, Symbolic] | None = None
    ) -> FamilyTranslator:
        return FamilyTranslator(self, state, parameters)

    def steps(self, state: Mapping[str, Symbolic], after: Mapping[str, Symbolic]) -> list[FamilyStep]:
        """Per action (and enumerated non-rank arguments): the formula of one step from ``state`` to
        ``after``, its rank parameters free constants in [0, N), with the counting facts it needs."""
        found = []
        for position, action in enumerate(self.family.machine.actions):
            ranks = [parameter for parameter in action.parameters if self.is_rank(parameter.sort)]
            others = [parameter for parameter in action.parameters if not self.is_rank(parameter.sort)]
            for values in itertools.product(*[list(parameter.sort.values()) for parameter in others]):
                rank_values = {
                    parameter.name: self.fresh_rank(f"{action.name}.{parameter.name}") for parameter in ranks
                }
                arguments: dict[str, Symbolic] = {**rank_values}
                arguments.update({p.name: lift_value(v, p.sort) for p, v in zip(others, values, strict=True)})
                translator = self.translator(state, arguments)
                guard = conjoin([translator.translate(conjunct) for conjunct in action.guard])
                updated = {name: translator.translate(value) for name, value in action.updates if name in self.sorts}
                frame = [self.equal(after[name], updated.get(name, state[name])) for name in self.sorts]
                body = conjoin(
                    [*(self.in_range(rank) for rank in rank_values.values()), guard, *frame, *translator.facts]
                )
                label = action.name + (f"({', '.join(str(v) for v in values)})" if values else "")
                found.append(
                    FamilyStep(label, position, dict(zip([p.name for p in others], values)), rank_values, to_z3(body))
                )
        return found

    def defined_steps(self, state: Mapping[str, Symbolic]) -> list[tuple[FamilyStep, list[Any]]]:
        """Per action: where its guard is defined, and where the guard holds its updates too (rank
        arguments free constants in [0, N)), with the counting facts its sums need."""
        found = []
        for position, action in enumerate(self.family.machine.actions):
            ranks = [parameter for parameter in action.parameters if self.is_rank(parameter.sort)]
            others = [parameter for parameter in action.parameters if not self.is_rank(parameter.sort)]
            for values in itertools.product(*[list(parameter.sort.values()) for parameter in others]):
                rank_values = {
                    parameter.name: self.fresh_rank(f"{action.name}.{parameter.name}") for parameter in ranks
                }
                arguments: dict[str, Symbolic] = {**rank_values}
                arguments.update({p.name: lift_value(v, p.sort) for p, v in zip(others, values, strict=True)})
                translator = self.translator(state, arguments)
                guard_defined: list[Any] = []
                holds: list[Symbolic] = []
                for conjunct in action.guard:
                    guard_defined.append(z3.Implies(to_z3(conjoin(holds)), to_z3(translator.defined(conjunct))))
                    holds.append(translator.translate(conjunct))
                updates_defined = [translator.defined(value) for name, value in action.updates if name in self.sorts]
                body = z3.And(*guard_defined, z3.Implies(to_z3(conjoin(holds)), to_z3(conjoin(updates_defined))))
                label = action.name + (f"({', '.join(str(v) for v in values)})" if values else "")
                step = FamilyStep(label, position, dict(zip([p.name for p in others], values)), rank_values, body)
                ranges = [self.in_range(rank) for rank in rank_values.values()]
                found.append((step, [*ranges, *(to_z3(fact) for fact in translator.facts)]))
        return found

    def predicate(self, expression: Expression, state: Mapping[str, Symbolic]) -> tuple[z3.BoolRef, list[Any]]:
        """A state predicate and the counting facts its sums need (to be assumed, never negated)."""
        translator = self.translator(state)
        value = to_z3(translator.translate(expression))
        return value, list(translator.facts)

    def defined(self, expression: Expression, state: Mapping[str, Symbolic]) -> tuple[z3.BoolRef, list[Any]]:
        translator = self.translator(state)
        value = to_z3(translator.defined(expression))
        return value, list(translator.facts)


class FamilyTranslator(Translator):
    """The IR read with a symbolic rank count (see the module doc); ``facts`` collects what the
    counting lemma says about each sum it abstracts."""

    def __init__(
        self, encoding: FamilyEncoding, variables: Mapping[str, Symbolic], parameters: Mapping[str, Symbolic] | None
    ) -> None:
        super().__init__(variables, parameters)
        self.encoding = encoding
        self.facts: list[Any] = []
        self._rank_bound = 0  # rank quantifiers open around the expression being translated
        self._sums: dict[tuple[int, tuple[tuple[str, Any], ...]], Any] = {}  # one integer per sum and binding

    def undefined(self, sort: Sort) -> Symbolic:
        if self.encoding.is_rank_map(sort):
            return self.encoding.declare(sort, f"undefined!{next(self.encoding._fresh)}")
        return super().undefined(sort)

    def translate(self, expression: Expression) -> Symbolic:
        encoding = self.encoding
        if isinstance(expression, Constant):
            offset = encoding.family.offsets.get(id(expression))
            if offset is not None:
                return encoding.N + offset
            if encoding.is_rank_map(expression.sort):
                return encoding.constant(expression.value, expression.sort)
        if isinstance(expression, Comprehension) and encoding.is_rank(expression.variable.sort):
            return self._rank_comprehension(expression)
        if isinstance(expression, Operation) and expression.arguments:
            special = self._rank_map_operation(expression)
            if special is not None:
                return special
        return super().translate(expression)

    def _rank_map_operation(self, expression: Operation) -> Symbolic | None:
        operator, arguments = expression.operator, expression.arguments
        encoding = self.encoding
        if operator in (Operator.SELECT, Operator.STORE) and encoding.is_rank_map(arguments[0].sort):
            container = self.translate(arguments[0])
            assert isinstance(container, RankMap)
            key = self.translate(arguments[1])
            if operator is Operator.SELECT:
                return container.select(key)
            return container.store(key, self.translate(arguments[2]))
        if operator in (Operator.EQUAL, Operator.NOT_EQUAL) and encoding.is_rank_map(arguments[0].sort):
            same = encoding.equal(self.translate(arguments[0]), self.translate(arguments[1]))
            return same if operator is Operator.EQUAL else z3.Not(to_z3(same))
        if operator is Operator.IF_THEN_ELSE and encoding.is_rank_map(expression.sort):
            condition = to_z3(self.translate(arguments[0]))
            then, otherwise = self.translate(arguments[1]), self.translate(arguments[2])
            assert isinstance(then, RankMap) and isinstance(otherwise, RankMap)
            return RankMap(
                then.element, tuple(z3.If(condition, a, b) for a, b in zip(then.leaves, otherwise.leaves, strict=True))
            )
        if operator is Operator.MAP and encoding.is_rank_map(expression.sort):
            raise NotUniform("a map over ranks written out per rank")
        return None

    def _with_rank(self, expression: Comprehension, hint: str) -> tuple[z3.ArithRef, Symbolic]:
        rank = self.encoding.fresh_rank(hint)
        name = expression.variable.name
        saved = self.bound.get(name)
        self.bound[name] = rank
        self._rank_bound += 1
        try:
            body = self.translate(expression.body)
        finally:
            self._rank_bound -= 1
            if saved is None:
                del self.bound[name]
            else:
                self.bound[name] = saved
        return rank, body

    def _rank_comprehension(self, expression: Comprehension) -> Symbolic:
        encoding, quantifier = self.encoding, expression.quantifier
        rank, body = self._with_rank(expression, expression.variable.name)
        in_range = encoding.in_range(rank)
        if quantifier is Quantifier.ALL:
            return z3.ForAll([rank], z3.Implies(in_range, to_z3(body)))
        if quantifier is Quantifier.ANY:
            return z3.Exists([rank], z3.And(in_range, to_z3(body)))
        if quantifier is Quantifier.MAP:
            element = expression.sort
            assert isinstance(element, MapSort)
            return RankMap(
                element.value, tuple(z3.Lambda([rank], to_z3(item)) for item in flatten(element.value, body))
            )
        free = {node.name for node in walk(expression.body) if isinstance(node, Bound)} - {expression.variable.name}
        if any(not isinstance(self.bound.get(name), int) for name in free):
            raise NotUniform(f"a {quantifier.value} over ranks that depends on another rank")
        key = (id(expression), tuple(sorted((name, self.bound[name]) for name in free)))
        if key in self._sums:
            return self._sums[key]
        result = z3.Int(f"{quantifier.value}!{next(encoding._fresh)}")
        self._sums[key] = result
        if quantifier in (Quantifier.MAXIMUM, Quantifier.MINIMUM):
            beyond = to_z3(body) <= result if quantifier is Quantifier.MAXIMUM else to_z3(body) >= result
            self.facts.append(z3.ForAll([rank], z3.Implies(in_range, beyond)))
            self.facts.append(z3.Exists([rank], z3.And(in_range, to_z3(body) == result)))
            return result
        if quantifier is Quantifier.COUNT:
            body = z3.If(to_z3(body), 1, 0)
        else:
            sort = expression.body.sort
            if not (isinstance(sort, IntSort) and sort.low == 0 and sort.high in (0, 1)):
                raise NotUniform(f"a sum over ranks of {sort.name} values (only 0/1 sums are abstracted)")
        if not encoding.counting_proved:
            raise NotUniform("a sum over ranks, and the counting lemma is not proved")
        value = to_z3(body)
        self.facts.extend(
            [
                result >= 0,
                result <= encoding.N,
                z3.Implies(result == 0, z3.ForAll([rank], z3.Implies(in_range, value == 0))),
                z3.Or(result == 0, z3.Exists([rank], z3.And(in_range, value != 0))),
                z3.Implies(result == encoding.N, z3.ForAll([rank], z3.Implies(in_range, value == 1))),
                z3.Or(result == encoding.N, z3.Exists([rank], z3.And(in_range, value != 1))),
            ]
        )
        return result

    def defined(self, expression: Expression) -> Symbolic:
        encoding = self.encoding
        if isinstance(expression, Comprehension) and encoding.is_rank(expression.variable.sort):
            rank = encoding.fresh_rank(expression.variable.name)
            name = expression.variable.name
            saved = self.bound.get(name)
            self.bound[name] = rank
            self._rank_bound += 1
            try:
                body = to_z3(self.defined(expression.body))
            finally:
                self._rank_bound -= 1
                if saved is None:
                    del self.bound[name]
                else:
                    self.bound[name] = saved
            return z3.ForAll([rank], z3.Implies(encoding.in_range(rank), body))
        if (
            isinstance(expression, Operation)
            and expression.operator in (Operator.SELECT, Operator.STORE)
            and encoding.is_rank_map(expression.arguments[0].sort)
        ):
            parts = [self.defined(argument) for argument in expression.arguments]
            parts.append(encoding.in_range(self.translate(expression.arguments[1])))
            return conjoin(parts)
        return super().defined(expression)
