"""A pinned model instance checked against its golden figures (shared by the model test modules)."""

from __future__ import annotations

from lockstep.checkers import CheckResult, Verdict, check
from lockstep.spec.protocol import Protocol

Golden = tuple[int, int, dict[str, int], int | None]  # states, transitions, {violated: length}, witness length


def check_golden(protocol: Protocol, variant: str, instance: str, golden: Golden, witness: str) -> CheckResult:
    """Check the instance and assert its verdict, state and transition counts, the lengths of the
    violated properties and of the ``witness`` property's witness; return the result for more."""
    states, transitions, violated, witness_length = golden
    pinned = protocol.instance(variant, instance)
    result = check(pinned, engine="bfs")
    assert result.verdict.value == pinned.expected
    assert (result.stats.states, result.stats.transitions) == (states, transitions)
    found = {
        item.name: (item.path.length if item.path else None)
        for item in result.properties
        if item.verdict is Verdict.VIOLATED
    }
    assert found == violated
    replayed = result.property_result(witness)
    assert (replayed.path.length if replayed.verdict is Verdict.HOLDS and replayed.path else None) == witness_length
    return result
