"""The smallest ``max_delay`` at which each finding (a released variant violating a finding instance's
``finding_properties``: the Findings table of docs/protocols.md) still shows its property's violation.

    python tools/finding_delays.py [FILTER ...]

For each finding (those whose ``protocol variant instance property`` contains every FILTER) it checks
the instance with ``max_delay`` = 0, 1, 2, ... (up to 12) and prints the first bound at which the
finding's property is violated (``none`` if none up to 12). ``tests/test_readme.py`` checks that
``FINDINGS`` lists every finding the model snapshot shows and that docs/protocols.md's table of smallest
bounds has a row for each.
"""

from __future__ import annotations

import sys

from lockstep.checkers import check
from lockstep.models import get_protocol

FINDINGS: tuple[tuple[str, str, str, str], ...] = (
    ("dp-pause", "post-fix", "stale-wave-after-resume", "no_hang"),
    ("dp-pause", "post-fix", "double-resume", "no_hang"),
    ("dp-pause", "post-fix", "request-after-resume", "coordinator_idle_when_quiet"),
    ("dp-pause", "post-fix", "second-client-during-resume", "no_hang"),
    ("dp-pause", "post-fix", "second-client-while-paused", "no_hang"),
    ("async-placeholders", "post-fix", "history-toggle", "tokens_aligned"),
    ("async-placeholders", "v0.27.0", "history-toggle", "tokens_aligned"),
    ("async-placeholders", "post-fix", "pipeline-queue", "tokens_aligned"),
    ("async-placeholders", "v0.27.0", "pipeline-queue", "tokens_aligned"),
    ("computed-tokens", "post-fix", "sync-pipeline-early-drafts", "U2_exact"),
    ("pp-broadcast", "post-fix", "failed-forward", "receive_only_on_non_last"),
    ("dp-pause", "v0.29.0", "wave-unseen-interval-2", "wave_seen_before_complete"),
    ("dp-pause", "v0.30.0", "wave-unseen", "wave_seen_before_complete"),
    ("dp-pause", "v0.23.0", "partial-wake", "forward_only_awake"),
    ("dp-pause", "v0.23.0", "partial-wake", "no_hang"),
    ("dp-pause", "v0.25.0", "drain-after-resume", "drained_when_idle"),
    ("dp-pause", "v0.29.0", "drain-after-resume", "drained_when_idle"),
    ("dp-pause", "v0.33.0", "drain-after-resume", "drained_when_idle"),
    ("dp-pause", "v0.25.0", "pause-device-busy", "device_idle_after_pause"),
    ("dp-pause", "v0.25.0", "drain-after-add", "drained_while_adding"),
    ("dp-pause", "v0.29.0", "drain-after-add", "drained_while_adding"),
    ("dp-pause", "v0.33.0", "drain-after-add", "drained_while_adding"),
    ("dp-pause", "v0.25.0", "wave-unseen", "wave_seen_before_complete"),
    ("dp-pause", "v0.33.0", "wave-unseen", "wave_seen_before_complete"),
    ("dp-pause", "v0.25.0", "second-client-during-resume", "no_hang"),
    ("dp-pause", "v0.29.0", "second-client-during-resume", "no_hang"),
    ("dp-pause", "v0.25.0", "second-client-while-paused", "no_hang"),
    ("dp-pause", "v0.29.0", "second-client-while-paused", "no_hang"),
    ("pp-broadcast", "post-fix", "spec-decode", "sampled_one_column"),
    ("pp-broadcast", "post-fix", "spec-decode", "draft_inputs_known"),
    ("pp-broadcast", "v0.21.0", "spec-decode", "sampled_one_column"),
    ("pp-broadcast", "v0.21.0", "spec-decode", "draft_inputs_known"),
    ("pp-broadcast", "v0.22.0", "spec-decode", "sampled_one_column"),
    ("pp-broadcast", "v0.22.0", "spec-decode", "draft_inputs_known"),
    ("pp-broadcast", "v0.23.0", "spec-decode", "sampled_one_column"),
    ("pp-broadcast", "v0.23.0", "spec-decode", "draft_inputs_known"),
    ("pp-broadcast", "v0.30.0", "spec-decode", "sampled_one_column"),
    ("pp-broadcast", "v0.30.0", "spec-decode", "draft_inputs_known"),
    ("pp-broadcast", "post-fix", "structured-output", "grammar_bitmask_current"),
    ("pp-broadcast", "v0.21.0", "structured-output", "grammar_bitmask_current"),
    ("pp-broadcast", "v0.22.0", "structured-output", "grammar_bitmask_current"),
    ("pp-broadcast", "v0.23.0", "structured-output", "grammar_bitmask_current"),
    ("pp-broadcast", "v0.30.0", "structured-output", "grammar_bitmask_current"),
    ("pp-broadcast", "post-fix", "v2-seed", "no_false_dependency"),
    ("pp-broadcast", "v0.21.0", "v2-seed", "no_false_dependency"),
    ("pp-broadcast", "v0.22.0", "v2-seed", "no_false_dependency"),
    ("pp-broadcast", "post-fix", "v2-spec-decode", "no_collective_mismatch"),
    ("pp-broadcast", "v0.21.0", "v2-spec-decode", "no_collective_mismatch"),
    ("pp-broadcast", "v0.22.0", "v2-spec-decode", "no_collective_mismatch"),
    ("pp-broadcast", "v0.23.0", "v2-spec-decode", "no_collective_mismatch"),
    ("pp-broadcast", "v0.23.0", "v2-spec-decode", "draft_inputs_known"),
    ("pp-broadcast", "v0.23.0", "sync-failed-forward", "failure_reaches_engine"),
    ("pp-broadcast", "v0.30.0", "sync-failed-forward", "failure_reaches_engine"),
    ("pp-broadcast", "v0.31.0", "sync-failed-forward", "failure_reaches_engine"),
    ("pp-broadcast", "v0.33.0", "sync-failed-forward", "failure_reaches_engine"),
)
LIMIT = 12


def smallest_delay(protocol: str, variant: str, instance: str, prop: str) -> int | None:
    for bound in range(LIMIT + 1):
        bounded = get_protocol(protocol).instance(variant, instance, overrides={"max_delay": bound})
        result = check(bounded, engine="auto", properties=[prop])
        if result.property_result(prop).verdict.value == "violated":
            return bound
    return None


def main(filters: list[str]) -> None:
    for finding in FINDINGS:
        if not all(word in " ".join(finding) for word in filters):
            continue
        bound = smallest_delay(*finding)
        shown = "none" if bound is None else str(bound)
        print(f"{' '.join(finding)}: smallest max_delay {shown}", flush=True)  # noqa: T201


if __name__ == "__main__":
    main(sys.argv[1:])
