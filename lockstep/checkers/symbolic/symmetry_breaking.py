"""Rank symmetry in the BMC unrolling: permutations of the grounded transitions, and a lex-leader
constraint on the selectors that keeps one path of each orbit.

A machine may declare an index sort (or some of its values) interchangeable (``declare_symmetric``);
``lockstep.checkers.symmetry.validate`` checks that no guard, update or property breaks that (no
constant naming a permuted value, no order or arithmetic on the sort, no value of it escaping into
another sort), and here the initial state is checked to be fixed by every permutation. Then a
permutation ``p`` of the declared values maps every state ``s`` to a state ``p(s)`` and every grounded
transition ``g`` (an action and its arguments) to ``p(g)`` (the same action, its arguments of the sort
permuted), such that ``g`` takes ``s`` to ``t`` iff ``p(g)`` takes ``p(s)`` to ``p(t)``, and every
property's goal (a violation, a witness, a deadlock, an enabled out-of-sort step, a monitor
counter) holds in ``s`` iff it holds in ``p(s)``.

The constraint (``LexLeader``). Order the grounded transitions by their index in
``Encoding.grounded``, and paths of equal length by the lexicographic order of their sequences of
transitions. For each permutation ``p`` other than the identity, a flag per frame records whether
an earlier step was not fixed by ``p`` (``p(g) != g``); the step at the first frame where
``p(g) != g`` must satisfy ``g < p(g)``. That is: the path's sequence is not greater than the
sequence of its image ``p(path)`` (the two agree up to that frame, since a fixed transition maps to
itself).

Soundness. Let ``S`` be the set of paths of exactly k steps from the initial state that end in a
state where some goal asked at depth k holds. ``S`` is closed under every permutation ``p``: the
initial state is fixed by ``p``, ``p`` maps a path to a path of the same length, and the goal holds
at ``p(t)`` iff at ``t``. Take the lexicographically least path ``m`` of ``S``; for every ``p``,
``p(m)`` is in ``S``, so ``m <= p(m)``, which is the constraint. So whenever the unreduced unrolling
has a path to a goal at depth k, the constrained one has one of the same length, and every verdict
and shortest counterexample length is unchanged. The same least path ``m`` also has no factor that
the partial-order reduction (``reduction``) forbids, since each such factor can be rewritten into
a lexicographically smaller path of ``S`` with the same last state: so the two constraints may be
combined, with the same order on transitions.

When the machine declares no symmetry, or the declaration does not hold (``SymmetryError``), or a
parameter of a permuted action has a compound sort holding the symmetric one, ``lex_leader``
returns None with the reason, and BMC runs without the constraint.
"""

from __future__ import annotations

import itertools

import z3

from lockstep.checkers.symbolic.encoding import Encoding, Grounded
from lockstep.checkers.symmetry import Canonicalizer, SymmetryError, validate
from lockstep.spec.sorts import IndexSort, MapSort, RecordSort, SequenceSort, Sort

Flags = dict[str, z3.BoolRef]


def membership(selector: z3.ExprRef, members: frozenset[int] | set[int]) -> z3.BoolRef:
    """``selector`` names one of ``members``."""
    return z3.Or(*[selector == member for member in sorted(members)]) if members else z3.BoolVal(False)


def _contains(sort: Sort, target: IndexSort) -> bool:
    if sort == target:
        return True
    if isinstance(sort, MapSort):
        return sort.key == target or _contains(sort.value, target)
    if isinstance(sort, SequenceSort):
        return _contains(sort.element, target)
    if isinstance(sort, RecordSort):
        return any(_contains(field_sort, target) for _, field_sort in sort.fields)
    return False


def transition_permutations(encoding: Encoding) -> tuple[list[tuple[int, ...]], str | None]:
    """Every permutation of the machine's declared symmetry as a map of grounded transition indices
    (the identity first), or the identity alone and why the symmetry cannot be used."""
    identity = tuple(range(len(encoding.grounded)))
    machine = encoding.machine
    if not machine.symmetric:
        return [identity], f"machine {machine.name} declares no symmetric sort"
    try:
        for sort, members in machine.symmetric:
            validate(machine, sort, members)
        Canonicalizer(machine)  # refuses an initial state that a permutation moves
    except SymmetryError as error:
        return [identity], str(error)
    groups = []
    for sort, members in machine.symmetric:
        chosen = sorted(members)
        mappings = []
        for image in itertools.permutations(chosen):
            values = list(range(sort.count))
            for source, destination in zip(chosen, image, strict=True):
                values[source] = destination
            mappings.append((sort, tuple(values)))
        groups.append(mappings)
    index = {grounded: position for position, grounded in enumerate(encoding.grounded)}
    permutations: list[tuple[int, ...]] = []
    for combination in itertools.product(*groups):
        images: list[int] = []
        for grounded in encoding.grounded:
            action = machine.actions[grounded.action]
            arguments = list(grounded.arguments)
            for position, parameter in enumerate(action.parameters):
                for sort, mapping in combination:
                    if parameter.sort == sort:
                        arguments[position] = mapping[int(arguments[position])]  # type: ignore[call-overload]
                    elif _contains(parameter.sort, sort):
                        reason = f"action {action.name}: parameter {parameter.name} holds {sort.name} values"
                        return [identity], reason
            found = index.get(Grounded(grounded.action, tuple(arguments)))
            if found is None:
                return [identity], f"action {action.name}: a permuted argument tuple is not grounded"
            images.append(found)
        permutations.append(tuple(images))
    permutations.sort(key=lambda permutation: permutation != identity)
    return permutations, None


class LexLeader:
    """The lex-leader constraint over the selectors, one flag per non-identity permutation (see the
    module doc); the same ``flags``/``initial``/``step`` interface as ``reduction.Reduction``."""

    def __init__(self, permutations: list[tuple[int, ...]]) -> None:
        identity = tuple(range(len(permutations[0])))
        self.permutations = [permutation for permutation in permutations if permutation != identity]
        self.flags = [f"symmetry!{position}" for position in range(len(self.permutations))]

    def initial(self, flags: Flags) -> z3.BoolRef:
        return z3.And(*[z3.Not(flags[name]) for name in self.flags])

    def step(self, selector: z3.ExprRef, before: Flags, after: Flags) -> z3.BoolRef:
        parts = []
        for name, permutation in zip(self.flags, self.permutations, strict=True):
            moved = {index for index, image in enumerate(permutation) if image != index}
            greater = {index for index, image in enumerate(permutation) if image < index}
            parts.append(after[name] == z3.Or(before[name], membership(selector, moved)))
            parts.append(z3.Or(before[name], z3.Not(membership(selector, greater))))
        return z3.And(*parts)


def lex_leader(encoding: Encoding) -> tuple[LexLeader | None, str | None]:
    """The constraint for ``encoding``'s machine, or None and why symmetry cannot be used."""
    permutations, reason = transition_permutations(encoding)
    if reason is not None:
        return None, reason
    if len(permutations) == 1:
        return None, "the declared symmetry permutes no grounded transition"
    return LexLeader(permutations), None
