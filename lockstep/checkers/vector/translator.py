"""Translates IR expressions to array values, as straight-line code over a whole frontier.

``Translator`` partially evaluates an expression for one binding of the action parameters (and
of comprehension variables, which it unrolls): what is known at compile time folds to a constant
through the reference ``apply_operator``; the rest becomes lines of array code (numpy or torch,
the same text for both) over one column per leaf of the packed state. Every value comes with an
error mask: the rows where the reference evaluator would raise (division by zero, a key outside
its map, the tail of an empty sequence), with ``evaluate``'s short-circuits. Integer temporaries
carry bounds, so checks they decide fold away; inside an if-then-else branch its condition is a
constant, and tests of one-bit fields compare the bit in place (``facts``). The operations on
scalars and their folding: ``scalar_code`` (the base class); maps and sequences: ``containers``.
"""

from __future__ import annotations

from collections.abc import Iterator

from lockstep.checkers.vector.containers import map_access, sequence_operation
from lockstep.checkers.vector.scalar_code import _SYMBOLS, ZERO, ScalarCode
from lockstep.checkers.vector.values import (
    FALSE,
    TRUE,
    Compound,
    Origin,
    Scalar,
    Sequence,
    Unsupported,
    VectorValue,
    constant_of,
)
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
from lockstep.spec.layout import is_scalar
from lockstep.spec.sorts import BoolSort, MapSort, RecordSort, SequenceSort, Sort

_UNBOUND = object()


class Translator(ScalarCode):
    """Translates IR expressions to vector values in one scope, with parameters bound to constants."""

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


__all__ = ["Translator"]
