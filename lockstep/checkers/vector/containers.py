"""Map and sequence operations over vector values: select and store, length, at, append and tail.

A map is a ``Compound`` of its values in key order, so a key that is a compile-time constant picks
one part and any other key becomes a chain of ``where``s; a sequence is a ``Sequence`` of fixed
capacity, whose append and tail keep an ``Origin`` so that ``packing`` can write its slots as one
shift (``merged_origin`` keeps it through an if-then-else). Each operation returns its value and the
mask of rows where the reference evaluator raises.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lockstep.checkers.vector.values import (
    FALSE,
    TRUE,
    Compound,
    Origin,
    Scalar,
    Sequence,
    Unsupported,
    VectorValue,
    padding,
)
from lockstep.spec.compiler import stays_in_sort
from lockstep.spec.expressions import Operation, Operator
from lockstep.spec.sorts import MapSort

if TYPE_CHECKING:
    from lockstep.checkers.vector.scalar_code import ScalarCode
    from lockstep.checkers.vector.translator import Translator


def map_access(translator: Translator, expression: Operation, values: list[VectorValue]) -> tuple[VectorValue, Scalar]:
    """A select or a store: ``values`` are the map, the key and (a store) the new value."""
    container, key = values[0], values[1]
    map_sort = expression.arguments[0].sort
    assert isinstance(container, Compound) and isinstance(key, Scalar) and isinstance(map_sort, MapSort)
    size = len(container.parts)
    if key.constant:
        assert isinstance(key.value, int)
        if not 0 <= key.value < size:
            return (container if expression.operator is Operator.STORE else container.parts[0]), TRUE
        if expression.operator is Operator.SELECT:
            return container.parts[key.value], FALSE
        parts = list(container.parts)
        parts[key.value] = values[2]
        return Compound(tuple(parts)), FALSE
    if stays_in_sort(expression.arguments[1], map_sort.key):
        error = FALSE
    else:
        low = translator.binary(Operator.LESS, key, Scalar("0", 0))
        high = translator.binary(Operator.GREATER_EQUAL, key, Scalar(repr(size), size))
        error = translator.either(low, high)
    if expression.operator is Operator.SELECT:
        return translator.choose(key, container.parts), error
    stored = tuple(
        translator.where(translator.binary(Operator.EQUAL, key, Scalar(repr(position), position)), values[2], part)
        for position, part in enumerate(container.parts)
    )
    return Compound(stored), error


def sequence_operation(
    translator: Translator, operator: Operator, sequence: Sequence, values: list[VectorValue]
) -> tuple[VectorValue, Scalar]:
    length, slots = sequence.length, sequence.slots
    if operator is Operator.LENGTH:
        return length, FALSE
    if operator is Operator.AT:
        position = values[1]
        assert isinstance(position, Scalar)
        error = translator.either(
            translator.binary(Operator.LESS, position, Scalar("0", 0)),
            translator.binary(Operator.GREATER_EQUAL, position, length),
        )
        if position.constant:
            assert isinstance(position.value, int)
            if not 0 <= position.value < len(slots):
                return (slots[0] if slots else Scalar("0", 0)), TRUE
            return slots[position.value], error
        if not slots:
            return Scalar("0", 0), TRUE
        return translator.choose(position, slots), error
    if operator is Operator.APPEND:
        element = values[1]
        filler = padding(sequence.element)
        grown = []
        for index, slot in enumerate((*slots, filler)):
            here = translator.binary(Operator.EQUAL, length, Scalar(repr(index), index))
            grown.append(translator.where(here, element, slot))
        origin = sequence.origin
        derived = (
            Origin("append", origin.length_leaf, element) if origin is not None and origin.kind == "read" else None
        )
        return Sequence(
            translator.binary(Operator.ADD, length, Scalar("1", 1)), tuple(grown), sequence.element, derived
        ), FALSE
    if operator is Operator.TAIL:
        error = translator.binary(Operator.LESS_EQUAL, length, Scalar("0", 0))
        if not slots:
            return sequence, TRUE
        shifted = (*slots[1:], padding(sequence.element))
        origin = sequence.origin
        derived = Origin("tail", origin.length_leaf) if origin is not None and origin.kind == "read" else None
        return Sequence(
            translator.binary(Operator.SUBTRACT, length, Scalar("1", 1)), shifted, sequence.element, derived
        ), error
    raise Unsupported(f"operator {operator.value} on a sequence")


def merged_origin(
    translator: ScalarCode, condition: Scalar, then: Origin | None, otherwise: Origin | None
) -> Origin | None:
    """The origin of ``then if condition else otherwise`` when one side leaves the state's sequence as it is."""
    if then is None or otherwise is None or then.length_leaf != otherwise.length_leaf:
        return None
    if otherwise.kind == "read":
        if then.kind == "read":
            return then
        return Origin(
            then.kind,
            then.length_leaf,
            then.element,
            condition if then.condition is None else translator.both(condition, then.condition),
        )
    if then.kind == "read":
        negated = translator.negate(condition)
        return Origin(
            otherwise.kind,
            otherwise.length_leaf,
            otherwise.element,
            negated if otherwise.condition is None else translator.both(negated, otherwise.condition),
        )
    return None


__all__ = ["map_access", "merged_origin", "sequence_operation"]
