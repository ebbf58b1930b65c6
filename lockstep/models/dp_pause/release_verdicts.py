"""The expected verdicts of dp-pause's later-release variants (``releases.py``): those added to the
instances the v0.20.0/v0.21.0 variants share, and the instances only the later releases have."""

from __future__ import annotations

from dataclasses import replace

from lockstep.models.dp_pause.releases import V0_25_0, V0_29_0, V0_33_0
from lockstep.spec.protocol import InstanceSpec

# instance -> {variant: verdict} for the shared instances
SHARED: dict[str, dict[str, str]] = {
    # D1 drained_when_idle: the kept request after resume (the finding drain-after-resume); v0.25.0 also
    # D2 device_idle_after_pause (the finding pause-device-busy)
    "seed": {V0_25_0: "violated", V0_29_0: "violated", V0_33_0: "violated"},
}

RELEASE_INSTANCES: tuple[InstanceSpec, ...] = (
    InstanceSpec(
        "drain-after-resume",
        "the seed (pause(keep) with a request held, collective_rpc, resume): right after resume_generation "
        "returned, wait_for_requests_to_drain returns at once while the kept request is unfinished: the resume "
        "barrier set engines_running on every rank, but the coordinator (and so the client's published view) "
        "still says the engines are idle until rank 0 reports start_wave after its next step (v0.29.0 on) or, "
        "in v0.25.0, never",
        {},
        {V0_25_0: "violated", V0_29_0: "violated", V0_33_0: "violated"},
        finding="`AsyncLLM.wait_for_requests_to_drain` (returns when `dp_engines_running()` is false), "
        "`DPAsyncMPClient` stats task (`engines_running` only from the coordinator's publications), "
        "`DPEngineCoreProc.resume_scheduler` (the barrier sets `engines_running` without telling the "
        "coordinator), `DPEngineCoreProc.run_busy_loop` (rank 0's `start_wave` only at the end of its next "
        "iteration, v0.29.0 on) (v0.25.0, v0.29.0, v0.33.0)",
    ),
    InstanceSpec(
        "sleep",
        "sleep(level=1) instead of pause (abort: the request is aborted), collective_rpc while asleep, then "
        "wake_up (fully awake: the DP resume barrier); v0.25.0's sleep returns while the last dummy batch's "
        "kernels may still run (no synchronize_device before the pause completes)",
        {"sleep_level": 1},
        {V0_25_0: "violated", V0_29_0: "holds", V0_33_0: "holds"},
        finding="`EngineCore.sleep` → `pause_scheduler` → the idle callback resolves the future (and the "
        "executor sleeps) with no device synchronisation; `DPEngineCoreProc.run_busy_loop` → "
        "`execute_dummy_batch` returns before its kernels finish (v0.25.0; v0.29.0 adds `_finish_pause` → "
        "`collective_rpc('synchronize_device')`)",
    ),
    InstanceSpec(
        "reject-while-paused",
        "pause_generation(mode='abort'), then a request while paused (rejected with engine_paused in v0.33.0), "
        "collective_rpc, resume: rejection stops once resume returned",
        {"requests": 0, "late_requests": 1, "late_window": 2, "pause_modes": 2},
        {V0_33_0: "holds"},
    ),
)


def with_release_verdicts(*instances: InstanceSpec) -> tuple[InstanceSpec, ...]:
    """The shared instances with the later releases' verdicts added, then the later releases' own."""
    merged = tuple(
        replace(instance, expected={**instance.expected, **SHARED.get(instance.name, {})}) for instance in instances
    )
    return merged + RELEASE_INSTANCES


__all__ = ["V0_25_0", "V0_29_0", "V0_33_0", "with_release_verdicts"]
