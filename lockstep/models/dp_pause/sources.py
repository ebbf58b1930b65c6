"""Where the vLLM functions a dp-pause action stands for differ by variant.

Each action names the v0.21.0 source it mirrors (``post-fix``, read from the v0.21.0 wheel) at its
definition (``mirrors=`` in ``engine.py``, ``coordinator.py``, ``client.py``); counterexamples
show it with every step. This table gives the v0.20.0 wheel's (``pre-fix``) where a function
differs, and the lines the mutants change; ``model.build`` applies it with ``machine.mirror``.
"""

from __future__ import annotations

from lockstep.models.dp_pause.engine import UTILITY
from lockstep.models.dp_pause.state import IGNORE_WHILE_PAUSED, NO_LOCAL_WAKEUP, Variant
from lockstep.models.vllm_files import (
    ASYNC_LLM,
    ASYNC_LLM_TESTS,
    COORDINATOR,
    CORE_CLIENT,
    DP_TESTS,
    ENGINE_CORE,
    ENGINE_CORE_TESTS,
    GPU_WORKER,
    PARALLEL_CONFIG,
)
from lockstep.spec.machine import Source

# v0.20.0: single-phase pause, MAX finish-sync, resume that tells the coordinator.
PRE_FIX_SOURCES: dict[str, str] = {
    "handle_start_wave": "DPEngineCoreProc._handle_client_request(START_DP_WAVE)",
    "handle_pause": UTILITY + "EngineCoreProc.pause_scheduler (None at once if not has_work())",
    "handle_resume": UTILITY + "DPEngineCoreProc.resume_scheduler (start_wave if idle with requests)",
    "finish_sync": "ParallelConfig.has_unfinished_dp returns → DPEngineCoreProc.run_busy_loop "
    "(wave end: wave_complete)",
}


def variant_sources(variant: Variant) -> dict[str, str]:
    """The sources of ``variant`` that differ from v0.21.0's (the mutants differ from their base only
    where they change a line)."""
    table = {} if variant.fixed else dict(PRE_FIX_SOURCES)
    if variant.name == IGNORE_WHILE_PAUSED:
        table["handle_start_wave"] = (
            "DPEngineCoreProc._handle_client_request(START_DP_WAVE) (dropped while paused: #36608/#38009)"
        )
    if variant.name == NO_LOCAL_WAKEUP:
        table["handle_add"] = "_handle_client_request(ADD) → DPEngineCoreProc.add_request (stale wave: start_wave only)"
    return table


# Where vLLM states each property: the release's lines (the wheel's vllm/..., the sdist's tests/...).
PROPERTY_SOURCES: dict[str, tuple[Source, ...]] = {
    "quiescent_during_rpc": (
        Source("0.33.0", ENGINE_CORE, 2308, "DPEngineCoreProc.__init__", "comment", 2312),
        Source("0.33.0", DP_TESTS, 662, "test_dp_pause_barrier_request_deadlock", "test"),
        Source("0.33.0", ENGINE_CORE_TESTS, 732, "test_paused_dp_rank_ignores_start_wave", "test"),
    ),
    "forward_counts_agree": (
        Source("0.33.0", ENGINE_CORE, 2457, "DPEngineCoreProc._should_throttle_prefills", "comment", 2459),
        Source("0.33.0", ENGINE_CORE, 2555, "DPEngineCoreProc._has_global_unfinished_reqs", "code", 2557),
        Source("0.33.0", ENGINE_CORE_TESTS, 674, "test_dp_sync_interval_normal_wave", "test"),
    ),
    "paused_ranks_agree": (
        Source("0.33.0", ENGINE_CORE, 2362, "DPEngineCoreProc._pause_complete", "docstring", 2368),
        Source("0.33.0", ENGINE_CORE_TESTS, 684, "test_dp_sync_interval_idle_pause_consensus_on_first_step", "test"),
    ),
    "sync_decisions_agree": (
        Source("0.33.0", ENGINE_CORE, 2567, "DPEngineCoreProc._has_global_unfinished_reqs", "code", 2570),
        Source("0.33.0", PARALLEL_CONFIG, 872, "ParallelConfig.sync_dp_state", "docstring", 880),
        Source("0.33.0", ENGINE_CORE_TESTS, 684, "test_dp_sync_interval_idle_pause_consensus_on_first_step", "test"),
    ),
    "resume_after_consensus": (
        Source("0.33.0", ENGINE_CORE, 2388, "DPEngineCoreProc.resume_scheduler", "raise", 2393),
    ),
    "pause_mode_semantics": (
        Source("0.33.0", ENGINE_CORE, 2186, "EngineCoreProc.pause_scheduler", "docstring", 2195),
        Source("0.33.0", ASYNC_LLM, 1003, "AsyncLLM.pause_generation", "docstring", 1008),
        Source("0.33.0", DP_TESTS, 495, "test_dp_pause_abort", "test"),
        Source("0.33.0", DP_TESTS, 548, "test_dp_pause_keep_then_resume", "test"),
        Source("0.33.0", DP_TESTS, 771, "test_dp_pause_wait_mode_drains_in_flight", "test"),
    ),
    "coordinator_idle_when_quiet": (
        Source("0.33.0", COORDINATOR, 413, "DPCoordinatorProc.process_input_socket", "comment", 415),
        Source("0.33.0", DP_TESTS, 340, "test_dp_pause_late_request_does_not_block_drain", "test"),
        Source("0.33.0", DP_TESTS, 452, "test_dp_sleep_late_request_does_not_block_drain", "test"),
    ),
    "pause_resolves": (
        Source("0.33.0", ENGINE_CORE, 2194, "EngineCoreProc.pause_scheduler", "docstring", 2195),
        Source("0.33.0", ENGINE_CORE, 2221, "EngineCoreProc.pause_scheduler", "code", 2223),
        Source("0.33.0", DP_TESTS, 601, "test_dp_pause_keep_race_staggered_engines", "test"),
    ),
    "pause_returns": (
        Source("0.33.0", ENGINE_CORE, 2221, "EngineCoreProc.pause_scheduler", "code", 2223),
        Source("0.33.0", CORE_CLIENT, 1306, "AsyncMPClient.call_utility_all_async", "comment", 1312),
        Source("0.33.0", DP_TESTS, 300, "test_dp_pause_resume_basic", "test"),
        Source("0.33.0", DP_TESTS, 803, "test_dp_pause_while_asleep", "test"),
    ),
    "resume_serves": (
        Source("0.33.0", ENGINE_CORE, 986, "EngineCore.resume_scheduler", "docstring"),
        Source("0.33.0", ASYNC_LLM, 1007, "AsyncLLM.pause_generation", "docstring", 1008),
        Source("0.33.0", DP_TESTS, 548, "test_dp_pause_keep_then_resume", "test"),
    ),
    "resume_eventually_serves": (
        Source("0.33.0", ENGINE_CORE, 986, "EngineCore.resume_scheduler", "docstring"),
        Source("0.33.0", ENGINE_CORE, 2405, "DPEngineCoreProc.resume_scheduler", "code", 2410),
        Source("0.33.0", DP_TESTS, 300, "test_dp_pause_resume_basic", "test"),
        Source("0.33.0", DP_TESTS, 412, "test_dp_request_reaching_rank_after_resume_wakes_peers", "test"),
    ),
    "drained_when_idle": (Source("0.33.0", ASYNC_LLM, 1262, "AsyncLLM.wait_for_requests_to_drain", "docstring", 1267),),
    "drained_while_adding": (
        Source("0.33.0", ASYNC_LLM, 1262, "AsyncLLM.wait_for_requests_to_drain", "docstring", 1267),
    ),
    "device_idle_after_pause": (
        Source("0.33.0", ENGINE_CORE, 949, "EngineCore._finish_pause", "comment", 950),
        Source("0.33.0", GPU_WORKER, 302, "Worker.sleep", "code"),
        Source("0.33.0", DP_TESTS, 836, "test_dp_pause_completion_implies_device_idle", "test"),
        Source("0.33.0", ENGINE_CORE_TESTS, 856, "test_pause_synchronizes_device_before_cache_reset", "test"),
    ),
    "wave_seen_before_complete": (
        Source("0.33.0", ENGINE_CORE, 2544, "DPEngineCoreProc.run_busy_loop", "comment", 2547),
        Source("0.33.0", COORDINATOR, 430, "DPCoordinatorProc.process_input_socket", "comment", 431),
        Source("0.33.0", ENGINE_CORE_TESTS, 708, "test_idle_dp_rank_announces_wave_for_new_work", "test"),
    ),
    "rejection_cleared_after_resume": (
        Source("0.33.0", ASYNC_LLM, 998, "AsyncLLM.pause_generation", "docstring", 1000),
        Source("0.33.0", ENGINE_CORE, 2235, "EngineCoreProc.resume_scheduler", "code", 2237),
        Source("0.33.0", ENGINE_CORE_TESTS, 770, "test_pause_generation_rejects_new_requests", "test"),
        Source("0.33.0", ASYNC_LLM_TESTS, 1382, "test_pause_admission_policy_per_mode", "test"),
    ),
    "awake_after_wake_up": (
        Source("0.33.0", ENGINE_CORE, 1038, "EngineCore.wake_up", "docstring"),
        Source("0.33.0", DP_TESTS, 803, "test_dp_pause_while_asleep", "test"),
    ),
    "forward_only_awake": (
        Source("0.33.0", ENGINE_CORE, 1051, "EngineCore.wake_up", "comment", 1052),
        Source("0.33.0", ENGINE_CORE, 2503, "DPEngineCoreProc.run_busy_loop", "comment", 2507),
    ),
}
