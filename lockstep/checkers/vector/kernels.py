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

The tuple ids of ``expand`` index ``Kernels.tuples``: (action position, argument tuple). This module
owns the successor and property kernels; how updated values are packed into words is in
``packing``, the symmetry kernel in ``images``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import CodeType
from typing import Any

from lockstep.checkers.vector import source_cache
from lockstep.checkers.vector.facts import guard_facts
from lockstep.checkers.vector.images import canonical_source
from lockstep.checkers.vector.packing import encoded, fit, indent, outside, packed_region
from lockstep.checkers.vector.tidy import tidy
from lockstep.checkers.vector.translator import Translator
from lockstep.checkers.vector.values import (
    FALSE,
    Emitter,
    Origin,
    Scalar,
    Scope,
    Unsupported,
    leaves_of,
)
from lockstep.spec.compiler import stays_in_sort
from lockstep.spec.expressions import Expression
from lockstep.spec.layout import Layout
from lockstep.spec.machine import NO_DEADLOCK, Machine, PropertyKind
from lockstep.spec.semantics import argument_space
from lockstep.spec.sorts import Value

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


@functools.lru_cache(maxsize=32)
def _compiled(source: str, filename: str) -> CodeType:
    """The code object of a generated source, compiled once per process (``check --all`` and a
    benchmark's repeats check the same models again)."""
    return compile(source, filename, "exec")


def _read_back(name: str, title: str, backend_namespace: Mapping[str, Any]) -> tuple[Any, dict[str, Any]] | None:
    """The cached (verified) kernels under ``name`` and the namespace their source defines, or None;
    an entry whose source does not compile, run or define the kernels is removed, to be made again."""
    cached = source_cache.read(name)
    if cached is None:
        return None
    generated, entry = cached
    namespace: dict[str, Any] = dict(backend_namespace)
    try:
        exec(_compiled(generated[0], title), namespace)  # noqa: S102 - our own signed entry
    except Exception as error:  # noqa: BLE001 - any failure of a cached entry: it is made again
        source_cache.reject(entry, f"it does not compile or run ({type(error).__name__})")
        return None
    if not all(kernel in namespace for kernel in ("expand", "predicates", "deadlocked")):
        source_cache.reject(entry, "it does not define the kernels")
        return None
    return generated, namespace


def compile_kernels(
    machine: Machine, layout: Layout, backend_namespace: Mapping[str, Any], symmetry: bool = False
) -> Kernels:
    """Generate (or read back from ``source_cache``) and compile the kernels; ``Unsupported`` names
    a construct that cannot be vectorised."""
    name = source_cache.key(machine, symmetry)
    title = f"<lockstep-vector {machine.name}>"
    found = _read_back(name, title, backend_namespace)
    if found is None:
        builder = _Builder(machine, layout)
        sources = [builder.expand_source(), builder.predicates_source(), builder.deadlocked_source()]
        permutations = 1
        if symmetry:
            text, permutations = canonical_source(machine, layout, builder.emitter)
            sources.append(text)
        generated = (tidy("\n\n".join(sources)), builder.tuples, builder.skipped, permutations)
        source_cache.write(name, generated)
        namespace: dict[str, Any] = dict(backend_namespace)
        exec(_compiled(generated[0], title), namespace)  # noqa: S102 - our own generated code
    else:
        generated, namespace = found
    source, tuples, skipped, permutations = generated
    return Kernels(
        layout,
        tuples,
        namespace["expand"],
        namespace["predicates"],
        namespace["deadlocked"],
        namespace.get("canonical"),
        source,
        skipped,
        permutations,
        namespace,
    )


def canonical_for(kernels: Kernels, backend_namespace: Mapping[str, Any]) -> Kernel | None:
    """``kernels``' ``canonical`` compiled again against another backend's helpers (numpy, say: a
    path is rebuilt one state at a time, and on a GPU each call would cost hundreds of launches)."""
    start = kernels.source.find("def canonical(")
    if kernels.canonical is None or start < 0:
        return None
    namespace: dict[str, Any] = dict(backend_namespace)
    exec(compile(kernels.source[start:], "<lockstep-vector canonical>", "exec"), namespace)  # noqa: S102 - our own generated code
    function: Kernel = namespace["canonical"]
    return function


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
                    facts = guard_facts(self.layout, outer, guard)
                    blocks.extend(self._successor_block(tuple_id, action.updates, bindings, guard, facts, action.name))
        counts = f"counts = _counts(({''.join(f'{guard}, ' for guard in guards)}), N)"
        body = [*outer.lines, counts, *blocks, f"return blocks, {enabled.code}, errors"]
        return "def expand(W):\n    N = W.shape[1]\n    blocks = []\n    errors = []\n" + indent(body, 1)

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
        facts: dict[int, tuple[int, int]],
        name: str,
    ) -> list[str]:
        parent = f"P{tuple_id}"
        scope = Scope(parent, facts=facts)  # the block's rows are those where the guard holds
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
            new = fit(translator, self.layout, value, sort, first)
            old = leaves_of(translator.variable(variable))
            checked = not stays_in_sort(expression, sort)
            offset = 0
            for item in new:
                if isinstance(item, Origin):
                    slots = self.layout.sequences[item.length_leaf]
                    offset += slots.capacity * slots.per_slot
                    if item.kind == "read":
                        continue
                    word_change, leaving = packed_region(translator, self.layout, parent, item, checked)
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
                    out_of_bounds = translator.either(out_of_bounds, outside(translator, item, leaf.low, leaf.high))
                changed.setdefault(leaf.word, []).append((leaf.mask << leaf.shift, encoded(item, leaf)))
            assert offset == last - first == len(old)
        writes = self._writes(translator, parent, changed)
        rows = f"r{tuple_id}"
        lines = [
            f"if counts[{tuple_id}]:",
            f"    {rows} = _rows({guard.code}, N, counts[{tuple_id}])",
            f"    {parent} = _columns(W, {rows})",
        ]
        body = list(scope.lines) + writes
        if error.value is not False:
            body.append(f"errors.append(({tuple_id}, {error.code}, {rows}))")
        oob = {False: "None", True: f"({rows} >= 0)"}.get(out_of_bounds.value, out_of_bounds.code)  # type: ignore[call-overload]
        body.append(f"blocks.append(({tuple_id}, {rows}, {parent}, {oob}, counts[{tuple_id}]))")
        lines.extend(indent(body, 1).splitlines())
        return lines

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
        return "def predicates(W):\n" + indent(body, 1)

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
        return "def deadlocked(W):\n" + indent(body, 1)


__all__ = ["Kernels", "Unsupported", "compile_kernels"]
