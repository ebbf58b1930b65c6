"""Compiles a finished ``Machine`` to generated Python functions: the fast ``TransitionSystem``.

Each action becomes one function ``transitions(s)`` whose nested loops enumerate the parameters;
each guard conjunct is hoisted to the outermost loop where all the parameters it reads are bound,
so a false conjunct prunes whole sub-loops. Updates read the pre-state tuple ``s``; unmentioned
variables are copied. A value that may leave its sort is checked and flagged (``in_bounds``).
The result must agree with ``InterpretedSystem`` exactly (tests/test_compiler.py checks it).
"""

from __future__ import annotations

from collections.abc import Callable

from lockstep.spec.evaluation import EvaluationError, element_at, select, store, tail
from lockstep.spec.expressions import (
    Bound,
    Comprehension,
    Constant,
    Expression,
    Operation,
    Operator,
    Parameter,
    Quantifier,
    Variable,
    walk,
)
from lockstep.spec.machine import Action, Machine
from lockstep.spec.semantics import ModelError, State, Transition, pack
from lockstep.spec.sorts import BoolSort, EnumSort, IndexSort, IntSort, MapSort, RecordSort, SequenceSort, Sort

_BINARY = {
    Operator.EQUAL: "==",
    Operator.NOT_EQUAL: "!=",
    Operator.LESS: "<",
    Operator.LESS_EQUAL: "<=",
    Operator.GREATER: ">",
    Operator.GREATER_EQUAL: ">=",
    Operator.ADD: "+",
    Operator.SUBTRACT: "-",
    Operator.MULTIPLY: "*",
    Operator.FLOOR_DIVIDE: "//",
    Operator.MODULO: "%",
}


# A compiled successor fails as the evaluator does (an EvaluationError from the shared bounds checks),
# or with the IndexError of a constant position read directly, or an arithmetic error.
_FAILURES = (EvaluationError, IndexError, ZeroDivisionError, TypeError)


class _Emitter:
    """Turns expressions into Python source over the state tuple ``s``."""

    UNROLL_LIMIT = 8  # comprehensions over at most this many scalar values are unrolled inline

    def __init__(self, index: dict[str, int]) -> None:
        self.index = index
        self.constants: dict[str, object] = {}
        self.bound: dict[str, str] = {}  # bound variables replaced by literals while unrolling

    def constant(self, value: object) -> str:
        if isinstance(value, (bool, int)):
            return repr(value)
        name = f"k{len(self.constants)}"
        self.constants[name] = value
        return name

    def source(self, expression: Expression) -> str:  # noqa: C901 - one branch per node kind
        if isinstance(expression, Constant):
            return self.constant(expression.value)
        if isinstance(expression, Variable):
            return f"s[{self.index[expression.name]}]"
        if isinstance(expression, Parameter):
            return f"p_{expression.name}"
        if isinstance(expression, Bound):
            return self.bound.get(expression.name, f"b{expression.name}")
        if isinstance(expression, Comprehension):
            unrolled = self._unrolled(expression)
            if unrolled is not None:
                return unrolled
            variable = expression.variable
            body = self.source(expression.body)
            if isinstance(variable.sort, (EnumSort, IndexSort)):
                domain = f"range({variable.sort.size})"
            else:  # Bool, bounded integers, composite sorts: their values in the evaluator's order
                domain = self.constant(tuple(variable.sort.values()))
            generator = f"({body} for b{variable.name} in {domain})"
            match expression.quantifier:
                case Quantifier.ALL:
                    return f"all{generator}"
                case Quantifier.ANY:
                    return f"any{generator}"
                case Quantifier.SUM:
                    return f"sum{generator}"
                case Quantifier.COUNT:
                    return f"sum(1 for b{variable.name} in {domain} if {body})"
                case Quantifier.MAXIMUM:
                    return f"max{generator}"
                case Quantifier.MINIMUM:
                    return f"min{generator}"
                case Quantifier.MAP:
                    return f"tuple{generator}"
        assert isinstance(expression, Operation)
        return self._operation(expression)

    def _unrolled(self, expression: Comprehension) -> str | None:
        """The comprehension written out value by value (no generator), for small scalar domains."""
        variable = expression.variable
        if not isinstance(variable.sort, (EnumSort, IndexSort, IntSort, BoolSort)):
            return None
        values = list(variable.sort.values())
        if len(values) > self.UNROLL_LIMIT:
            return None
        bodies = []
        for value in values:
            self.bound[variable.name] = repr(value)
            bodies.append(self.source(expression.body))
        del self.bound[variable.name]
        match expression.quantifier:
            case Quantifier.ALL:
                return "(" + " and ".join(bodies) + ")"  # Bool-sorted bodies evaluate to bools
            case Quantifier.ANY:
                return "(" + " or ".join(bodies) + ")"
            case Quantifier.SUM:
                return "(" + " + ".join(bodies) + ")"
            case Quantifier.COUNT:
                return "(" + " + ".join(f"(1 if {body} else 0)" for body in bodies) + ")"
            case Quantifier.MAXIMUM:
                return f"max({', '.join(bodies)})" if len(bodies) > 1 else f"({bodies[0]})"
            case Quantifier.MINIMUM:
                return f"min({', '.join(bodies)})" if len(bodies) > 1 else f"({bodies[0]})"
            case Quantifier.MAP:
                return "(" + "".join(f"{body}, " for body in bodies) + ")"
        return None  # pragma: no cover - every quantifier is handled above

    def _operation(self, expression: Operation) -> str:  # noqa: C901 - one branch per operator
        operator = expression.operator
        parts = [self.source(argument) for argument in expression.arguments]
        if operator in _BINARY:
            return f"({parts[0]} {_BINARY[operator]} {parts[1]})"
        match operator:
            case Operator.NOT:
                return f"(not {parts[0]})"
            case Operator.AND:
                return "(" + " and ".join(parts) + ")"
            case Operator.OR:
                return "(" + " or ".join(parts) + ")"
            case Operator.IMPLIES:
                return f"((not {parts[0]}) or {parts[1]})"
            case Operator.NEGATE:
                return f"(-{parts[0]})"
            case Operator.MINIMUM:
                return f"min({', '.join(parts)})" if len(parts) > 1 else f"({parts[0]})"
            case Operator.MAXIMUM:
                return f"max({', '.join(parts)})" if len(parts) > 1 else f"({parts[0]})"
            case Operator.IF_THEN_ELSE:
                return f"({parts[1]} if {parts[0]} else {parts[2]})"
            case Operator.SELECT:
                container = expression.arguments[0].sort
                if isinstance(container, MapSort) and stays_in_sort(expression.arguments[1], container.key):
                    return f"{parts[0]}[{parts[1]}]"
                return f"_select({parts[0]}, {parts[1]})"  # a key that may be outside the map
            case Operator.STORE | Operator.WITH_FIELD:
                return f"_store({parts[0]}, {parts[1]}, {parts[2]})"
            case Operator.LENGTH:
                return f"len({parts[0]})"
            case Operator.AT:
                position = expression.arguments[1]
                if isinstance(position, Constant) and isinstance(position.value, int) and position.value >= 0:
                    return f"{parts[0]}[{position.value}]"  # raises IndexError when out of range, like _at
                return f"_at({parts[0]}, {parts[1]})"
            case Operator.APPEND:
                return f"({parts[0]} + ({parts[1]},))"
            case Operator.TAIL:
                return f"_tail({parts[0]})"
            case Operator.FIELD:
                return f"{parts[0]}[{parts[1]}]"
            case Operator.RECORD | Operator.SEQUENCE | Operator.MAP:
                return "(" + "".join(f"{part}, " for part in parts) + ")"
        raise ModelError(f"the compiler does not know operator {operator}")  # pragma: no cover


def stays_in_sort(expression: Expression, sort: Sort) -> bool:
    """A cheap static proof that ``expression`` always yields a value of ``sort``.

    Values of Bool and enum sorts only arise from in-sort sources (constants are checked when
    built, state values when stored, and arithmetic yields the unbounded ``INTEGER``), so an
    expression of exactly that sort stays in it. Index sorts mix with integers (a map of ranks may
    store ``rank + 1``), so an index-sorted expression is proved structurally like the others.
    Anything not proved here is checked at run time.
    """
    if isinstance(sort, (BoolSort, EnumSort)):
        return expression.sort == sort or (isinstance(sort, BoolSort) and isinstance(expression.sort, BoolSort))
    if isinstance(sort, IndexSort) and expression.sort != sort:
        return False
    if isinstance(expression, Constant):
        return sort.contains(expression.value)
    if isinstance(expression, (Variable, Parameter, Bound)):
        return expression.sort == sort
    if isinstance(expression, Comprehension):
        return (
            expression.quantifier is Quantifier.MAP
            and isinstance(sort, MapSort)
            and expression.variable.sort == sort.key
            and stays_in_sort(expression.body, sort.value)
        )
    operator, arguments = expression.operator, expression.arguments
    if operator is Operator.IF_THEN_ELSE:
        return stays_in_sort(arguments[1], sort) and stays_in_sort(arguments[2], sort)
    if operator is Operator.STORE and isinstance(sort, MapSort):
        return (
            stays_in_sort(arguments[0], sort)
            and stays_in_sort(arguments[1], sort.key)
            and stays_in_sort(arguments[2], sort.value)
        )
    if operator is Operator.SELECT:
        container = arguments[0].sort
        return isinstance(container, MapSort) and container.value == sort and stays_in_sort(arguments[0], container)
    if operator is Operator.TAIL:
        return stays_in_sort(arguments[0], sort)
    if isinstance(sort, RecordSort) and operator is Operator.WITH_FIELD:
        position = arguments[1]
        assert isinstance(position, Constant) and isinstance(position.value, int)
        return stays_in_sort(arguments[0], sort) and stays_in_sort(arguments[2], sort.fields[position.value][1])
    if isinstance(sort, RecordSort) and operator is Operator.RECORD:
        return all(stays_in_sort(argument, field_sort) for argument, (_, field_sort) in zip(arguments, sort.fields))
    return False


class CompiledSystem:
    """A ``TransitionSystem`` whose actions and properties are generated Python functions."""

    def __init__(self, machine: Machine) -> None:
        if not machine.finished:
            machine.finish()
        self.machine = machine
        self.names = tuple(machine.variables)
        index = {name: position for position, name in enumerate(self.names)}
        self._emitter = _Emitter(index)
        self.source_code: list[str] = []
        self._transitions = [self._compile_action(position, action) for position, action in enumerate(machine.actions)]
        self._all_transitions = self._compile_all_actions()
        self._property_values = self._compile_properties()
        self._properties = [self._compile_predicate(prop.predicate) for prop in machine.properties]
        self._deadlock = [
            None if prop.at_deadlock is None else self._compile_predicate(prop.at_deadlock)
            for prop in machine.properties
        ]
        self._final = self._compile_predicate(machine.final)

    def _namespace(self) -> dict[str, object]:
        return {
            "_store": store,
            "_select": select,
            "_at": element_at,
            "_tail": tail,
            "Transition": Transition,
            **self._emitter.constants,
        }

    def _compile_predicate(self, expression: Expression) -> Callable[[State], bool]:
        source = f"def predicate(s):\n    return bool({self._emitter.source(expression)})\n"
        self.source_code.append(source)
        namespace = self._namespace()
        exec(compile(source, "<lockstep-predicate>", "exec"), namespace)  # noqa: S102 - our own generated code
        return namespace["predicate"]  # type: ignore[return-value]

    def _action_block(self, position: int, action: Action, indent: str, on_false: str) -> list[str]:
        """Source lines enumerating ``action``'s parameters and appending its transitions to ``result``.

        ``on_false`` is what a false parameter-free conjunct does: ``return result`` in a function of
        its own, or skipping the block (a ``while`` that runs once, left by ``break``) when fused."""
        emitter = self._emitter
        parameter_names = [parameter.name for parameter in action.parameters]
        # Hoist each conjunct to the loop depth where its last parameter is bound.
        levels: list[list[str]] = [[] for _ in range(len(parameter_names) + 1)]
        for conjunct in action.guard:
            used = {node.name for node in walk(conjunct) if isinstance(node, Parameter)}
            depth = max((parameter_names.index(name) + 1 for name in used), default=0)
            levels[depth].append(emitter.source(conjunct))
        lines = [f"{indent}if not {condition}: {on_false}" for condition in levels[0]]
        for depth, parameter in enumerate(action.parameters, start=1):
            domain = tuple(parameter.sort.values())
            lines.append(f"{indent}for p_{parameter.name} in {domain!r}:")
            indent += "    "
            lines.extend(f"{indent}if not {condition}: continue" for condition in levels[depth])
        target = [f"s[{i}]" for i in range(len(self.names))]
        checks: list[str] = []
        for name, expression in action.updates:
            slot = self.names.index(name)
            lines.append(f"{indent}v{slot} = {emitter.source(expression)}")
            target[slot] = f"v{slot}"
            check = self._check_source(expression, self.machine.variables[name].sort, f"v{slot}")
            if check is not None:
                checks.append(f"(None if {check} else {name!r})")
        out_of_bounds = "None" if not checks else " or ".join(checks)
        arguments = "(" + "".join(f"p_{name}, " for name in parameter_names) + ")"
        lines.append(
            f"{indent}result.append(Transition({position}, {arguments}, ({', '.join(target)},), {out_of_bounds}))"
        )
        return lines

    def _check_source(self, expression: Expression, sort: Sort, value: str) -> str | None:
        """Code that is true when ``value`` (the result of ``expression``) lies in ``sort``; None when
        that is proved statically. A store or append checks only what it changed."""
        if stays_in_sort(expression, sort):
            return None
        emitter = self._emitter
        if isinstance(expression, Operation):
            operator, arguments = expression.operator, expression.arguments
            if (
                operator is Operator.STORE
                and isinstance(sort, MapSort)
                and stays_in_sort(arguments[0], sort)
                and arguments[1].sort == sort.key
                and isinstance(sort.key, (EnumSort, IndexSort, BoolSort))
            ):
                return self._check_source(arguments[2], sort.value, f"{value}[{emitter.source(arguments[1])}]")
            if (
                operator is Operator.APPEND
                and isinstance(sort, SequenceSort)
                and stays_in_sort(arguments[0], sort)
                and stays_in_sort(arguments[1], sort.element)
            ):
                return f"(len({value}) <= {sort.capacity})"
            if operator is Operator.IF_THEN_ELSE:
                then = self._check_source(arguments[1], sort, value)
                otherwise = self._check_source(arguments[2], sort, value)
                return f"(({then or 'True'}) if {emitter.source(arguments[0])} else ({otherwise or 'True'}))"
        return f"{emitter.constant(_membership(sort))}({value})"

    def _compile_action(self, position: int, action: Action) -> Callable[[State], list[Transition]]:
        lines = [
            "def transitions(s):",
            "    result = []",
            *self._action_block(position, action, "    ", "return result"),
        ]
        lines.append("    return result")
        return self._define("\n".join(lines) + "\n", f"<lockstep-action {action.name}>", "transitions")  # type: ignore[return-value]

    def _compile_all_actions(self) -> Callable[[State], list[Transition]]:
        """Every action in one function: no call per action per state."""
        lines = ["def transitions(s):", "    result = []"]
        for position, action in enumerate(self.machine.actions):
            lines.append("    while True:")
            lines.extend(self._action_block(position, action, "        ", "break"))
            lines.append("        break")
        lines.append("    return result")
        return self._define("\n".join(lines) + "\n", "<lockstep-actions>", "transitions")  # type: ignore[return-value]

    def _compile_properties(self) -> Callable[[State], tuple[bool, ...]]:
        values = "".join(f"bool({self._emitter.source(prop.predicate)}), " for prop in self.machine.properties)
        return self._define(f"def values(s):\n    return ({values})\n", "<lockstep-properties>", "values")  # type: ignore[return-value]

    def _define(self, source: str, filename: str, name: str) -> object:
        self.source_code.append(source)
        namespace = self._namespace()
        exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - our own generated code
        return namespace[name]

    def initial(self) -> State:
        return pack(self.machine, self.machine.initial_state())

    def transitions(self, state: State) -> list[Transition]:
        try:
            return self._all_transitions(state)
        except _FAILURES:
            pass  # find the action that failed, one by one
        result: list[Transition] = []
        for position, function in enumerate(self._transitions):
            try:
                result.extend(function(state))
            except _FAILURES as error:
                action = self.machine.actions[position]
                raise ModelError(f"action {action.name} failed in a reachable state: {error}") from error
        raise ModelError("the fused transition function failed where no single action does")  # pragma: no cover

    def property_values(self, state: State) -> tuple[bool, ...]:
        """Every property's predicate in ``state``, in declaration order."""
        try:
            return self._property_values(state)
        except _FAILURES:
            return tuple(self.holds(position, state) for position in range(len(self.machine.properties)))

    def holds(self, predicate: int, state: State) -> bool:
        return _predicate_value(
            self._properties[predicate], state, f"property {self.machine.properties[predicate].name}"
        )

    def holds_at_deadlock(self, predicate: int, state: State) -> bool:
        function = self._deadlock[predicate]
        where = f"property {self.machine.properties[predicate].name}"
        return True if function is None else _predicate_value(function, state, where)

    def is_final(self, state: State) -> bool:
        return _predicate_value(self._final, state, "final")


def _predicate_value(function: Callable[[State], bool], state: State, where: str) -> bool:
    """A compiled predicate's value; a failure is a ``ModelError``, as in ``InterpretedSystem``."""
    try:
        return function(state)
    except _FAILURES as error:
        raise ModelError(f"{where} failed in a reachable state: {error}") from error


def _membership(sort: Sort) -> Callable[[object], bool]:
    """A fast membership test for the common sorts; ``sort.contains`` otherwise."""
    if isinstance(sort, IntSort) and sort.low is not None and sort.high is not None:
        low, high = sort.low, sort.high
        return lambda value: low <= value <= high  # type: ignore[operator]
    if isinstance(sort, (EnumSort, IndexSort)):
        size = len(list(sort.values()))
        return lambda value: 0 <= value < size  # type: ignore[operator]
    if isinstance(sort, MapSort) and isinstance(sort.value, (BoolSort, IntSort, EnumSort, IndexSort)):
        inner = _membership(sort.value)
        width = len(sort.keys)  # a store at a key outside the map changes its length
        return lambda value: len(value) == width and all(inner(item) for item in value)  # type: ignore[arg-type, attr-defined]
    if isinstance(sort, SequenceSort):
        return sort.contains
    return sort.contains


__all__ = ["CompiledSystem", "stays_in_sort"]
