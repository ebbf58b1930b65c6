"""The second translation of a machine: a bit-level circuit (AIGER) for ABC's ``pdr``.

It starts from the same IR and encoding as BMC (``Encoding.steps_as_written`` over the named
state, in the bit-vector reading of the encoding's sound width: the steps without the condition
that the state's successors are defined, which only adds steps, so an invariant ABC finds is
inductive for ``Encoding.steps`` too and a path that ``evaluate`` does not replay is dropped), so
the two translations share every guard and update; what this module adds is the circuit's own
reading, each point of which the re-checks in ``pdr`` guard:

- registers: each scalar component of the state is a register of its packed width (as
  ``lockstep.spec.layout`` packs it: ``value - low`` in as many bits as the sort's range needs).
  A register whose initial bit is 1 is stored inverted, so every latch resets to zero (ABC's
  ``pdr -d`` writes invariants only for an all-zero initial state);
- the step: the inputs are the bits of a selector; transition ``g`` fires when the selector
  equals ``g``, its guard holds and no update leaves its sort (as in ``Encoding.transition``);
  when none fires (the selector names no transition, or one not enabled) the state stutters.
  Updates are truncated to the packed widths, which loses nothing for a step that fires;
- undefined values (where the concrete semantics raises) are zero bits;
- one output per property: its ``bad`` condition (``invariants.bad``), so that each property
  is a separate AIGER file with one output;
- assumptions (``Assumptions``): invariants already known to hold in every reachable state (the
  sort domains, Houdini's inductive lemmas, earlier proofs' invariants as blocked cubes). A state
  violating them is never bad and, with ``stutter``, takes no step, so ABC need not exclude it.
  This is sound only because they are inductive invariants: ``pdr`` re-checks ABC's invariant
  conjoined with everything assumed, never ABC's invariant alone.

``decode_path`` reads ABC's counterexample (AIGER witness lines) back into grounded transitions,
dropping stutter steps; ``invariant`` reads ABC's inductive invariant (a PLA of blocked cubes over
the latches) back into a formula over the model's variables, each cube as value sets of the
components it fixes, so it reads ``not (mode[0] == IDLE and count[1] in {2, 3})``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import z3

from lockstep.checkers.symbolic.aig import FALSE, Aig, Blaster, Word, invert
from lockstep.checkers.symbolic.encoding import Encoding, Grounded, flatten
from lockstep.checkers.symbolic.invariants import bad, components, named_state
from lockstep.checkers.symbolic.values import bit_vectors, lift_value
from lockstep.spec.layout import scalar_range
from lockstep.spec.sorts import BoolSort, MapSort, RecordSort, SequenceSort, Sort

LARGEST_ENUMERATED = 4096  # a register with more values than this is read back bit by bit


class CircuitError(ValueError):
    """A part of the encoding the circuit translation cannot express."""


@dataclass(frozen=True)
class Register:
    """One scalar component of the state as latches: ``value - low`` in ``len(latches)`` bits."""

    name: str
    low: int
    high: int
    boolean: bool
    latches: tuple[int, ...]  # latch literals, least significant bit first
    inverted: tuple[bool, ...]  # stored inverted (its initial bit is 1)

    def bits(self) -> list[int]:
        return [latch ^ int(flip) for latch, flip in zip(self.latches, self.inverted, strict=True)]


@dataclass(frozen=True)
class Assumptions:
    """What the circuit assumes of every state (see the module doc); empty: nothing.

    ``domain``: every register holds a value of its sort and unused sequence slots the default (the
    re-check assumes the domains too, so this costs nothing there). ``formulas``: predicates over the
    named state in the bit-vector reading of the encoding's width (``Encoding.holds`` or
    ``Encoding.predicate`` inside ``bit_vectors(width)``). ``blocked``: earlier ABC invariants as
    (cubes, columns), each cube a state that is not reachable. ``stutter``: a state violating them
    also takes no step (otherwise only its bad output is masked)."""

    domain: bool = False
    stutter: bool = False
    formulas: tuple[z3.BoolRef, ...] = ()
    blocked: tuple[tuple[tuple[str, ...], tuple[int, ...]], ...] = field(default=())


def scalar_ranges(sort: Sort) -> list[tuple[int, int, bool]]:
    """``(low, high, boolean)`` of each scalar component of ``sort``, in ``flatten``'s order."""
    if isinstance(sort, MapSort):
        return [part for _ in sort.keys for part in scalar_ranges(sort.value)]
    if isinstance(sort, RecordSort):
        return [part for _, field_sort in sort.fields for part in scalar_ranges(field_sort)]
    if isinstance(sort, SequenceSort):
        slots = [part for _ in range(sort.capacity) for part in scalar_ranges(sort.element)]
        return [(0, sort.capacity, False), *slots]
    low, high = scalar_range(sort)
    return [(low, high, isinstance(sort, BoolSort))]


class Circuit:
    """The AIG of one machine: registers, the stuttering step, one bad output per property."""

    def __init__(self, encoding: Encoding, assumptions: Assumptions | None = None) -> None:
        self.encoding = encoding
        self.assumptions = assumptions or Assumptions()
        self.width = encoding.integer_width()
        self.aig = Aig()
        grounded = len(encoding.grounded)
        self.selector = [self.aig.add_input() for _ in range(max(1, grounded.bit_length()))]
        with bit_vectors(self.width):
            self.state = named_state(encoding)
            self._build()

    def _build(self) -> None:
        encoding, aig = self.encoding, self.aig
        self.registers: list[Register] = []
        terms: list[Any] = []
        for name, variable in encoding.machine.variables.items():
            sort = encoding.sorts[name]
            initial = list(flatten(sort, lift_value(variable.initial, sort)))
            current = list(flatten(sort, self.state[name]))
            for term, value, (low, high, boolean) in zip(current, initial, scalar_ranges(sort), strict=True):
                packed = int(value) - low
                width = max(1, (high - low).bit_length())
                latches = tuple(aig.add_latch() for _ in range(width))
                inverted = tuple(bool((packed >> bit) & 1) for bit in range(width))
                self.registers.append(Register(str(term), low, high, boolean, latches, inverted))
                terms.append(term)
        self._by_name = {register.name: register for register in self.registers}
        self.blaster = Blaster(aig, self.width, self._leaf)
        self.assumed = self._assumed()
        steps = encoding.steps_as_written(self.state)  # (more steps: every answer is re-checked on ``steps``)
        fires: list[int] = []
        changes: dict[int, list[tuple[int, Any]]] = {index: [] for index in range(len(self.registers))}
        for index, (guard, updates, out_of_bounds) in enumerate(steps):
            if guard is False:
                fires.append(FALSE)
                continue
            selected = aig.equal(self.selector, aig.constant(index, len(self.selector)))
            allowed = aig.conjunction(self.blaster.literal(guard), invert(self.blaster.literal(out_of_bounds)))
            fire = aig.conjunction(selected, allowed)
            if self.assumptions.stutter:
                fire = aig.conjunction(fire, self.assumed)
            fires.append(fire)
            if fire == FALSE:
                continue
            offset = 0
            for name, sort in encoding.sorts.items():
                count = len(scalar_ranges(sort))
                if name in updates:
                    for component, value in enumerate(flatten(sort, updates[name])):
                        old = terms[offset + component]
                        if isinstance(value, z3.ExprRef) and value.eq(old):
                            continue
                        changes[offset + component].append((fire, value))
                offset += count
        for index, register in enumerate(self.registers):
            current = register.bits()
            taken = [fire for fire, _ in changes[index]]
            keep = invert(aig.any_of(taken))
            following = [aig.conjunction(keep, bit) for bit in current]
            for fire, value in changes[index]:
                written = self._packed(register, value)
                following = [aig.disjunction(bit, aig.conjunction(fire, new)) for bit, new in zip(following, written)]
            for latch, flip, bit in zip(register.latches, register.inverted, following, strict=True):
                aig.set_next(latch, bit ^ int(flip))

    def _assumed(self) -> int:
        """The literal of everything assumed (``Assumptions``); TRUE when nothing is."""
        aig, assumptions = self.aig, self.assumptions
        parts: list[int] = []
        if assumptions.domain:
            parts.append(self.blaster.literal(self.encoding.domain(self.state)))
        parts.extend(self.blaster.literal(formula) for formula in assumptions.formulas)
        for cubes, columns in assumptions.blocked:
            for cube in cubes:
                literals = [
                    2 * (aig.inputs + 1 + latch) ^ int(char == "1")
                    for latch, char in zip(columns, cube, strict=True)
                    if char in "01"
                ]
                parts.append(aig.any_of(literals))  # the state is not this cube
        return aig.all_of(parts)

    def _packed(self, register: Register, value: Any) -> list[int]:
        """The register bits of a new value: ``value - low`` truncated to the register's width."""
        if register.boolean:
            return [self.blaster.literal(value)]
        word = self.blaster.word(value)
        if register.low:
            word = self.aig.subtract(word, self.aig.constant(register.low, self.width))
        return word[: len(register.latches)]

    def _leaf(self, term: z3.ExprRef) -> Word | int:
        name = str(term)
        register = self._by_name.get(name)
        if register is not None:
            bits = register.bits()
            if register.boolean:
                return bits[0]
            word = bits + [FALSE] * (self.width - len(bits))
            if register.low:
                word = self.aig.add(word, self.aig.constant(register.low, self.width))
            return word
        if name.startswith("undefined!"):
            return FALSE if z3.is_bool(term) else self.aig.constant(0, term.size())
        raise CircuitError(f"the circuit has no value for {name}")

    def aiger(self, position: int) -> bytes:
        """The circuit with one output: property ``position``'s bad condition."""
        with bit_vectors(self.width):
            output = self.blaster.literal(bad(self.encoding, position, self.state))
        self.aig.outputs = [self.aig.conjunction(output, self.assumed)]
        name = self.encoding.machine.properties[position].name
        return self.aig.aiger(f"lockstep: {self.encoding.machine.name} {name}")

    @property
    def latch_count(self) -> int:
        return len(self.aig.latches)

    def decode_path(self, frames: list[str]) -> list[Grounded]:
        """The transitions a witness's input frames select (stutter steps dropped); the last frame
        is the one where the bad output is asserted, so its inputs take no step."""
        taken = []
        for line in frames[:-1]:
            value = sum(1 << bit for bit, char in enumerate(line[: len(self.selector)]) if char == "1")
            if value < len(self.encoding.grounded):
                taken.append(self.encoding.grounded[value])
        return taken

    def invariant(self, cubes: list[str], columns: list[int]) -> z3.BoolRef:
        """ABC's invariant (the negation of each blocked cube, conjoined) over the model's variables,
        in the integer reading; ``columns`` names the latch of each cube position."""
        where = {latch: column for column, latch in enumerate(columns)}
        with bit_vectors(None):
            named = {str(term): term for term in components(self.encoding, named_state(self.encoding))}
        clauses = []
        for cube in cubes:
            literals: list[z3.BoolRef] = []
            empty = False
            for register in self.registers:
                fixed = {
                    bit: (char == "1") != flip
                    for bit, (latch, flip) in enumerate(zip(register.latches, register.inverted, strict=True))
                    if (column := where.get(latch // 2 - self.aig.inputs - 1)) is not None
                    and (char := cube[column]) in "01"
                }
                if not fixed:
                    continue
                outside = _outside(register, fixed, named[register.name])
                if outside is None:  # the cube holds no value of this register's sort
                    empty = True
                    break
                if not z3.is_false(outside):
                    literals.append(outside)
            if empty:
                continue
            clauses.append(z3.Or(*literals) if len(literals) > 1 else literals[0] if literals else z3.BoolVal(False))
        if not clauses:
            return z3.BoolVal(True)
        return z3.And(*clauses) if len(clauses) > 1 else clauses[0]


def _outside(register: Register, fixed: dict[int, bool], term: z3.ExprRef) -> z3.BoolRef | None:
    """``term`` lies outside the values whose packed bits match ``fixed`` (None: no value of the
    sort matches; False: every value does)."""
    if register.boolean:
        return z3.Not(term) if fixed[0] else term
    low, high = register.low, register.high
    if high - low + 1 > LARGEST_ENUMERATED:
        packed = term - low
        return z3.Or(*[(packed / (1 << bit)) % 2 != int(value) for bit, value in fixed.items()])
    matching = [
        value
        for value in range(low, high + 1)
        if all(bool(((value - low) >> bit) & 1) == want for bit, want in fixed.items())
    ]
    if not matching:
        return None
    if len(matching) == high - low + 1:
        return z3.BoolVal(False)
    inside = _intervals(matching)
    others = _intervals([value for value in range(low, high + 1) if value not in set(matching)])
    if len(others) <= len(inside):  # term in the complement
        parts = [term == first if first == last else z3.And(term >= first, term <= last) for first, last in others]
        return z3.Or(*parts) if len(parts) > 1 else parts[0]
    parts = [term != first if first == last else z3.Or(term < first, term > last) for first, last in inside]
    return z3.And(*parts) if len(parts) > 1 else parts[0]


def _intervals(values: list[int]) -> list[tuple[int, int]]:
    result: list[tuple[int, int]] = []
    for value in values:
        if result and result[-1][1] == value - 1:
            result[-1] = (result[-1][0], value)
        else:
            result.append((value, value))
    return result
