"""The vLLM functions each action mirrors in the releases before v0.33.0, where they differ from v0.33.0's.

``Machine.mirror`` replaces an action's ``mirrors=`` (v0.33.0's) with these for the variant: v0.24.0's
``sample_tokens`` has no drafter call for a batch that does not fit the drafter, and before v0.30.0
``_has_global_unfinished_reqs`` all-reduces on every 32nd step only (the decision ``execute_model`` and
``execute_dummy_batch`` fix when they start an iteration). Line numbers: docs/models/dp-step-coordination.md.
"""

from __future__ import annotations

from lockstep.models.dp_step_coordination.state import PRE_FIX, V0_29_0

_CORE = "vllm/v1/engine/core.py"
_RUNNER = "vllm/v1/worker/gpu_model_runner.py"
_SYNC_EVERY_32 = f"{_CORE} DPEngineCoreProc._has_global_unfinished_reqs (step_counter % 32: the all-reduce)"
_DUMMY = (
    f"{_CORE} DPEngineCoreProc.run_busy_loop (not executed, engines_running) -> execute_dummy_batch; "
    f"vllm/v1/worker/gpu_worker.py Worker.execute_dummy_batch -> {_RUNNER} GPUModelRunner._dummy_run "
    f"(_determine_batch_execution_and_padding; self.drafter.dummy_run); {_SYNC_EVERY_32}"
)


def _execute_model(overlong: str) -> str:
    return (
        f"{_CORE} EngineCore.step (schedule; model_executor.execute_model, sample_tokens); {_RUNNER} "
        f"GPUModelRunner.execute_model -> _determine_batch_execution_and_padding; sample_tokens "
        f"(_input_fits_in_drafter -> propose_draft_token_ids, {overlong}); {_SYNC_EVERY_32}"
    )


def variant_sources(variant: str) -> dict[str, str]:
    """The mirrors of ``variant`` that differ from v0.33.0's (none for ``post-fix``)."""
    overlong = {
        PRE_FIX: "else prepare_next_token_ids_padded only: no drafter collective",
        V0_29_0: "else drafter.dummy_run(num_tokens=1) when data_parallel_size > 1",
    }
    if variant not in overlong:
        return {}
    return {"execute_model": _execute_model(overlong[variant]), "execute_dummy_batch": _DUMMY}
