"""The built-in ``well_defined`` property on concrete states: where ``evaluate`` raises.

``evaluate`` raises (a ``ModelError`` from the stepping interface) on a division or modulo by
zero, a map key or sequence position out of range, and the ``tail`` of an empty sequence. Such a
state violates ``well_defined``, and every engine treats it alike (the symbolic engines through
``Translator.defined``): the state has no successors (they cannot be computed), it is no deadlock,
and a property whose predicate is undefined there does not hold there (an ``always`` property is
violated, a ``sometimes`` property has no witness there). So a property whose value rests on an
undefined operation is never proved, and the state is reported with a path to it.

``undefined_at`` says why a state violates it, with the reference interpreter (its message names
the action and arguments or the property, and the expression). ``UndefinedOperation`` is what an
engine that cannot report the property itself raises (the vectorised kernels): ``check`` then runs
the reference search, which does.

The reference semantics is ``evaluate``'s, guard conjuncts in their declared order (each evaluated
where those before it hold). The generated successor code evaluates a conjunct that reads fewer
of an action's parameters first (it prunes loops); where that raises, the explicit engine takes
the interpreter's answer for the state. Where the reordering hides one (an earlier-declared
conjunct undefined where a hoisted later one is false), the explicit engine does not see it and
the symbolic engines do: a differential test between them shows such a model.
"""

from __future__ import annotations

from lockstep.spec.semantics import InterpretedSystem, ModelError, State


class UndefinedOperation(ModelError):
    """An engine met a state where ``evaluate`` raises and cannot report ``well_defined`` itself."""


def undefined_at(system: InterpretedSystem, state: State) -> str | None:
    """Why ``evaluate`` cannot compute, in ``state``, what the engines ask there (the successors,
    every property's predicate, and where nothing is enabled the final and deadlock conditions);
    None where all of it is defined."""
    try:
        transitions = system.transitions(state)
        for position in range(len(system.machine.properties)):
            system.holds(position, state)
        if not transitions:
            system.is_final(state)
            for position in range(len(system.machine.properties)):
                system.holds_at_deadlock(position, state)
    except ModelError as error:
        return str(error)
    return None
