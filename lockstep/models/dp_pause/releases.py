"""The vLLM releases after v0.21.0 whose DP pause code differs, as variants of dp-pause, and what each
changed (read from the PyPI wheels, ``vllm/v1/engine/core.py``, ``core_client.py``,
``coordinator.py``, ``async_llm.py`` and ``vllm/config/parallel.py``).

A ``Release`` is a set of switches, each naming the change it stands for; the variants v0.23.0, v0.25.0,
v0.29.0, v0.30.0 and v0.33.0 switch on what their wheel has (each change is listed at the first
release that has it, found by diffing every wheel from 0.21.0 to 0.33.0: ``BISECTION`` below). The
switches are all off for the v0.20.0/v0.21.0 variants, whose counts and verdicts stay as pinned.

- v0.23.0 (0.21.0-0.23.0): v0.25.0's pause, resume, wave and client code with sleep/wake_up as those
  releases have it: ``EngineCore.wake_up`` resumes the scheduler after any wake, partial or not (core.py
  0.21.0:715-729), and ``DPEngineCoreProc.run_busy_loop`` runs the dummy batch whatever the executor's sleep
  state (core.py 0.21.0:1814-1821). (``Worker.sleep`` has no explicit synchronize, not modelled apart, as 0.24.0.)
- v0.25.0 (the switches arrive in 0.24.0): ``DPEngineCoreProc.run_busy_loop`` skips the dummy batch while
  ``model_executor.is_sleeping`` (it still counts the step and joins the engine all-reduce);
  ``EngineCore.wake_up`` resumes the scheduler only once fully awake. ``sleep(level, mode)`` is
  ``pause_scheduler`` (no ``reject_new_requests``) whose completion puts the executor to sleep:
  ``model_executor.sleep`` → ``collective_rpc("sleep")`` waits for every worker, and
  ``Worker.sleep`` synchronises the device first, so the reply follows an idle device (a pause's
  own completion does not wait for the device before v0.29.0). (``Worker.sleep``'s explicit
  ``torch.accelerator.synchronize`` arrives in 0.25.0; 0.24.0's sleep is not modelled apart.)
- v0.29.0: ``EngineCore._finish_pause``: a pause completes only after
  ``collective_rpc("synchronize_device")`` (the idle callback runs it before the future resolves);
  ``run_busy_loop``: rank 0 reports ``start_wave`` to the coordinator when it starts running at an
  iteration it began idle (``was_running``), unless a pause is pending;
  ``DPCoordinatorProc.process_input_socket``: FIRST_REQ still sends START_DP_WAVE to an idle wave
  but no longer sets ``engines_running`` nor publishes ("only set from the engines' own
  notifications"; 0.27.0 still set it).
- v0.30.0 (also 0.31.0, 0.32.0): ``DPEngineCoreProc._has_global_unfinished_reqs`` syncs at step 1
  of a wave and every ``parallel_config.dp_sync_interval`` steps (default 16; 0.29.0: every 32nd
  step), the step counter reset when a wave ends: v0.33.0's ``sync_at_step_one``, nothing else.
- v0.33.0: ``EngineCoreProc.pause_generation`` sets ``reject_new_requests`` for abort and wait (an
  ADD is answered ``engine_paused``; ``EngineCoreProc.resume_scheduler`` clears it);
  the front-end has no FIRST_REQ path
  (``DPAsyncMPClient.add_request_async`` only stamps the wave; the coordinator logs a front-end
  message as unexpected) and ``DPEngineCoreProc.add_request`` wakes an idle unpaused engine for any
  request (``start_wave`` to the coordinator), not only for a stale wave.
"""

from __future__ import annotations

from dataclasses import dataclass

V0_23_0, V0_25_0, V0_29_0, V0_30_0, V0_33_0 = "v0.23.0", "v0.25.0", "v0.29.0", "v0.30.0", "v0.33.0"
RELEASES = (V0_23_0, V0_25_0, V0_29_0, V0_30_0, V0_33_0)

# Every PyPI release from 0.21.0 to 0.33.0 -> the variant whose DP pause code it has (diffed function by
# function: EngineCore/EngineCoreProc/DPEngineCoreProc pause, resume, sleep, wake_up, _finish_pause,
# add_request, run_busy_loop, _has_global_unfinished_reqs; ParallelConfig.sync_dp_state; DPCoordinatorProc;
# DPAsyncMPClient/DPLBAsyncMPClient; AsyncLLM pause_generation, resume_generation, sleep, wake_up,
# wait_for_requests_to_drain), and what differs that no variant models.
BISECTION: tuple[tuple[str, str, str], ...] = (
    # 0.21.0-0.23.0: the pause, resume, wave and client code of v0.25.0 at sleep_level 0 (its D1, D1a, D2, D3
    # verdicts apply: post-fix does not check them); sleep differs: a dummy batch while asleep, wake_up
    # resumes after a partial wake, no synchronize in Worker.sleep (not modelled apart)
    # (w18wake) the variant v0.23.0 models that sleep (partial_wake: the resume after a partial wake)
    ("0.21.0", V0_23_0, "sleep as 0.22.0"),
    ("0.22.0", V0_23_0, "as 0.21.0 (request counts published before the step; mm cache cleared on pause)"),
    ("0.22.1", V0_23_0, "as 0.22.0"),
    ("0.23.0", V0_23_0, "as 0.22.0 (the dummy batch in log_iteration_details)"),
    ("0.24.0", V0_25_0, "Worker.sleep has no explicit synchronize yet (0.25.0 adds it)"),
    ("0.25.0", V0_25_0, ""),
    ("0.25.1", V0_25_0, "as 0.25.0"),
    ("0.26.0", V0_25_0, "dummy-batch stats without a coordinator only"),
    ("0.27.0", V0_25_0, "elastic EP and coordinator stats changes only"),
    ("0.27.1", V0_25_0, "as 0.27.0"),
    ("0.28.0", V0_25_0, "multimodal cache miss handling only"),
    ("0.29.0", V0_29_0, ""),
    ("0.30.0", V0_30_0, ""),
    ("0.31.0", V0_30_0, "wake_up returns fully_awake; _finish_pause errors reach the future"),
    ("0.32.0", V0_30_0, "wake_up sent to every engine with call_utility_all_async (the DP LB client already did)"),
    ("0.33.0", V0_33_0, ""),
)


@dataclass(frozen=True)
class Release:
    """The DP pause changes after v0.21.0 that a variant has (all off: v0.20.0/v0.21.0)."""

    later: bool = False  # a release after v0.21.0: sleep/wake, device_busy tracked
    sleeps: bool = False  # 0.21.0 on: sleep/wake_up with the executor's sleep state (v0.23.0 on)
    resumes_partially_awake: bool = False  # 0.21.0-0.23.0: wake_up resumes the scheduler after a partial wake
    sleep_skips_dummy: bool = False  # v0.25.0: no dummy batch while asleep; wake_up resumes only fully awake
    synchronizes_device: bool = False  # v0.29.0: _finish_pause → collective_rpc("synchronize_device")
    reports_wave_start: bool = False  # v0.29.0: rank 0 reports start_wave on its idle → running edge
    first_request_leaves_idle: bool = False  # v0.29.0: the coordinator's FIRST_REQ leaves engines_running false
    rejects_while_paused: bool = False  # v0.33.0: pause_generation's reject_new_requests
    sync_at_step_one: bool = False  # v0.33.0: dp_sync_interval cadence, step 1 of a wave synced too
    no_first_request: bool = False  # v0.33.0: no FIRST_REQ; add_request wakes for any request


_TABLE: dict[str, Release] = {
    V0_23_0: Release(later=True, sleeps=True, resumes_partially_awake=True),
    V0_25_0: Release(later=True, sleeps=True, sleep_skips_dummy=True),
    V0_29_0: Release(
        later=True,
        sleeps=True,
        sleep_skips_dummy=True,
        synchronizes_device=True,
        reports_wave_start=True,
        first_request_leaves_idle=True,
    ),
    V0_30_0: Release(
        later=True,
        sleeps=True,
        sleep_skips_dummy=True,
        synchronizes_device=True,
        reports_wave_start=True,
        first_request_leaves_idle=True,
        sync_at_step_one=True,
    ),
    V0_33_0: Release(
        later=True,
        sleeps=True,
        sleep_skips_dummy=True,
        synchronizes_device=True,
        reports_wave_start=True,
        first_request_leaves_idle=True,
        rejects_while_paused=True,
        sync_at_step_one=True,
        no_first_request=True,
    ),
}


def response_steps(release: Release, ranks: int) -> int:
    """The model steps a later release adds to an L1/L2 response window (``response_bound`` + these is
    the bound checked), none of them a wait: the device finishing each rank's last two forwards
    (``device_idle``, 2·ranks) and the stats task applying the coordinator's publications
    (``client_read_view``, 2); from v0.29.0 the device synchronisation (``fire_idle_callbacks`` and
    ``synchronize_device`` where ``notify_idle`` was one step, + ranks) and rank 0's start_wave report
    taken and published (+ 2). Measured smallest bounds for pause_resolves in staggered-pause (2 ranks):
    post-fix 21, v0.25.0 27, v0.29.0 32, v0.33.0 27; default 25 plus these: 31, 35, 35."""
    if not release.later:
        return 0
    steps = 2 * ranks + 2
    if release.synchronizes_device:
        steps += ranks
    if release.reports_wave_start:
        steps += 2
    return steps


def release_of(variant_name: str) -> Release:
    """The changes variant ``variant_name`` has (none for a variant that is not a later release)."""
    return _TABLE.get(variant_name, Release())
