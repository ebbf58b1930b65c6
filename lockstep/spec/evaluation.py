"""The concrete evaluator: the reference semantics of the expression IR.

``evaluate`` is deliberately simple and slow; the compiler (``lockstep.spec.compiler``) and the
Z3 translator are tested against it. Integer arithmetic is unbounded here: a value leaves its
sort only when it is stored in a state variable, which the machine reports as ``in_bounds``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

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
)
from lockstep.spec.sorts import Value


class EvaluationError(ValueError):
    """An expression cannot be evaluated (an index out of range, a division by zero, ...)."""


@dataclass(frozen=True)
class Environment:
    """Values for the state variables, action parameters and bound variables an expression reads."""

    state: Mapping[str, Value]
    parameters: Mapping[str, Value] = field(default_factory=dict)
    bound: Mapping[str, Value] = field(default_factory=dict)

    def binding(self, name: str, value: Value) -> Environment:
        return Environment(self.state, self.parameters, {**self.bound, name: value})


def _floor_divide(left: int, right: int) -> int:
    if right == 0:
        raise EvaluationError("division by zero")
    return left // right


def _modulo(left: int, right: int) -> int:
    if right == 0:
        raise EvaluationError("modulo by zero")
    return left % right


# The bounds checks of maps and sequences, shared by the evaluator and the compiled successors
# (lockstep.spec.compiler): an index out of range is an EvaluationError in both.


def element_at(sequence: tuple[Value, ...], position: int) -> Value:
    if not 0 <= position < len(sequence):
        raise EvaluationError(f"position {position} outside a sequence of length {len(sequence)}")
    return sequence[position]


def tail(sequence: tuple[Value, ...]) -> tuple[Value, ...]:
    if not sequence:
        raise EvaluationError("tail of an empty sequence")
    return sequence[1:]


def store(mapping: tuple[Value, ...], key: int, value: Value) -> tuple[Value, ...]:
    if not 0 <= key < len(mapping):
        raise EvaluationError(f"key {key} outside a map of {len(mapping)} keys")
    return mapping[:key] + (value,) + mapping[key + 1 :]


def select(mapping: tuple[Value, ...], key: int) -> Value:
    if not 0 <= key < len(mapping):
        raise EvaluationError(f"key {key} outside a map of {len(mapping)} keys")
    return mapping[key]


def apply_operator(operator: Operator, values: list[Value]) -> Value:  # noqa: C901 - one branch per operator
    """An operator applied to concrete operand values (not the short-circuit forms)."""
    a = values[0] if values else None
    b = values[1] if len(values) > 1 else None
    match operator:
        case Operator.NOT:
            return not a
        case Operator.IMPLIES:
            return (not a) or bool(b)
        case Operator.EQUAL:
            return a == b
        case Operator.NOT_EQUAL:
            return a != b
        case Operator.LESS:
            return a < b  # type: ignore[operator]
        case Operator.LESS_EQUAL:
            return a <= b  # type: ignore[operator]
        case Operator.GREATER:
            return a > b  # type: ignore[operator]
        case Operator.GREATER_EQUAL:
            return a >= b  # type: ignore[operator]
        case Operator.ADD:
            return a + b  # type: ignore[operator]
        case Operator.SUBTRACT:
            return a - b  # type: ignore[operator]
        case Operator.MULTIPLY:
            return a * b  # type: ignore[operator]
        case Operator.FLOOR_DIVIDE:
            return _floor_divide(a, b)  # type: ignore[arg-type]
        case Operator.MODULO:
            return _modulo(a, b)  # type: ignore[arg-type]
        case Operator.NEGATE:
            return -a  # type: ignore[operator]
        case Operator.MINIMUM:
            return min(values)  # type: ignore[type-var]
        case Operator.MAXIMUM:
            return max(values)  # type: ignore[type-var]
        case Operator.SELECT:
            return select(a, b)  # type: ignore[arg-type]
        case Operator.STORE:
            return store(a, b, values[2])  # type: ignore[arg-type]
        case Operator.LENGTH:
            return len(a)  # type: ignore[arg-type]
        case Operator.AT:
            return element_at(a, b)  # type: ignore[arg-type]
        case Operator.APPEND:
            return a + (b,)  # type: ignore[operator]
        case Operator.TAIL:
            return tail(a)  # type: ignore[arg-type]
        case Operator.FIELD:
            return a[b]  # type: ignore[index]
        case Operator.WITH_FIELD:
            return store(a, b, values[2])  # type: ignore[arg-type]
        case Operator.RECORD | Operator.SEQUENCE | Operator.MAP:
            return tuple(values)
    raise EvaluationError(f"the evaluator does not know operator {operator}")


def evaluate(expression: Expression, environment: Environment) -> Value:
    """The value of ``expression`` in ``environment`` (the reference semantics)."""
    if isinstance(expression, Constant):
        return expression.value
    if isinstance(expression, Variable):
        return environment.state[expression.name]
    if isinstance(expression, Parameter):
        return environment.parameters[expression.name]
    if isinstance(expression, Bound):
        return environment.bound[expression.name]
    if isinstance(expression, Comprehension):
        return _comprehend(expression, environment)
    if isinstance(expression, Operation):
        operator = expression.operator
        # Short-circuit forms first: their later operands may be undefined when skipped.
        if operator is Operator.AND:
            return all(evaluate(argument, environment) for argument in expression.arguments)
        if operator is Operator.OR:
            return any(evaluate(argument, environment) for argument in expression.arguments)
        if operator is Operator.IMPLIES:
            antecedent, consequent = expression.arguments
            return (not evaluate(antecedent, environment)) or bool(evaluate(consequent, environment))
        if operator is Operator.IF_THEN_ELSE:
            condition, then, otherwise = expression.arguments
            return evaluate(then if evaluate(condition, environment) else otherwise, environment)
        values = [evaluate(argument, environment) for argument in expression.arguments]
        return apply_operator(operator, values)
    raise EvaluationError(f"the evaluator does not know node {type(expression).__name__}")


def _comprehend(expression: Comprehension, environment: Environment) -> Value:
    variable = expression.variable
    results = [evaluate(expression.body, environment.binding(variable.name, value)) for value in variable.sort.values()]
    match expression.quantifier:
        case Quantifier.ALL:
            return all(results)
        case Quantifier.ANY:
            return any(results)
        case Quantifier.SUM:
            return sum(results)  # type: ignore[arg-type]
        case Quantifier.COUNT:
            return sum(1 for result in results if result)
        case Quantifier.MAXIMUM:
            return max(results)  # type: ignore[type-var]
        case Quantifier.MINIMUM:
            return min(results)  # type: ignore[type-var]
        case Quantifier.MAP:
            return tuple(results)
    raise EvaluationError(f"the evaluator does not know quantifier {expression.quantifier}")
