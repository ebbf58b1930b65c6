"""Writing values into packed words: the leaves an update stores, their encoded bits, range checks.

``fit`` lays a value out as the leaves of the variable it is stored in (sequences cut or padded
to capacity); ``encoded`` gives a leaf's bits in place (a constant or code); ``outside`` the rows
whose value leaves a leaf's range (``in_bounds``); ``packed_region`` the new bits of a sequence's
one-word slot region after an append or a tail, written as one shift.
"""

from __future__ import annotations

from lockstep.checkers.vector.translator import Translator
from lockstep.checkers.vector.values import (
    FALSE,
    Compound,
    Origin,
    Scalar,
    VectorValue,
    leaves_of,
    padding,
)
from lockstep.spec.expressions import Operator
from lockstep.spec.layout import Layout, Leaf
from lockstep.spec.sorts import MapSort, RecordSort, SequenceSort, Sort


def fit(
    translator: Translator, layout: Layout, value: VectorValue, sort: Sort | None, position: int
) -> list[Scalar | Origin]:
    """The leaves of ``value`` stored at leaf ``position`` (of ``sort``; None: the sort laid out
    there), sequences cut or padded to capacity, slots past the length reset to the padding when the
    element sorts differ. A sequence derived from the very sequence stored there, whose slots share
    one word, comes back as its ``Origin``: all its slot leaves written as one shift."""
    items: list[Scalar | Origin] = []
    _fit_into(translator, layout, value, sort, position, items)
    return items


def _fit_into(
    translator: Translator,
    layout: Layout,
    value: VectorValue,
    sort: Sort | None,
    position: int,
    items: list[Scalar | Origin],
) -> int:
    if isinstance(value, Scalar):
        items.append(value)
        return position + 1
    if isinstance(value, Compound):
        children = _child_sorts(sort, len(value.parts))
        for part, child in zip(value.parts, children):
            position = _fit_into(translator, layout, part, child, position, items)
        return position
    slots = layout.sequences[position]
    element = sort.element if isinstance(sort, SequenceSort) else value.element
    items.append(value.length)
    origin = value.origin
    if origin is not None and origin.length_leaf == position and slots.word is not None and value.element == element:
        items.append(origin)
        return slots.first + slots.capacity * slots.per_slot
    grown = translator.widen(value, slots.capacity)
    cursor = slots.first
    for slot_index, slot in enumerate(grown.slots[: slots.capacity]):
        slot_items: list[Scalar | Origin] = []
        cursor = _fit_into(translator, layout, slot, element, cursor, slot_items)
        if value.element != element:
            used = translator.binary(Operator.GREATER, value.length, Scalar(repr(slot_index), slot_index))
            pads = leaves_of(padding(element))
            slot_items = [
                translator.where(used, leaf, pad) if isinstance(leaf, Scalar) else leaf  # type: ignore[misc]
                for leaf, pad in zip(slot_items, pads)
            ]
        items.extend(slot_items)
    return cursor


def _child_sorts(sort: Sort | None, count: int) -> list[Sort | None]:
    if isinstance(sort, MapSort):
        return [sort.value] * count
    if isinstance(sort, RecordSort):
        return [field_sort for _, field_sort in sort.fields]
    return [None] * count


def encoded(value: Scalar, leaf: Leaf, shift: int | None = None) -> str | int:
    """The bits of ``value`` in ``leaf``, shifted to its place (or by ``shift``): a constant or code."""
    places = leaf.shift if shift is None else shift
    if value.constant:
        number: int = int(value.value)  # type: ignore[call-overload]
        return ((number - leaf.low) & leaf.mask) << places
    code = f"_int({value.code})" if leaf.boolean else value.code
    if leaf.low:
        code = f"({code} - {leaf.low})"
    return f"({code} << {places})" if places else code


def outside(translator: Translator, value: Scalar, low: int, high: int) -> Scalar:
    if value.constant:
        inside = low <= int(value.value) <= high  # type: ignore[call-overload]
        return FALSE if inside else Scalar("True", True)
    known = translator.value_range(value)
    if known is not None and low <= known[0] and known[1] <= high:  # e.g. a stored field, or a choice of them
        return FALSE
    span = high - low + 1
    if span & (span - 1) == 0:  # a range of 2**k values: one shift tells (negative values shift to -1)
        shifted = value.code if low == 0 else f"({value.code} - {low})" if low > 0 else f"({value.code} + {-low})"
        return translator.emit(f"(({shifted} >> {span.bit_length() - 1}) != 0)")
    below = translator.binary(Operator.LESS, value, Scalar(repr(low), low))
    above = translator.binary(Operator.GREATER, value, Scalar(repr(high), high))
    return translator.either(below, above)


def packed_region(
    translator: Translator, layout: Layout, parent: str, origin: Origin, checked: bool
) -> tuple[tuple[int, int, str | int], Scalar]:
    """The new bits of a sequence's slot region after an append or a tail (where the origin's
    condition holds), as (word, bits cleared, code or constant); and the rows whose appended element
    leaves its sort."""
    slots = layout.sequences[origin.length_leaf]
    assert slots.word is not None
    region = ((1 << (slots.capacity * slots.stride)) - 1) << slots.base
    current = f"({parent}[{slots.word}] & {region})"
    leaving = FALSE
    length = translator.column(origin.length_leaf)
    if origin.kind == "tail":
        shift = slots.base + slots.stride
        if region >> shift == 0:  # the tail of a one-slot sequence: its region is all zero
            if origin.condition is None:
                return (slots.word, region, 0), leaving
            code = "0"
        else:
            code = f"(({parent}[{slots.word}] >> {shift}) & {region >> shift}) << {slots.base}"
    else:
        assert origin.element is not None
        parts, constant = [], 0
        element_leaves = fit(translator, layout, origin.element, None, slots.first)
        for index, value in enumerate(element_leaves):
            assert isinstance(value, Scalar)
            leaf = layout.leaves[slots.first + index]
            shift = leaf.shift - slots.base
            if checked and not leaf.boolean:
                leaving = translator.either(leaving, outside(translator, value, leaf.low, leaf.high))
            value_bits = encoded(value, leaf, shift=0)
            if isinstance(value_bits, int):
                constant |= value_bits << shift
            else:
                parts.append(f"({value_bits} << {shift})" if shift else value_bits)
        bits = " | ".join([*parts, *([str(constant)] if constant or not parts else [])])
        offset = (
            f"(({length.code} * {slots.stride}) + {slots.base})"
            if not length.constant
            else str(int(length.value) * slots.stride + slots.base)  # type: ignore[call-overload]
        )
        code = f"{current} | (({bits}) << {offset})"
    if origin.condition is not None and not origin.condition.constant:
        code = f"_where({origin.condition.code}, {code}, {current})"
        leaving = translator.both(origin.condition, leaving)
    elif origin.condition is not None and not origin.condition.value:
        return (slots.word, region, current), FALSE  # the sequence stays as it is in every row
    return (slots.word, region, f"({code})"), leaving


def indent(lines: list[str], depth: int) -> str:
    prefix = "    " * depth
    return "".join(f"{prefix}{line}\n" for line in lines)


__all__ = ["encoded", "fit", "indent", "outside", "packed_region"]
