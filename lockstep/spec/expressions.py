"""The expression IR: frozen dataclasses and an operator enum, the one language of every engine.

Protocol models never build these nodes by hand; they use ``Term`` (``lockstep.spec.terms``),
which checks sorts at definition time. Engines read only these nodes: the concrete evaluator
(``lockstep.spec.evaluation``), the Python compiler (``lockstep.spec.compiler``) and, in the
symbolic checker, the Z3 translator. Every node carries its sort.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from lockstep.spec.sorts import Sort, Value


class Operator(enum.Enum):
    """Every operator of the IR; ``Operation.arguments`` lists its operands in order."""

    NOT = "not"
    AND = "and"  # n-ary
    OR = "or"  # n-ary
    IMPLIES = "implies"
    EQUAL = "=="
    NOT_EQUAL = "!="
    LESS = "<"
    LESS_EQUAL = "<="
    GREATER = ">"
    GREATER_EQUAL = ">="
    ADD = "+"
    SUBTRACT = "-"
    MULTIPLY = "*"
    FLOOR_DIVIDE = "//"
    MODULO = "%"
    NEGATE = "neg"
    MINIMUM = "min"
    MAXIMUM = "max"
    IF_THEN_ELSE = "ite"
    SELECT = "select"  # map[key]
    STORE = "store"  # map with map[key] = value
    LENGTH = "len"  # len(sequence)
    AT = "at"  # sequence[position]
    APPEND = "append"  # sequence + (element,)
    TAIL = "tail"  # sequence[1:]
    FIELD = "field"  # record.field, the second argument a constant position
    WITH_FIELD = "with_field"  # record with one field replaced (record, constant position, value)
    RECORD = "record"  # a record from its fields in order
    SEQUENCE = "sequence"  # a sequence from its elements
    MAP = "map"  # a map from its values in key order


class Quantifier(enum.Enum):
    """Comprehensions over every value of a finite sort."""

    ALL = "all"
    ANY = "any"
    SUM = "sum"
    COUNT = "count"
    MAXIMUM = "max"
    MINIMUM = "min"
    MAP = "map"  # builds the map key -> body


@dataclass(frozen=True)
class Constant:
    value: Value
    sort: Sort


@dataclass(frozen=True)
class Variable:
    """A state variable of the machine."""

    name: str
    sort: Sort


@dataclass(frozen=True)
class Parameter:
    """An action parameter: all nondeterminism lives here."""

    name: str
    sort: Sort


@dataclass(frozen=True)
class Bound:
    """A variable bound by a comprehension."""

    name: str
    sort: Sort


@dataclass(frozen=True)
class Operation:
    operator: Operator
    arguments: tuple[Expression, ...]
    sort: Sort


@dataclass(frozen=True)
class Comprehension:
    quantifier: Quantifier
    variable: Bound
    body: Expression
    sort: Sort


Expression = Constant | Variable | Parameter | Bound | Operation | Comprehension
NODE_CLASSES: tuple[type, ...] = (Constant, Variable, Parameter, Bound, Operation, Comprehension)


def children(expression: Expression) -> tuple[Expression, ...]:
    """The direct sub-expressions of a node."""
    if isinstance(expression, Operation):
        return expression.arguments
    if isinstance(expression, Comprehension):
        return (expression.variable, expression.body)
    return ()


def walk(expression: Expression) -> Iterator[Expression]:
    """Every node of the expression, parents before children."""
    stack = [expression]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))


def variables_of(expression: Expression) -> frozenset[str]:
    """Names of the state variables an expression reads."""
    return frozenset(node.name for node in walk(expression) if isinstance(node, Variable))


def substitute(expression: Expression, replace: Callable[[Expression], Expression | None]) -> Expression:
    """Rebuild ``expression`` bottom-up, replacing any node for which ``replace`` returns a node."""
    memo: dict[int, Expression] = {}

    def rebuild(node: Expression) -> Expression:
        key = id(node)
        if key in memo:
            return memo[key]
        replacement = replace(node)
        if replacement is not None:
            result: Expression = replacement
        elif isinstance(node, Operation):
            arguments = tuple(rebuild(argument) for argument in node.arguments)
            result = node if arguments == node.arguments else Operation(node.operator, arguments, node.sort)
        elif isinstance(node, Comprehension):
            body = rebuild(node.body)
            result = node if body is node.body else Comprehension(node.quantifier, node.variable, body, node.sort)
        else:
            result = node
        memo[key] = result
        return result

    return rebuild(expression)


def substitute_variables(expression: Expression, values: Mapping[str, Expression]) -> Expression:
    """Replace state variables by expressions (used to express a post-state over the pre-state)."""
    return substitute(
        expression,
        lambda node: values.get(node.name) if isinstance(node, Variable) else None,
    )


def render(expression: Expression) -> str:
    """A compact infix rendering, used in explanations and error messages."""
    if isinstance(expression, Constant):
        return expression.sort.render(expression.value)
    if isinstance(expression, (Variable, Parameter, Bound)):
        return expression.name
    if isinstance(expression, Comprehension):
        variable = expression.variable
        return f"{expression.quantifier.value}({variable.name} in {variable.sort.name}: {render(expression.body)})"
    operator, arguments = expression.operator, expression.arguments
    parts = [render(argument) for argument in arguments]
    if operator in (Operator.AND, Operator.OR):
        joiner = " & " if operator is Operator.AND else " | "
        return "(" + joiner.join(parts) + ")"
    if operator is Operator.NOT:
        return f"~{parts[0]}"
    if operator is Operator.NEGATE:
        return f"-{parts[0]}"
    if operator is Operator.SELECT:
        return f"{parts[0]}[{parts[1]}]"
    if operator is Operator.AT:
        return f"{parts[0]}[{parts[1]}]"
    if operator is Operator.IF_THEN_ELSE:
        return f"({parts[1]} if {parts[0]} else {parts[2]})"
    if operator is Operator.FIELD:
        record_sort = arguments[0].sort
        position = arguments[1]
        assert isinstance(position, Constant) and isinstance(position.value, int)
        names = getattr(record_sort, "fields", ())
        return f"{parts[0]}.{names[position.value][0]}" if names else f"{parts[0]}.{position.value}"
    if len(parts) == 2 and operator.value in {"==", "!=", "<", "<=", ">", ">=", "+", "-", "*", "//", "%"}:
        return f"({parts[0]} {operator.value} {parts[1]})"
    return f"{operator.value}({', '.join(parts)})"
