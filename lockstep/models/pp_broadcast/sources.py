"""The vLLM functions each pp-broadcast action stands for, shown with every counterexample step.

Read from the wheels of every release v0.19.0 to v0.33.0 (``releases.py``; the mutants change one
line of v0.20.0's): ``vllm/v1/engine/core.py`` (``EngineCore.step_with_batch_queue``),
``vllm/v1/core/sched/scheduler.py`` / ``async_scheduler.py`` (``Scheduler.schedule``,
``AsyncScheduler._update_after_schedule``, ``Scheduler.update_from_output``),
``vllm/v1/worker/gpu_worker.py`` (``Worker.execute_model``), ``vllm/v1/worker/gpu_model_runner.py``
(``GPUModelRunner.execute_model``, ``sample_tokens``, ``_pp_broadcast_prev_sampled_token_ids``,
``_pp_receive_prev_sampled_token_ids_to_input_batch``, ``_is_all_reqs_chunked_prefill`` (v0.20.0))
and ``vllm/distributed/parallel_state.py`` (``GroupCoordinator.isend_tensor_dict``,
``irecv_tensor_dict``). The ``gpu_*`` actions are the CUDA stream of a rank, not a Python function:
they name the kernel or NCCL call the stream runs.
"""

from __future__ import annotations

from lockstep.models.pp_broadcast.variants import release_of
from lockstep.models.vllm_files import (
    ASYNC_SCHEDULING_TESTS,
    EAGLE3_PIPELINE_TESTS,
    ENGINE_CORE,
    GPU_WORKER,
    PIPELINE_PARALLEL_TESTS,
    PP_UTILS,
    RUNNER_OUTPUTS,
    SCHEDULER,
    SCHEDULER_OUTPUT,
    V1_INPUT_BATCH,
    V1_MODEL_RUNNER,
    V1_MODEL_RUNNER_TESTS,
    V2_MODEL_RUNNER,
)
from lockstep.spec.machine import Source

RECEIVE = "_pp_receive_prev_sampled_token_ids_to_input_batch"
BROADCAST = "_pp_broadcast_prev_sampled_token_ids"

COMMON: dict[str, str] = {
    # the engine (one process; the executor sends every worker the same RPCs in the same order)
    "schedule": "EngineCore.step_with_batch_queue → Scheduler.schedule (AsyncScheduler._update_after_schedule) "
    "→ executor.execute_model + sample_tokens (non_block)",
    "process_output": "EngineCore.step_with_batch_queue: the oldest future.result() → Scheduler.update_from_output",
    # the CPU thread of a rank
    "execute_model": "Worker.execute_model (wait _pp_send_work; irecv_tensor_dict → AsyncIntermediateTensors) "
    "→ GPUModelRunner.execute_model (_prepare_inputs: discard_request_mask) → isend_tensor_dict",
    # the CUDA stream of a rank
    "gpu_compute": "the stream runs GPUModelRunner._model_forward (or, on the last rank, _sample)",
    "gpu_post": "the stream reaches an NCCL op on pp.device_group: isend/irecv (isend_tensor_dict / "
    "irecv_tensor_dict) or torch.distributed.broadcast",
    "gpu_complete": "the NCCL op finishes; the stream moves on",
    # the PP communicator
    "pp.transfer": "NCCL send meets recv on pp.device_group (GroupCoordinator.isend_tensor_dict / irecv_tensor_dict)",
    "pp.complete": f"torch.distributed.broadcast(group=pp.device_group) completes on every member ({BROADCAST} / "
    f"{RECEIVE})",
}

SAMPLE_TOKENS: dict[str, str] = {
    "pre-fix": f"GPUModelRunner.sample_tokens: last rank _sample → {BROADCAST} (always broadcasts) → "
    "_bookkeeping_sync; "
    f"others {RECEIVE} (always receives)",
    "post-fix": f"GPUModelRunner.sample_tokens: last rank _sample → {BROADCAST} → _bookkeeping_sync; others {RECEIVE} "
    "(both skip the broadcast if _is_all_reqs_chunked_prefill())",
    "skip-disagree": f"GPUModelRunner.sample_tokens (mutant: {BROADCAST} skips if _is_all_reqs_chunked_prefill(), "
    f"{RECEIVE} if no row decodes)",
    "skip-whole-receive": f"GPUModelRunner.sample_tokens (mutant: {RECEIVE} returns before rebuilding "
    "prev_req_id_to_index if _is_all_reqs_chunked_prefill())",
    "v0.21.0": "GPUModelRunner.sample_tokens: with execute_model_state: _sample → "
    f"{BROADCAST} (skipped if _is_all_reqs_chunked_prefill()) → _bookkeeping_sync; without: "
    f"{RECEIVE} if use_async_scheduling and not pp.is_last_rank, else return None",
    "v0.22.0": "GPUModelRunner.sample_tokens: as v0.21.0; "
    f"{RECEIVE} also advances input_batch.num_tokens_no_spec per kept row",
    "v0.23.0": "GPUModelRunner.sample_tokens: as v0.22.0 (without execute_model_state it returns "
    "ModelRunnerOutput.with_kv_conn_output_only(None), EMPTY_MODEL_RUNNER_OUTPUT; from v0.28.0 "
    f"{RECEIVE} posts the broadcast with async_op=True, waited in _prepare_input_ids)",
}
SAMPLE_TOKENS["v0.30.0"] = SAMPLE_TOKENS["v0.23.0"]
SAMPLE_TOKENS_SYNC = (
    "GPUModelRunner.sample_tokens without async scheduling: with execute_model_state _sample → "
    "_bookkeeping_sync (the real ids appended); without: return (the receive's guard needs use_async_scheduling)"
)
SAMPLE_TOKENS_REFUSED = (
    " (from v0.31.0 VllmConfig turns async scheduling off for the V1 runner with PP and refuses a request for it: "
    "_validate_v1_model_runner)"
)

V2_RUNNER = "vllm/v1/worker/gpu/model_runner.py GPUModelRunner"
V2_SAMPLE_TOKENS = {
    False: f"{V2_RUNNER}.sample_tokens: no execute_model_state: return None; non-last ranks pp_receive "
    "([num_reqs, num_speculative_steps + 1] ids, then (num_sampled, num_rejected)) → postprocess; the last rank "
    "sample → pp_broadcast (the sampler's ids, then the counts) on pp.device_group (pp_utils.py)",
    True: f"{V2_RUNNER}.sample_tokens: no execute_model_state: return None; non-last ranks PPHandler.receive "
    "(compute_need_sampled_mask; on broadcast_stream over the pp_broadcast group; the slot queue[-1]) → "
    "postprocess_num_computed_tokens; the last rank sample → PPHandler.broadcast → postprocess_sampled → "
    "speculator.propose → PPHandler.broadcast_drafts (v0.30.0 on) (pp_utils.py)",
}
V2_EXECUTE_MODEL = (
    "Worker.execute_model (wait _pp_send_work; irecv_tensor_dict → AsyncIntermediateTensors) → "
    f"{V2_RUNNER}.execute_model (update_pp_decode_requests → PPHandler.get_prev_sampled_outputs: the slot of "
    "step N - pp_size, main_stream.wait_event, postprocess_sampled) → isend_tensor_dict"
)
SIDE_STREAM: dict[str, str] = {
    "side_post": "PPHandler.broadcast / receive / broadcast_drafts: with torch.cuda.stream(broadcast_stream): "
    "broadcast_stream.wait_stream(main_stream); torch.distributed.broadcast(group=broadcast_group)",
    "side_complete": "the pp_broadcast group's broadcasts complete; broadcast_stream.record_event() (the slot's event)",
    "side_pass": "nothing on broadcast_stream for the step (compute_need_sampled_mask is None, or no sample_tokens)",
    "ppb.complete": "torch.distributed.broadcast(group=PPHandler.broadcast_group) completes on every member",
}
STRUCTURED_OUTPUT = {
    "sample_deferred": "EngineCore.step_with_batch_queue after a deferral (pending_structured_output_tokens): the "
    "oldest future.result() → Scheduler.update_from_output, then get_grammar_bitmask(deferred_scheduler_output) → "
    "executor.sample_tokens (non_block)",
}
SPEC_DECODE_FAILURE = {
    "engine_raises_on_sample": "EngineCore.step_with_batch_queue: future.result() of the step's sample_tokens raises "
    "(MultiprocExecutor.get_response: 'Worker failed with error ...'; the output rank's AssertionError)",
}
GUARD_V019 = (
    " (no execute_model_state: the receive path if use_async_scheduling and pp.world_size > 1, "
    f"and {RECEIVE} asserts not pp.is_last_rank)"
)


FAILURE: dict[str, str] = {
    "execute_model_raises": "Worker.execute_model (irecv_tensor_dict posted) → GPUModelRunner.execute_model raises "
    "before _model_forward; execute_model_state stays None; WorkerProc.worker_busy_loop reports the failure",
    "engine_raises": "EngineCore.step_with_batch_queue: future.result() is None (or raises) → "
    "exec_model_fut.result() raises",
}


EMPTY: dict[str, str] = {
    "schedule_empty": "EngineCore.step_with_batch_queue → Scheduler.schedule returns a SchedulerOutput with "
    "total_num_scheduled_tokens == 0 → executor.execute_model (non_block) only: model_executed is False, "
    "no sample_tokens; the exec future is queued as the step's output",
    "execute_model_empty": "Worker.execute_model (forward_pass False: no irecv_tensor_dict) → "
    "GPUModelRunner.execute_model: _update_states, then `if not num_scheduled_tokens: return "
    "EMPTY_MODEL_RUNNER_OUTPUT` (execute_model_state stays None; no isend_tensor_dict)",
    "gpu_pass": "the stream has nothing of the empty step (no _model_forward, _sample or NCCL op on pp.device_group)",
}


def sources(variant: str, runner: int = 1, async_scheduling: bool = True, handler: bool = False) -> dict[str, str]:
    """The mapping for a variant: the variants differ only in ``sample_tokens`` (and the V2 runner in
    ``execute_model`` and its side stream)."""
    if runner == 2:
        return {
            **COMMON,
            **FAILURE,
            **EMPTY,
            **SIDE_STREAM,
            **STRUCTURED_OUTPUT,
            "execute_model": V2_EXECUTE_MODEL
            if handler
            else COMMON["execute_model"].replace("GPUModelRunner", f"{V2_RUNNER}"),
            "sample_tokens": V2_SAMPLE_TOKENS[handler],
        }
    refused = release_of(variant).refuses_v1_async  # VllmConfig turns async scheduling off for the V1 runner with PP
    if refused:
        async_scheduling = False
        sample = SAMPLE_TOKENS_SYNC + SAMPLE_TOKENS_REFUSED
    elif not async_scheduling:
        sample = SAMPLE_TOKENS_SYNC
    else:
        sample = SAMPLE_TOKENS[variant]
    if variant in ("pre-fix", "post-fix", "skip-disagree", "skip-whole-receive") and async_scheduling:
        sample += GUARD_V019
    spec_decode_failure = SPEC_DECODE_FAILURE if async_scheduling else {}  # the broadcast's shape assert
    return {**COMMON, **FAILURE, **EMPTY, **spec_decode_failure, **STRUCTURED_OUTPUT, "sample_tokens": sample}


# Where vLLM states each property: the release's lines (the wheel's vllm/..., the sdist's tests/...).
PROPERTY_SOURCES: dict[str, tuple[Source, ...]] = {
    "S1_broadcast_matching": (
        Source("0.33.0", V1_MODEL_RUNNER, 4537, "GPUModelRunner._pp_broadcast_prev_sampled_token_ids", "comment", 4539),
        Source(
            "0.33.0",
            V1_MODEL_RUNNER,
            4551,
            "GPUModelRunner._pp_receive_prev_sampled_token_ids_to_input_batch",
            "comment",
            4552,
        ),
    ),
    "S2_predicate_agreement": (
        Source("0.33.0", V1_MODEL_RUNNER, 3897, "GPUModelRunner._is_all_reqs_chunked_prefill", "docstring", 3901),
    ),
    "S3_no_stale_read": (
        Source("0.33.0", V1_MODEL_RUNNER, 1749, "GPUModelRunner._prepare_input_ids", "docstring", 1751),
        Source(
            "0.33.0",
            V1_MODEL_RUNNER,
            4558,
            "GPUModelRunner._pp_receive_prev_sampled_token_ids_to_input_batch",
            "comment",
            4559,
        ),
    ),
    "reads_latest_token": (
        Source("0.33.0", SCHEDULER, 1946, "Scheduler._make_cached_request_data", "comment", 1950),
        Source("0.33.0", V2_MODEL_RUNNER, 1208, "GPUModelRunner.update_pp_decode_requests", "comment", 1209),
        Source("0.33.0", ASYNC_SCHEDULING_TESTS, 46, "test_without_spec_decoding", "test"),
        Source("0.33.0", PIPELINE_PARALLEL_TESTS, 343, "test_tp_language_generation", "test"),
        Source(
            "0.33.0",
            V1_MODEL_RUNNER_TESTS,
            1035,
            "test_update_states_pp_async_multi_request_keeps_rank_state_consistent",
            "test",
        ),
    ),
    "S4_placeholder_agreement": (
        Source(
            "0.33.0",
            V1_MODEL_RUNNER,
            4567,
            "GPUModelRunner._pp_receive_prev_sampled_token_ids_to_input_batch",
            "comment",
            4568,
        ),
        Source(
            "0.33.0",
            V1_MODEL_RUNNER_TESTS,
            1035,
            "test_update_states_pp_async_multi_request_keeps_rank_state_consistent",
            "test",
        ),
    ),
    "S5_rpc_order": (Source("0.33.0", V1_MODEL_RUNNER, 3912, "GPUModelRunner.execute_model", "raise", 3914),),
    "no_false_dependency": (
        Source("0.33.0", V1_MODEL_RUNNER, 4537, "GPUModelRunner._pp_broadcast_prev_sampled_token_ids", "comment", 4538),
        Source("0.33.0", PP_UTILS, 56, "PPHandler", "docstring", 58),
    ),
    "sample_only_with_state": (
        Source("0.33.0", V1_MODEL_RUNNER, 4532, "GPUModelRunner._pp_broadcast_prev_sampled_token_ids", "assert"),
        Source("0.33.0", PP_UTILS, 240, "PPHandler.broadcast", "assert"),
    ),
    "receive_only_on_non_last": (
        Source(
            "0.33.0",
            V1_MODEL_RUNNER,
            4547,
            "GPUModelRunner._pp_receive_prev_sampled_token_ids_to_input_batch",
            "assert",
        ),
        Source("0.33.0", PP_UTILS, 180, "PPHandler.receive", "assert"),
        Source(
            "0.33.0",
            V1_MODEL_RUNNER_TESTS,
            379,
            "test_sample_tokens_receives_pp_sampled_ids_only_on_non_last_rank",
            "test",
        ),
    ),
    "return_only_after_failure": (
        Source("0.33.0", V1_MODEL_RUNNER, 4277, "GPUModelRunner.sample_tokens", "code"),
        Source("0.33.0", ENGINE_CORE, 785, "EngineCore.step_with_batch_queue", "comment", 786),
        Source("0.33.0", V2_MODEL_RUNNER, 2153, "GPUModelRunner.sample_tokens", "comment"),
    ),
    "failure_reaches_engine": (
        Source("0.33.0", ENGINE_CORE, 785, "EngineCore.step_with_batch_queue", "comment", 786),
        Source("0.23.0", RUNNER_OUTPUTS, 287, "ModelRunnerOutput.with_kv_conn_output_only", "docstring", 288),
    ),
    "sampled_one_column": (
        Source("0.33.0", V1_MODEL_RUNNER, 4534, "GPUModelRunner._pp_broadcast_prev_sampled_token_ids", "assert", 4536),
    ),
    "draft_inputs_known": (
        Source("0.33.0", V1_INPUT_BATCH, 514, "InputBatch.update_req_spec_token_ids", "comment", 516),
        Source("0.33.0", PP_UTILS, 166, "PPHandler.broadcast_drafts", "docstring"),
        Source("0.33.0", EAGLE3_PIPELINE_TESTS, 52, "test_eagle3_pipeline_parallel_acceptance", "test"),
    ),
    "grammar_bitmask_current": (
        Source("0.33.0", SCHEDULER_OUTPUT, 282, "SchedulerOutput", "comment", 283),
        Source("0.33.0", SCHEDULER, 2432, "Scheduler.update_from_output", "code"),
    ),
    "no_sample_on_empty_step": (
        Source("0.33.0", ENGINE_CORE, 743, "EngineCore.step_with_batch_queue", "comment", 744),
    ),
    "no_pp_op_on_empty_step": (
        Source("0.33.0", GPU_WORKER, 1345, "Worker.execute_model", "code", 1346),
        Source("0.33.0", V1_MODEL_RUNNER, 3955, "GPUModelRunner.execute_model", "code"),
    ),
}
