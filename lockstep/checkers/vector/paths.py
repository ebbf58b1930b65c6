"""Counterexamples of the vectorised engines, rebuilt and re-run through the reference evaluator.

The engines keep, per stored state, only its parent's index and the id of the action x argument
tuple that reached it. A path is rebuilt by replaying those tuples with ``InterpretedSystem``
(``evaluate``, the reference semantics), from the initial state. With symmetry the stored states
are canonical representatives: the replay follows the representatives and, beside them, a
concrete execution whose every state has the representative's canonical form, so the path shown
is a real run of the model. The violation at its end is checked again with ``evaluate``: a
disagreement is an internal error of the kernels, never a result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import numpy as np

from lockstep.checkers.definedness import UndefinedOperation, undefined_at
from lockstep.checkers.explicit.search import transition_step
from lockstep.checkers.result import Path, Step
from lockstep.checkers.symmetry import Canonicalizer, argument_permuters
from lockstep.checkers.vector.backend import NumpyBackend
from lockstep.checkers.vector.kernels import Kernels, canonical_for
from lockstep.spec.layout import Layout
from lockstep.spec.machine import IN_BOUNDS, NO_DEADLOCK, Machine, PropertyKind
from lockstep.spec.semantics import InterpretedSystem, ModelError, State, Transition
from lockstep.spec.sorts import Value

Canonical = Callable[[list[tuple[int, ...]]], list[tuple[int, ...]]]  # packed states -> their representatives
TUPLE_PERMUTATIONS = 120  # up to this many permutations a state's images are taken one by one, in Python


def host_canonical(function: Callable[[Any], Any] | None) -> Canonical | None:
    """A numpy ``canonical`` kernel as a function of packed states given as tuples."""
    if function is None:
        return None

    def canonical(states: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        if not states:
            return []
        images = function(np.array(states, dtype=np.int64).T)
        return [tuple(int(word) for word in column) for column in images.T]

    return canonical


def reproduce_action_error(machine: Machine, state: State, action: int, arguments: tuple[Value, ...]) -> NoReturn:
    """A kernel failed on action x ``arguments`` at ``state``: the reference's error, as an
    ``UndefinedOperation`` (``well_defined`` is violated there; the caller checks with an engine
    that reports it), found by re-running the state's transitions (an internal error where they
    do not fail)."""
    why = undefined_at(InterpretedSystem(machine), state)
    if why is not None:
        raise UndefinedOperation(why)
    raise ModelError(
        f"internal error: the vectorised kernel of {machine.actions[action].name}{arguments} fails where "
        f"evaluate does not"
    )


def reproduce_property_error(machine: Machine, state: State) -> NoReturn:
    """A property kernel failed at ``state``: the reference's error as an ``UndefinedOperation``
    (or an internal error)."""
    system = InterpretedSystem(machine)
    why = undefined_at(system, state)
    try:
        for position in range(len(machine.properties)):
            system.holds_at_deadlock(position, state)
        system.is_final(state)
    except ModelError as error:
        why = why or str(error)
    if why is not None:
        raise UndefinedOperation(why)
    raise ModelError("internal error: a vectorised property kernel fails where evaluate does not")


class PathBuilder:
    """Rebuilds paths from ``kernels``' tuple ids. With symmetry (``kernels`` have a ``canonical``,
    which maps packed words to their representatives), a state's representative is
    the least packed form of its images: taken in Python, image by image (``Canonicalizer``'s
    permutations: the same set as the kernel's), where there are at most ``TUPLE_PERMUTATIONS`` of
    them, which needs no decode and no array call per step; by the kernel compiled for numpy beyond."""

    def __init__(self, machine: Machine, layout: Layout, kernels: Kernels) -> None:
        self.machine = machine
        self.layout = layout
        self.tuples: Sequence[tuple[int, tuple[Value, ...]]] = kernels.tuples
        self.symmetric = kernels.canonical is not None
        self.permutations: list[Callable[[State], State]] = []
        self.moves: list[list[Callable[[Any], Any]]] = []  # per permutation, per action: its arguments' images
        self.canonical: Canonical | None = None
        if self.symmetric:
            canonicalizer = Canonicalizer(machine, validated=True)
            permutations = canonicalizer.permutations
            if len(permutations) <= TUPLE_PERMUTATIONS:
                self.permutations = permutations
                self.moves = [argument_permuters(machine, combination) for combination in canonicalizer.combinations]
            else:  # one state at a time
                self.canonical = host_canonical(canonical_for(kernels, NumpyBackend().namespace()))
        self.system = InterpretedSystem(machine)

    def _representative(self, state: State) -> State:
        """The representative of ``state``: its least image by ``canonical`` (which is set when
        there are more than ``TUPLE_PERMUTATIONS`` permutations; the state itself without symmetry)."""
        if self.canonical is None:
            return state
        words = self.layout.encode(state)
        wanted = self.canonical([words])[0]
        return state if wanted == words else self.layout.decode(wanted)

    def _least(self, state: State) -> State:
        """The least image of ``state`` in packed order, from ``permutations``' distinct images
        compared word by word (most differ in the first word, so the rest is never packed; a state
        that every permutation leaves as it is is its own)."""
        images = list({permute(state): None for permute in self.permutations})  # an image is often repeated
        word = self.layout.word
        for index in range(self.layout.words):
            if len(images) == 1:
                break
            keys = [word(image, index) for image in images]
            least = min(keys)
            images = [image for image, key in zip(images, keys) if key == least]
        return images[0]

    def _fire(self, state: State, tuple_id: int, in_bounds: bool = True, moved: int = 0) -> Transition:
        """The step of tuple ``tuple_id`` from ``state``, its arguments moved by permutation ``moved``
        (an index into ``permutations``; 0, the identity, leaves them as they are)."""
        action, arguments = self.tuples[tuple_id]
        if moved:
            arguments = self.moves[moved][action](arguments)
        for transition in self.system.transitions(state, action, arguments):
            if (
                transition.action == action
                and transition.arguments == arguments
                and (transition.out_of_bounds is None) == in_bounds
            ):
                return transition
        name = self.machine.actions[action].name
        raise ModelError(
            f"internal error: the vectorised kernels took {name}{arguments}, which evaluate does not enable here"
        )

    def _concrete(self, concrete: State, action: int, representative: State, steps: list[Step]) -> State:
        """The step from ``concrete`` to a state whose representative is ``representative`` (appended
        to ``steps``), and its target: among the same action's steps first (a permutation of the
        representative's arguments takes it where symmetry says), then among all, their targets'
        representatives taken in one call of ``canonical``."""
        assert self.canonical is not None
        wanted = self.layout.encode(representative)
        for only in (action, None):
            candidates = [
                transition for transition in self.system.transitions(concrete, only) if transition.out_of_bounds is None
            ]
            keys = self.canonical([self.layout.encode(transition.target) for transition in candidates])
            for transition, key in zip(candidates, keys):
                if key == wanted:
                    steps.append(transition_step(self.machine, transition))
                    return transition.target
        raise ModelError("internal error: no concrete step reaches the representative the vectorised engine stored")

    def path(self, chain: Sequence[int], extra: int | None = None) -> Path:
        """The path along ``chain`` (tuple ids from the initial state), then ``extra`` (a step that
        leaves a sort), as a concrete execution.

        With symmetry, up to ``TUPLE_PERMUTATIONS`` permutations, see ``_followed``. Beyond, while
        the concrete execution is at the representative itself (as it mostly is), the
        representative's step is the concrete step: only the target's representative is taken, no
        successor of the concrete state searched."""
        initial = self.system.initial()
        if self.permutations:
            return self._followed(initial, chain, extra)
        representative, concrete = self._representative(initial), initial
        steps: list[Step] = []
        for tuple_id in chain:
            taken = self._fire(representative, tuple_id)
            if not self.symmetric:
                steps.append(transition_step(self.machine, taken))
                representative = concrete = taken.target
                continue
            image = self._representative(taken.target)
            if concrete == representative:
                steps.append(transition_step(self.machine, taken))
                concrete = taken.target
            else:
                concrete = self._concrete(concrete, taken.action, image, steps)
            representative = image
        if extra is not None:
            leaving = self._fire(representative, extra, in_bounds=False)
            if self.symmetric:
                leaving = next(
                    transition
                    for transition in self.system.transitions(concrete)
                    if transition.action == leaving.action and transition.out_of_bounds == leaving.out_of_bounds
                )
            steps.append(transition_step(self.machine, leaving))
        return Path(initial, tuple(steps))

    def _followed(self, initial: State, chain: Sequence[int], extra: int | None) -> Path:
        """``path`` with ``permutations``: the concrete execution alone is run. Where it stands at
        the image of the representative under permutation ``moved``, the representative's tuple with
        its arguments moved the same way is the concrete step (by symmetry it reaches the image of
        the representative's target), so each step costs one ``evaluate`` of one tuple, as without
        symmetry; the next representative is the least image of the step's target, and the
        permutation taking it there the first in ``permutations``' order."""
        concrete = initial  # symmetric (validated), so its own representative
        moved = 0
        steps: list[Step] = []
        for tuple_id in chain:
            taken = self._fire(concrete, tuple_id, moved=moved)
            steps.append(transition_step(self.machine, taken))
            concrete = taken.target
            representative = self._least(concrete)
            moved = 0
            if representative != concrete:
                images = (permute(representative) for permute in self.permutations)
                moved = next((index for index, image in enumerate(images) if image == concrete), -1)
                if moved < 0:
                    raise ModelError("internal error: a state is no image of its representative")
        if extra is not None:
            steps.append(transition_step(self.machine, self._fire(concrete, extra, in_bounds=False, moved=moved)))
        return Path(initial, tuple(steps))

    def confirm(self, position: int, path: Path, deadlock: bool) -> None:
        """Check with ``evaluate`` that ``path`` ends where property ``position`` is violated (or, for
        ``sometimes``, witnessed); anything else is an internal error of the kernels."""
        prop = self.machine.properties[position]
        final = path.final_state
        if deadlock:
            ok = (
                self.system.is_final(final)
                if prop.name == NO_DEADLOCK
                else self.system.holds_at_deadlock(position, final)
            )
            confirmed = not self.system.transitions(final) and not ok
        elif prop.name == IN_BOUNDS:
            confirmed = bool(path.steps) and self._leaves_sort(path)
        else:
            holds = self.system.holds(position, final)
            confirmed = holds if prop.kind is PropertyKind.SOMETIMES else not holds
        if not confirmed:
            raise ModelError(
                f"internal error: evaluate does not confirm the vectorised engine's result for {prop.name}"
            )

    def _leaves_sort(self, path: Path) -> bool:
        last = path.steps[-1]
        previous = path.steps[-2].state if len(path.steps) > 1 else path.initial
        for transition in self.system.transitions(previous):
            if transition.target == last.state and transition.out_of_bounds is not None:
                return True
        return False


__all__ = ["PathBuilder", "host_canonical", "reproduce_action_error", "reproduce_property_error"]
