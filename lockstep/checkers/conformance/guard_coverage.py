"""Guard conjuncts seen true and false along a replay (opt-in: ``replay_traces(guard_coverage=True)``).

Before each event, every action's guard conjuncts are evaluated, for every argument binding, in
one candidate state (the first; candidates that differ are not all visited, so this is a lower
bound on what the trace exercised). A conjunct counts as seen true (false) when some binding made
it true (false) at some event. The result maps ``"action: conjunct"`` to ``[true, false]`` counts
of events; ``never_false`` and ``never_true`` list the conjuncts a test-runtime goal would still
need. Evaluation is interpretive and memoised per state, so it is cheap for traces of thousands
of events and the small models lockstep ships.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lockstep.spec.evaluation import Environment, EvaluationError, evaluate
from lockstep.spec.expressions import render
from lockstep.spec.machine import Machine
from lockstep.spec.semantics import State, unpack


@dataclass
class GuardCoverage:
    machine: Machine
    spaces: Sequence[Sequence[tuple[Any, ...]]]  # per action, its argument bindings (the replayer's)
    counts: dict[str, list[int]] = field(default_factory=dict)
    _memo: dict[State, frozenset[tuple[str, bool]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for action in self.machine.actions:
            for conjunct in action.guard:
                self.counts.setdefault(f"{action.name}: {render(conjunct)}", [0, 0])

    def observe(self, state: State) -> None:
        seen = self._memo.get(state)
        if seen is None:
            seen = self._evaluate(state)
            if len(self._memo) < 10_000:
                self._memo[state] = seen
        for key, value in seen:
            self.counts[key][0 if value else 1] += 1

    def _evaluate(self, state: State) -> frozenset[tuple[str, bool]]:
        values = unpack(self.machine, state)
        seen: set[tuple[str, bool]] = set()
        for position, action in enumerate(self.machine.actions):
            names = [parameter.name for parameter in action.parameters]
            labels = [f"{action.name}: {render(conjunct)}" for conjunct in action.guard]
            for arguments in self.spaces[position]:
                environment = Environment(values, dict(zip(names, arguments)))
                for label, conjunct in zip(labels, action.guard):
                    try:
                        seen.add((label, bool(evaluate(conjunct, environment))))
                    except (EvaluationError, IndexError, ZeroDivisionError):
                        continue
        return frozenset(seen)

    def to_json(self) -> dict[str, Any]:
        return {
            "conjuncts": {key: {"true": true, "false": false} for key, (true, false) in self.counts.items()},
            "never_true": sorted(key for key, (true, _) in self.counts.items() if not true),
            "never_false": sorted(key for key, (_, false) in self.counts.items() if not false),
        }


__all__ = ["GuardCoverage"]
