"""The vLLM functions each cudagraph-pp action stands for, shown with every counterexample step.

Read from the v0.18.0 wheel (``pre-fix``) and the v0.19.0 wheel (``post-fix``; each mutant changes
one line of it): ``vllm/v1/engine/core.py`` (``EngineCore.step``), ``vllm/v1/worker/gpu_worker.py``
(``Worker.execute_model``: ``_pp_send_work``, ``irecv_tensor_dict``, ``isend_tensor_dict``),
``vllm/v1/worker/gpu/model_runner.py`` (the V2 ``GPUModelRunner``: ``load_model``,
``capture_model``, ``_dummy_run``, ``execute_model``) and ``vllm/v1/worker/gpu/cudagraph_utils.py``
(``CudaGraphManager.dispatch``, ``run_fullgraph``, ``ModelCudaGraphManager.capture``).
"""

from __future__ import annotations

WAIT = "wait _pp_send_work"
COPY_IN = "copy every key of the received tensors into self.intermediate_tensors[:num_tokens_after_padding]"

POST_FIX_SOURCES: dict[str, str] = {
    "schedule": "EngineCore.step → Scheduler.schedule (one SchedulerOutput; the executor runs it on every stage)",
    "capture": "GPUModelRunner.capture_model → ModelCudaGraphManager.capture, one descriptor (create_forward_fn: "
    "warm-up forward_fn(NONE), then capture; non-first ranks read slices of self.intermediate_tensors)",
    "first_forward": f"Worker.execute_model (rank 0: {WAIT}) → GPUModelRunner.execute_model: "
    "CudaGraphManager.dispatch, "
    "run_fullgraph or self.model(...) on the input buffers",
    "receive": f"Worker.execute_model (non-first rank: {WAIT}) → get_pp_group().irecv_tensor_dict → "
    "AsyncIntermediateTensors (waited lazily)",
    "prepare_inputs": f"GPUModelRunner.execute_model: CudaGraphManager.dispatch, then {COPY_IN}",
    "forward": "GPUModelRunner.execute_model: CudaGraphManager.run_fullgraph (FULL) or self.model(**model_inputs) "
    "under set_forward_context (PIECEWISE replay / eager)",
    "send": "Worker.execute_model: get_pp_group().isend_tensor_dict(output.tensors) → _pp_send_work",
}

# v0.18.0 captures nothing once PP is on, so its machine has no ``capture`` action.
PRE_FIX_SOURCES: dict[str, str] = {
    **{name: text for name, text in POST_FIX_SOURCES.items() if name != "capture"},
    "prepare_inputs": "GPUModelRunner.execute_model: CudaGraphManager.dispatch (NONE: capture_model captured nothing, "
    "'Pipeline parallel is currently eager-only'); the received tensors are handed in as they are",
    "forward": "GPUModelRunner.execute_model: self.model(**model_inputs) (eager)",
}

MUTATED: dict[str, dict[str, str]] = {
    "no-persistent-buffer": {
        "capture": "ModelCudaGraphManager.capture (mutant: graphs read _dummy_run's own intermediate tensors)",
        "prepare_inputs": "GPUModelRunner.execute_model: CudaGraphManager.dispatch (mutant: the received tensors "
        "are handed straight to the graph)",
    },
    "no-copy-in": {
        "prepare_inputs": "GPUModelRunner.execute_model: CudaGraphManager.dispatch (mutant: the persistent buffer "
        "without the copy-in)",
    },
    "missing-key": {
        "prepare_inputs": f"GPUModelRunner.execute_model: CudaGraphManager.dispatch, then {COPY_IN} "
        "(mutant: the sender's tensors lack 'residual': KeyError)",
    },
    "full-adjustment": {
        "capture": "ModelCudaGraphManager.capture, one descriptor (mutant: #35162's proposed adjusted_num_reqs "
        "for FULL graphs)",
    },
    "no-send-wait": {
        "first_forward": "Worker.execute_model (rank 0, mutant: no wait on _pp_send_work) → "
        "GPUModelRunner.execute_model",
        "receive": "Worker.execute_model (non-first rank, mutant: no wait on _pp_send_work) → "
        "get_pp_group().irecv_tensor_dict",
    },
}


def sources(variant: str) -> dict[str, str]:
    """The mapping for a variant (a mutant differs from v0.19.0 only where it changes a line)."""
    if variant == "pre-fix":
        return dict(PRE_FIX_SOURCES)
    return {**POST_FIX_SOURCES, **MUTATED.get(variant, {})}
