"""Every vLLM release from v0.19.0 to v0.33.0 mapped to a dp-step-coordination variant.

Found by diffing, release against release (the PyPI wheels), the functions the model mirrors, extracted with
Python's ``ast`` and compared as text: ``vllm/v1/engine/core.py`` (``DPEngineCoreProc.run_busy_loop``,
``_has_global_unfinished_reqs``, ``EngineCore.step``, ``step_with_batch_queue``, ``execute_dummy_batch``),
``vllm/v1/worker/dp_utils.py`` (every function), ``vllm/v1/worker/gpu_model_runner.py``
(``_determine_batch_execution_and_padding``, ``sample_tokens``, ``_dummy_run``, ``_input_fits_in_drafter``),
``vllm/v1/spec_decode/llm_base_proposer.py`` (``eagle.py`` before 0.22.0: ``propose``, ``dummy_run``,
``_determine_batch_execution_and_padding``) and ``vllm/v1/worker/gpu_worker.py`` (``execute_dummy_batch``).
Each change is listed at the first release that has it; ``docs/models/dp-step-coordination.md`` gives the lines.

Two facts decide a variant: whether ``sample_tokens`` posts the drafter's collectives for a batch that does
not fit the drafter (from 0.25.0) and whether ``_has_global_unfinished_reqs`` syncs at step 1 (from 0.30.0).
"""

from __future__ import annotations

from lockstep.models.dp_step_coordination.state import POST_FIX, PRE_FIX, V0_29_0

BISECTION: tuple[tuple[str, str, str], ...] = (
    ("0.19.0", PRE_FIX, "an overlong batch skips the drafter; the sync every 32nd step (has_unfinished_dp, MAX)"),
    ("0.19.1", PRE_FIX, "as 0.19.0"),
    ("0.20.0", PRE_FIX, "coordinate_batch_across_dp loses num_scheduled_tokens_per_request; drafts zeroed"),
    ("0.20.1", PRE_FIX, "as 0.20.0"),
    ("0.20.2", PRE_FIX, "as 0.20.0"),
    ("0.21.0", PRE_FIX, "sync_dp_state (SUM of [unfinished, pending_pause]) replaces has_unfinished_dp"),
    ("0.22.0", PRE_FIX, "_run_ar fills its tensor on the CPU first (the same all-reduce)"),
    ("0.22.1", PRE_FIX, "as 0.22.0"),
    ("0.23.0", PRE_FIX, "_input_fits_in_drafter factored out (the same predicate)"),
    ("0.24.0", PRE_FIX, "no dummy batch while the engine sleeps (sleep: dp-pause's model)"),
    ("0.25.0", V0_29_0, "PR #40589: sample_tokens runs drafter.dummy_run(num_tokens=1) when the batch does not fit"),
    ("0.25.1", V0_29_0, "as 0.25.0"),
    ("0.26.0", V0_29_0, "dummy-batch stats without a coordinator"),
    ("0.27.0", V0_29_0, "elastic EP scaling state in the busy loop"),
    ("0.27.1", V0_29_0, "as 0.27.0"),
    ("0.28.0", V0_29_0, "dp_utils post-processing under gpu_sync_allowed"),
    ("0.29.0", V0_29_0, "rank 0 reports start_wave on its idle to running edge"),
    ("0.30.0", POST_FIX, "the sync at step 1 and every dp_sync_interval (16); skip_dp_coordination (elastic EP)"),
    ("0.31.0", POST_FIX, "randomize_inputs for dummy batches"),
    ("0.32.0", POST_FIX, "_determine_batch_execution_and_padding drops cascade attention and SP padding"),
    ("0.33.0", POST_FIX, "a new elastic-EP rank resumes itself"),
)
