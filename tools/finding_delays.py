"""The smallest ``max_delay`` at which each finding (a pinned ``violated`` instance of a released
variant, README's Findings table) still shows its property's violation.

    python tools/finding_delays.py

For each finding it checks the instance with ``max_delay`` = 0, 1, 2, ... (up to 12) and prints the
first bound at which the finding's property is violated (``none`` if none up to 12).
"""

from __future__ import annotations

from lockstep.checkers import check
from lockstep.models import get_protocol

FINDINGS: tuple[tuple[str, str, str, str], ...] = (
    ("dp-pause", "post-fix", "stale-wave-after-resume", "no_hang"),
    ("dp-pause", "post-fix", "double-resume", "no_hang"),
    ("dp-pause", "post-fix", "request-after-resume", "coordinator_idle_when_quiet"),
    ("dp-pause", "post-fix", "second-client-during-resume", "no_hang"),
    ("dp-pause", "post-fix", "second-client-while-paused", "no_hang"),
    ("async-placeholders", "post-fix", "history-toggle", "tokens_aligned"),
    ("computed-tokens", "post-fix", "sync-pipeline-early-drafts", "U2_exact"),
    ("pp-broadcast", "post-fix", "failed-forward", "receive_only_on_non_last"),
    ("dp-pause", "v0.29.0", "wave-unseen-interval-2", "wave_seen_before_complete"),
    ("dp-pause", "v0.30.0", "wave-unseen", "wave_seen_before_complete"),
    ("dp-pause", "v0.23.0", "partial-wake", "forward_only_awake"),
)
LIMIT = 12


def smallest_delay(protocol: str, variant: str, instance: str, prop: str) -> int | None:
    for bound in range(LIMIT + 1):
        bounded = get_protocol(protocol).instance(variant, instance, overrides={"max_delay": bound})
        result = check(bounded, engine="auto")
        if any(item.name == prop and item.verdict.value == "violated" for item in result.properties):
            return bound
    return None


def main() -> None:
    for protocol, variant, instance, prop in FINDINGS:
        bound = smallest_delay(protocol, variant, instance, prop)
        shown = "none" if bound is None else str(bound)
        print(f"{protocol} {variant} {instance} {prop}: smallest max_delay {shown}", flush=True)  # noqa: T201


if __name__ == "__main__":
    main()
