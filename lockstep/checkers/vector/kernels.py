"""Kernels compiled from a finished ``Machine``: whole-frontier successors, properties, symmetry.

``compile_kernels`` generates Python source over an array module (numpy or torch; the text is the
same, the backend supplies ``_where``, ``_minimum``, ``_maximum``, ``_int``, ``_counts``, ``_rows``,
``_lookup``, ``_less`` and ``_stack``) and returns three functions over a frontier ``W`` of packed states (words x
rows):

- ``expand(W)``: for every action x parameter tuple whose guard is not false at compile time, the
  rows where its guard holds and their successors (the parent's words with the updated fields
  rewritten), the rows whose successor leaves its sort (``in_bounds``), which rows have some
  enabled action (deadlock), and the rows where evaluation fails (a model error);
- ``predicates(W)``: each property's predicate, and ``deadlocked(W)``: the final predicate and each
  ``at_deadlock`` condition, for states with no enabled action;
- ``canonical(W)``: with symmetry, the least image of each state under the declared permutations
  (compared as word tuples), so that states of one orbit share one packed form.

The tuple ids of ``expand`` index ``Kernels.tuples``: (action position, argument tuple).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lockstep.checkers.vector.tidy import tidy
from lockstep.checkers.vector.translator import Translator
from lockstep.checkers.vector.values import (
    FALSE,
    Compound,
    Emitter,
    Origin,
    Scalar,
    Scope,
    Sequence,
    Unsupported,
    VectorValue,
    leaves_of,
    padding,
)
from lockstep.spec.compiler import stays_in_sort
from lockstep.spec.expressions import Expression, Operator
from lockstep.spec.layout import Layout, Leaf
from lockstep.spec.machine import NO_DEADLOCK, Machine, PropertyKind
from lockstep.spec.semantics import argument_space
from lockstep.spec.sorts import IndexSort, MapSort, RecordSort, SequenceSort, Sort, Value

Kernel = Callable[..., Any]


@dataclass
class Kernels:
    """The generated functions of one machine and what their outputs refer to."""

    layout: Layout
    tuples: list[tuple[int, tuple[Value, ...]]]  # tuple id -> (action position, arguments)
    expand: Kernel
    predicates: Kernel
    deadlocked: Kernel
    canonical: Kernel | None
    source: str = ""
    skipped: int = 0  # action x argument tuples whose guard is false for every state
    permutations: int = 1
    namespace: dict[str, Any] = field(default_factory=dict)


def compile_kernels(
    machine: Machine, layout: Layout, backend_namespace: Mapping[str, Any], symmetry: bool = False
) -> Kernels:
    """Generate and compile the kernels; ``Unsupported`` names a construct that cannot be vectorised."""
    builder = _Builder(machine, layout)
    sources = [builder.expand_source(), builder.predicates_source(), builder.deadlocked_source()]
    permutations = 1
    if symmetry:
        source, permutations = builder.canonical_source()
        sources.append(source)
    source = tidy("\n\n".join(sources))
    namespace: dict[str, Any] = dict(backend_namespace)
    exec(compile(source, f"<lockstep-vector {machine.name}>", "exec"), namespace)  # noqa: S102 - our own generated code
    return Kernels(
        layout,
        builder.tuples,
        namespace["expand"],
        namespace["predicates"],
        namespace["deadlocked"],
        namespace.get("canonical"),
        source,
        builder.skipped,
        permutations,
        namespace,
    )


class _Builder:
    def __init__(self, machine: Machine, layout: Layout) -> None:
        self.machine = machine
        self.layout = layout
        self.emitter = Emitter()
        self.tuples: list[tuple[int, tuple[Value, ...]]] = []
        self.skipped = 0
        self.variable_index = {name: position for position, name in enumerate(layout.names)}

    # -------------------------------------------------------------------------------- successors
    def expand_source(self) -> str:
        """``expand(W)``: the guards of every tuple first, then one count of their rows (a single
        synchronisation on a GPU), then each enabled tuple's successors. Errors are masks, checked
        by the caller in one reduction."""
        outer = Scope("W")
        blocks: list[str] = []
        guards: list[str] = []
        enabled = FALSE
        for action_position, action in enumerate(self.machine.actions):
            for arguments in argument_space(action):
                bindings = {parameter.name: value for parameter, value in zip(action.parameters, arguments)}
                translator = Translator(self.layout, self.emitter, outer, bindings)
                guard, error = self._guard(translator, action.guard, action.name)
                if guard.value is False and error.value is False:
                    self.skipped += 1
                    continue
                tuple_id = len(self.tuples)
                self.tuples.append((action_position, arguments))
                enabled = translator.either(enabled, guard)
                guards.append(guard.code)
                if error.value is not False:
                    blocks.append(f"errors.append(({tuple_id}, {error.code}, None))")
                if guard.value is not False:
                    blocks.extend(self._successor_block(tuple_id, action.updates, bindings, guard, action.name))
        counts = f"counts = _counts(({''.join(f'{guard}, ' for guard in guards)}), N)"
        body = [*outer.lines, counts, *blocks, f"return blocks, {enabled.code}, errors"]
        return "def expand(W):\n    N = W.shape[1]\n    blocks = []\n    errors = []\n" + _indent(body, 1)

    def _guard(self, translator: Translator, conjuncts: tuple[Expression, ...], where: str) -> tuple[Scalar, Scalar]:
        guard, error = Scalar("True", True), FALSE
        for conjunct in conjuncts:
            value, failed = self._scalar(translator, conjunct, f"action {where}")
            error = translator.either(error, translator.both(guard, failed))
            guard = translator.both(guard, value)
            if guard.value is False:
                break
        return guard, error

    def _scalar(self, translator: Translator, expression: Expression, where: str) -> tuple[Scalar, Scalar]:
        try:
            return translator.scalar(expression)
        except Unsupported as error:
            raise Unsupported(f"{where}: {error}") from None

    def _successor_block(
        self,
        tuple_id: int,
        updates: tuple[tuple[str, Expression], ...],
        bindings: Mapping[str, Value],
        guard: Scalar,
        name: str,
    ) -> list[str]:
        parent = f"P{tuple_id}"
        scope = Scope(parent)
        translator = Translator(self.layout, self.emitter, scope, bindings)
        error, out_of_bounds = FALSE, FALSE
        changed: dict[int, list[tuple[int, str | int]]] = {}  # word -> (bits cleared, new bits: code or constant)
        for variable, expression in updates:
            try:
                value, failed = translator.translate(expression)
            except Unsupported as problem:
                raise Unsupported(f"action {name} (update of {variable}): {problem}") from None
            error = translator.either(error, failed)
            position = self.variable_index[variable]
            sort = self.layout.sorts[position]
            first, last = self.layout.spans[position]
            new = _fit(translator, self.layout, value, sort, first)
            old = leaves_of(translator.variable(variable))
            checked = not stays_in_sort(expression, sort)
            offset = 0
            for item in new:
                if isinstance(item, Origin):
                    slots = self.layout.sequences[item.length_leaf]
                    offset += slots.capacity * slots.per_slot
                    if item.kind == "read":
                        continue
                    word_change, leaving = self._packed(translator, parent, item, checked)
                    out_of_bounds = translator.either(out_of_bounds, leaving)
                    word, cleared, bits = word_change
                    changed.setdefault(word, []).append((cleared, bits))
                    continue
                old_value = old[offset]
                leaf = self.layout.leaves[first + offset]
                offset += 1
                if item.code == old_value.code:
                    continue
                if checked and not leaf.boolean:
                    out_of_bounds = translator.either(out_of_bounds, _outside(translator, item, leaf.low, leaf.high))
                changed.setdefault(leaf.word, []).append((leaf.mask << leaf.shift, _encoded(item, leaf)))
            assert offset == last - first == len(old)
        writes = self._writes(translator, parent, changed)
        rows = f"r{tuple_id}"
        lines = [
            f"if counts[{tuple_id}]:",
            f"    {rows} = _rows({guard.code}, N, counts[{tuple_id}])",
            f"    {parent} = W[:, {rows}]",
        ]
        body = list(scope.lines) + writes
        if error.value is not False:
            body.append(f"errors.append(({tuple_id}, {error.code}, {rows}))")
        oob = {False: "None", True: f"({rows} >= 0)"}.get(out_of_bounds.value, out_of_bounds.code)  # type: ignore[call-overload]
        body.append(f"blocks.append(({tuple_id}, {rows}, {parent}, {oob}, counts[{tuple_id}]))")
        lines.extend(_indent(body, 1).splitlines())
        return lines

    def _packed(
        self, translator: Translator, parent: str, origin: Origin, checked: bool
    ) -> tuple[tuple[int, int, str], Scalar]:
        """The new bits of a sequence's slot region after an append or a tail (where the origin's
        condition holds), as (word, bits cleared, code); and the rows whose appended element leaves its sort."""
        slots = self.layout.sequences[origin.length_leaf]
        assert slots.word is not None
        region = ((1 << (slots.capacity * slots.stride)) - 1) << slots.base
        current = f"({parent}[{slots.word}] & {region})"
        leaving = FALSE
        length = translator.column(origin.length_leaf)
        if origin.kind == "tail":
            shift = slots.base + slots.stride
            code = f"(({parent}[{slots.word}] >> {shift}) & {region >> shift}) << {slots.base}"
        else:
            assert origin.element is not None
            parts, constant = [], 0
            element_leaves = _fit(translator, self.layout, origin.element, None, slots.first)
            for index, value in enumerate(element_leaves):
                assert isinstance(value, Scalar)
                leaf = self.layout.leaves[slots.first + index]
                shift = leaf.shift - slots.base
                if checked and not leaf.boolean:
                    leaving = translator.either(leaving, _outside(translator, value, leaf.low, leaf.high))
                encoded = _encoded(value, leaf, shift=0)
                if isinstance(encoded, int):
                    constant |= encoded << shift
                else:
                    parts.append(f"({encoded} << {shift})" if shift else encoded)
            bits = " | ".join([*parts, *([str(constant)] if constant or not parts else [])])
            offset = (
                f"(({length.code} * {slots.stride}) + {slots.base})"
                if not length.constant
                else str(int(length.value) * slots.stride + slots.base)  # type: ignore[call-overload]
            )
            code = f"{current} | (({bits}) << {offset})"
        if origin.condition is not None:
            code = f"_where({origin.condition.code}, {code}, {current})"
            leaving = translator.both(origin.condition, leaving)
        return (slots.word, region, f"({code})"), leaving

    def _writes(
        self, translator: Translator, target: str, changed: Mapping[int, list[tuple[int, str | int]]]
    ) -> list[str]:
        lines = []
        for word, items in sorted(changed.items()):
            clear = 0
            constant_bits = 0
            parts: list[str] = []
            for cleared, bits in items:
                clear |= cleared
                if isinstance(bits, int):
                    constant_bits |= bits
                else:
                    parts.append(bits)
            keep = ((1 << 63) - 1) & ~clear
            expression = " | ".join(
                [f"({target}[{word}] & {keep})", *([str(constant_bits)] if constant_bits else []), *parts]
            )
            lines.append(f"{target}[{word}] = {expression}")
        return lines

    # ------------------------------------------------------------------------------- properties
    def predicates_source(self) -> str:
        scope = Scope("W")
        translator = Translator(self.layout, self.emitter, scope)
        results, error = [], FALSE
        for prop in self.machine.properties:
            if prop.kind is PropertyKind.LEADS_TO:
                results.append("None")
                continue
            value, failed = self._scalar(translator, prop.predicate, f"property {prop.name}")
            error = translator.either(error, failed)
            results.append(value.code)
        body = [*scope.lines, f"return ({', '.join(results)},), {error.code}"]
        return "def predicates(W):\n" + _indent(body, 1)

    def deadlocked_source(self) -> str:
        scope = Scope("W")
        translator = Translator(self.layout, self.emitter, scope)
        results, error = [], FALSE
        for prop in self.machine.properties:
            condition = self.machine.final if prop.name == NO_DEADLOCK else prop.at_deadlock
            if condition is None:
                results.append("None")
                continue
            value, failed = self._scalar(translator, condition, f"property {prop.name}")
            error = translator.either(error, failed)
            results.append(value.code)
        body = [*scope.lines, f"return ({', '.join(results)},), {error.code}"]
        return "def deadlocked(W):\n" + _indent(body, 1)

    # ---------------------------------------------------------------------------------- symmetry
    def canonical_source(self) -> tuple[str, int]:
        from lockstep.checkers.symmetry import Canonicalizer

        Canonicalizer(self.machine)  # validates the declaration, with its messages
        groups: list[list[tuple[IndexSort, tuple[int, ...]]]] = []
        for symmetric, members in self.machine.symmetric:
            chosen = sorted(members)
            group = []
            for image in itertools.permutations(chosen):
                renamed = list(range(symmetric.count))
                for source, destination in zip(chosen, image):
                    renamed[source] = destination
                group.append((symmetric, tuple(renamed)))
            groups.append(group)
        scope = Scope("W")
        translator = Translator(self.layout, self.emitter, scope)
        originals = [translator.variable(name) for name in self.layout.names]
        lines: list[str] = []
        count = 0
        for combination in itertools.product(*groups):
            if all(mapping == tuple(range(len(mapping))) for _, mapping in combination):
                continue
            count += 1
            images = []
            for value, sort in zip(originals, self.layout.sorts):
                for symmetric_sort, mapping in combination:
                    value = _permute(translator, value, sort, symmetric_sort, mapping)
                images.append(value)
            leaves = [leaf for image in images for leaf in leaves_of(image)]
            words = self._encode_words(translator, leaves)
            image_name = f"image{count}"
            scope.lines.append(f"{image_name} = _stack([{', '.join(words)}], N)")
            lines.append(image_name)
        body = ["N = W.shape[1]", *scope.lines, "best = W"]
        for image_name in lines:
            body.append(f"best = _where(_less({image_name}, best)[None, :], {image_name}, best)")
        body.append("return best")
        return "def canonical(W):\n" + _indent(body, 1), count + 1

    def _encode_words(self, translator: Translator, leaves: list[Scalar]) -> list[str]:
        """The words of a state whose leaves hold ``leaves``. A leaf that holds another leaf's value
        unchanged is a bit move; moves between the same two words by the same distance are one
        masked shift (a permutation mostly moves whole blocks: a rank's entries of a map)."""
        reads = {
            translator.column(position).code: position for position, leaf in enumerate(self.layout.leaves) if leaf.width
        }
        moves: dict[tuple[int, int, int], int] = {}  # (target word, source word, shift) -> source bits
        per_word: list[list[str]] = [[] for _ in range(self.layout.words)]
        constants = [0] * self.layout.words
        for leaf, value in zip(self.layout.leaves, leaves, strict=True):
            if leaf.width == 0:
                continue
            source = None if value.constant else reads.get(value.code)
            if source is not None and (self.layout.leaves[source].low, self.layout.leaves[source].width) == (
                leaf.low,
                leaf.width,
            ):
                origin = self.layout.leaves[source]
                key = (leaf.word, origin.word, leaf.shift - origin.shift)
                moves[key] = moves.get(key, 0) | (origin.mask << origin.shift)
                continue
            encoded = _encoded(value, leaf)
            if isinstance(encoded, int):
                constants[leaf.word] |= encoded
            else:
                per_word[leaf.word].append(encoded)
        for (target, source, distance), bits in moves.items():
            moved = f"(W[{source}] & {bits})"
            per_word[target].append(
                moved if distance == 0 else f"({moved} << {distance})" if distance > 0 else f"({moved} >> {-distance})"
            )
        return [
            " | ".join([*parts, *([str(constants[word])] if constants[word] or not parts else [])])
            for word, parts in enumerate(per_word)
        ]


def _fit(
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


def _encoded(value: Scalar, leaf: Leaf, shift: int | None = None) -> str | int:
    """The bits of ``value`` in ``leaf``, shifted to its place (or by ``shift``): a constant or code."""
    places = leaf.shift if shift is None else shift
    if value.constant:
        number: int = int(value.value)  # type: ignore[call-overload]
        return ((number - leaf.low) & leaf.mask) << places
    code = f"_int({value.code})" if leaf.boolean else value.code
    if leaf.low:
        code = f"({code} - {leaf.low})"
    return f"({code} << {places})" if places else code


def _outside(translator: Translator, value: Scalar, low: int, high: int) -> Scalar:
    if value.constant:
        inside = low <= int(value.value) <= high  # type: ignore[call-overload]
        return FALSE if inside else Scalar("True", True)
    below = translator.binary(Operator.LESS, value, Scalar(repr(low), low))
    above = translator.binary(Operator.GREATER, value, Scalar(repr(high), high))
    return translator.either(below, above)


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


def _indent(lines: list[str], depth: int) -> str:
    prefix = "    " * depth
    return "".join(f"{prefix}{line}\n" for line in lines)


__all__ = ["Kernels", "Unsupported", "compile_kernels"]
