"""``Machine``: state variables, guarded actions with parallel updates, properties, and monitors.

A machine is data. An action is a name, an actor, finite parameters, a guard and a map of
parallel updates (every unmentioned variable is unchanged); all nondeterminism lives in the
parameters. Properties are ``always`` invariants (optionally with a condition on states where
nothing is enabled), ``sometimes`` witnesses, and bounded responses, which become an ``always``
over a monitor counter that every action updates, so every engine checks them the same way.
``finish()`` freezes the machine and adds the built-in properties. The records it is made of are
in ``lockstep.spec.definitions`` and the monitors' counters in ``lockstep.spec.monitors`` (their
names are re-exported here).
"""

from __future__ import annotations

import enum
import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import replace

from lockstep.spec.actions import REBINDING, ActionDefinition, check_actor
from lockstep.spec.definitions import (
    IN_BOUNDS,
    NO_COLLECTIVE_MISMATCH,
    NO_DEADLOCK,
    NO_HANG,
    WELL_DEFINED,
    Action,
    DoubleWrite,
    Property,
    PropertyKind,
    Source,
    SourceLike,
    StateVariable,
    Step,
    Updates,
    double_write,
    sources_of,
)
from lockstep.spec.evaluation import Environment, evaluate
from lockstep.spec.expressions import Constant, Expression, Operation, Operator, Parameter, Variable, walk
from lockstep.spec.monitors import Response, monitor_update
from lockstep.spec.sorts import (
    BOOL,
    BoolSort,
    EnumSort,
    IndexSort,
    IntSort,
    MapSort,
    RecordSort,
    SequenceSort,
    Sort,
    Value,
    same_kind,
)
from lockstep.spec.terms import DefinitionError, Term, TermLike, lift


class Machine:
    """A protocol's transition system, built by a model module and frozen by ``finish()``."""

    def __init__(self, name: str, *, hang_bound: int | None = None) -> None:
        """``hang_bound``: the steps within which every posted collective op must complete (the
        ``no_hang`` property); a machine with communicators needs it."""
        if hang_bound is not None and (
            isinstance(hang_bound, bool) or not isinstance(hang_bound, int) or hang_bound < 1
        ):
            raise DefinitionError(f"machine {name}: hang_bound must be a positive integer, not {hang_bound!r}")
        self.name = name
        self.hang_bound = hang_bound
        self.variables: dict[str, StateVariable] = {}
        self.actions: list[Action] = []
        self.properties: list[Property] = []
        self.final: Expression = Constant(False, BOOL)
        self.final_declared = False  # set_final was called: without it every state with no enabled action deadlocks
        self.symmetric: list[tuple[IndexSort, frozenset[int]]] = []
        self.communicators: list[object] = []
        self.strengthening: list[Expression] = []  # invariants k-induction assumes (and proves)
        self._responses: list[Response] = []
        self._finished = False

    # ----------------------------------------------------------------------------------- definition
    def _open(self, what: str) -> None:
        if self._finished:
            raise DefinitionError(f"cannot add {what} to machine {self.name} after finish()")

    def variable(self, name: str, sort: Sort, initial: object, description: str = "") -> Term:
        """Declare a state variable and return the Term that reads it."""
        return self._declare(name, sort, initial, description, monitor=False)

    def _declare(self, name: str, sort: Sort, initial: object, description: str, monitor: bool) -> Term:
        self._open(f"variable {name!r}")
        if name in self.variables:
            raise DefinitionError(f"machine {self.name} already has a variable named {name!r}")
        if not sort.is_finite:
            raise DefinitionError(f"variable {name!r}: state variables need a finite sort, not {sort.name}")
        value = initial_value(sort, initial, f"variable {name!r}: initial value")
        self.variables[name] = StateVariable(name, sort, value, description, monitor)
        return Term(Variable(name, sort))

    def action(
        self, name: str | None = None, *, actor: str, description: str = "", mirrors: str = "", **parameters: Sort
    ) -> Callable[[Callable[..., Step]], Callable[..., Step]]:
        """Decorator: the function receives one Term per parameter and returns a ``Step``.
        ``mirrors`` names the source function(s) the action stands for (e.g.
        ``"DPEngineCoreProc.add_request"``); counterexamples show it with every step."""

        def register(function: Callable[..., Step]) -> Callable[..., Step]:
            self.add_action(
                name or function.__name__,
                function,
                actor=actor,
                description=description or inspect.cleandoc(function.__doc__ or ""),
                mirrors=mirrors,
                **parameters,
            )
            return function

        return register

    def add(
        self,
        definition: ActionDefinition[...],
        *context: object,
        name: str | None = None,
        actor: str | None = None,
        sorts: Mapping[str, Sort] | None = None,
        **parameters: Sort,
    ) -> Action:
        """Bind a module-level action (``lockstep.spec.actions.action``): ``context`` fills the
        function's leading arguments (the model's state, its variant), ``parameters`` give the sort of
        each remaining one (``sorts`` too, for names computed at build time, which a function taking
        ``**keywords`` receives in order). ``name`` and ``actor`` override the definition's. While an
        overlay builds the model (``REBINDING``), it may bind its own definition in place of this one,
        and its actions declared ``like`` this one after it, with the same context and sorts."""
        rebinding = REBINDING.get()
        if rebinding is not None:
            definition = rebinding.replacement(definition, context)
        function = functools.partial(definition.function, *context) if context else definition.function
        bound = self.add_action(
            name or definition.name,
            function,
            actor=actor or definition.actor,
            description=definition.description,
            mirrors=definition.mirrors,
            **{**(sorts or {}), **parameters},
        )
        for companion in rebinding.companions(name or definition.name) if rebinding is not None else ():
            self.add(companion, *context, sorts={**(sorts or {}), **parameters})
        return bound

    def add_action(
        self,
        name: str,
        function: Callable[..., Step],
        *,
        actor: str,
        description: str = "",
        mirrors: str = "",
        **parameters: Sort,
    ) -> Action:
        self._open(f"action {name!r}")
        if any(existing.name == name for existing in self.actions):
            raise DefinitionError(f"machine {self.name} already has an action named {name!r}")
        arguments = inspect.signature(function).parameters.values()
        signature = [argument.name for argument in arguments if argument.kind is not inspect.Parameter.VAR_KEYWORD]
        variadic = any(argument.kind is inspect.Parameter.VAR_KEYWORD for argument in arguments)
        matches = set(signature) <= set(parameters) if variadic else sorted(signature) == sorted(parameters)
        if not matches:
            raise DefinitionError(
                f"action {name!r}: the function's parameters are {signature} but sorts were given for "
                f"{list(parameters)}; give one sort per parameter after the context arguments, as in "
                f"machine.add({name}, state, {', '.join(f'{argument}=<its sort>' for argument in signature) or '...'})"
            )
        for parameter_name, sort in parameters.items():
            if not sort.is_finite:
                raise DefinitionError(f"action {name!r}: parameter {parameter_name!r} needs a finite sort")
        symbols = {parameter_name: Parameter(parameter_name, sort) for parameter_name, sort in parameters.items()}
        check_actor(actor, parameters, f"action {name!r}")
        try:
            step = function(**{parameter_name: Term(symbol) for parameter_name, symbol in symbols.items()})
        except DoubleWrite as error:  # raised where the step is built: the same place, with the action named
            raise DoubleWrite(f"action {name!r}: {error}").with_traceback(error.__traceback__) from None
        if not isinstance(step, Step):
            raise DefinitionError(f"action {name!r} must return Step(guard, updates), not {type(step).__name__}")
        guard = lift(step.guard)
        if not isinstance(guard.sort, BoolSort):
            raise DefinitionError(f"action {name!r}: the guard has sort {guard.sort.name}, not Bool")
        expression = guard.expression
        conjuncts: tuple[Expression, ...]
        if isinstance(expression, Operation) and expression.operator is Operator.AND:
            conjuncts = expression.arguments
        else:
            conjuncts = (expression,)
        updates: list[tuple[str, Expression]] = []
        written: dict[str, tuple[Term, TermLike]] = {}
        for target, value in step.updates.items():
            if not isinstance(target, Term) or not isinstance(target.expression, Variable):
                raise DefinitionError(f"action {name!r}: update targets must be state variables, got {target!r}")
            variable = self.variables.get(target.expression.name)
            if variable is None or variable.sort != target.sort:
                raise DefinitionError(f"action {name!r}: {target!r} is not a variable of machine {self.name}")
            if variable.name in written:  # two Terms of one variable, each a key of the mapping
                raise DoubleWrite(
                    f"action {name!r}: " + double_write(variable.name, written[variable.name], (target, value))
                )
            written[variable.name] = (target, value)
            value_term = lift(value, variable.sort)
            _check_assignable(name, variable, value_term)
            updates.append((variable.name, value_term.expression))
        for part in (*conjuncts, *(value for _, value in updates)):
            self._check_references(f"action {name!r}", part, set(parameters))
        action = Action(name, actor, tuple(symbols.values()), conjuncts, tuple(updates), description, mirrors)
        self.actions.append(action)
        return action

    def mirror(self, sources: Mapping[str, str]) -> None:
        """Name the source function(s) each action stands for, from a table ``{action: functions}``
        (the ``mirrors=`` of ``action``, for models that keep the mapping in one place)."""
        self._open("mirrored functions")
        known = {action.name for action in self.actions}
        unknown = sorted(set(sources) - known)
        if unknown:
            raise DefinitionError(f"mirror: {unknown} are not actions of machine {self.name}")
        self.actions = [replace(action, mirrors=sources.get(action.name, action.mirrors)) for action in self.actions]

    def _check_references(self, where: str, expression: Expression, parameters: set[str]) -> None:
        for node in walk(expression):
            if isinstance(node, Variable) and (
                node.name not in self.variables or self.variables[node.name].sort != node.sort
            ):
                raise DefinitionError(f"{where} reads {node.name!r}, which is not a variable of machine {self.name}")
            if isinstance(node, Parameter) and node.name not in parameters:
                raise DefinitionError(f"{where} uses parameter {node.name!r} of another action")

    def _add_property(self, prop: Property) -> None:
        self._open(f"property {prop.name!r}")
        if any(existing.name == prop.name for existing in self.properties):
            raise DefinitionError(f"machine {self.name} already has a property named {prop.name!r}")
        if not prop.builtin and prop.name in (IN_BOUNDS, WELL_DEFINED, NO_DEADLOCK, NO_COLLECTIVE_MISMATCH, NO_HANG):
            raise DefinitionError(
                f"property name {prop.name!r} is reserved for a built-in property; choose another name"
            )
        self._check_references(f"property {prop.name!r}", prop.predicate, set())
        self.properties.append(prop)

    def always(
        self,
        name: str,
        predicate: TermLike,
        description: str = "",
        *,
        at_deadlock: TermLike | None = None,
        source: SourceLike | None = None,
    ) -> None:
        """An invariant: ``predicate`` holds in every reachable state. ``source``: the vLLM line(s) that
        state it (``Source``); no check reads them."""
        term = _boolean(predicate, f"property {name!r}")
        deadlock = None if at_deadlock is None else _boolean(at_deadlock, f"property {name!r}").expression
        cited = sources_of(source, f"property {name!r}")
        self._add_property(Property(name, PropertyKind.ALWAYS, term.expression, description, deadlock, sources=cited))

    def sometimes(
        self, name: str, predicate: TermLike, description: str = "", *, source: SourceLike | None = None
    ) -> None:
        """A witness: some reachable state satisfies ``predicate`` (catches vacuous models)."""
        term = _boolean(predicate, f"property {name!r}")
        cited = sources_of(source, f"property {name!r}")
        self._add_property(Property(name, PropertyKind.SOMETIMES, term.expression, description, sources=cited))

    def leads_to(
        self,
        name: str,
        trigger: TermLike,
        response: TermLike,
        description: str = "",
        *,
        fair: tuple[str, ...] | None = None,
        source: SourceLike | None = None,
    ) -> None:
        """Liveness: every time ``trigger`` holds, ``response`` holds then or later, on every run in
        which the ``fair`` actions (default: all) are weakly fair: an action instance (an action
        with its arguments) that stays enabled forever is eventually taken. A violation is a lasso:
        a path to a cycle (or a dead end) along which the response never comes. Checked by the
        explicit engines over the whole state graph; the Z3 engines report it inconclusive."""
        condition = _boolean(trigger, f"property {name!r}")
        term = _boolean(response, f"property {name!r}")
        self._check_references(f"property {name!r}", condition.expression, set())
        self._add_property(
            Property(
                name,
                PropertyKind.LEADS_TO,
                term.expression,
                description,
                trigger=condition.expression,
                fair=fair,
                sources=sources_of(source, f"property {name!r}"),
            )
        )

    def respond_within(
        self,
        name: str,
        trigger: TermLike,
        response: TermLike,
        bound: int,
        description: str = "",
        *,
        response_actions: tuple[str, ...] = (),
        at_deadlock: TermLike | None = None,
        source: SourceLike | None = None,
    ) -> None:
        """Bounded response: once ``trigger`` holds, ``response`` holds (or one of ``response_actions``
        fires) within ``bound`` steps: in the state ``bound`` steps after the trigger it must hold.
        Checked through a monitor counter added to the state."""
        counter = self.monitor(name, trigger, response, bound, response_actions=response_actions)
        deadlock = None if at_deadlock is None else _boolean(at_deadlock, f"property {name!r}").expression
        self._add_property(
            Property(
                name,
                PropertyKind.ALWAYS,
                (counter < bound).expression,
                description or f"within {bound} steps",
                deadlock,
                sources=sources_of(source, f"property {name!r}"),
            )
        )

    def monitor(
        self, name: str, trigger: TermLike, response: TermLike, bound: int, *, response_actions: tuple[str, ...] = ()
    ) -> Term:
        """A counter of the steps since ``trigger`` began to hold without ``response`` (-1: none
        pending; saturates at ``bound``, where the property ``counter < bound`` fails). Every action
        updates it; it is part of the state."""
        if bound < 0:
            raise DefinitionError(f"monitor {name!r}: the bound must be non-negative, got {bound}")
        counter = self._declare(f"monitor.{name}", IntSort(-1, bound), -1, f"steps since {name} was triggered", True)
        self._responses.append(
            Response(
                name,
                _boolean(trigger, f"monitor {name!r}"),
                _boolean(response, f"monitor {name!r}"),
                bound,
                frozenset(response_actions),
                counter,
            )
        )
        return counter

    def cite(self, sources: Mapping[str, SourceLike]) -> None:
        """Name the vLLM line(s) each property comes from, from a table ``{property: Source or sources}``
        (the ``source=`` of a declaration, for models that keep the table in one place); a table entry
        replaces what the declaration gave. One table serves every variant and instance of a model, so
        an entry for a property this machine does not declare is passed over (a misspelt name leaves
        its property without a source, which the models' tests refuse)."""
        self._open("property sources")
        cited = {name: sources_of(given, f"property {name!r}") for name, given in sources.items()}
        self.properties = [
            replace(prop, sources=cited[prop.name]) if prop.name in cited else prop for prop in self.properties
        ]

    def add_builtin(self, prop: Property) -> None:
        """Used by libraries on top of the language (collectives) to add their built-in properties."""
        self._add_property(prop)

    def strengthen(self, predicate: TermLike) -> None:
        """A strengthening invariant for k-induction: assumed in the first k states of a step and
        proved in the last, together with the property (so a wrong one cannot prove anything)."""
        self._open("a strengthening invariant")
        term = _boolean(predicate, "strengthening invariant")
        self._check_references("a strengthening invariant", term.expression, set())
        self.strengthening.append(term.expression)

    def set_final(self, predicate: TermLike) -> None:
        """States where the protocol has legitimately ended: no enabled action there is no deadlock."""
        self._open("a final predicate")
        self.final = _boolean(predicate, "final").expression
        self.final_declared = True

    def declare_symmetric(self, sort: IndexSort, members: tuple[int, ...] | None = None) -> None:
        """Declare ``sort`` (or a subset of its values) interchangeable, for symmetry reduction."""
        self._open("a symmetry")
        chosen = frozenset(range(sort.count) if members is None else members)
        if not chosen <= set(range(sort.count)) or len(chosen) < 2:
            raise DefinitionError(
                f"symmetry over {sort.name}: members {sorted(chosen)} must be at least two values of the sort"
            )
        self.symmetric.append((sort, chosen))

    # ------------------------------------------------------------------------------------- freezing
    def finish(self) -> Machine:
        """Add monitor updates and built-in properties; afterwards the machine is read-only."""
        if self._finished:
            return self
        for library in self.communicators:
            finish = getattr(library, "before_finish", None)
            if finish is not None:
                finish()
        known = {action.name for action in self.actions}
        for prop in self.properties:
            unknown = sorted(set(prop.fair or ()) - known)
            if unknown:
                raise DefinitionError(f"property {prop.name!r}: fair actions {unknown} are not actions of {self.name}")
        self._add_monitor_updates()
        self.properties.insert(
            0,
            Property(
                IN_BOUNDS, PropertyKind.ALWAYS, Constant(True, BOOL), "every update stays inside its sort", builtin=True
            ),
        )
        self.properties.insert(
            1,
            Property(
                WELL_DEFINED,
                PropertyKind.ALWAYS,
                Constant(True, BOOL),
                "every division, index and tail in a guard, update or property is defined",
                builtin=True,
            ),
        )
        self.properties.append(
            Property(
                NO_DEADLOCK,
                PropertyKind.ALWAYS,
                Constant(True, BOOL),
                "a state with no enabled action is final"
                + (
                    ""
                    if self.final_declared
                    else f" ({self.name} declares no final state: declare legitimate ends with machine.set_final(...))"
                ),
                self.final,
                builtin=True,
            )
        )
        self._finished = True
        return self

    def _add_monitor_updates(self) -> None:
        if not self._responses:
            return
        rebuilt: list[Action] = []
        for action in self.actions:
            post = dict(action.updates)
            extra: list[tuple[str, Expression]] = []
            for response in self._responses:
                extra.append((f"monitor.{response.name}", monitor_update(response, action.name, post)))
            rebuilt.append(replace(action, updates=action.updates + tuple(extra)))
        self.actions = rebuilt
        initial = self.initial_state()
        for response in self._responses:
            name = f"monitor.{response.name}"
            environment = Environment(initial)
            value = (
                -1
                if evaluate(response.response.expression, environment)
                else (0 if evaluate(response.trigger.expression, environment) else -1)
            )
            self.variables[name] = StateVariable(
                name, self.variables[name].sort, value, self.variables[name].description, True
            )

    # ------------------------------------------------------------------------------------- querying
    @property
    def finished(self) -> bool:
        return self._finished

    def initial_state(self) -> dict[str, Value]:
        return {name: variable.initial for name, variable in self.variables.items()}

    def property_named(self, name: str) -> Property:
        for prop in self.properties:
            if prop.name == name:
                return prop
        raise KeyError(name)

    def action_named(self, name: str) -> Action:
        for action in self.actions:
            if action.name == name:
                return action
        raise KeyError(name)


def initial_value(sort: Sort, initial: object, where: str) -> Value:
    """``initial`` as a value of ``sort``: enum members as ``Phase.READY``, ``"READY"`` or a Python
    ``enum.Enum`` member of that name; maps and sequences as tuples or lists of such values (a map in
    key order, or a dict by key), records as tuples in field order or dicts by field name.
    Anything else is a ``DefinitionError`` that says how to write a value of the sort."""
    if isinstance(initial, Term):
        if not isinstance(initial.expression, Constant) or not same_kind(initial.sort, sort):
            raise DefinitionError(f"{where} {initial!r} is not a constant of {sort.name}; {how_to_write(sort)}")
        initial = initial.expression.value
    elif isinstance(initial, enum.Enum) and isinstance(sort, EnumSort):
        initial = initial.name
    if isinstance(sort, EnumSort) and isinstance(initial, str):
        if initial not in sort.members:
            raise DefinitionError(f"{where} {initial!r} is not a member of {sort.name}; {how_to_write(sort)}")
        return sort.members.index(initial)
    if isinstance(sort, MapSort) and isinstance(initial, (tuple, list, dict)):
        keys = sort.keys
        if isinstance(initial, dict):
            by_key = {sort.key.render(key): key for key in keys}
            items = {by_key.get(str(key), key): item for key, item in initial.items()}
            if set(items) != set(keys):
                raise DefinitionError(f"{where} {initial!r} must give every key of {sort.name}; {how_to_write(sort)}")
            initial = [items[key] for key in keys]
        if len(initial) != len(keys):
            raise DefinitionError(
                f"{where} {initial!r} has {len(initial)} entries, not one per key of {sort.name} ({len(keys)}); "
                f"{how_to_write(sort)}"
            )
        return tuple(
            initial_value(sort.value, item, f"{where}[{sort.key.render(key)}]") for key, item in zip(keys, initial)
        )
    if isinstance(sort, SequenceSort) and isinstance(initial, (tuple, list)):
        return tuple(initial_value(sort.element, item, f"{where}[{index}]") for index, item in enumerate(initial))
    if isinstance(sort, RecordSort) and isinstance(initial, (tuple, list, dict)):
        names = [field for field, _ in sort.fields]
        if isinstance(initial, dict):
            if set(initial) != set(names):
                raise DefinitionError(f"{where} {initial!r} must give every field of {sort.name}; {how_to_write(sort)}")
            initial = [initial[field] for field in names]
        if len(initial) == len(names):
            return tuple(
                initial_value(field_sort, item, f"{where}.{field}")
                for (field, field_sort), item in zip(sort.fields, initial)
            )
    if not sort.contains(initial):
        raise DefinitionError(f"{where} {initial!r} is not a value of {sort.name}; {how_to_write(sort)}")
    return initial


def how_to_write(sort: Sort) -> str:
    """How a model writes a value of ``sort`` (in an initial value), for a message."""
    if isinstance(sort, EnumSort):
        member = sort.members[0]
        return f"write a member as {sort.name}.{member} or {member!r} (members: {', '.join(sort.members)})"
    if isinstance(sort, BoolSort):
        return "write True or False"
    if isinstance(sort, (IntSort, IndexSort)):
        low, high = (0, sort.count - 1) if isinstance(sort, IndexSort) else (sort.low, sort.high)
        return f"write an integer from {low} to {high}"
    if isinstance(sort, MapSort):
        count = len(sort.keys)
        return (
            f"write a tuple of one {sort.value.name} per key of {sort.key.name} in key order ({count} entries, e.g. "
            f"(value,) * {count}) or a dict by key; each entry: {how_to_write(sort.value)}"
        )
    if isinstance(sort, SequenceSort):
        return f"write a tuple of at most {sort.capacity} elements, front first; each: {how_to_write(sort.element)}"
    if isinstance(sort, RecordSort):
        return f"write a tuple in field order ({', '.join(name for name, _ in sort.fields)}) or a dict by field name"
    return f"write a value of {sort.name}"


def _boolean(value: TermLike, where: str) -> Term:
    term = lift(value)
    if not isinstance(term.sort, BoolSort):
        raise DefinitionError(f"{where}: the predicate has sort {term.sort.name}, not Bool")
    return term


def _check_assignable(action: str, variable: StateVariable, value: Term) -> None:
    if not same_kind(value.sort, variable.sort):
        raise DefinitionError(
            f"action {action!r}: cannot assign a value of sort {value.sort.name} to {variable.name!r} of sort "
            f"{variable.sort.name}"
        )


__all__ = [
    "IN_BOUNDS",
    "WELL_DEFINED",
    "NO_COLLECTIVE_MISMATCH",
    "NO_DEADLOCK",
    "NO_HANG",
    "Action",
    "Machine",
    "Property",
    "PropertyKind",
    "Source",
    "StateVariable",
    "Step",
    "Updates",
]
