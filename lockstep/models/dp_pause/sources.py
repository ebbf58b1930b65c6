"""The vLLM functions each dp-pause action stands for, shown with every counterexample step.

Read from the v0.21.0 wheel (``post-fix`` and its mutants) and the v0.20.0 wheel (``pre-fix``, where
a function differs): ``vllm/v1/engine/core.py`` (``EngineCoreProc``, ``DPEngineCoreProc``),
``coordinator.py`` (``DPCoordinatorProc``), ``core_client.py`` (``DPAsyncMPClient``,
``DPLBAsyncMPClient``), ``async_llm.py`` (``AsyncLLM``) and ``vllm/config/parallel.py``
(``ParallelConfig``). A utility call reaches its method through
``EngineCoreProc._handle_client_request`` (UTILITY) and ``_invoke_utility_method``, which replies
at once or when the returned Future resolves.
"""

from __future__ import annotations

UTILITY = "_handle_client_request(UTILITY) → "
REPLY = " → _invoke_utility_method (reply)"

POST_FIX_SOURCES: dict[str, str] = {
    # engine cores: input path
    "arrive_from_client": "EngineCoreProc.process_input_sockets (→ input_queue)",
    "arrive_from_coordinator": "EngineCoreProc.process_input_sockets (coordinator → input_queue)",
    "handle_add": "_handle_client_request(ADD) → DPEngineCoreProc.add_request",
    "handle_start_wave": "DPEngineCoreProc._handle_client_request(START_DP_WAVE) (dropped under ignore_start_dp_wave)",
    "handle_abort": "_handle_client_request(ABORT) → EngineCore.abort_requests (scheduler.finish_requests)",
    "handle_pause": UTILITY + "EngineCoreProc.pause_scheduler → DPEngineCoreProc._pause_complete",
    "handle_collective_rpc": UTILITY + "EngineCore.collective_rpc (body: a collective on the workers)",
    "finish_collective_rpc": "EngineCore.collective_rpc returns" + REPLY,
    "handle_barrier": UTILITY + "DPEngineCoreProc.barrier (dist.barrier(dp_group))",
    "finish_barrier": "DPEngineCoreProc.barrier returns" + REPLY,
    "handle_resume": UTILITY + "DPEngineCoreProc.resume_scheduler (→ has_unfinished_dp barrier)",
    "finish_resume": "ParallelConfig.has_unfinished_dp returns in DPEngineCoreProc.resume_scheduler" + REPLY,
    "notify_idle": "EngineCoreProc._process_input_queue → _notify_idle_state_callbacks (pause Future resolves)",
    # engine cores: the busy loop
    "step": "DPEngineCoreProc.run_busy_loop → _process_engine_step / execute_dummy_batch / idle continue",
    "finish_forward": "execute_model / execute_dummy_batch returns → DPEngineCoreProc._has_global_unfinished_reqs",
    "finish_sync": "ParallelConfig.sync_dp_state returns → DPEngineCoreProc.run_busy_loop (wave end: wave_complete)",
    # coordinator
    "coordinator_first_request": "DPCoordinatorProc.process_input_socket (FIRST_REQ) → _send_start_wave",
    "coordinator_report": "DPCoordinatorProc.process_input_socket (wave_complete / start_wave) → _send_start_wave",
    # client
    "client_add_request": "AsyncLLM.add_request → DPAsyncMPClient.add_request_async (ADD; FIRST_REQ if not engines_running)",
    "client_abort_request": "AsyncLLM.abort → DPLBAsyncMPClient.abort_requests_async (ABORT to the request's engine)",
    "client_read_publication": "DPAsyncMPClient run_engine_stats_update_task (current_wave, engines_running)",
    "client_read_stale_publication": "DPAsyncMPClient run_engine_stats_update_task: the drained publications end at one "
                                     "the coordinator has superseded (current_wave, engines_running)",
    "client_forward_first_request": "DPAsyncMPClient run_engine_stats_update_task (FIRST_REQ from the inproc socket: "
                                    "engines_running = True, forward (engine, current_wave) to the coordinator)",
    "client_choose_pause_mode": "AsyncLLM.pause_generation(mode=...)",
    "client_pause": "AsyncLLM.pause_generation → pause_scheduler_async → DPLBAsyncMPClient.call_utility_async (one engine)",
    "client_pause_returned": "DPLBAsyncMPClient.call_utility_async: every engine answered → pause_generation returns",
    "client_collective_rpc": "AsyncLLM.collective_rpc → DPLBAsyncMPClient.call_utility_async (one engine)",
    "client_collective_rpc_returned": "DPLBAsyncMPClient.call_utility_async: every engine answered → collective_rpc returns",
    "client_barrier": "DPLBAsyncMPClient.call_utility_async('barrier') (one engine; vLLM's test staggers them)",
    "client_barrier_returned": "DPLBAsyncMPClient.call_utility_async: every engine answered the barrier",
    "client_resume": "AsyncLLM.resume_generation → resume_scheduler_async → DPLBAsyncMPClient.call_utility_async (one engine)",
    "client_resume_returned": "DPLBAsyncMPClient.call_utility_async: every engine answered → resume_generation returns",
}

# v0.20.0: single-phase pause, MAX finish-sync, resume that tells the coordinator.
PRE_FIX_SOURCES: dict[str, str] = {
    **POST_FIX_SOURCES,
    "handle_start_wave": "DPEngineCoreProc._handle_client_request(START_DP_WAVE)",
    "handle_pause": UTILITY + "EngineCoreProc.pause_scheduler (None at once if not has_work())",
    "handle_resume": UTILITY + "DPEngineCoreProc.resume_scheduler (start_wave if idle with requests)",
    "finish_sync": "ParallelConfig.has_unfinished_dp returns → DPEngineCoreProc.run_busy_loop (wave end: wave_complete)",
}


def sources(fixed: bool, variant: str) -> dict[str, str]:
    """The mapping for a variant (the mutants differ from their base only where they change a line)."""
    table = dict(POST_FIX_SOURCES if fixed else PRE_FIX_SOURCES)
    if variant == "ignore-wave-while-paused":
        table["handle_start_wave"] = "DPEngineCoreProc._handle_client_request(START_DP_WAVE) (dropped while paused: #36608/#38009)"
    if variant == "no-local-wakeup":
        table["handle_add"] = "_handle_client_request(ADD) → DPEngineCoreProc.add_request (stale wave: start_wave only)"
    return table
