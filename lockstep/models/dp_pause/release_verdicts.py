"""The expected verdicts of dp-pause's later-release variants (``releases.py``): those added to the
instances the v0.20.0/v0.21.0 variants share, and the instances only the later releases have."""

from __future__ import annotations

from dataclasses import replace

from lockstep.models.dp_pause.releases import V0_23_0, V0_25_0, V0_29_0, V0_30_0, V0_33_0
from lockstep.spec.protocol import InstanceSpec

# instance -> {variant: verdict} for the shared instances
SHARED: dict[str, dict[str, str]] = {
    # D1 drained_when_idle after resume (the finding drain-after-resume), D1a drained_while_adding, D3
    # wave_seen_before_complete; v0.25.0 also D2 device_idle_after_pause (the finding pause-device-busy)
    # (v0.23.0 and v0.30.0 as their nearest: D2 too in v0.23.0, D3 by the 13-step path in v0.30.0)
    "seed": {V0_23_0: "violated", V0_25_0: "violated", V0_29_0: "violated", V0_30_0: "violated", V0_33_0: "violated"},
    # (w18review) L1 pause_resolves holds within response_bound + releases.response_steps; violated through
    # the seed's D1, D1a, D3 (and D2 in v0.25.0)
    "staggered-pause": {V0_25_0: "violated", V0_29_0: "violated", V0_33_0: "violated"},
}

RELEASE_INSTANCES: tuple[InstanceSpec, ...] = (
    InstanceSpec(
        "drain-after-resume",
        "the seed (pause(keep) with a request held, collective_rpc, resume): right after resume_generation "
        "returned, wait_for_requests_to_drain returns at once while the kept request is unfinished (a race: "
        "the view lags the engines): the resume barrier set engines_running on every rank, but the coordinator "
        "(and so the client's published view) still says idle until rank 0 reports start_wave after its first "
        "step (v0.29.0 on) or, in v0.25.0, for the whole resumed wave",
        {},
        {V0_25_0: "violated", V0_29_0: "violated", V0_33_0: "violated"},
        finding="`drained_when_idle` in 45 (v0.25.0), 51 (v0.29.0), 46 (v0.33.0) steps: "
        "`DPEngineCoreProc.resume_scheduler` (the barrier sets `engines_running`, nothing to the coordinator), "
        "`DPAsyncMPClient` stats task (`engines_running` only from the coordinator's publications), "
        "`AsyncLLM.wait_for_requests_to_drain` (returns when `dp_engines_running()` is false), "
        "`DPEngineCoreProc.run_busy_loop` (rank 0's `start_wave` after its first step, v0.29.0 on) "
        "(v0.25.0, v0.29.0, v0.33.0)",
        finding_properties=("drained_when_idle",),
        upstream="new (RFC #51476 and PR #51481 are the opposite latch: the view stuck at running)",
    ),
    InstanceSpec(
        "pause-device-busy",
        "the seed: pause_generation returns while the last dummy batch's kernels still run on a device (v0.25.0: "
        "the pause future resolves with no device synchronisation; v0.29.0 adds _finish_pause)",
        {},
        {V0_25_0: "violated"},
        finding="`device_idle_after_pause` in 20 steps: `DPEngineCoreProc._pause_complete` / the idle callback "
        "resolves the pause future, `DPEngineCoreProc.run_busy_loop` → `execute_dummy_batch` returns before its "
        "kernels finish (v0.25.0; v0.29.0 adds `EngineCore._finish_pause` → `collective_rpc('synchronize_device')`)",
        finding_properties=("device_idle_after_pause",),
        upstream="known: RFC #51476 (problem 3), fixed by PR #52914 (first in 0.29.0)",
    ),
    InstanceSpec(
        "drain-after-add",
        "the seed: right after add_request the drain returns while the request is on its way: v0.33.0 has no "
        "FIRST_REQ (the view stays idle until the engine's start_wave is published); v0.25.0/v0.29.0 set the "
        "view at FIRST_REQ, but the stats task then applies a publication the coordinator sent before it took "
        "FIRST_REQ (v0.29.0's coordinator never publishes running for FIRST_REQ)",
        {},
        {V0_25_0: "violated", V0_29_0: "violated", V0_33_0: "violated"},
        finding="`drained_while_adding` in 2 (v0.25.0, v0.29.0) and 1 (v0.33.0) steps: "
        "`DPAsyncMPClient.add_request_async`, its stats task (FIRST_REQ sets `engines_running`, the next drained "
        "publication overwrites it), `DPCoordinatorProc` poll-timeout publication, "
        "`AsyncLLM.wait_for_requests_to_drain` (v0.25.0, v0.29.0, v0.33.0)",
        finding_properties=("drained_while_adding",),
        upstream="new (searched with drain-after-resume)",
    ),
    InstanceSpec(
        "wave-unseen",
        "the seed: a wave that serves the request ends (rank 0's wave_complete taken) before the coordinator "
        "marked it running: v0.25.0, the FIRST_REQ still on its way while the engine runs the request and the "
        "pause wave; v0.33.0, the engine's start_wave taken after rank 0's wave_complete; v0.30.0, the wave ends "
        "at its first step (a sync step from 0.30.0 on) before rank 0 reports start_wave. v0.29.0's shortest "
        "violation at sync_interval 1 is that path, the model syncing at step 1 where v0.29.0 syncs every 32: "
        "its own is wave-unseen-interval-2",
        {},
        {V0_25_0: "violated", V0_30_0: "violated", V0_33_0: "violated"},
        finding="`wave_seen_before_complete` in 24 steps (v0.25.0, v0.33.0), 13 (v0.30.0: the wave ends at its "
        "first step, a sync step from 0.30.0 on, before rank 0's `start_wave` edge): `DPEngineCoreProc.add_request`, "
        "`run_busy_loop` (wave_complete from rank 0; v0.33.0 `start_wave` from the rank that took the request), "
        "`_has_global_unfinished_reqs` (v0.30.0: step 1 syncs), `DPCoordinatorProc.process_input_socket` "
        "(FIRST_REQ / start_wave / wave_complete in arrival order) (v0.25.0, v0.30.0, v0.33.0)",
        finding_properties=("wave_seen_before_complete",),
        upstream="new (the start_wave edge, core.py 2544-2550, was added for this class of race)",
    ),
    InstanceSpec(  # (w18review) v0.29.0's wave-unseen: its first step is never a sync step, so interval 2
        "wave-unseen-interval-2",
        "the seed at sync_interval 2 (v0.29.0 syncs every 32nd step, never at a wave's first) with every message "
        "taken at once (max_delay 0): the coordinator takes FIRST_REQ and sends START_DP_WAVE but, from v0.29.0, "
        "leaves itself idle; rank 0 takes START_DP_WAVE and its PAUSE in one _process_input_queue pass, so its "
        "first running iteration has a pause pending and sends no start_wave; the pause consensus ends the wave",
        {"sync_interval": 2, "max_delay": 0},
        {V0_29_0: "violated"},
        finding="`wave_seen_before_complete` in 26 steps (v0.29.0; 21 with max_delay unbounded): "
        "`DPCoordinatorProc.process_input_socket` (FIRST_REQ: START_DP_WAVE, `engines_running` left false), "
        "`DPEngineCoreProc._handle_client_request` (START_DP_WAVE), `_pause_complete` (`pending_pause`), "
        "`run_busy_loop` (no `start_wave` while `pending_pause`; `wave_complete` at the consensus), "
        "`_has_global_unfinished_reqs` (v0.29.0)",
        finding_properties=("wave_seen_before_complete",),
        upstream="new (wave-unseen's mechanism at vLLM's sync cadence)",
    ),
    InstanceSpec(
        "sleep",
        "sleep(level=1) instead of pause (abort: the request is aborted), collective_rpc while asleep, then "
        "wake_up (fully awake: the DP resume barrier); sleep replies only once the executor slept, and "
        "Worker.sleep synchronises the device first, so no release returns with a busy device; violated "
        "through drained_while_adding and wave_seen_before_complete, as the seed",
        {"sleep_level": 1},
        {V0_25_0: "violated", V0_29_0: "violated", V0_33_0: "violated"},
    ),
    InstanceSpec(  # (w18sleep) sleep called while paused: no new violation
        "sleep-while-paused",
        "pause_generation(keep), then sleep(level=1) on the paused group (pause_scheduler sets the pause again and "
        "kicks the consensus round, the executor sleeps when it completes), then wake_up; D2, W1 and no_hang hold; "
        "violated through drained_while_adding and wave_seen_before_complete, as the seed",
        {"sleep_level": 1, "sleep_with_pause": 1},
        {V0_25_0: "violated", V0_29_0: "violated", V0_33_0: "violated"},
    ),
    InstanceSpec(  # (w18sleep) pause_generation called while asleep: no new violation
        "pause-while-asleep",
        "sleep(level=1), then pause_generation(keep) on the sleeping group (a consensus round with no dummy batch, "
        "the executor asleep), then wake_up (fully awake: the resume barrier); D2, W1 and no_hang hold; violated "
        "through drained_while_adding and wave_seen_before_complete, as the seed",
        {"sleep_level": 1, "sleep_with_pause": 2},
        {V0_25_0: "violated", V0_29_0: "violated", V0_33_0: "violated"},
    ),
    InstanceSpec(  # (w18wake) issue 18: checked against vLLM 0.21.0's source step by step (README)
        "partial-wake",
        "sleep(level=1), a request while asleep, collective_rpc, then wake_up(tags=['weights']) and "
        "wake_up(tags=['kv_cache']): 0.21.0-0.23.0 resume the scheduler after the first (partial) wake, so the "
        "resume barrier starts a wave and the engine runs the request's forward with its kv_cache unmapped; "
        "from 0.24.0 wake_up resumes only once fully awake (forward_only_awake holds in v0.25.0). The second wake_up "
        "resumes again: a rank whose wave still runs ignores it, while its peer, whose copy arrived as the wave ended, "
        "enters the resume barrier alone (double-resume's hang, reached by the usual weights-then-kv_cache wake)",
        {"sleep_level": 1, "partial_wake": 1, "resumes": 2, "requests": 0, "late_requests": 1, "late_window": 2},
        {V0_23_0: "violated", V0_25_0: "violated"},
        finding="`forward_only_awake` in 49 steps (v0.23.0 = vLLM 0.21.0-0.23.0): `EngineCore.sleep` → "
        "`DPEngineCoreProc._pause_complete`, the consensus in `_has_global_unfinished_reqs`, `model_executor.sleep`; "
        "`EngineCore.add_request` while paused; `EngineCore.wake_up(['weights'])` → `Executor.wake_up` "
        "(`is_sleeping` stays true) → `DPEngineCoreProc.resume_scheduler` (the `has_unfinished_dp` barrier sets "
        "`engines_running`); `run_busy_loop` → `_process_engine_step` → `execute_model`. `no_hang` in 68 steps: "
        "`EngineCore.wake_up(['kv_cache'])` → `DPEngineCoreProc.resume_scheduler` (a no-op where `engines_running`, "
        "the `has_unfinished_dp` barrier where the wave has ended, decided per rank), `_has_global_unfinished_reqs` "
        "(the wave's end between the two ranks' copies) (v0.23.0; v0.25.0 violates only the seed's drain properties)",
        finding_properties=("forward_only_awake", "no_hang"),
        upstream="known: issue #44395, fixed by PR #44483 (first in 0.24.0)",
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


__all__ = ["V0_25_0", "V0_29_0", "V0_30_0", "V0_33_0", "with_release_verdicts"]
