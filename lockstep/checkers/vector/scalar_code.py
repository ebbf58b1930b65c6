"""The scalar half of the translation to array code: the base of ``Translator``.

``ScalarCode`` emits one line of array code per operation on scalar columns and folds what it can:
constants through the reference ``apply_operator``, comparisons whose operands' bounds decide them,
negations of comparisons (one complementary comparison, often one already computed), conjunctions
and disjunctions of one-bit tests of one word (one test, ``facts``), a constant operand written
second so that ``0 >= x`` and ``x <= 0`` share a temporary. It also holds the branch conditions
assumed while a branch is translated, the bounds of integer temporaries, if-then-else over scalars
and compounds, and division with its error mask. ``translator`` adds the expressions.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from collections.abc import Sequence as Sequences
from contextlib import contextmanager

from lockstep.checkers.vector.containers import merged_origin
from lockstep.checkers.vector.facts import bit_test, column_code, decided, merged_test
from lockstep.checkers.vector.values import (
    FALSE,
    TRUE,
    Compound,
    Emitter,
    Scalar,
    Scope,
    Sequence,
    Unsupported,
    VectorValue,
    padding,
)
from lockstep.spec.evaluation import apply_operator
from lockstep.spec.expressions import Operator
from lockstep.spec.layout import Layout
from lockstep.spec.sorts import Value

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


class ScalarCode:
    """Scalar operations as array code in one scope, with what is known folded (``Translator``'s base)."""

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


__all__ = ["ZERO", "ScalarCode"]
