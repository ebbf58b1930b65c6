"""The vLLM functions each computed-tokens action stands for, shown with every counterexample step.

Read from the v0.21.0 wheel (``pre-fix``) and the v0.22.0 wheel (``post-fix``, PR #42202):
``vllm/v1/engine/core.py`` (``EngineCore.step``, ``step_with_batch_queue``, ``post_step``),
``vllm/v1/core/sched/scheduler.py`` (``Scheduler.schedule``, ``_make_cached_request_data``,
``_update_after_schedule``, ``update_from_output``, ``_update_request_with_output``,
``update_draft_token_ids``), ``vllm/v1/worker/gpu/model_runner.py`` (the V2 ``GPUModelRunner``:
``execute_model``, ``add_requests``, ``update_requests``, ``prepare_inputs``, ``sample_tokens``,
``sample``, ``postprocess``), ``vllm/v1/worker/gpu/input_batch.py`` (``post_update``) and
``vllm/v1/worker/gpu/pp_utils.py`` (``pp_broadcast``, ``pp_receive``). The releases differ in where
the CPU mirror ``num_computed_tokens_np`` moves: ``postprocess`` (v0.21.0) or ``update_requests``
(v0.22.0).
"""

from __future__ import annotations

from lockstep.models.vllm_files import ASYNC_SCHEDULER_TESTS, SCHEDULER, V2_ATTENTION_STATE, V2_MODEL_RUNNER
from lockstep.spec.machine import Source

PRE_FIX_SOURCES: dict[str, str] = {
    # the scheduler (engine core process)
    "schedule": "EngineCore.step / step_with_batch_queue → Scheduler.schedule (_make_cached_request_data: "
    "num_computed_tokens before the step) → _update_after_schedule (+= num_scheduled)",
    "update_from_output": "EngineCore.step / step_with_batch_queue: future.result() → Scheduler.update_from_output "
    "(subtract rejected drafts) → _update_request_with_output; sync: post_step → "
    "update_draft_token_ids",
    # the V2 runner of every PP rank (worker processes)
    "execute_model": "GPUModelRunner.execute_model → add_requests, update_requests (block ids only), prepare_inputs "
    "(seq_lens_cpu_upper_bound = num_computed_tokens_np + num_scheduled)",
    "sample_tokens": "GPUModelRunner.sample_tokens (last rank) → sample (rejection sampler) → pp_broadcast (PP) → "
    "postprocess (post_update on the GPU; num_computed_tokens_np += num_scheduled)",
    "pp_receive": "GPUModelRunner.sample_tokens (non-last rank) → pp_receive → postprocess (post_update; "
    "num_computed_tokens_np += num_scheduled)",
}

POST_FIX_SOURCES: dict[str, str] = {
    **PRE_FIX_SOURCES,
    "execute_model": "GPUModelRunner.execute_model → add_requests, update_requests (num_computed_tokens_np := "
    "the scheduler's value; num_computed_prefill_tokens = min(…, prefill_len)), prepare_inputs",
    "sample_tokens": "GPUModelRunner.sample_tokens (last rank) → sample (rejection sampler) → pp_broadcast (PP) → "
    "postprocess (post_update on the GPU only)",
    "pp_receive": "GPUModelRunner.sample_tokens (non-last rank) → pp_receive → postprocess "
    "(post_update on the GPU only)",
}


def sources(variant: str) -> dict[str, str]:
    """The mapping for a variant."""
    return dict(POST_FIX_SOURCES if variant == "post-fix" else PRE_FIX_SOURCES)


# Where vLLM states each property: the release's lines (the wheel's vllm/..., the sdist's tests/...).
PROPERTY_SOURCES: dict[str, tuple[Source, ...]] = {
    "U1_sound": (
        Source("0.33.0", V2_MODEL_RUNNER, 1534, "GPUModelRunner.prepare_inputs", "comment"),
        Source("0.33.0", V2_ATTENTION_STATE, 199, "DefaultModelState.prepare_attn", "code"),
    ),
    "U2_exact": (
        Source("0.33.0", V2_MODEL_RUNNER, 1271, "GPUModelRunner.update_requests", "comment"),
        Source("0.33.0", V2_MODEL_RUNNER, 1278, "GPUModelRunner.update_requests", "code"),
    ),
    "U3_bounded_slack": (Source("0.33.0", SCHEDULER, 2355, "Scheduler.update_from_output", "comment", 2364),),
    "U3_within_max_model_len": (
        Source("0.33.0", SCHEDULER, 851, "Scheduler.schedule", "comment", 856),
        Source("0.33.0", ASYNC_SCHEDULER_TESTS, 69, "test_no_spec_decode_padding_up_to_max_model_len", "test"),
    ),
    "U4_prefill_progress": (
        Source("0.33.0", V2_MODEL_RUNNER, 1285, "GPUModelRunner.update_requests", "code", 1289),
        Source("0.33.0", V2_MODEL_RUNNER, 1335, "GPUModelRunner.gather_batch_req_state", "code", 1338),
    ),
    "U5_padding": (
        Source("0.33.0", V2_ATTENTION_STATE, 181, "DefaultModelState.prepare_attn", "code"),
        Source("0.33.0", V2_MODEL_RUNNER, 1534, "GPUModelRunner.prepare_inputs", "comment", 1536),
    ),
    "U6_mirror_converges": (
        Source("0.33.0", V2_MODEL_RUNNER, 1271, "GPUModelRunner.update_requests", "comment"),
        Source("0.33.0", V2_MODEL_RUNNER, 1278, "GPUModelRunner.update_requests", "code"),
    ),
}
