"""Proofs for every number of ranks: quantified invariants mined from reachable sets, kept by Houdini.

The method (project and generalise; Arons, Pnueli et al., CAV 2001; DistAI's enumeration):

1. **Views.** The explicit engine enumerates the reachable states at small rank counts
   (``sizes``, 2 by default). Each state is projected onto *one-rank views* (the global
   variables and rank r's own) and *two-rank views* (ranks r != s). A view is a vector of
   *atoms*: a variable's value (``mode[r] == TOP``, ``client.phase == RPC``), a queue's length
   or the kind at its front, ``r == 0`` (rank 0 reports wave_complete), ``x == N`` for a
   counter whose sort follows the rank count.
2. **Candidates.** Every clause of up to two literals that no one-rank view falsifies, read as
   ``for every rank r: ...``; every clause ``l(r) or l'(s)`` no two-rank view falsifies, read as
   ``for every pair of ranks r != s: ...``; and ``for every pair r != s: A(r) and A(s) imply
   x[r] == x[s]`` for a rank's atom A and variable x. Clauses a smaller valid clause implies are
   dropped.
3. **Houdini over symbolic N** (``rank_family.FamilyEncoding``): while some step from a state
   of the conjunction leads out of it, Z3's model is decoded into a concrete post-state at the
   model's N and every candidate it falsifies is dropped. What remains is inductive for every
   N >= 2.
4. **Obligations.** The invariant must keep every update inside its sort (``in_bounds``) and
   every guard, update and property defined (``well_defined``) for every N; otherwise nothing
   is claimed. A property is proved for all N when the invariant implies it.
5. **Re-check** (``recheck``): initiation, consecution per action and each property, each a
   separate Z3 query on a fresh encoding, for symbolic N; a planted wrong invariant is refused.

A property the invariant does not imply is **open**, with the reason (the strongest invariant
from these templates does not imply it; a Z3 answer of unknown; the model is not one family in
its rank count; a sum over ranks this encoding does not abstract).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import z3

from lockstep.checkers.explicit.search import ExplicitSearch
from lockstep.checkers.symbolic.budget import cpu_seconds, z3_cpu_limit
from lockstep.checkers.symbolic.encoding import decode
from lockstep.checkers.symbolic.lemmas import prove
from lockstep.checkers.symbolic.rank_family import (
    Family,
    FamilyEncoding,
    FamilyStep,
    NotUniform,
    RankMap,
    family,
    instantiate,
    negated,
    rebuild,
)
from lockstep.checkers.symbolic.solving import milliseconds
from lockstep.checkers.symbolic.values import Symbolic, SymbolicSequence, bit_vectors, to_z3
from lockstep.spec.compiler import CompiledSystem
from lockstep.spec.lemma import Lemma, lemma
from lockstep.spec.machine import PropertyKind
from lockstep.spec.protocol import Protocol
from lockstep.spec.semantics import InterpretedSystem, ModelError, Transition
from lockstep.spec.sorts import (
    BOOL,
    INTEGER,
    BoolSort,
    EnumSort,
    IndexSort,
    IntSort,
    MapSort,
    RecordSort,
    SequenceSort,
    Sort,
    Value,
    integers,
)
from lockstep.spec.terms import Term, conjunction

PROVED, OPEN = "proved for all N", "open"
SKIPPED_PROPERTIES = ("no_hang", "no_deadlock")  # read monitors / talk about enabledness, not a state


def _counting_lemma() -> Lemma:
    """The sum of N >= 1 values in [0, 1] lies in [0, N], is 0 exactly when every value is 0 and N
    exactly when every value is 1 (what ``rank_family`` assumes of each sum or count over ranks)."""

    def step(acc: dict[str, Term], value: Term, index: Term) -> dict[str, Term]:
        return {
            "total": acc["total"] + value,
            "all_zero": acc["all_zero"] & (value == 0),
            "all_one": acc["all_one"] & (value == 1),
        }

    def invariant(acc: dict[str, Term], index: Term) -> Term:
        return conjunction(
            acc["total"] >= 0,
            acc["total"] <= index,
            (acc["total"] == 0) == acc["all_zero"],
            (acc["total"] == index) == acc["all_one"],
        )

    def conclusion(acc: dict[str, Term], size: Term) -> Term:
        return conjunction(
            acc["total"] >= 0,
            acc["total"] <= size,
            (acc["total"] == 0) == acc["all_zero"],
            (acc["total"] == size) == acc["all_one"],
        )

    return lemma(
        "all-ranks/zero-one-sum",
        "a sum of N >= 1 values in [0, 1] lies in [0, N]; it is 0 iff all are 0, and N iff all are 1",
        expected="proved",
        element=integers(0, 1),
        accumulators={"total": (INTEGER, 0), "all_zero": (BOOL, True), "all_one": (BOOL, True)},
        step=step,
        invariant=invariant,
        conclusion=conclusion,
        minimum_size=1,
    )


COUNTING_LEMMA = _counting_lemma()


# ------------------------------------------------------------------------------------ atoms
@dataclass(frozen=True)
class Atom:
    """A Boolean fact about one state: ``variable`` (of rank r if ``local``) has ``value`` under
    ``feature`` (``value``: the variable itself; ``length``: a queue's length; ``front``: the
    first field of a non-empty queue's head; ``rank``: r == 0). ``value`` ``"N"`` is the rank count."""

    variable: str
    local: bool
    feature: str
    value: int | str

    def render(self, rank: str, sorts: Mapping[str, Sort]) -> tuple[str, str]:
        """(the atom as text, its negation as text), in the model's words."""
        if self.feature == "rank":
            return f"{rank} == 0", f"{rank} != 0"
        target = f"{self.variable}[{rank}]" if self.local else self.variable
        sort = sorts[self.variable]
        element = sort.value if isinstance(sort, MapSort) and self.local else sort
        if self.feature == "length":
            return f"len({target}) == {self.value}", f"len({target}) != {self.value}"
        if self.feature == "front":
            assert isinstance(element, SequenceSort) and isinstance(element.element, RecordSort)
            name, field_sort = element.element.fields[0]
            shown = field_sort.render(self.value)
            return f"{target}[0].{name} == {shown}", f"not {target}[0].{name} == {shown}"
        if isinstance(element, BoolSort):
            return target, f"not {target}"
        shown = "N" if self.value == "N" else element.render(self.value)
        return f"{target} == {shown}", f"{target} != {shown}"


def _front_field(sort: Sort) -> bool:
    return isinstance(sort, SequenceSort) and isinstance(sort.element, RecordSort) and bool(sort.element.fields)


@dataclass
class Features:
    """The atoms of one family and how to read them from a concrete state at any rank count."""

    family: Family
    local: list[Atom] = field(default_factory=list)
    glob: list[Atom] = field(default_factory=list)

    @property
    def positions(self) -> dict[str, int]:
        return {name: position for position, name in enumerate(self.family.machine.variables)}

    def local_values(self, state: Sequence[Value], rank: int) -> tuple[Value, ...]:
        return tuple(self._local(state, rank, atom) for atom in self.local)

    def global_values(self, state: Sequence[Value], size: int) -> tuple[Value, ...]:
        return tuple(self._global(state, size, atom) for atom in self.glob)

    def _local(self, state: Sequence[Value], rank: int, atom: Atom) -> bool:
        if atom.feature == "rank":
            return rank == 0
        value = state[self.positions[atom.variable]]
        assert isinstance(value, tuple)
        return _feature(value[rank], atom)

    def _global(self, state: Sequence[Value], size: int, atom: Atom) -> bool:
        value = state[self.positions[atom.variable]]
        if atom.value == "N":
            return value == size
        return _feature(value, atom)


def _feature(value: Value, atom: Atom) -> bool:
    if atom.feature == "length":
        assert isinstance(value, tuple)
        return len(value) == atom.value
    if atom.feature == "front":
        assert isinstance(value, tuple)
        head = value[0] if value else None
        return isinstance(head, tuple) and head[0] == atom.value
    return value == atom.value


def features(machine_family: Family, states_by_size: Mapping[int, Sequence[Sequence[Value]]]) -> Features:
    """The atoms whose variables the reachable states show with more than one value (a variable
    constant on every state gets one atom, which becomes a unit candidate)."""
    found = Features(machine_family)
    positions = found.positions
    encoding = FamilyEncoding(machine_family, counting_proved=False)
    for name in machine_family.variables:
        sort = machine_family.machine.variables[name].sort
        twin = machine_family.sorts_next[name]
        position = positions[name]
        if encoding.is_rank_map(sort):
            assert isinstance(sort, MapSort)
            observed = [
                item for states in states_by_size.values() for state in states for item in _items(state[position])
            ]
            found.local.extend(_atoms(name, True, sort.value, observed))
        elif isinstance(sort, IntSort) and sort != twin:
            found.glob.extend([Atom(name, False, "value", 0), Atom(name, False, "value", "N")])
        else:
            observed = [state[position] for states in states_by_size.values() for state in states]
            found.glob.extend(_atoms(name, False, sort, observed))
    found.local.append(Atom("", True, "rank", 0))
    return found


def _items(value: Value) -> tuple[Value, ...]:
    assert isinstance(value, tuple)
    return value


def _atoms(name: str, local: bool, sort: Sort, observed: Iterable[Value]) -> list[Atom]:
    values = set(observed)
    if isinstance(sort, BoolSort):
        return [Atom(name, local, "value", True)]
    if isinstance(sort, (EnumSort, IntSort)) or (isinstance(sort, IndexSort) and not local):
        if isinstance(sort, IndexSort):
            return []
        return [Atom(name, local, "value", value) for value in sorted(values)]  # type: ignore[type-var, arg-type]
    if isinstance(sort, SequenceSort):
        atoms = [Atom(name, local, "length", length) for length in sorted({len(value) for value in values})]  # type: ignore[arg-type]
        if _front_field(sort):
            fronts = sorted({value[0][0] for value in values if value})  # type: ignore[index]
            atoms.extend(Atom(name, local, "front", front) for front in fronts)
        return atoms
    return []


# ------------------------------------------------------------------------------- candidates
Literal = tuple[int, bool, int]  # (atom index in local + glob order, polarity, rank slot: 0 r, 1 s, -1 global)


@dataclass(frozen=True)
class Candidate:
    """A clause: ``kind`` 1 (for every rank r), 2 (for every pair r != s) or 0 (no rank);
    ``equal``: for the pair form, the rank-local variable whose values at r and s agree."""

    kind: int
    literals: tuple[Literal, ...]
    equal: str | None = None


def mine(found: Features, states_by_size: Mapping[int, Sequence[Sequence[Value]]]) -> list[Candidate]:
    """Every candidate of the templates (module doc) that no view of the states falsifies."""
    local_count, global_count = len(found.local), len(found.glob)
    one: set[tuple[Value, ...]] = set()
    two: set[tuple[Value, ...]] = set()
    equal_variables = [
        name
        for name in found.family.variables
        if isinstance(found.family.machine.variables[name].sort, MapSort)
        and FamilyEncoding(found.family, False).is_rank_map(found.family.machine.variables[name].sort)
        and isinstance(found.family.machine.variables[name].sort.value, (BoolSort, EnumSort, IntSort))  # type: ignore[attr-defined]
    ]
    positions = found.positions
    for size, states in states_by_size.items():
        for state in states:
            glob = found.global_values(state, size)
            locals_ = [found.local_values(state, rank) for rank in range(size)]
            for rank in range(size):
                one.add((*locals_[rank], *glob))
            for rank, other in itertools.permutations(range(size), 2):
                same = tuple(
                    state[positions[name]][rank] == state[positions[name]][other]  # type: ignore[index]
                    for name in equal_variables
                )
                two.add((*locals_[rank], *locals_[other], *same))
    one_views, two_views = list(one), list(two)

    def false_set(views: list[tuple[Value, ...]], column: int, polarity: bool) -> int:
        bits = 0
        for position, view in enumerate(views):
            if bool(view[column]) != polarity:
                bits |= 1 << position
        return bits

    # one-rank literals: local atoms (columns 0..L-1), then global atoms (L..L+G-1)
    one_literals = [(column, polarity) for column in range(local_count + global_count) for polarity in (True, False)]
    one_false = {literal: false_set(one_views, *literal) for literal in one_literals}
    candidates: list[Candidate] = []
    units: set[tuple[int, bool]] = set()
    for literal in one_literals:
        if one_false[literal] == 0:
            units.add(literal)
            candidates.append(_one_rank(found, (literal,)))
    for first, second in itertools.combinations(one_literals, 2):
        if first[0] == second[0] or first in units or second in units:
            continue
        if one_false[first] & one_false[second] == 0:
            candidates.append(_one_rank(found, (first, second)))
    # two-rank literals: rank r's local atoms (0..L-1), rank s's (L..2L-1)
    two_literals = [(column, polarity) for column in range(2 * local_count) for polarity in (True, False)]
    two_false = {literal: false_set(two_views, *literal) for literal in two_literals}
    one_valid_local = {(column, polarity) for column, polarity in units if column < local_count}
    for first, second in itertools.product(
        [literal for literal in two_literals if literal[0] < local_count],
        [literal for literal in two_literals if literal[0] >= local_count],
    ):
        if first in one_valid_local or (second[0] - local_count, second[1]) in one_valid_local:
            continue
        if first[0] > second[0] - local_count:  # symmetric: r and s swapped gives the same clause
            continue
        if two_false[first] & two_false[second] == 0:
            candidates.append(Candidate(2, ((first[0], first[1], 0), (second[0] - local_count, second[1], 1))))
    for index, name in enumerate(equal_variables):
        column = 2 * local_count + index
        differ = false_set(two_views, column, True)
        if differ == 0:
            candidates.append(Candidate(2, (), name))
            continue
        for atom in range(local_count):
            for polarity in (True, False):
                # the clause: not A(r) or not A(s) or x[r] == x[s]; falsified where A(r), A(s) and differ
                holds_r = two_false[(atom, not polarity)]
                holds_s = two_false[(atom + local_count, not polarity)]
                if holds_r & holds_s & differ == 0:
                    candidates.append(Candidate(2, ((atom, not polarity, 0), (atom, not polarity, 1)), name))
    return candidates


def _one_rank(found: Features, literals: tuple[tuple[int, bool], ...]) -> Candidate:
    local_count = len(found.local)
    converted = tuple(
        (column, polarity, 0) if column < local_count else (column - local_count, polarity, -1)
        for column, polarity in literals
    )
    return Candidate(1 if any(slot == 0 for _, _, slot in converted) else 0, converted)


# ------------------------------------------------------------------------- reading candidates
class Reader:
    """Candidates as concrete predicates (on a state at a rank count) and as Z3 formulas."""

    def __init__(self, found: Features, encoding: FamilyEncoding) -> None:
        self.found = found
        self.encoding = encoding

    def holds(self, candidate: Candidate, state: Sequence[Value], size: int) -> bool:
        return not self.failing_ranks(candidate, state, size)

    def failing_ranks(self, candidate: Candidate, state: Sequence[Value], size: int) -> list[int]:
        """The ranks (none, one, or a pair) at which ``candidate`` fails on the state; empty if it holds."""
        glob = self.found.global_values(state, size)
        locals_ = [self.found.local_values(state, rank) for rank in range(size)]
        positions = self.found.positions

        def literal(item: Literal, ranks: tuple[int, ...]) -> bool:
            atom, polarity, slot = item
            value = glob[atom] if slot == -1 else locals_[ranks[slot]][atom]
            return bool(value) == polarity

        if candidate.kind == 0:
            return [] if any(literal(item, ()) for item in candidate.literals) else [0]
        if candidate.kind == 1:
            for rank in range(size):
                if not any(literal(item, (rank,)) for item in candidate.literals):
                    return [rank]
            return []
        values = state[positions[candidate.equal]] if candidate.equal is not None else None
        for rank, other in itertools.permutations(range(size), 2):
            if any(literal(item, (rank, other)) for item in candidate.literals):
                continue
            if isinstance(values, tuple) and values[rank] == values[other]:
                continue
            return [rank, other]
        return []

    def atom_formula(self, atom: Atom, state: Mapping[str, Symbolic], rank: Any) -> Any:
        encoding = self.encoding
        if atom.feature == "rank":
            return rank == 0
        value = state[atom.variable]
        if atom.local:
            assert isinstance(value, RankMap)
            value = value.select(rank)
        if atom.feature == "length":
            assert isinstance(value, SymbolicSequence)
            return to_z3(value.length) == atom.value
        if atom.feature == "front":
            assert isinstance(value, SymbolicSequence)
            return z3.And(to_z3(value.length) > 0, to_z3(value.slots[0][0]) == atom.value)
        if atom.value == "N":
            return to_z3(value) == encoding.N
        if isinstance(atom.value, bool):
            return to_z3(value) if atom.value else z3.Not(to_z3(value))
        return to_z3(value) == atom.value

    def literal_formula(self, item: Literal, state: Mapping[str, Symbolic], ranks: tuple[Any, ...]) -> Any:
        atom_index, polarity, slot = item
        if slot == -1:
            formula = self.atom_formula(self.found.glob[atom_index], state, None)
        else:
            formula = self.atom_formula(self.found.local[atom_index], state, ranks[slot])
        return formula if polarity else z3.Not(formula)

    def body(self, candidate: Candidate, state: Mapping[str, Symbolic], ranks: tuple[Any, ...]) -> Any:
        parts = [self.literal_formula(item, state, ranks) for item in candidate.literals]
        if candidate.equal is not None:
            values = state[candidate.equal]
            assert isinstance(values, RankMap)
            parts.append(to_z3(self.encoding.equal(values.select(ranks[0]), values.select(ranks[1]))))
        return z3.Or(*parts) if len(parts) != 1 else parts[0]

    def conjunction(self, candidates: Sequence[Candidate], state: Mapping[str, Symbolic]) -> Any:
        """All candidates as one formula: one quantifier over r, one over r != s."""
        encoding = self.encoding
        rank, other = encoding.fresh_rank("r"), encoding.fresh_rank("s")
        plain = [self.body(c, state, ()) for c in candidates if c.kind == 0]
        single = [self.body(c, state, (rank,)) for c in candidates if c.kind == 1]
        pairs = [self.body(c, state, (rank, other)) for c in candidates if c.kind == 2]
        parts = list(plain)
        if single:
            parts.append(z3.ForAll([rank], z3.Implies(encoding.in_range(rank), z3.And(*single))))
        if pairs:
            distinct = z3.And(encoding.in_range(rank), encoding.in_range(other), rank != other)
            parts.append(z3.ForAll([rank, other], z3.Implies(distinct, z3.And(*pairs))))
        return z3.And(*parts) if parts else z3.BoolVal(True)

    def violated(
        self, candidates: Sequence[Candidate], state: Mapping[str, Symbolic], witnesses: tuple[Any, Any]
    ) -> Any:
        """Some candidate fails at the ranks ``witnesses`` (the negation of ``conjunction``)."""
        encoding = self.encoding
        rank, other = witnesses
        parts = [z3.Not(self.body(c, state, ())) for c in candidates if c.kind == 0]
        single = [z3.Not(self.body(c, state, (rank,))) for c in candidates if c.kind == 1]
        pairs = [z3.Not(self.body(c, state, (rank, other))) for c in candidates if c.kind == 2]
        if single:
            parts.append(z3.And(encoding.in_range(rank), z3.Or(*single)))
        if pairs:
            parts.append(z3.And(encoding.in_range(rank), encoding.in_range(other), rank != other, z3.Or(*pairs)))
        return z3.Or(*parts) if parts else z3.BoolVal(False)

    def render(self, candidate: Candidate) -> str:
        sorts = {name: variable.sort for name, variable in self.found.family.machine.variables.items()}
        texts = []
        for atom_index, polarity, slot in candidate.literals:
            atom = self.found.glob[atom_index] if slot == -1 else self.found.local[atom_index]
            positive, negative = atom.render("s" if slot == 1 else "r", sorts)
            texts.append(positive if polarity else negative)
        if candidate.equal is not None:
            texts.append(f"{candidate.equal}[r] == {candidate.equal}[s]")
        clause = " or ".join(texts)
        if candidate.kind == 1:
            return f"for every rank r: {clause}"
        if candidate.kind == 2:
            return f"for every pair of ranks r != s: {clause}"
        return clause


# ------------------------------------------------------------------------------- decoding
def decode_state(
    encoding: FamilyEncoding, state: Mapping[str, Symbolic], model: z3.ModelRef
) -> tuple[list[Value], int]:
    """A concrete state (the template's variable order, monitors at their initial values) at the
    model's rank count."""
    size = model.eval(encoding.N, model_completion=True).as_long()
    values: list[Value] = []
    for name, variable in encoding.family.machine.variables.items():
        if name not in state:
            values.append(variable.initial)
            continue
        value = state[name]
        if isinstance(value, RankMap):
            per_rank = []
            for rank in range(size):
                scalars = [model.eval(z3.Select(leaf, rank), model_completion=True) for leaf in value.leaves]
                per_rank.append(decode(value.element, rebuild(value.element, iter(scalars)), model))
            values.append(tuple(per_rank))
        else:
            values.append(decode(variable.sort, value, model))
    return values, size


# --------------------------------------------------------------------------------- outcomes
@dataclass(frozen=True)
class PropertyOutcome:
    name: str
    status: str  # PROVED or OPEN
    reason: str = ""


@dataclass
class AllRanksResult:
    """What an all-N attempt proved, the invariant it used (in the model's words) and its costs."""

    protocol: str
    variant: str
    instance: str
    properties: list[PropertyOutcome]
    invariant: list[str]
    candidates: int = 0
    kept: int = 0
    sizes_mined: tuple[int, ...] = ()
    sizes_matched: tuple[int, ...] = ()
    cpu_seconds: float = 0.0
    rechecked: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def proved(self) -> list[str]:
        return [item.name for item in self.properties if item.status == PROVED]


@dataclass
class _Budget:
    cpu: float | None
    query: float
    started: float = field(default_factory=cpu_seconds)

    def left(self) -> float | None:
        return None if self.cpu is None else self.cpu - (cpu_seconds() - self.started)

    def query_seconds(self) -> float:
        left = self.left()
        return self.query if left is None else max(0.001, min(self.query, left))


class OutOfBudget(Exception):
    """The CPU budget of an all-N attempt ran out."""


def reachable_states(protocol: Protocol, variant: str, parameters: Mapping[str, int], size: int) -> list[Any]:
    """The exact reachable set at ``size`` ranks (the explicit engine's exhaustive bfs)."""
    assert protocol.rank_parameter is not None
    machine = protocol.machine(variant, {**parameters, protocol.rank_parameter: size})
    search = ExplicitSearch(CompiledSystem(machine), order="bfs")
    search.run()
    return list(search.states)


def sampled_states(
    protocol: Protocol, variant: str, parameters: Mapping[str, int], size: int, walks: int, length: int, seed: int = 0
) -> list[Any]:
    """Reachable states at ``size`` ranks along ``walks`` random walks of ``length`` steps (each a
    reachable state, so a filter for candidates where the exhaustive set is too large)."""
    assert protocol.rank_parameter is not None
    system = CompiledSystem(protocol.machine(variant, {**parameters, protocol.rank_parameter: size}))
    chooser = random.Random(seed)
    found: set[Any] = set()
    for _ in range(walks):
        state = system.initial()
        found.add(state)
        for _ in range(length):
            transitions = system.transitions(state)
            if not transitions:
                break
            state = chooser.choice(transitions).target
            found.add(state)
    return list(found)


REAL, SPURIOUS = "real", "spurious"
REFINEMENTS = 6  # rounds of adding the model's concrete ranks as instances before giving up
RANKS_PER_REFINEMENT = 4
FALLBACK_SECONDS = 300.0  # CPU seconds for the properties' checks against the sorts alone, after Houdini


class _Prover:
    """The queries of one attempt. Every quantifier over ranks in an assumption is instantiated at
    the query's rank terms (rank 0, the action's ranks, the witnesses); a model is decoded into a
    concrete state at its N and judged with the concrete semantics (``InterpretedSystem`` of the
    model built at that N): a model the concrete semantics does not bear out adds its ranks as
    instances and the query is asked again. So unsat is a proof for every N, and sat is a concrete
    counterexample (to induction, to a property, to an obligation)."""

    def __init__(self, machine_family: Family, found: Features, budget: _Budget) -> None:
        self.family = machine_family
        self.found = found
        self.budget = budget
        self.encoding = FamilyEncoding(machine_family, counting_proved=prove(COUNTING_LEMMA).outcome == "proved")
        self.reader = Reader(found, self.encoding)
        self.before, self.after = self.encoding.state("pre"), self.encoding.state("post")
        self.steps = self.encoding.steps(self.before, self.after)
        self.witnesses = (self.encoding.fresh_rank("witness_r"), self.encoding.fresh_rank("witness_s"))
        self._systems: dict[int, InterpretedSystem] = {}

    # -- the concrete side
    def system(self, size: int) -> InterpretedSystem:
        if size not in self._systems:
            protocol, rank = self.family.protocol, self.family.rank_parameter
            parameters = {**self.family.parameters, rank: size}
            self._systems[size] = InterpretedSystem(protocol.machine(self.family.variant, parameters))
        return self._systems[size]

    def culprits(self, state: Sequence[Value], size: int, invariant: Sequence[Candidate]) -> list[int]:
        """The ranks at which the state leaves its sorts or fails ``invariant`` (empty: it is valid)."""
        machine = self.system(size).machine
        found: set[int] = set()
        for value, variable in zip(state, machine.variables.values(), strict=True):
            if variable.sort.contains(value):
                continue
            if isinstance(variable.sort, MapSort) and isinstance(value, tuple) and len(value) == size:
                found.update(rank for rank in range(size) if not variable.sort.value.contains(value[rank]))
            else:
                found.update(range(min(size, RANKS_PER_REFINEMENT)))
        if found:
            return sorted(found)
        for candidate in invariant:
            ranks = self.reader.failing_ranks(candidate, state, size)
            if ranks:
                return ranks
        return []

    def differing(self, state: Sequence[Value], other: Sequence[Value], size: int) -> list[int]:
        """The ranks whose own values differ between two states."""
        found: set[int] = set()
        for name, first, second in zip(self.family.machine.variables, state, other, strict=True):
            if first == second:
                continue
            if self.encoding.is_rank_map(self.family.machine.variables[name].sort):
                assert isinstance(first, tuple) and isinstance(second, tuple)
                found.update(rank for rank in range(size) if first[rank] != second[rank])
        return sorted(found)

    def arguments(self, step: FamilyStep, model: z3.ModelRef) -> tuple[Value, ...]:
        action = self.family.machine.actions[step.action]
        values = []
        for parameter in action.parameters:
            if parameter.name in step.ranks:
                values.append(model.eval(step.ranks[parameter.name], model_completion=True).as_long())
            else:
                values.append(step.arguments[parameter.name])
        return tuple(values)

    def arguments_ranks(self, step: FamilyStep, model: z3.ModelRef) -> list[int]:
        return [model.eval(rank, model_completion=True).as_long() for rank in step.ranks.values()]

    def successors(self, step: FamilyStep, state: Sequence[Value], size: int, model: z3.ModelRef) -> list[Transition]:
        return self.system(size).transitions(tuple(state), step.action, self.arguments(step, model))

    # -- the symbolic side
    def ask(
        self,
        assertions: Callable[[list[Any]], list[Any]],
        terms: list[Any],
        judge: Callable[[z3.ModelRef], tuple[str, Any]],
    ) -> tuple[str, Any]:
        """unsat, (REAL, what the judge found), or unknown (with why)."""
        terms = list(terms)
        for _ in range(REFINEMENTS):
            left = self.budget.left()
            if left is not None and left <= 0:
                raise OutOfBudget()
            solver = z3.Solver()
            solver.add(self.encoding.N >= 2, *assertions(terms))
            seconds = self.budget.query_seconds()
            solver.set("timeout", milliseconds(seconds))
            with z3_cpu_limit(seconds):
                answer = solver.check()
            if answer == z3.unsat:
                return "unsat", None
            if answer != z3.sat:
                return "unknown", f"Z3 answered unknown ({solver.reason_unknown()})"
            model = solver.model()
            verdict, payload = judge(model)
            if verdict == REAL:
                return REAL, payload
            known = {term.as_long() for term in terms if z3.is_int_value(term)}
            new = [z3.IntVal(rank) for rank in sorted(set(payload) - known)][:RANKS_PER_REFINEMENT]
            if not new:
                return "unknown", "instantiating the invariant at every rank of Z3's model did not settle the query"
            terms.extend(new)
        return "unknown", f"{REFINEMENTS} rounds of instantiation did not settle the query"

    def assumed(self, invariant: Sequence[Candidate], terms: list[Any]) -> list[Any]:
        encoding = self.encoding
        return [
            instantiate(to_z3(encoding.domain(self.before)), terms),
            instantiate(self.reader.conjunction(invariant, self.before), terms),
        ]

    def base_terms(self, *extra: Any) -> list[Any]:
        return [z3.IntVal(0), *extra]

    # -- Houdini
    def initiation(self, invariant: list[Candidate]) -> tuple[str, Any]:
        initial = self.encoding.state("initial")
        witnesses = (self.encoding.fresh_rank("initial_r"), self.encoding.fresh_rank("initial_s"))

        def judge(model: z3.ModelRef) -> tuple[str, Any]:
            state, size = decode_state(self.encoding, initial, model)
            return REAL, (state, size)

        return self.ask(
            lambda terms: [to_z3(self.encoding.initial(initial)), self.reader.violated(invariant, initial, witnesses)],
            [],
            judge,
        )

    def consecution(self, invariant: list[Candidate], step: FamilyStep, keep_domain: bool = True) -> tuple[str, Any]:
        """A real counterexample to induction through ``step`` (its concrete successors), or unsat."""

        def assertions(terms: list[Any]) -> list[Any]:
            post = [self.reader.violated(invariant, self.after, self.witnesses)]
            if keep_domain:
                post.append(instantiate(to_z3(self.encoding.domain(self.after)), terms))
            return [*self.assumed(invariant, terms), instantiate(step.formula, terms), *post]

        def judge(model: z3.ModelRef) -> tuple[str, Any]:
            state, size = decode_state(self.encoding, self.before, model)
            culprits = self.culprits(state, size, invariant)
            if culprits:
                return SPURIOUS, culprits
            try:
                successors = self.successors(step, state, size, model)
            except ModelError as error:
                return REAL, ("undefined", str(error), size)
            for transition in successors:
                if transition.out_of_bounds is not None:
                    return REAL, ("out of bounds", transition.out_of_bounds, size)
                if not all(self.reader.holds(candidate, transition.target, size) for candidate in invariant):
                    return REAL, ("step", [t.target for t in successors], size)
            post, _ = decode_state(self.encoding, self.after, model)
            differing = [self.differing(post, t.target, size) for t in successors]
            return SPURIOUS, min(differing, key=len) if differing else list(self.arguments_ranks(step, model))

        return self.ask(assertions, self.base_terms(*step.ranks.values(), *self.witnesses), judge)

    def houdini(self, candidates: list[Candidate]) -> tuple[list[Candidate], str | None]:
        kept = list(candidates)
        while True:
            answer, payload = self.initiation(kept)
            if answer == "unsat":
                break
            if answer != REAL:
                return kept, f"initiation: {payload}"
            state, size = payload
            kept = [candidate for candidate in kept if self.reader.holds(candidate, state, size)]
        progress = True
        while progress:
            progress = False
            for step in self.steps:
                answer, payload = self.consecution(kept, step)
                if answer == "unsat":
                    continue
                if answer != REAL:
                    return kept, f"consecution of {step.label}: {payload}"
                what, detail, size = payload
                if what != "step":
                    return kept, f"{step.label} at N = {size}: {what} ({detail}) from a state the invariant allows"
                remaining = [
                    candidate
                    for candidate in kept
                    if all(self.reader.holds(candidate, target, size) for target in detail)
                ]
                if len(remaining) == len(kept):  # pragma: no cover - the judge found a violated candidate
                    return kept, f"internal: no candidate dropped at {step.label}"
                kept = remaining
                progress = True
                break
        return kept, None

    # -- obligations and properties
    def in_bounds(self, invariant: list[Candidate]) -> str | None:
        for step in self.steps:
            constants: list[Any] = []
            leaving = negated(to_z3(self.encoding.domain(self.after)), constants, "out")

            def assertions(terms: list[Any], step: FamilyStep = step, leaving: Any = leaving) -> list[Any]:
                return [*self.assumed(invariant, terms), instantiate(step.formula, terms), leaving]

            def judge(model: z3.ModelRef, step: FamilyStep = step) -> tuple[str, Any]:
                state, size = decode_state(self.encoding, self.before, model)
                culprits = self.culprits(state, size, invariant)
                if culprits:
                    return SPURIOUS, culprits
                try:
                    successors = self.successors(step, state, size, model)
                except ModelError as error:
                    return REAL, f"undefined at N = {size}: {error}"
                for transition in successors:
                    if transition.out_of_bounds is not None:
                        return REAL, f"{transition.out_of_bounds} leaves its sort at N = {size}"
                post, _ = decode_state(self.encoding, self.after, model)
                differing = [self.differing(post, t.target, size) for t in successors]
                return SPURIOUS, min(differing, key=len) if differing else self.arguments_ranks(step, model)

            rank_constants = [c for c in constants if c.sort() == z3.IntSort()]
            answer, payload = self.ask(assertions, self.base_terms(*step.ranks.values(), *rank_constants), judge)
            if answer != "unsat":
                return f"{step.label}: {payload}"
        return None

    def well_defined(self, invariant: list[Candidate]) -> str | None:
        for step, facts in self.encoding.defined_steps(self.before):
            constants: list[Any] = []
            undefined = negated(step.formula, constants, "undefined")

            def assertions(terms: list[Any], facts: list[Any] = facts, undefined: Any = undefined) -> list[Any]:
                return [*self.assumed(invariant, terms), *(instantiate(fact, terms) for fact in facts), undefined]

            def judge(model: z3.ModelRef, step: FamilyStep = step) -> tuple[str, Any]:
                state, size = decode_state(self.encoding, self.before, model)
                culprits = self.culprits(state, size, invariant)
                if culprits:
                    return SPURIOUS, culprits
                try:
                    self.successors(step, state, size, model)
                except ModelError as error:
                    return REAL, f"undefined at N = {size}: {error}"
                return SPURIOUS, list(range(min(size, RANKS_PER_REFINEMENT)))

            rank_constants = [c for c in constants if c.sort() == z3.IntSort()]
            answer, payload = self.ask(assertions, self.base_terms(*step.ranks.values(), *rank_constants), judge)
            if answer != "unsat":
                return f"{step.label}: {payload}"
        return None

    def implies(self, invariant: list[Candidate], name: str) -> tuple[str, Any]:
        prop = self.family.machine.property_named(name)
        predicate, facts = self.encoding.predicate(prop.predicate, self.before)
        defined, defined_facts = self.encoding.defined(prop.predicate, self.before)
        constants: list[Any] = []
        failing = z3.Or(negated(predicate, constants, "bad"), negated(defined, constants, "bad_undefined"))

        def assertions(terms: list[Any]) -> list[Any]:
            return [
                *self.assumed(invariant, terms),
                *(instantiate(to_z3(fact), terms) for fact in (*facts, *defined_facts)),
                failing,
            ]

        def judge(model: z3.ModelRef) -> tuple[str, Any]:
            state, size = decode_state(self.encoding, self.before, model)
            culprits = self.culprits(state, size, invariant)
            if culprits:
                return SPURIOUS, culprits
            system = self.system(size)
            position = [p.name for p in system.machine.properties].index(name)
            try:
                holds = system.holds(position, tuple(state))
            except ModelError as error:
                return REAL, f"undefined at N = {size}: {error}"
            if holds:
                return SPURIOUS, list(range(min(size, RANKS_PER_REFINEMENT)))
            return REAL, f"a state at N = {size} the invariant allows violates it"

        rank_constants = [c for c in constants if c.sort() == z3.IntSort()]
        return self.ask(assertions, self.base_terms(*rank_constants), judge)


def prove_all_ranks(
    protocol: Protocol,
    variant: str,
    instance: str,
    parameters: Mapping[str, int],
    *,
    sizes: tuple[int, ...] = (2,),
    cpu_budget: float | None = 600.0,
    query_seconds: float = 60.0,
) -> AllRanksResult:
    """Try to prove every ``always`` property of the instance for every rank count N >= 2 (module doc)."""
    started = cpu_seconds()
    budget = _Budget(cpu_budget, query_seconds)
    properties = [
        prop.name
        for prop in protocol.machine(variant, dict(parameters)).properties
        if prop.kind is PropertyKind.ALWAYS and prop.name not in SKIPPED_PROPERTIES
    ]
    result = AllRanksResult(protocol.name, variant, instance, [], [], sizes_mined=sizes)

    def all_open(reason: str) -> AllRanksResult:
        result.properties = [PropertyOutcome(name, OPEN, reason) for name in properties]
        result.cpu_seconds = cpu_seconds() - started
        return result

    try:
        machine_family = family(protocol, variant, parameters)
    except NotUniform as error:
        return all_open(f"not one family in the rank count: {error}")
    result.sizes_matched = machine_family.sizes
    counting = prove(COUNTING_LEMMA)
    if counting.outcome != "proved":
        return all_open(f"the counting lemma is {counting.outcome}: {counting.detail}")
    result.notes.append(f"counting lemma {COUNTING_LEMMA.name}: {counting.detail}")
    with bit_vectors(None):
        states = {size: reachable_states(protocol, variant, parameters, size) for size in sizes}
        found = features(machine_family, states)
        candidates = mine(found, states)
        result.candidates = len(candidates)
        try:
            prover = _Prover(machine_family, found, budget)
        except NotUniform as error:
            return all_open(f"not encodable for symbolic N: {error}")
        try:
            kept, failure = prover.houdini(candidates)
        except OutOfBudget:
            kept, failure = [], f"the CPU budget ({cpu_budget:g} s) ran out during Houdini"
        if failure is not None:  # fall back on the invariant every state satisfies: its sorts alone
            result.notes.append(f"Houdini did not finish ({failure}); the invariant is the sorts alone")
            kept = []
            prover.budget = _Budget(FALLBACK_SECONDS, query_seconds)
        result.kept = len(kept)
        result.invariant = [prover.reader.render(candidate) for candidate in kept]
        outcomes = []
        try:
            for name in properties:
                outcomes.append(_outcome(prover, kept, name, failure))
        except OutOfBudget:
            outcomes.extend(
                PropertyOutcome(name, OPEN, "the CPU budget ran out checking the invariant")
                for name in properties[len(outcomes) :]
            )
        result.properties = outcomes
        if result.proved:
            problem = recheck(machine_family, found, kept, result.proved, _Budget(FALLBACK_SECONDS, query_seconds))
            if problem is not None:
                result.properties = [
                    PropertyOutcome(item.name, OPEN, f"the re-check refused the invariant: {problem}")
                    if item.status == PROVED
                    else item
                    for item in outcomes
                ]
            else:
                result.rechecked = True
    result.cpu_seconds = cpu_seconds() - started
    return result


def _outcome(prover: _Prover, kept: list[Candidate], name: str, failure: str | None) -> PropertyOutcome:
    """One property's all-N outcome from the invariant ``kept``."""
    weaker = "" if failure is None else f" (Houdini did not finish: {failure})"
    if name in ("in_bounds", "well_defined"):
        problem = prover.in_bounds(kept) if name == "in_bounds" else prover.well_defined(kept)
        if problem is None:
            return PropertyOutcome(name, PROVED)
        return PropertyOutcome(name, OPEN, f"{problem}{weaker}")
    try:
        answer, payload = prover.implies(kept, name)
    except NotUniform as error:
        return PropertyOutcome(name, OPEN, f"not encodable for symbolic N: {error}")
    if answer == "unsat":
        return PropertyOutcome(name, PROVED)
    if answer == REAL:
        return PropertyOutcome(
            name, OPEN, f"the invariant does not imply it: {payload} (that state need not be reachable){weaker}"
        )
    return PropertyOutcome(name, OPEN, f"{payload}{weaker}")


def recheck(
    machine_family: Family,
    found: Features,
    invariant: Sequence[Candidate],
    properties: Sequence[str],
    budget: _Budget | None = None,
) -> str | None:
    """Initiation, consecution per action (successors in their sorts, defined) and each property
    for symbolic N, each its own Z3 query on a fresh encoding; None when every one is unsat, else
    the first that is not, with what the concrete semantics found."""
    budget = budget or _Budget(None, 120.0)
    kept = list(invariant)
    with bit_vectors(None):
        prover = _Prover(machine_family, found, budget)
        answer, payload = prover.initiation(kept)
        if answer != "unsat":
            return f"initiation: {answer} {payload if answer != REAL else ''}".strip()
        for step in prover.steps:
            answer, payload = prover.consecution(kept, step, keep_domain=False)
            if answer != "unsat":
                return f"consecution of {step.label}: {answer} {payload}"
        for name in properties:
            if name == "in_bounds":
                problem = prover.in_bounds(kept)
            elif name == "well_defined":
                problem = prover.well_defined(kept)
            else:
                answer, payload = prover.implies(kept, name)
                problem = None if answer == "unsat" else f"{answer} {payload}"
            if problem is not None:
                return f"{name}: {problem}"
    return None
