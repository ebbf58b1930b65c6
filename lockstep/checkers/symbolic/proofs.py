"""Re-checking properties pinned as proved: pdr on the named properties of one machine, each within
a budget of CPU seconds, and which of them it proved (``lockstep check --all --proofs``; the pins
live with the protocols, ``lockstep.models.proofs``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lockstep.checkers.result import Verdict
from lockstep.spec.machine import Machine


@dataclass(frozen=True)
class ProofCheck:
    """One pinned proof re-run: the property, whether pdr proved it, the seconds, the detail."""

    protocol: str
    prop: str
    proved: bool
    seconds: float
    detail: str


def check_pinned(protocol: str, machine: Machine, names: Sequence[str], budget: float) -> list[ProofCheck]:
    """Run pdr on the properties ``names`` of ``machine`` (``protocol`` labels the rows), each within
    ``budget`` CPU seconds; a name the machine has no property for is a row not proved."""
    from lockstep.checkers.symbolic.pdr import PropertyDirectedReachability

    if not names:
        return []
    positions = {prop.name: position for position, prop in enumerate(machine.properties)}
    missing = [name for name in names if name not in positions]
    only = frozenset(positions[name] for name in names if name in positions)
    prover = PropertyDirectedReachability(machine, property_timeout=budget, only=only, beside=True)
    result = prover.run()
    rows = [ProofCheck(protocol, name, False, 0.0, "the model has no such property") for name in missing]
    for item in result.properties:
        attempt = prover.attempts.get(item.name)
        seconds = 0.0 if attempt is None else attempt.seconds
        rows.append(ProofCheck(protocol, item.name, item.verdict is Verdict.HOLDS, seconds, item.detail))
    return rows
