"""The translator checked at run time: the encoding's successors against ``evaluate``'s, state by state.

Every symbolic verdict rests on ``Encoding`` (BMC's unrolling, the circuit ABC reads and the Z3
re-check of every invariant all come from it). A counterexample is replayed through the concrete
evaluator, but a proof or a bound has no path to replay: a translator that drops an action proves
what the model violates (an action dropped from ``Encoding.steps`` gave ``holds, proved by PDR``
on a property violated in 10 steps). The CI's differential tests cover the built-in models only;
these checks run with every symbolic engine, on every model (a ``--model-file`` too):

- ``reachable_sample``: states from seeded random walks through the reference interpreter
  (``InterpretedSystem``, the evaluator's own successors).
- ``invariant_states``: a few states a proof's invariant admits (Z3 models of it in the sort
  domains), the states a certificate rests on.
- ``check_states``: in each state, every grounded transition of the encoding, its guard, whether
  an update leaves its sort, and its successor (``Encoding.successor``, the ITE chains BMC and the
  re-check use), folded to values with the state's concrete values, must be what the evaluator
  gives (none where it raises: ``well_defined``); and every property's value must be the
  evaluator's, an undefined predicate being false. A difference raises
  ``TranslationBug`` naming the action, its arguments and the state: an internal error, never a
  verdict.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable

import z3

from lockstep.checkers.definedness import undefined_at
from lockstep.checkers.symbolic.bmc import TranslationBug
from lockstep.checkers.symbolic.encoding import Encoding, flatten
from lockstep.checkers.symbolic.invariants import components, named_state
from lockstep.checkers.symbolic.values import Symbolic, bit_vectors, conjoin, integer_of, lift_value, negate, to_z3
from lockstep.spec.machine import IN_BOUNDS, NO_DEADLOCK, WELL_DEFINED, PropertyKind
from lockstep.spec.semantics import InterpretedSystem, ModelError, State, Transition
from lockstep.spec.sorts import Value

WALKS, WALK_LENGTH = 6, 24  # the default sample: at most 145 states
INVARIANT_STATES = 4  # states taken from each proof's invariant


def reachable_sample(encoding: Encoding, walks: int = WALKS, length: int = WALK_LENGTH, seed: int = 0) -> list[State]:
    """Distinct reachable states of ``walks`` seeded random walks of up to ``length`` steps through
    the evaluator, the initial state first (a walk ends where nothing is enabled or the model fails)."""
    system = InterpretedSystem(encoding.machine)
    chooser = random.Random(seed)
    initial = system.initial()
    found = {initial: None}
    for _ in range(walks):
        state = initial
        for _ in range(length):
            try:
                moves = [transition for transition in system.transitions(state) if transition.out_of_bounds is None]
            except ModelError:
                break
            if not moves:
                break
            state = chooser.choice(moves).target
            found.setdefault(state, None)
    return list(found)


def invariant_states(encoding: Encoding, invariant: z3.BoolRef, count: int = INVARIANT_STATES) -> list[State]:
    """Up to ``count`` distinct states in the sort domains that satisfy ``invariant`` (over the named
    state, integer reading)."""
    with bit_vectors(None):
        state = named_state(encoding)
        terms = components(encoding, state)
        solver = z3.Solver()
        solver.set("timeout", 10_000)
        solver.add(to_z3(encoding.domain(state)), invariant)
        found: list[State] = []
        while len(found) < count and solver.check() == z3.sat:
            model = solver.model()
            found.append(encoding.decode_state(state, model))
            solver.add(z3.Or(*[term != model.eval(term, model_completion=True) for term in terms]))
    return found


def check_encoding(encoding: Encoding, invariants: list[z3.BoolRef] | None = None) -> None:
    """The spot checks an engine runs after its verdicts: a reachable sample, and a few states of
    each proof's invariant (over the named state, integer reading). Raises ``TranslationBug``."""
    check_states(encoding, reachable_sample(encoding), where="reachable")
    for invariant in invariants or []:
        check_states(encoding, invariant_states(encoding, invariant), where="an invariant's")


def check_states(encoding: Encoding, states: list[State], *, where: str) -> None:
    """The encoding agrees with the evaluator in every state of ``states`` (see the module doc);
    ``where`` says what the states are (for the message). Raises ``TranslationBug``."""
    system = InterpretedSystem(encoding.machine)
    with bit_vectors(None):
        for state in states:
            try:
                expected: list[Transition] | None = system.transitions(state)
            except ModelError:
                expected = None  # evaluate cannot compute the successors: the encoding has none either
            pre = _lifted(encoding, state)
            _check_successors(encoding, pre, state, expected, where)
            _check_properties(encoding, system, pre, state, expected, where)


def _check_successors(
    encoding: Encoding, pre: dict[str, Symbolic], state: State, expected: list[Transition] | None, where: str
) -> None:
    machine = encoding.machine
    steps = encoding.steps(pre)
    if len(steps) != len(encoding.grounded):
        raise TranslationBug(
            f"the encoding has {len(steps)} transitions for {len(encoding.grounded)} grounded actions of "
            f"{machine.name}: a translator bug"
        )
    by_key = {(transition.action, transition.arguments): transition for transition in expected or []}
    for index, (grounded, (guard, _, out_of_bounds)) in enumerate(zip(encoding.grounded, steps, strict=True)):
        action = machine.actions[grounded.action]
        name = f"{action.name}{grounded.arguments}"
        reference = by_key.get((grounded.action, grounded.arguments))
        enabled = _known(guard, f"the guard of {name}", state, where)
        if enabled != (reference is not None):
            said = "enabled" if reference is not None else "not enabled"
            if expected is None:
                said = "no successors (it cannot compute them)"
            raise TranslationBug(
                f"the encoding and evaluate disagree on action {name} in {where} state {state}: evaluate has it "
                f"{said}, the encoding's guard is {enabled}: a translator bug"
            )
        if reference is None:
            continue
        leaves = _known(out_of_bounds, f"whether {name} leaves a sort", state, where)
        if leaves != (reference.out_of_bounds is not None):
            raise TranslationBug(
                f"the encoding and evaluate disagree on whether action {name} leaves a sort in {where} state "
                f"{state} (evaluate: {reference.out_of_bounds or 'no'}): a translator bug"
            )
        if leaves:
            continue
        taken = _known(conjoin([guard, negate(out_of_bounds)]), f"the step {name}", state, where)
        after = encoding.successor(pre, index, steps)
        for (variable, sort), value in zip(encoding.sorts.items(), reference.target, strict=True):
            wanted = list(flatten(sort, lift_value(value, sort)))
            got = [_known(item, f"{variable} after {name}", state, where) for item in after[variable]]
            if not taken or got != wanted:
                raise TranslationBug(
                    f"the encoding and evaluate disagree on action {name} in {where} state {state}: {variable} "
                    f"becomes {value!r} in evaluate, components {got} in the encoding: a translator bug"
                )


def _check_properties(
    encoding: Encoding,
    system: InterpretedSystem,
    pre: dict[str, Symbolic],
    state: State,
    expected: list[Transition] | None,
    where: str,
) -> None:
    for position, prop in enumerate(encoding.machine.properties):
        if prop.kind is PropertyKind.LEADS_TO:
            continue
        if prop.kind is PropertyKind.SOMETIMES:
            wanted = _defined_and_true(functools.partial(system.holds, position, state))
            symbolic = encoding.defined_predicate(prop.predicate, pre)
        else:
            wanted = _evaluated_holds(encoding, system, position, state, expected)
            symbolic = encoding.holds(position, pre)
        if _known(symbolic, f"property {prop.name}", state, where) != wanted:
            raise TranslationBug(
                f"the encoding and evaluate disagree on property {prop.name} in {where} state {state} "
                f"(evaluate: {wanted}): a translator bug"
            )


def _evaluated_holds(
    encoding: Encoding, system: InterpretedSystem, position: int, state: State, expected: list[Transition] | None
) -> bool:
    """``Encoding.holds``'s question asked of the evaluator: the predicate and, where nothing is
    enabled, the deadlock condition (``no_deadlock``: the state is final), each defined and true;
    ``in_bounds``: no enabled step leaves its sort; ``well_defined``: nothing it asks raises."""
    prop = encoding.machine.properties[position]
    if prop.name == IN_BOUNDS:
        return all(transition.out_of_bounds is None for transition in expected or [])
    if prop.name == WELL_DEFINED:
        return undefined_at(system, state) is None
    holds = _defined_and_true(lambda: system.holds(position, state))
    if expected != []:  # something is enabled, or evaluate cannot say: no deadlock
        return holds
    if prop.name == NO_DEADLOCK:
        return holds and _defined_and_true(lambda: system.is_final(state))
    return holds and _defined_and_true(lambda: system.holds_at_deadlock(position, state))


def _defined_and_true(question: Callable[[], bool]) -> bool:
    try:
        return question()
    except ModelError:
        return False


def _lifted(encoding: Encoding, state: State) -> dict[str, Symbolic]:
    return {name: lift_value(value, sort) for (name, sort), value in zip(encoding.sorts.items(), state, strict=True)}


def _known(value: Symbolic, what: str, state: State, where: str) -> Value:
    """A folded value as a Python bool or int (Z3 literals simplified); a translator bug if the
    encoding leaves it symbolic in a concrete state."""
    if isinstance(value, bool | int):
        return value
    if isinstance(value, z3.ExprRef):
        simple = z3.simplify(to_z3(value))
        if z3.is_true(simple) or z3.is_false(simple):
            return z3.is_true(simple)
        if z3.is_int_value(simple) or z3.is_bv_value(simple):
            return integer_of(simple)
    raise TranslationBug(f"the encoding leaves {what} undecided in {where} state {state}: a translator bug")
