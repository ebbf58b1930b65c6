"""Kernels compiled from a finished ``Machine``: whole-frontier successors, properties, symmetry.

``compile_kernels`` generates Python source over an array module (numpy or torch; the text is the
same, the backend supplies ``_where``, ``_minimum``, ``_maximum``, ``_int``, ``_rows`` and
``_stack``) and returns three functions over a frontier ``W`` of packed states (words x rows):

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

from lockstep.checkers.vector.values import (
    FALSE,
    Compound,
    Emitter,
    Scalar,
    Scope,
    Sequence,
    Translator,
    Unsupported,
    VectorValue,
    leaves_of,
    padding,
)
from lockstep.spec.compiler import stays_in_sort
from lockstep.spec.expressions import Expression, Operator
from lockstep.spec.layout import Layout
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


def compile_kernels(machine: Machine, layout: Layout, backend_namespace: Mapping[str, Any], symmetry: bool = False) -> Kernels:
    """Generate and compile the kernels; ``Unsupported`` names a construct that cannot be vectorised."""
    builder = _Builder(machine, layout)
    sources = [builder.expand_source(), builder.predicates_source(), builder.deadlocked_source()]
    permutations = 1
    if symmetry:
        source, permutations = builder.canonical_source()
        sources.append(source)
    source = "\n\n".join(sources) + "\n"
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
        outer = Scope("W")
        blocks: list[str] = []
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
                lines = []
                if error.value is not False:
                    lines.append(f"e = _rows({error.code}, N)")
                    lines.append(f"if len(e): errors.append(({tuple_id}, e))")
                if guard.value is not False:
                    lines.extend(self._successor_block(tuple_id, action.updates, bindings, guard, action.name))
                blocks.extend(lines)
        body = [*outer.lines, *blocks, f"return blocks, {enabled.code}, errors"]
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
        self, tuple_id: int, updates: tuple[tuple[str, Expression], ...], bindings: Mapping[str, Value], guard: Scalar, name: str
    ) -> list[str]:
        parent = f"P{tuple_id}"
        scope = Scope(parent)
        translator = Translator(self.layout, self.emitter, scope, bindings)
        error, out_of_bounds = FALSE, FALSE
        changed: dict[int, list[tuple[int, Scalar]]] = {}
        for variable, expression in updates:
            try:
                value, failed = translator.translate(expression)
            except Unsupported as problem:
                raise Unsupported(f"action {name} (update of {variable}): {problem}") from None
            error = translator.either(error, failed)
            position = self.variable_index[variable]
            sort = self.layout.sorts[position]
            first, last = self.layout.spans[position]
            new = _fit(translator, value, sort)
            old = leaves_of(translator.variable(variable))
            checked = not stays_in_sort(expression, sort)
            for offset, (leaf_value, old_value) in enumerate(zip(new, old, strict=True)):
                if leaf_value.code == old_value.code:
                    continue
                leaf = self.layout.leaves[first + offset]
                if checked and not leaf.boolean:
                    out_of_bounds = translator.either(out_of_bounds, _outside(translator, leaf_value, leaf.low, leaf.high))
                changed.setdefault(leaf.word, []).append((first + offset, leaf_value))
            assert last - first == len(new)
        writes = self._writes(translator, parent, changed)
        rows = f"r{tuple_id}"
        lines = [f"{rows} = _rows({guard.code}, N)", f"if len({rows}):", f"    {parent} = W[:, {rows}]"]
        body = list(scope.lines) + writes
        if error.value is not False:
            body.append(f"e = _rows({error.code}, len({rows}))")
            body.append(f"if len(e): errors.append(({tuple_id}, {rows}[e]))")
        oob = {False: "None", True: f"({rows} >= 0)"}.get(out_of_bounds.value, out_of_bounds.code)  # type: ignore[call-overload]
        body.append(f"blocks.append(({tuple_id}, {rows}, {parent}, {oob}))")
        lines.extend(_indent(body, 1).splitlines())
        return lines

    def _writes(self, translator: Translator, target: str, changed: Mapping[int, list[tuple[int, Scalar]]]) -> list[str]:
        lines = []
        for word, items in sorted(changed.items()):
            clear = 0
            constant_bits = 0
            parts: list[str] = []
            for leaf_position, value in items:
                leaf = self.layout.leaves[leaf_position]
                clear |= leaf.mask << leaf.shift
                if value.constant:
                    encoded = int(value.value) - leaf.low  # type: ignore[call-overload]
                    constant_bits |= (encoded & leaf.mask) << leaf.shift
                    continue
                code = f"_int({value.code})" if leaf.boolean else value.code
                if leaf.low:
                    code = f"({code} - {leaf.low})"
                parts.append(f"({code} << {leaf.shift})" if leaf.shift else code)
            keep = ((1 << 63) - 1) & ~clear
            expression = " | ".join([f"({target}[{word}] & {keep})", *([str(constant_bits)] if constant_bits else []), *parts])
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
            words = self._encode_words(leaves)
            image_name = f"image{count}"
            scope.lines.append(f"{image_name} = _stack([{', '.join(words)}], N)")
            lines.append(image_name)
        body = ["N = W.shape[1]", *scope.lines, "best = W"]
        for image_name in lines:
            body.append(f"best = _where(_less({image_name}, best)[None, :], {image_name}, best)")
        body.append("return best")
        return "def canonical(W):\n" + _indent(body, 1), count + 1

    def _encode_words(self, leaves: list[Scalar]) -> list[str]:
        per_word: list[list[str]] = [[] for _ in range(self.layout.words)]
        constants = [0] * self.layout.words
        for leaf, value in zip(self.layout.leaves, leaves, strict=True):
            if leaf.width == 0:
                continue
            if value.constant:
                constants[leaf.word] |= ((int(value.value) - leaf.low) & leaf.mask) << leaf.shift  # type: ignore[call-overload]
                continue
            code = f"_int({value.code})" if leaf.boolean else value.code
            if leaf.low:
                code = f"({code} - {leaf.low})"
            per_word[leaf.word].append(f"({code} << {leaf.shift})" if leaf.shift else code)
        return [" | ".join([*parts, *([str(constants[word])] if constants[word] or not parts else [])]) for word, parts in enumerate(per_word)]


def _fit(translator: Translator, value: VectorValue, sort: Sort) -> list[Scalar]:
    """The leaves of ``value`` stored in a variable of ``sort``: sequences cut or padded to capacity,
    slots past the length reset to the variable's padding when the element sorts differ."""
    if isinstance(sort, SequenceSort):
        assert isinstance(value, Sequence)
        grown = translator.widen(value, sort.capacity)
        slots = grown.slots[: sort.capacity]
        result = [value.length]
        for slot_index, slot in enumerate(slots):
            slot_leaves = _fit(translator, slot, sort.element)
            if value.element != sort.element:
                used = translator.binary(Operator.GREATER, value.length, Scalar(repr(slot_index), slot_index))
                pads = leaves_of(padding(sort.element))
                slot_leaves = [translator.where(used, leaf, pad) for leaf, pad in zip(slot_leaves, pads)]  # type: ignore[misc]
            result.extend(slot_leaves)
        return result
    if isinstance(sort, MapSort):
        assert isinstance(value, Compound)
        return [leaf for part in value.parts for leaf in _fit(translator, part, sort.value)]
    if isinstance(sort, RecordSort):
        assert isinstance(value, Compound)
        return [leaf for part, (_, field_sort) in zip(value.parts, sort.fields) for leaf in _fit(translator, part, field_sort)]
    assert isinstance(value, Scalar)
    return [value]


def _outside(translator: Translator, value: Scalar, low: int, high: int) -> Scalar:
    if value.constant:
        inside = low <= int(value.value) <= high  # type: ignore[call-overload]
        return FALSE if inside else Scalar("True", True)
    below = translator.binary(Operator.LESS, value, Scalar(repr(low), low))
    above = translator.binary(Operator.GREATER, value, Scalar(repr(high), high))
    return translator.either(below, above)


def _permute(translator: Translator, value: VectorValue, sort: Sort, target: IndexSort, mapping: tuple[int, ...]) -> VectorValue:
    """The image of ``value`` (of ``sort``) when the values of ``target`` are renamed by ``mapping``."""
    if sort == target:
        assert isinstance(value, Scalar)
        return translator.choose(value, [Scalar(repr(image), image) for image in mapping])
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
        return Compound(tuple(_permute(translator, part, field_sort, target, mapping) for part, (_, field_sort) in zip(value.parts, sort.fields)))
    if isinstance(sort, SequenceSort):
        assert isinstance(value, Sequence)
        slots = []
        for slot_index, slot in enumerate(value.slots):
            image = _permute(translator, slot, sort.element, target, mapping)
            if image is not slot:
                used = translator.binary(Operator.GREATER, value.length, Scalar(repr(slot_index), slot_index))
                image = translator.where(used, image, slot)
            slots.append(image)
        return Sequence(value.length, tuple(slots), value.element)
    return value


def _indent(lines: list[str], depth: int) -> str:
    prefix = "    " * depth
    return "".join(f"{prefix}{line}\n" for line in lines)


__all__ = ["Kernels", "Unsupported", "compile_kernels"]
