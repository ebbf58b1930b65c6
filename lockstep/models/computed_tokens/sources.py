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
