"""The symbolic interpreter of the expression IR: IR nodes to Z3 terms, with partial evaluation.

A symbolic value mirrors a concrete one: a Z3 term (or a plain Python bool/int when the value is
known) for scalars, a tuple for maps and records, and a ``SymbolicSequence`` (a length and
``capacity`` slots) for sequences. Comprehensions are over finite sorts and are unrolled with
concrete bound values, so every formula is quantifier-free. Where every operand is known the
operator is applied concretely (the concrete evaluator's own ``apply``), so guards of grounded
actions fold to constants. Slots beyond a sequence's length always hold the sort's default
value, which keeps one Z3 state per concrete state.

Where ``evaluate`` raises (the head of an empty queue, division by zero), the Z3 term is
unconstrained: models guard such reads, and every Z3 counterexample is re-run through
``evaluate`` (``lockstep.checkers.symbolic.bmc``), so a translation gap cannot go unnoticed.
``Translator.defined`` says exactly where that happens: the condition under which ``evaluate``
computes an expression without raising (every divisor non-zero, every map key and sequence
position in range, every ``tail`` of a non-empty sequence), reading the short-circuit forms as
``evaluate`` does (``a and b`` needs ``b`` defined only where ``a`` holds); the encoding builds
the built-in ``well_defined`` property from it, so no engine proves a property whose value rests
on an unconstrained term.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Mapping

import z3

from lockstep.checkers.symbolic.values import (
    Symbolic,
    SymbolicSequence,
    TranslationError,
    _compare,
    _Undefined,
    conjoin,
    declare,
    default_value,
    disjoin,
    equal,
    implies,
    ite,
    known_scalar,
    lift_value,
    negate,
    select,
    store,
    to_z3,
)
from lockstep.spec.evaluation import EvaluationError, apply_operator
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
from lockstep.spec.sorts import MapSort, SequenceSort, Sort

# One counter for the whole process: every undefined value is its own constant, whichever
# translator, frame or use made it (a counter per translator gave ``undefined!1`` at every step
# of an unrolling, so undefined reads of different frames were forced equal).
_UNDEFINED = itertools.count(1)


class Translator:
    """Translates IR expressions in an environment of symbolic variable and parameter values."""

    def __init__(self, variables: Mapping[str, Symbolic], parameters: Mapping[str, Symbolic] | None = None) -> None:
        self.variables = variables
        self.parameters = dict(parameters or {})
        self.bound: dict[str, Symbolic] = {}

    def undefined(self, sort: Sort) -> Symbolic:
        """An unconstrained value, where the concrete semantics raises; its name is unique in the process."""
        return declare(sort, f"undefined!{next(_UNDEFINED)}")

    def translate(self, expression: Expression) -> Symbolic:  # noqa: C901 - one branch per node class
        if isinstance(expression, Constant):
            return lift_value(expression.value, expression.sort)
        if isinstance(expression, Variable):
            return self.variables[expression.name]
        if isinstance(expression, Parameter):
            return self.parameters[expression.name]
        if isinstance(expression, Bound):
            return self.bound[expression.name]
        if isinstance(expression, Comprehension):
            return self._comprehension(expression)
        if isinstance(expression, Operation):
            try:
                return self._operation(expression)
            except _Undefined:
                return self.undefined(expression.sort)
        raise TranslationError(f"the translator does not know node {type(expression).__name__}")

    def defined(self, expression: Expression) -> Symbolic:  # noqa: C901 - one branch per partial form
        """Where ``evaluate`` computes ``expression`` without raising (see the module doc)."""
        if isinstance(expression, Comprehension):  # evaluate computes the body for every value
            variable = expression.variable
            saved = self.bound.get(variable.name)
            parts = []
            for value in variable.sort.values():
                self.bound[variable.name] = lift_value(value, variable.sort)
                parts.append(self.defined(expression.body))
                if known_scalar(parts[-1]) is False:
                    break
            if saved is None:
                del self.bound[variable.name]
            else:
                self.bound[variable.name] = saved
            return conjoin(parts)
        if not isinstance(expression, Operation):
            return True
        operator, arguments = expression.operator, expression.arguments
        if operator in (Operator.AND, Operator.OR):
            absorbing = operator is Operator.OR
            reached: list[Symbolic] = []  # the earlier operands leave this one to decide
            parts = []
            for argument in arguments:
                parts.append(implies(conjoin(reached), self.defined(argument)))
                value = self.translate(argument)
                if known_scalar(value) is absorbing:
                    break
                reached.append(negate(value) if absorbing else value)
            return conjoin(parts)
        if operator is Operator.IMPLIES:
            antecedent = self.translate(arguments[0])
            return conjoin([self.defined(arguments[0]), implies(antecedent, self.defined(arguments[1]))])
        if operator is Operator.IF_THEN_ELSE:
            condition = self.translate(arguments[0])
            return conjoin(
                [
                    self.defined(arguments[0]),
                    implies(condition, self.defined(arguments[1])),
                    implies(negate(condition), self.defined(arguments[2])),
                ]
            )
        parts = [self.defined(argument) for argument in arguments]
        if known_scalar(conjoin(parts)) is False:
            return False
        match operator:
            case Operator.FLOOR_DIVIDE | Operator.MODULO:
                parts.append(negate(equal(self.translate(arguments[1]), 0)))
            case Operator.SELECT | Operator.STORE:
                map_sort = arguments[0].sort
                assert isinstance(map_sort, MapSort)
                parts.append(_within(self.translate(arguments[1]), len(map_sort.keys)))
            case Operator.AT:
                sequence = self.translate(arguments[0])
                assert isinstance(sequence, SymbolicSequence)
                parts.append(_within(self.translate(arguments[1]), sequence.length))
            case Operator.TAIL:
                sequence = self.translate(arguments[0])
                assert isinstance(sequence, SymbolicSequence)
                parts.append(_compare(Operator.GREATER, sequence.length, 0))
        return conjoin(parts)

    def _comprehension(self, expression: Comprehension) -> Symbolic:
        variable = expression.variable
        results = []
        for value in variable.sort.values():
            self.bound[variable.name] = lift_value(value, variable.sort)
            results.append(self.translate(expression.body))
        del self.bound[variable.name]
        match expression.quantifier:
            case Quantifier.ALL:
                return conjoin(results)
            case Quantifier.ANY:
                return disjoin(results)
            case Quantifier.SUM:
                return _sum(results)
            case Quantifier.COUNT:
                return _sum([ite(result, 1, 0) for result in results])
            case Quantifier.MAXIMUM:
                return _extreme(results, maximum=True)
            case Quantifier.MINIMUM:
                return _extreme(results, maximum=False)
            case Quantifier.MAP:
                return tuple(results)
        raise TranslationError(f"the translator does not know quantifier {expression.quantifier}")

    def _operation(self, expression: Operation) -> Symbolic:  # noqa: C901 - one branch per operator
        operator, arguments = expression.operator, expression.arguments
        # Short-circuit forms: a later operand may be undefined where the earlier one decides.
        if operator in (Operator.AND, Operator.OR):
            absorbing = operator is Operator.OR  # the operand value that decides the whole
            parts: list[Symbolic] = []
            for argument in arguments:
                value = self.translate(argument)
                if known_scalar(value) is absorbing:
                    return absorbing
                parts.append(value)
            return disjoin(parts) if absorbing else conjoin(parts)
        if operator is Operator.IMPLIES:
            left = self.translate(arguments[0])
            if known_scalar(left) is False:
                return True
            return implies(left, self.translate(arguments[1]))
        if operator is Operator.IF_THEN_ELSE:
            condition = self.translate(arguments[0])
            known = known_scalar(condition)
            if known is not None:
                return self.translate(arguments[1] if known else arguments[2])
            return ite(condition, self.translate(arguments[1]), self.translate(arguments[2]))
        values = [self.translate(argument) for argument in arguments]
        if all(isinstance(value, bool | int) for value in values) and operator not in _STRUCTURAL:
            try:
                return apply_operator(operator, values)
            except (EvaluationError, ZeroDivisionError, IndexError, TypeError):
                raise _Undefined() from None
        return _symbolic_operation(operator, values, expression, self)


_STRUCTURAL = {
    Operator.SELECT,
    Operator.STORE,
    Operator.LENGTH,
    Operator.AT,
    Operator.APPEND,
    Operator.TAIL,
    Operator.FIELD,
    Operator.WITH_FIELD,
    Operator.RECORD,
    Operator.SEQUENCE,
    Operator.MAP,
}


def _within(position: Symbolic, size: Symbolic) -> Symbolic:
    """``0 <= position < size``."""
    return conjoin([_compare(Operator.LESS_EQUAL, 0, position), _compare(Operator.LESS, position, size)])


def _sum(values: list[Symbolic]) -> Symbolic:
    known = [value for value in values if isinstance(value, int) and not isinstance(value, bool)]
    unknown = [to_z3(value) for value in values if not (isinstance(value, int) and not isinstance(value, bool))]
    total = sum(known)
    if not unknown:
        return total
    result = functools.reduce(lambda left, right: left + right, unknown)
    return result + total if total else result


def _extreme(values: list[Symbolic], *, maximum: bool) -> Symbolic:
    result = values[0]
    for value in values[1:]:
        better = _compare(Operator.GREATER if maximum else Operator.LESS, value, result)
        result = ite(better, value, result)
    return result


def _symbolic_operation(
    operator: Operator, values: list[Symbolic], expression: Operation, translator: Translator
) -> Symbolic:  # noqa: C901
    arguments = expression.arguments
    match operator:
        case Operator.NOT:
            return negate(values[0])
        case Operator.EQUAL:
            return equal(values[0], values[1])
        case Operator.NOT_EQUAL:
            return negate(equal(values[0], values[1]))
        case Operator.LESS | Operator.LESS_EQUAL | Operator.GREATER | Operator.GREATER_EQUAL:
            return _compare(operator, values[0], values[1])
        case Operator.ADD:
            return to_z3(values[0]) + to_z3(values[1])
        case Operator.SUBTRACT:
            return to_z3(values[0]) - to_z3(values[1])
        case Operator.MULTIPLY:
            return to_z3(values[0]) * to_z3(values[1])
        case Operator.FLOOR_DIVIDE:
            return _floor_divide(to_z3(values[0]), to_z3(values[1]))
        case Operator.MODULO:
            a, b = to_z3(values[0]), to_z3(values[1])
            return a - b * _floor_divide(a, b)
        case Operator.NEGATE:
            return -to_z3(values[0])
        case Operator.MINIMUM:
            return _extreme(values, maximum=False)
        case Operator.MAXIMUM:
            return _extreme(values, maximum=True)
        case Operator.SELECT:
            map_sort = arguments[0].sort
            assert isinstance(map_sort, MapSort)
            return select(values[0], values[1], len(map_sort.keys))
        case Operator.STORE:
            return store(values[0], values[1], values[2])
        case Operator.FIELD:
            return select(values[0], values[1], len(values[0]))
        case Operator.WITH_FIELD:
            return store(values[0], values[1], values[2])
        case Operator.RECORD | Operator.MAP:
            return tuple(values)
        case Operator.SEQUENCE:
            sort = expression.sort
            assert isinstance(sort, SequenceSort)
            padding = [lift_value(default_value(sort.element), sort.element)] * (sort.capacity - len(values))
            return SymbolicSequence(len(values), (*values, *padding))
        case Operator.LENGTH:
            sequence = values[0]
            assert isinstance(sequence, SymbolicSequence)
            return sequence.length
        case Operator.AT:
            return _at(values[0], values[1], expression, translator)
        case Operator.APPEND:
            return _append(values[0], values[1])
        case Operator.TAIL:
            return _tail(values[0], expression.sort)
    raise TranslationError(f"the translator does not know operator {operator}")


def _floor_divide(a: z3.ExprRef, b: z3.ExprRef) -> z3.ExprRef:
    """Python's floor division (Z3's integer division is Euclidean; bit-vector division truncates)."""
    if z3.is_bv(a):
        quotient = a / b  # signed, rounds toward zero
        inexact = z3.And(a - quotient * b != 0, (a < 0) != (b < 0))
        return z3.If(inexact, quotient - 1, quotient)
    return z3.If(b > 0, a / b, (-a) / (-b))


def _at(sequence: Symbolic, position: Symbolic, expression: Operation, translator: Translator) -> Symbolic:
    assert isinstance(sequence, SymbolicSequence)
    length, index = known_scalar(sequence.length), known_scalar(position)
    if index is not None and length is not None and not 0 <= int(index) < int(length):
        raise _Undefined()
    if index is not None:
        if int(index) < 0 or int(index) >= len(sequence.slots):
            raise _Undefined()
        return sequence.slots[int(index)]
    return select(sequence.slots, position, len(sequence.slots))


def _append(sequence: Symbolic, element: Symbolic) -> Symbolic:
    assert isinstance(sequence, SymbolicSequence)
    length = known_scalar(sequence.length)
    slots = list(sequence.slots) + [element]  # one slot past capacity: in_bounds catches its use
    if length is not None:
        slots[int(length)] = element
        return SymbolicSequence(int(length) + 1, tuple(slots))
    new_slots = tuple(ite(to_z3(sequence.length) == position, element, slot) for position, slot in enumerate(slots))
    return SymbolicSequence(to_z3(sequence.length) + 1, new_slots)


def _tail(sequence: Symbolic, sort: Sort) -> Symbolic:
    assert isinstance(sequence, SymbolicSequence) and isinstance(sort, SequenceSort)
    if known_scalar(sequence.length) == 0:
        raise _Undefined()
    filler = lift_value(default_value(sort.element), sort.element)
    return SymbolicSequence(_sum([sequence.length, -1]), (*sequence.slots[1:], filler))
