"""Translates IR expressions to array values, as straight-line code over a whole frontier.

``Translator`` partially evaluates an expression for one binding of the action parameters (and
of comprehension variables, which it unrolls): what is known at compile time folds to a constant
through the reference ``apply_operator``; the rest becomes lines of array code (numpy or torch,
the same text for both) over one column per leaf of the packed state. Every value comes with an
error mask: the rows where the reference evaluator would raise (division by zero, a key outside
its map, the tail of an empty sequence), with ``evaluate``'s short-circuits. Integer temporaries
carry bounds, so checks they decide fold away; inside an if-then-else branch its condition is a
constant, and tests of one-bit fields compare the bit in place (``facts``). Maps and sequences:
``containers``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from collections.abc import Sequence as Sequences
from contextlib import contextmanager

from lockstep.checkers.vector.containers import map_access, merged_origin, sequence_operation
from lockstep.checkers.vector.facts import bit_test, column_code, decided, merged_test
from lockstep.checkers.vector.values import (
    FALSE,
    TRUE,
    Compound,
    Emitter,
    Origin,
    Scalar,
    Scope,
    Sequence,
    Unsupported,
    VectorValue,
    constant_of,
    padding,
)
from lockstep.spec.evaluation import apply_operator
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
from lockstep.spec.layout import Layout, is_scalar
from lockstep.spec.sorts import BoolSort, MapSort, RecordSort, SequenceSort, Sort, Value

_SYMBOLS = {
    Operator.EQUAL: "==",
    Operator.NOT_EQUAL: "!=",
    Operator.LESS: "<",
    Operator.LESS_EQUAL: "<=",
    Operator.GREATER: ">",
    Operator.GREATER_EQUAL: ">=",
    Operator.ADD: "+",
    Operator.SUBTRACT: "-",
    Operator.MULTIPLY: "*",
}
_UNBOUND = object()
ZERO = Scalar("0", 0)
_COMPLEMENTS = {"==": "!=", "!=": "==", "<": ">=", ">=": "<", ">": "<=", "<=": ">"}
_COMPARISON = re.compile(r"^\((\S+) (==|!=|<=|>=|<|>) (\S+)\)$")
_NEGATION = re.compile(r"^\(~(\w+)\)$")
_BIT_TEST = re.compile(r"^\((\(\w+\[\d+\] & \d+\)) (==|!=) (0)\)$")
# a comparison or commutative operation with a constant first is written with it second, so that
# ``0 >= x`` and ``x <= 0`` are one temporary
_MIRRORED = {
    Operator.LESS: Operator.GREATER,
    Operator.GREATER: Operator.LESS,
    Operator.LESS_EQUAL: Operator.GREATER_EQUAL,
    Operator.GREATER_EQUAL: Operator.LESS_EQUAL,
    Operator.EQUAL: Operator.EQUAL,
    Operator.NOT_EQUAL: Operator.NOT_EQUAL,
    Operator.ADD: Operator.ADD,
    Operator.MULTIPLY: Operator.MULTIPLY,
}
_COMMUTATIVE = (Operator.EQUAL, Operator.NOT_EQUAL, Operator.ADD, Operator.MULTIPLY)


class Translator:
    """Translates IR expressions to vector values in one scope, with parameters bound to constants."""

    def __init__(
        self, layout: Layout, emitter: Emitter, scope: Scope, parameters: Mapping[str, Value] | None = None
    ) -> None:
        self.layout = layout
        self.emitter = emitter
        self.scope = scope
        self.parameters = dict(parameters or {})
        self.bound: dict[str, Value] = {}
        self.assumed: dict[str, bool] = {}  # conditions known inside the branch being translated
        self._variables = {name: position for position, name in enumerate(layout.names)}

    # ----------------------------------------------------------------------------- scalar helpers
    def emit(self, code: str) -> Scalar:
        return Scalar(self.emitter.emit(self.scope, code))

    def column(self, leaf_position: int) -> Scalar:
        leaf = self.layout.leaves[leaf_position]
        low, high = self.scope.facts.get(leaf_position, (leaf.low, leaf.high))
        if leaf.width == 0 or low == high:  # one value in every row (the sort's, or the one the guard leaves)
            return Scalar(repr(bool(low)), bool(low)) if leaf.boolean else Scalar(repr(low), low)
        code = self.emit(column_code(leaf, self.scope.words))
        self.scope.leaves[code.code] = leaf_position
        return code if leaf.boolean else self._bounded(code, (low, high))  # stored states lie in their sorts

    def settled(self, value: Scalar) -> Scalar:
        """``value``, or the constant it is in the branch being translated."""
        known = None if value.constant else self.assumed.get(value.code)
        return value if known is None else TRUE if known else FALSE

    @contextmanager
    def assuming(self, condition: Scalar, truth: bool) -> Iterator[None]:
        """Translate inside a branch where ``condition`` (and so its negation) is known to be ``truth``."""
        if condition.constant:
            yield
            return
        saved = dict(self.assumed)
        negated = self.negate(condition)
        self.assumed[condition.code] = truth
        if not negated.constant:
            self.assumed[negated.code] = not truth
        try:
            yield
        finally:
            self.assumed = saved

    def value_range(self, value: Scalar) -> tuple[int, int] | None:
        """Bounds of an integer value known at compile time (None: unknown, or not an integer)."""
        if value.constant:
            number = value.value
            return (number, number) if isinstance(number, int) and not isinstance(number, bool) else None
        return self.scope.ranges.get(value.code)

    def _bounded(self, value: Scalar, bounds: tuple[int, int] | None) -> Scalar:
        if bounds is not None and not value.constant:
            self.scope.ranges[value.code] = bounds
        return value

    def where(self, condition: Scalar, then: VectorValue, otherwise: VectorValue) -> VectorValue:
        condition = self.settled(condition)
        if condition.constant:
            return then if condition.value else otherwise
        negation = _NEGATION.match(self.scope.codes.get(condition.code, ""))
        if negation is not None:  # where(~c, a, b) is where(c, b, a): no negation computed
            return self.where(Scalar(negation.group(1)), otherwise, then)
        if isinstance(then, Scalar) and isinstance(otherwise, Scalar):
            if then.code == otherwise.code:
                return then
            if then.value is True and otherwise.value is False:
                return condition
            if then.value is False and otherwise.value is True:
                return self.negate(condition)
            then_range, otherwise_range = self.value_range(then), self.value_range(otherwise)
            bounds = (
                None
                if then_range is None or otherwise_range is None
                else (min(then_range[0], otherwise_range[0]), max(then_range[1], otherwise_range[1]))
            )
            return self._bounded(self.emit(f"_where({condition.code}, {then.code}, {otherwise.code})"), bounds)
        if isinstance(then, Compound) and isinstance(otherwise, Compound):
            return Compound(
                tuple(self.where(condition, a, b) for a, b in zip(then.parts, otherwise.parts, strict=True))
            )
        if isinstance(then, Sequence) and isinstance(otherwise, Sequence):
            count = max(len(then.slots), len(otherwise.slots))
            first, second = self.widen(then, count), self.widen(otherwise, count)
            length = self.where(condition, first.length, second.length)
            assert isinstance(length, Scalar)
            slots = tuple(self.where(condition, a, b) for a, b in zip(first.slots, second.slots))
            return Sequence(length, slots, then.element, merged_origin(self, condition, then.origin, otherwise.origin))
        raise Unsupported("if-then-else over values of different shapes")

    def widen(self, sequence: Sequence, count: int) -> Sequence:
        if len(sequence.slots) >= count:
            return sequence
        filler = padding(sequence.element)
        return Sequence(
            sequence.length,
            sequence.slots + tuple(filler for _ in range(count - len(sequence.slots))),
            sequence.element,
            sequence.origin,
        )

    def negate(self, value: Scalar) -> Scalar:
        value = self.settled(value)
        if value.constant:
            return TRUE if not value.value else FALSE
        definition = self.scope.codes.get(value.code, "")
        comparison = _COMPARISON.match(definition) or _BIT_TEST.match(definition)
        if comparison is not None:  # not (a < b) is a >= b: one operation, often one already computed
            left, symbol, right = comparison.groups()
            return self.emit(f"({left} {_COMPLEMENTS[symbol]} {right})")
        negation = _NEGATION.match(definition)
        if negation is not None:
            return Scalar(negation.group(1))
        return self.emit(f"(~{value.code})")

    def both(self, left: Scalar, right: Scalar) -> Scalar:
        left, right = self.settled(left), self.settled(right)
        if left.constant:
            return right if left.value else FALSE
        if right.constant:
            return left if right.value else FALSE
        if left.code == right.code:
            return left
        merged = merged_test(self.scope.codes.get(left.code, ""), self.scope.codes.get(right.code, ""), "==")
        if merged is not None:  # bits of one word all clear: one test
            return self.emit(merged)
        first, second = sorted((left.code, right.code))  # a & b and b & a: one temporary
        return self.emit(f"({first} & {second})")

    def either(self, left: Scalar, right: Scalar) -> Scalar:
        left, right = self.settled(left), self.settled(right)
        if left.constant:
            return TRUE if left.value else right
        if right.constant:
            return TRUE if right.value else left
        if left.code == right.code:
            return left
        merged = merged_test(self.scope.codes.get(left.code, ""), self.scope.codes.get(right.code, ""), "!=")
        if merged is not None:  # some bit of one word set: one test
            return self.emit(merged)
        first, second = sorted((left.code, right.code))
        return self.emit(f"({first} | {second})")

    def binary(self, operator: Operator, left: Scalar, right: Scalar) -> Scalar:
        if left.constant and right.constant:
            value = apply_operator(operator, [left.value, right.value])
            return Scalar(repr(value), value)
        if left.constant and operator in _MIRRORED:
            left, right, operator = right, left, _MIRRORED[operator]
        elif operator in _COMMUTATIVE and not right.constant and right.code < left.code:
            left, right = right, left
        first, second = self.value_range(left), self.value_range(right)
        if first is not None and second is not None:
            outcome = decided(operator, first, second)
            if outcome is not None:  # the bounds decide the comparison for every row
                return TRUE if outcome else FALSE
        if operator in (Operator.EQUAL, Operator.NOT_EQUAL) and right.constant and left.code in self.scope.leaves:
            test = bit_test(self.layout.leaves[self.scope.leaves[left.code]], self.scope.words, right.value, operator)
            if test is not None:  # a one-bit field against a constant: test the bit in place
                return self.emit(test)
        symbol = _SYMBOLS[operator]
        result = self.emit(f"({left.code} {symbol} {right.code})")
        if first is not None and second is not None and operator in (Operator.ADD, Operator.SUBTRACT):
            if operator is Operator.ADD:
                return self._bounded(result, (first[0] + second[0], first[1] + second[1]))
            return self._bounded(result, (first[0] - second[1], first[1] - second[0]))
        return result

    def equal(self, left: VectorValue, right: VectorValue) -> Scalar:
        if isinstance(left, Scalar) and isinstance(right, Scalar):
            if left.code == right.code:
                return TRUE
            return self.binary(Operator.EQUAL, left, right)
        if isinstance(left, Compound) and isinstance(right, Compound):
            result = TRUE
            for a, b in zip(left.parts, right.parts, strict=True):
                result = self.both(result, self.equal(a, b))
            return result
        if isinstance(left, Sequence) and isinstance(right, Sequence):
            result = self.equal(left.length, right.length)
            count = max(len(left.slots), len(right.slots))
            first, second = self.widen(left, count), self.widen(right, count)
            for slot, (a, b) in enumerate(zip(first.slots, second.slots)):
                unused = self.binary(Operator.LESS_EQUAL, left.length, Scalar(repr(slot), slot))
                result = self.both(result, self.either(unused, self.equal(a, b)))
            return result
        raise Unsupported("comparison of values of different shapes")

    def extreme(self, function: str, values: Sequences[Scalar]) -> Scalar:
        folded = [value for value in values if not value.constant]
        constants = [value.value for value in values if value.constant]
        pick = min if function == "_minimum" else max
        result: Scalar | None = None
        if constants:
            best = pick(constants)  # type: ignore[type-var]
            result = Scalar(repr(best), best)
        for value in folded:
            if result is None:
                result = value
                continue
            first, second = self.value_range(result), self.value_range(value)
            bounds = None
            if first is not None and second is not None:
                bounds = (pick(first[0], second[0]), pick(first[1], second[1]))
            result = self._bounded(self.emit(f"{function}({result.code}, {value.code})"), bounds)
        assert result is not None
        return result

    def choose(self, key: Scalar, options: Sequences[VectorValue]) -> VectorValue:
        """``options[key]`` for a key that is not a constant (rows outside the range: the last)."""
        result = options[-1]
        for position in range(len(options) - 2, -1, -1):
            result = self.where(
                self.binary(Operator.EQUAL, key, Scalar(repr(position), position)), options[position], result
            )
        return result

    # ------------------------------------------------------------------------------ translation
    def translate(self, expression: Expression) -> tuple[VectorValue, Scalar]:
        """The value of ``expression`` and the mask of rows where evaluating it fails."""
        if isinstance(expression, Constant):
            return constant_of(expression.value, expression.sort), FALSE
        if isinstance(expression, Parameter):
            return constant_of(self.parameters[expression.name], expression.sort), FALSE
        if isinstance(expression, Bound):
            return constant_of(self.bound[expression.name], expression.sort), FALSE
        if isinstance(expression, Variable):
            return self.variable(expression.name), FALSE
        if isinstance(expression, Comprehension):
            return self._comprehension(expression)
        return self._operation(expression)

    def variable(self, name: str) -> VectorValue:
        if name not in self.scope.variables:  # a scope decodes each variable once
            position = self._variables[name]
            self.scope.variables[name] = self._assemble(
                self.layout.sorts[position], iter(range(*self.layout.spans[position]))
            )
        return self.scope.variables[name]

    def _assemble(self, sort: Sort, positions: Iterator[int]) -> VectorValue:
        if is_scalar(sort):
            return self.column(next(positions))
        if isinstance(sort, MapSort):
            return Compound(tuple(self._assemble(sort.value, positions) for _ in sort.keys))
        if isinstance(sort, RecordSort):
            return Compound(tuple(self._assemble(field_sort, positions) for _, field_sort in sort.fields))
        assert isinstance(sort, SequenceSort)
        position = next(positions)
        slots = tuple(self._assemble(sort.element, positions) for _ in range(sort.capacity))
        return Sequence(self.column(position), slots, sort.element, Origin("read", position))

    def scalar(self, expression: Expression) -> tuple[Scalar, Scalar]:
        value, error = self.translate(expression)
        if not isinstance(value, Scalar):
            raise Unsupported(f"expected a scalar value for an expression of sort {expression.sort.name}")
        return value, error

    def _comprehension(self, expression: Comprehension) -> tuple[VectorValue, Scalar]:
        variable = expression.variable
        results: list[VectorValue] = []
        error = FALSE
        saved = self.bound.get(variable.name, _UNBOUND)
        for value in variable.sort.values():
            self.bound[variable.name] = value
            result, failed = self.translate(expression.body)
            results.append(result)
            error = self.either(error, failed)
        if saved is _UNBOUND:
            del self.bound[variable.name]
        else:
            self.bound[variable.name] = saved
        if expression.quantifier is Quantifier.MAP:
            return Compound(tuple(results)), error
        scalars = [result for result in results if isinstance(result, Scalar)]
        if len(scalars) != len(results):
            raise Unsupported(f"{expression.quantifier.value} over non-scalar values")
        match expression.quantifier:
            case Quantifier.ALL:
                total = TRUE
                for item in scalars:
                    total = self.both(total, item)
                return total, error
            case Quantifier.ANY:
                total = FALSE
                for item in scalars:
                    total = self.either(total, item)
                return total, error
            case Quantifier.SUM | Quantifier.COUNT:
                counting = expression.quantifier is Quantifier.COUNT
                # no "0 +" before integer terms (a sum of Booleans starts from 0, which makes it an integer)
                summed: Scalar | None = None if counting or not isinstance(expression.body.sort, BoolSort) else ZERO
                for item in scalars:
                    term = item
                    if expression.quantifier is Quantifier.COUNT:
                        term = (
                            Scalar(repr(int(bool(item.value))), int(bool(item.value)))
                            if item.constant
                            else self.emit(f"_int({item.code})")
                        )
                    summed = term if summed is None else self.binary(Operator.ADD, summed, term)
                return (ZERO if summed is None else summed), error
            case Quantifier.MAXIMUM:
                return self.extreme("_maximum", scalars), error
            case Quantifier.MINIMUM:
                return self.extreme("_minimum", scalars), error
        raise Unsupported(f"quantifier {expression.quantifier}")  # pragma: no cover

    def _operation(self, expression: Operation) -> tuple[VectorValue, Scalar]:  # noqa: C901 - one branch per operator
        operator, arguments = expression.operator, expression.arguments
        if operator in (Operator.AND, Operator.OR):
            total, error, reached = (TRUE if operator is Operator.AND else FALSE), FALSE, TRUE
            for argument in arguments:
                value, failed = self.scalar(argument)
                error = self.either(error, self.both(reached, failed))
                if operator is Operator.AND:
                    total = self.both(total, value)
                    reached = total
                else:
                    total = self.either(total, value)
                    reached = self.negate(total)
                if reached.value is False:
                    break
            return total, error
        if operator is Operator.IMPLIES:
            antecedent, failed = self.scalar(arguments[0])
            consequent, failed_later = self.scalar(arguments[1]) if antecedent.value is not False else (TRUE, FALSE)
            return self.either(self.negate(antecedent), consequent), self.either(
                failed, self.both(antecedent, failed_later)
            )
        if operator is Operator.IF_THEN_ELSE:
            condition, failed = self.scalar(arguments[0])
            condition = self.settled(condition)
            then, then_failed, otherwise, else_failed = None, FALSE, None, FALSE
            if condition.value is not False:
                with self.assuming(condition, True):
                    then, then_failed = self.translate(arguments[1])
            if condition.value is not True:
                with self.assuming(condition, False):
                    otherwise, else_failed = self.translate(arguments[2])
            if then is None:
                assert otherwise is not None
                return otherwise, self.either(failed, else_failed)
            if otherwise is None:
                return then, self.either(failed, then_failed)
            error = self.either(
                failed, self.either(self.both(condition, then_failed), self.both(self.negate(condition), else_failed))
            )
            return self.where(condition, then, otherwise), error
        translated = [self.translate(argument) for argument in arguments]
        values = [value for value, _ in translated]
        error = FALSE
        for _, failed in translated:
            error = self.either(error, failed)
        result, failed = self._apply(expression, values)
        return result, self.either(error, failed)

    def _apply(self, expression: Operation, values: list[VectorValue]) -> tuple[VectorValue, Scalar]:  # noqa: C901
        operator, arguments = expression.operator, expression.arguments
        first = values[0] if values else None
        if operator in (Operator.RECORD, Operator.MAP):
            return Compound(tuple(values)), FALSE
        if operator is Operator.SEQUENCE:
            assert isinstance(expression.sort, SequenceSort)
            return Sequence(Scalar(repr(len(values)), len(values)), tuple(values), expression.sort.element), FALSE
        if operator in (Operator.EQUAL, Operator.NOT_EQUAL):
            same = self.equal(values[0], values[1])
            return (same if operator is Operator.EQUAL else self.negate(same)), FALSE
        if operator in (Operator.FIELD, Operator.WITH_FIELD):
            assert isinstance(first, Compound) and isinstance(arguments[1], Constant)
            position = arguments[1].value
            assert isinstance(position, int)
            if operator is Operator.FIELD:
                return first.parts[position], FALSE
            return Compound(first.parts[:position] + (values[2],) + first.parts[position + 1 :]), FALSE
        if operator in (Operator.SELECT, Operator.STORE):
            return map_access(self, expression, values)
        if isinstance(first, Sequence):
            return sequence_operation(self, operator, first, values)
        scalars = [value for value in values if isinstance(value, Scalar)]
        if len(scalars) != len(values):
            raise Unsupported(f"operator {operator.value} over non-scalar values")
        if operator is Operator.NOT:
            return self.negate(scalars[0]), FALSE
        if operator is Operator.NEGATE:
            value = scalars[0]
            negated = -value.value if value.constant else 0  # type: ignore[operator]
            return (Scalar(repr(negated), negated) if value.constant else self.emit(f"(-{value.code})")), FALSE
        if operator is Operator.MINIMUM:
            return self.extreme("_minimum", scalars), FALSE
        if operator is Operator.MAXIMUM:
            return self.extreme("_maximum", scalars), FALSE
        if operator in (Operator.FLOOR_DIVIDE, Operator.MODULO):
            return self._division(operator, scalars[0], scalars[1])
        if operator in _SYMBOLS:
            return self.binary(operator, scalars[0], scalars[1]), FALSE
        raise Unsupported(f"operator {operator.value}")

    def _division(self, operator: Operator, left: Scalar, right: Scalar) -> tuple[Scalar, Scalar]:
        if right.constant:
            if right.value == 0:
                return Scalar("0", 0), TRUE
            if left.constant:
                value = apply_operator(operator, [left.value, right.value])
                return Scalar(repr(value), value), FALSE
            symbol = "//" if operator is Operator.FLOOR_DIVIDE else "%"
            return self.emit(f"({left.code} {symbol} {right.code})"), FALSE
        zero = self.binary(Operator.EQUAL, right, Scalar("0", 0))  # constant when the bounds decide it
        safe = self.where(zero, Scalar("1", 1), right)
        assert isinstance(safe, Scalar)
        symbol = "//" if operator is Operator.FLOOR_DIVIDE else "%"
        return self.emit(f"({left.code} {symbol} {safe.code})"), zero


__all__ = ["Translator"]
