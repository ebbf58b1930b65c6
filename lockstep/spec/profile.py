"""Recorder profiles: what a recorder defined in code does not record, and the model parameters
its recordings stand for. A profile is the caller's word, never the trace's: replay
(``lockstep.checkers.conformance.judgement``) compares a trace header with it and refuses a header that
would widen the check. Pure Python; imports nothing of the project.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RecorderProfile:
    """``unrecorded``: actions, actors or actor kinds (``"rank:*"``) the recorder leaves out;
    ``parameters``: model parameter values its recordings stand for; ``derived``: values computed
    from the run's sizing parameters (e.g. a bound on waves from the request count)."""

    name: str
    protocol: str
    unrecorded: tuple[str, ...] = ()
    parameters: Mapping[str, int] = field(default_factory=dict)
    derived: Callable[[Mapping[str, int]], Mapping[str, int]] | None = None

    def values(self, sizing: Mapping[str, int]) -> dict[str, int]:
        """The profile's parameter values for a run of ``sizing`` (the derived ones included)."""
        values = dict(self.parameters)
        if self.derived is not None:
            values.update(self.derived({**sizing, **values}))
        return values
