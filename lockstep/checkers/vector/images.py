"""Symmetry as array code: the least image of every state of a frontier under the declared permutations.

``canonical_source`` generates ``canonical(W)``: for every permutation of the symmetric index
values (but the identity) the image of each state, built as bit-block moves of the packed words
(a rank's entries of a map move together) plus table lookups for values of the permuted sort;
each state's least image (compared as word tuples) is its representative, so that states of one
orbit share one packed form. ``lockstep.checkers.vector.kernels`` compiles it with the others.
"""

from __future__ import annotations

import itertools

from lockstep.checkers.vector.packing import encoded, indent
from lockstep.checkers.vector.translator import Translator
from lockstep.checkers.vector.values import Compound, Emitter, Scalar, Scope, Sequence, VectorValue, leaves_of
from lockstep.spec.expressions import Operator
from lockstep.spec.layout import Layout
from lockstep.spec.machine import Machine
from lockstep.spec.sorts import IndexSort, MapSort, RecordSort, SequenceSort, Sort


def canonical_source(machine: Machine, layout: Layout, emitter: Emitter) -> tuple[str, int]:
    """``canonical(W)``'s source: each state's least image under the declared permutations (compared
    as word tuples), and the number of permutations, the identity included."""

    from lockstep.checkers.symmetry import Canonicalizer  # noqa: PLC0415 - the checkers package imports this one

    Canonicalizer(machine)  # validates the declaration, with its messages
    groups: list[list[tuple[IndexSort, tuple[int, ...]]]] = []
    for symmetric, members in machine.symmetric:
        chosen = sorted(members)
        group = []
        for image in itertools.permutations(chosen):
            renamed = list(range(symmetric.count))
            for source, destination in zip(chosen, image):
                renamed[source] = destination
            group.append((symmetric, tuple(renamed)))
        groups.append(group)
    scope = Scope("W")
    translator = Translator(layout, emitter, scope)
    originals = [translator.variable(name) for name in layout.names]
    lines: list[str] = []
    count = 0
    for combination in itertools.product(*groups):
        if all(mapping == tuple(range(len(mapping))) for _, mapping in combination):
            continue
        count += 1
        images = []
        for value, sort in zip(originals, layout.sorts):
            for symmetric_sort, mapping in combination:
                value = _permute(translator, value, sort, symmetric_sort, mapping)
            images.append(value)
        leaves = [leaf for image in images for leaf in leaves_of(image)]
        words = _encode_words(layout, translator, leaves)
        image_name = f"image{count}"
        scope.lines.append(f"{image_name} = _stack([{', '.join(words)}], N)")
        lines.append(image_name)
    body = ["N = W.shape[1]", *scope.lines, "best = W"]
    for image_name in lines:
        body.append(f"best = _where(_less({image_name}, best)[None, :], {image_name}, best)")
    body.append("return best")
    return "def canonical(W):\n" + indent(body, 1), count + 1


def _encode_words(layout: Layout, translator: Translator, leaves: list[Scalar]) -> list[str]:
    """The words of a state whose leaves hold ``leaves``. A leaf that holds another leaf's value
    unchanged is a bit move; moves between the same two words by the same distance are one
    masked shift (a permutation mostly moves whole blocks: a rank's entries of a map)."""
    reads = {translator.column(position).code: position for position, leaf in enumerate(layout.leaves) if leaf.width}
    moves: dict[tuple[int, int, int], int] = {}  # (target word, source word, shift) -> source bits
    per_word: list[list[str]] = [[] for _ in range(layout.words)]
    constants = [0] * layout.words
    for leaf, value in zip(layout.leaves, leaves, strict=True):
        if leaf.width == 0:
            continue
        source = None if value.constant else reads.get(value.code)
        if source is not None and (layout.leaves[source].low, layout.leaves[source].width) == (
            leaf.low,
            leaf.width,
        ):
            origin = layout.leaves[source]
            key = (leaf.word, origin.word, leaf.shift - origin.shift)
            moves[key] = moves.get(key, 0) | (origin.mask << origin.shift)
            continue
        bits = encoded(value, leaf)
        if isinstance(bits, int):
            constants[leaf.word] |= bits
        else:
            per_word[leaf.word].append(bits)
    for (target, source, distance), bits in moves.items():
        moved = f"(W[{source}] & {bits})"
        per_word[target].append(
            moved if distance == 0 else f"({moved} << {distance})" if distance > 0 else f"({moved} >> {-distance})"
        )
    return [
        " | ".join([*parts, *([str(constants[word])] if constants[word] or not parts else [])])
        for word, parts in enumerate(per_word)
    ]


def _permute(
    translator: Translator, value: VectorValue, sort: Sort, target: IndexSort, mapping: tuple[int, ...]
) -> VectorValue:
    """The image of ``value`` (of ``sort``) when the values of ``target`` are renamed by ``mapping``."""
    if sort == target:
        assert isinstance(value, Scalar)
        if value.constant:
            renamed = mapping[int(value.value)]  # type: ignore[call-overload]
            return Scalar(repr(renamed), renamed)
        return translator.emit(f"_lookup({mapping!r}, {value.code})")
    if isinstance(sort, MapSort):
        assert isinstance(value, Compound)
        parts = [_permute(translator, part, sort.value, target, mapping) for part in value.parts]
        if sort.key == target:
            moved = list(parts)
            for source, destination in enumerate(mapping):
                moved[destination] = parts[source]
            parts = moved
        return Compound(tuple(parts))
    if isinstance(sort, RecordSort):
        assert isinstance(value, Compound)
        return Compound(
            tuple(
                _permute(translator, part, field_sort, target, mapping)
                for part, (_, field_sort) in zip(value.parts, sort.fields)
            )
        )
    if isinstance(sort, SequenceSort):
        assert isinstance(value, Sequence)
        slots = []
        for slot_index, slot in enumerate(value.slots):
            image = _permute(translator, slot, sort.element, target, mapping)
            if image is not slot and mapping[0] != 0:  # an unused slot's padding (value 0) would change
                used = translator.binary(Operator.GREATER, value.length, Scalar(repr(slot_index), slot_index))
                image = translator.where(used, image, slot)
            slots.append(image)
        return Sequence(value.length, tuple(slots), value.element)
    return value


__all__ = ["canonical_source"]
