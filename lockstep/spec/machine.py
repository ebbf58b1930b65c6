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

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import replace

from lockstep.spec.actions import REBINDING, ActionDefinition
from lockstep.spec.definitions import (
    IN_BOUNDS,
    NO_COLLECTIVE_MISMATCH,
    NO_DEADLOCK,
    NO_HANG,
    Action,
    Property,
    PropertyKind,
    StateVariable,
    Step,
)
from lockstep.spec.evaluation import Environment, evaluate
from lockstep.spec.expressions import Constant, Expression, Operation, Operator, Parameter, Variable, walk
from lockstep.spec.monitors import Response, monitor_update
from lockstep.spec.sorts import BOOL, BoolSort, IndexSort, IntSort, Sort, Value
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
        value = initial
        if isinstance(initial, Term) and isinstance(initial.expression, Constant):
            value = initial.expression.value
        if isinstance(value, str):
            literal = lift(value, sort).expression
            value = literal.value if isinstance(literal, Constant) else value
        if not sort.contains(value):
            raise DefinitionError(f"variable {name!r}: initial value {value!r} is not a value of {sort.name}")
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
                f"action {name!r}: the function takes {signature} but the parameters declared are "
                f"{list(parameters)}; declare one sort per function argument, e.g. @machine.action(actor=..., "
                f"rank=Rank)"
            )
        for parameter_name, sort in parameters.items():
            if not sort.is_finite:
                raise DefinitionError(f"action {name!r}: parameter {parameter_name!r} needs a finite sort")
        symbols = {parameter_name: Parameter(parameter_name, sort) for parameter_name, sort in parameters.items()}
        try:
            actor.format(**{parameter_name: "" for parameter_name in parameters})
        except (KeyError, IndexError) as error:
            raise DefinitionError(
                f"action {name!r}: actor template {actor!r} names an unknown parameter {error}"
            ) from None
        step = function(**{parameter_name: Term(symbol) for parameter_name, symbol in symbols.items()})
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
        for target, value in step.updates.items():
            if not isinstance(target, Term) or not isinstance(target.expression, Variable):
                raise DefinitionError(f"action {name!r}: update targets must be state variables, got {target!r}")
            variable = self.variables.get(target.expression.name)
            if variable is None or variable.sort != target.sort:
                raise DefinitionError(f"action {name!r}: {target!r} is not a variable of machine {self.name}")
            if any(updated == variable.name for updated, _ in updates):
                raise DefinitionError(
                    f"action {name!r} updates {variable.name!r} twice; merge the two updates into one"
                )
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
        if not prop.builtin and prop.name in (IN_BOUNDS, NO_DEADLOCK, NO_COLLECTIVE_MISMATCH, NO_HANG):
            raise DefinitionError(
                f"property name {prop.name!r} is reserved for a built-in property; choose another name"
            )
        self._check_references(f"property {prop.name!r}", prop.predicate, set())
        self.properties.append(prop)

    def always(
        self, name: str, predicate: TermLike, description: str = "", *, at_deadlock: TermLike | None = None
    ) -> None:
        """An invariant: ``predicate`` holds in every reachable state."""
        term = _boolean(predicate, f"property {name!r}")
        deadlock = None if at_deadlock is None else _boolean(at_deadlock, f"property {name!r}").expression
        self._add_property(Property(name, PropertyKind.ALWAYS, term.expression, description, deadlock))

    def sometimes(self, name: str, predicate: TermLike, description: str = "") -> None:
        """A witness: some reachable state satisfies ``predicate`` (catches vacuous models)."""
        term = _boolean(predicate, f"property {name!r}")
        self._add_property(Property(name, PropertyKind.SOMETIMES, term.expression, description))

    def leads_to(
        self,
        name: str,
        trigger: TermLike,
        response: TermLike,
        description: str = "",
        *,
        fair: tuple[str, ...] | None = None,
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
            Property(name, PropertyKind.LEADS_TO, term.expression, description, trigger=condition.expression, fair=fair)
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
        self.properties.append(
            Property(
                NO_DEADLOCK,
                PropertyKind.ALWAYS,
                Constant(True, BOOL),
                "a state with no enabled action is final",
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


def _boolean(value: TermLike, where: str) -> Term:
    term = lift(value)
    if not isinstance(term.sort, BoolSort):
        raise DefinitionError(f"{where}: the predicate has sort {term.sort.name}, not Bool")
    return term


def _check_assignable(action: str, variable: StateVariable, value: Term) -> None:
    from lockstep.spec.sorts import same_kind

    if not same_kind(value.sort, variable.sort):
        raise DefinitionError(
            f"action {action!r}: cannot assign a value of sort {value.sort.name} to {variable.name!r} of sort "
            f"{variable.sort.name}"
        )


__all__ = [
    "IN_BOUNDS",
    "NO_COLLECTIVE_MISMATCH",
    "NO_DEADLOCK",
    "NO_HANG",
    "Action",
    "Machine",
    "Property",
    "PropertyKind",
    "StateVariable",
    "Step",
]
