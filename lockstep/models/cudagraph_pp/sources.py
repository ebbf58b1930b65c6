"""The vLLM functions each cudagraph-pp action stands for, shown with every counterexample step.

Read from the v0.18.0 wheel (``pre-fix``) and the v0.19.0 wheel (``post-fix``; each mutant changes
one line of it): ``vllm/v1/engine/core.py`` (``EngineCore.step``), ``vllm/v1/worker/gpu_worker.py``
(``Worker.execute_model``: ``_pp_send_work``, ``irecv_tensor_dict``, ``isend_tensor_dict``),
``vllm/v1/worker/gpu/model_runner.py`` (the V2 ``GPUModelRunner``: ``load_model``,
``capture_model``, ``_dummy_run``, ``execute_model``) and ``vllm/v1/worker/gpu/cudagraph_utils.py``
(``CudaGraphManager.dispatch``, ``run_fullgraph``, ``ModelCudaGraphManager.capture``).
"""

from __future__ import annotations

from lockstep.models.vllm_files import (
    CUDAGRAPH_TESTS,
    CUDAGRAPH_UTILS,
    GPU_WORKER,
    GPU_WORKER_TESTS,
    V2_INPUT_BATCH,
    V2_INPUT_BATCH_TESTS,
    V2_MODEL_RUNNER,
)
from lockstep.spec.machine import Source

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


# Where vLLM states each property: the release's lines (the wheel's vllm/..., the sdist's tests/...).
PROPERTY_SOURCES: dict[str, tuple[Source, ...]] = {
    "A1_address_stability": (
        Source("0.33.0", V2_MODEL_RUNNER, 543, "GPUModelRunner.load_model", "comment", 546),
        Source("0.33.0", CUDAGRAPH_UTILS, 699, "ModelCudaGraphManager.capture.create_forward_fn", "assert"),
    ),
    "A2_freshness": (
        Source("0.33.0", V2_MODEL_RUNNER, 2026, "GPUModelRunner.execute_model", "comment"),
        Source("0.33.0", V2_MODEL_RUNNER, 2031, "GPUModelRunner.execute_model", "code", 2033),
    ),
    "A3_sender_reuse": (
        Source("0.33.0", GPU_WORKER, 1337, "Worker.execute_model", "comment", 1342),
        Source("0.33.0", GPU_WORKER_TESTS, 443, "test_execute_model_waits_previous_pp_send_before_forward", "test"),
    ),
    "K1_key_sets": (
        Source("0.33.0", V2_MODEL_RUNNER, 2033, "GPUModelRunner.execute_model", "code"),
        Source("0.33.0", CUDAGRAPH_UTILS, 666, "ModelCudaGraphManager.capture.store_capture_output", "code"),
    ),
    "S1_sizes": (
        Source("0.33.0", V2_MODEL_RUNNER, 2031, "GPUModelRunner.execute_model", "code"),
        Source("0.33.0", V2_MODEL_RUNNER, 548, "GPUModelRunner.load_model", "code"),
        Source("0.33.0", V2_MODEL_RUNNER, 881, "GPUModelRunner._dummy_run", "assert"),
    ),
    "C1_capture_order": (
        Source("0.33.0", CUDAGRAPH_UTILS, 444, "CudaGraphManager.capture", "comment", 447),
        Source("0.33.0", CUDAGRAPH_UTILS, 377, "CudaGraphManager._init_candidates", "code"),
        Source("0.33.0", CUDAGRAPH_UTILS, 664, "ModelCudaGraphManager.capture.store_capture_output", "code", 666),
    ),
    "D1_dummy_batch_bounds": (
        Source("0.33.0", V2_INPUT_BATCH, 143, "InputBatch.make_dummy", "assert"),
        Source("0.33.0", V2_MODEL_RUNNER, 870, "GPUModelRunner._dummy_run", "assert"),
        Source("0.33.0", CUDAGRAPH_UTILS, 676, "ModelCudaGraphManager.capture.create_forward_fn", "code"),
        Source("0.33.0", V2_INPUT_BATCH_TESTS, 29, "test_make_dummy_distributes_remainder", "test"),
    ),
    "R1_replay_compatibility": (
        Source("0.33.0", CUDAGRAPH_UTILS, 111, "_is_compatible", "code", 138),
        Source("0.33.0", CUDAGRAPH_UTILS, 557, "CudaGraphManager.run_fullgraph", "assert", 560),
        Source("0.33.0", CUDAGRAPH_TESTS, 420, "test_mixed_batch_never_selects_a_uniform_decode_graph", "test"),
        Source("0.33.0", CUDAGRAPH_TESTS, 383, "test_uniform_decode_pads_up_to_full_graph", "test"),
    ),
}
