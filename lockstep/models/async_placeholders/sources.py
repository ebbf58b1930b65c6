"""The vLLM functions each async-placeholders action stands for, shown with every counterexample step.

Read from the v0.21.0 wheel (``pre-fix``) and the v0.22.0 wheel (``post-fix``):
``vllm/v1/core/sched/scheduler.py`` (``Scheduler.schedule``, ``_make_cached_request_data``,
``_preempt_request``, ``update_from_output``, ``_handle_invalid_blocks``),
``vllm/v1/core/sched/async_scheduler.py`` (``AsyncScheduler._update_after_schedule``,
``_update_request_with_output``), ``vllm/v1/worker/gpu_model_runner.py``
(``GPUModelRunner._update_states``, ``_sample``, ``_bookkeeping_sync``, ``sample_tokens``) and
``vllm/v1/worker/gpu_input_batch.py`` (``InputBatch.update_async_output_token_ids``,
``set_async_sampled_token_ids``). The two releases differ, for these actions, only in how
``update_async_output_token_ids`` finds the trailing -1 run; ``v0.27.0`` (read from the v0.27.0
and v0.33.0 wheels) adds the stale-output preemption to ``schedule`` and ``update_from_output``.
"""

from __future__ import annotations

from lockstep.models.async_placeholders.releases import V0_27_0
from lockstep.models.vllm_files import (
    ASYNC_SCHEDULER,
    ASYNC_SCHEDULER_TESTS,
    ASYNC_SCHEDULING_TESTS,
    SCHEDULER,
    V1_INPUT_BATCH,
    V1_MODEL_RUNNER,
)
from lockstep.spec.machine import Source
from lockstep.spec.protocol import POST_FIX, PRE_FIX

COMMON: dict[str, str] = {
    # the scheduler (engine core process)
    "schedule": "Scheduler.schedule (RUN: _make_cached_request_data sends num_output_tokens + placeholders; "
    "PREEMPT: _preempt_request) → AsyncScheduler._update_after_schedule (placeholders += 1 + drafts)",
    "update_from_output": "Scheduler.update_from_output → AsyncScheduler._update_request_with_output "
    "(num_output_placeholders -= new tokens)",
    "kv_load_failure": "Scheduler.update_from_output → _handle_invalid_blocks (sync KV-load failure: recompute; "
    "the runner sees fewer num_output_tokens)",
    # the last rank's runner (worker process)
    "update_states": "GPUModelRunner._update_states (A2: extend [-1] * optimistic_num_accepted; trim to "
    "num_output_tokens; rebuild a resumed request; InputBatch.add_request)",
    "bookkeeping": "GPUModelRunner.sample_tokens → _bookkeeping_sync (A1: [-1] per sampled row; prev_req_id_to_index) "
    "→ InputBatch.set_async_sampled_token_ids; the reply (AsyncGPUModelRunnerOutput)",
}

SAMPLE: dict[str, str] = {
    "pre-fix": "GPUModelRunner._sample → InputBatch.update_async_output_token_ids (forward scan: "
    "req_output_token_ids.index(-1))",
    "post-fix": "GPUModelRunner._sample → InputBatch.update_async_output_token_ids (backward scan over the "
    "trailing -1 run)",
}


STALE_PREEMPTION: dict[str, str] = {
    "schedule": "Scheduler.schedule (RUN: _make_cached_request_data sends num_output_tokens + placeholders; a "
    "preempted request with num_stale_output_tokens waits; PREEMPT: _preempt_request zeroes "
    "num_output_placeholders, num_stale_output_tokens = num_in_flight_tokens) → "
    "AsyncScheduler._update_after_schedule (placeholders += num_sampled_tokens_per_step + drafts)",
    "update_from_output": "Scheduler.update_from_output (output_is_stale: no rejection roll-back) → "
    "Scheduler._update_request_with_output (num_output_placeholders -= new tokens unless is_stale)",
}


def sources(variant: str) -> dict[str, str]:
    """The mapping for a variant: the scan of ``sample``; from v0.27.0 the stale-output preemption."""
    scan = SAMPLE[PRE_FIX] if variant == PRE_FIX else SAMPLE[POST_FIX]
    later = STALE_PREEMPTION if variant == V0_27_0 else {}
    return {**COMMON, "sample": scan, **later}


# Where vLLM states each property: the release's lines (the wheel's vllm/..., the sdist's tests/...).
PROPERTY_SOURCES: dict[str, tuple[Source, ...]] = {
    "suffix_form": (Source("0.33.0", V1_INPUT_BATCH, 1072, "InputBatch.update_async_output_token_ids", "code", 1077),),
    "unused_slots_empty": (
        Source("0.33.0", V1_INPUT_BATCH, 1081, "InputBatch.update_async_output_token_ids", "comment", 1082),
    ),
    "repair_postcondition": (
        Source("0.33.0", V1_INPUT_BATCH, 1063, "InputBatch.update_async_output_token_ids", "comment"),
        Source("0.33.0", V1_INPUT_BATCH, 1081, "InputBatch.update_async_output_token_ids", "comment", 1082),
    ),
    "scans_agree": (Source("0.33.0", V1_INPUT_BATCH, 1072, "InputBatch.update_async_output_token_ids", "code", 1077),),
    "batch_aliases_request_list": (
        Source("0.33.0", V1_INPUT_BATCH, 354, "InputBatch.add_request", "code"),
        Source("0.33.0", V1_INPUT_BATCH, 358, "InputBatch.add_request", "code"),
        Source("0.33.0", V1_INPUT_BATCH, 910, "InputBatch._make_sampling_metadata", "code"),
    ),
    "scan_cost_bounded": (
        Source("0.33.0", V1_INPUT_BATCH, 1072, "InputBatch.update_async_output_token_ids", "code", 1077),
    ),
    "list_matches_scheduler_count": (
        Source("0.33.0", V1_MODEL_RUNNER, 1410, "GPUModelRunner._update_states", "comment", 1412),
        Source("0.33.0", SCHEDULER, 1967, "Scheduler._make_cached_request_data", "code", 1969),
    ),
    "tokens_aligned": (Source("0.33.0", ASYNC_SCHEDULING_TESTS, 46, "test_without_spec_decoding", "test"),),
    "placeholders_nonnegative": (
        Source("0.33.0", SCHEDULER, 2769, "Scheduler._update_request_with_output", "assert"),
        Source("0.33.0", ASYNC_SCHEDULER_TESTS, 540, "test_kv_pressure_preemption_with_inflight_output", "test"),
    ),
    "placeholders_count_in_flight": (
        Source("0.33.0", ASYNC_SCHEDULER, 39, "AsyncScheduler._update_after_schedule", "comment", 44),
        Source("0.33.0", SCHEDULER, 2766, "Scheduler._update_request_with_output", "code", 2769),
        Source("0.33.0", SCHEDULER, 2360, "Scheduler.update_from_output", "code", 2364),
        Source("0.33.0", ASYNC_SCHEDULER_TESTS, 36, "test_stop_by_max_tokens", "test"),
    ),
    "stale_output_drains": (
        Source("0.33.0", SCHEDULER, 1085, "Scheduler.schedule", "comment", 1087),
        Source("0.33.0", SCHEDULER, 2323, "Scheduler.update_from_output", "assert"),
        Source(
            "0.33.0",
            ASYNC_SCHEDULER_TESTS,
            603,
            "test_reset_prefix_cache_with_inflight_output_under_kv_pressure",
            "test",
        ),
    ),
}
