"""The scenarios of the pd-kv-transfer runtime: the model's instances, and the faults each steers to.

A scenario is a model instance (its parameters: requests, blocks, fault budgets, lease mode). A
run's choices pick among the actions its engines can take; a scenario named for a failure also
*steers* them: while any preferred action is enabled, the choice is among the preferred ones
only, so the run goes to that failure whatever the seed (``abort-failed-cleanup``: D aborts a
request it admitted before allocating it, and the notify-only read to P fails;
``untimely-lease``: P's lease expires as soon as it may). A run following a script (``lockstep
reproduce``, ``test-runtime``) is not steered until its script is done. Imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from lockstep.models.pd_kv_transfer.model import PROTOCOL


@dataclass(frozen=True)
class Steering:
    """The preferred actions (an option's action, and a text its arguments must contain) and, when
    fixed, how many of the run's aborts P injects (the rest are D's)."""

    preferred: tuple[tuple[str, str], ...] = ()
    prefill_aborts: int | None = None

    def prefers(self, option: str) -> bool:
        action, _, arguments = option.partition(" ")
        return any(action == name and needle in arguments for name, needle in self.preferred)


STEERING = {
    "abort-failed-cleanup": Steering((("decode_abort", ""), ("decode_notify_only", "ok=false")), prefill_aborts=0),
    "untimely-lease": Steering((("prefill_lease_expires", ""),)),
    "lost-notification": Steering((("lose_notification", ""),)),
    "lost-notification-lease": Steering((("lose_notification", ""),)),
    "duplicated-notification": Steering((("duplicate_notification", ""),)),
}

# the first is `lockstep run`'s default: pre-fix fails (EngineCore's assert), post-fix completes
SCENARIOS = (
    "abort-failed-cleanup",
    *(instance.name for instance in PROTOCOL.instances if instance.name != "abort-failed-cleanup"),
)


def steering_of(scenario: str) -> Steering:
    return STEERING.get(scenario, Steering())
