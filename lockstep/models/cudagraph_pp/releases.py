"""Every vLLM release from v0.18.0 to v0.33.0 mapped to a cudagraph-pp variant.

Found by diffing, release against release (the PyPI wheels), the functions the model mirrors
(``sources.py``), extracted with Python's ``ast`` and compared as text: ``vllm/v1/worker/gpu/cudagraph_utils.py``
(every function and class body), ``vllm/v1/worker/gpu/model_runner.py`` (``GPUModelRunner.__init__``,
``load_model``, ``capture_model``, ``_dummy_run``, ``execute_model``), ``vllm/v1/worker/gpu/dp_utils.py`` and
``vllm/v1/worker/gpu_worker.py`` (``Worker.execute_model``, ``compile_or_warm_up_model``). Each change is listed
at the first release that has it; ``docs/models/cudagraph-pp.md`` gives the source lines.

``BISECTION`` maps each release to its variant and says what changed on the model's path. No release after
v0.19.0 changes a fact an action reads (the persistent buffer of ``load_model``, the copy-in of ``execute_model``,
the wait on ``_pp_send_work``, capture order PIECEWISE then FULL by ``num_tokens`` descending, the request count
``desc.num_reqs or min(num_tokens, max_num_reqs)`` of a captured dummy batch, ``dispatch`` NONE until graphs are
captured), so every later release is ``post-fix``; the paths they add that the model leaves out are in the ledger.
"""

from __future__ import annotations

from lockstep.spec.protocol import POST_FIX, PRE_FIX

BISECTION: tuple[tuple[str, str, str], ...] = (
    ("0.18.0", PRE_FIX, "capture_model returns early with PP ('Pipeline parallel is currently eager-only')"),
    (
        "0.19.0",
        POST_FIX,
        "PR #35162: load_model allocates the persistent intermediate tensors, graphs are captured on slices of "
        "them, execute_model copies every received key in",
    ),
    ("0.19.1", POST_FIX, "as 0.19.0 (no mirrored function changed)"),
    (
        "0.20.0",
        POST_FIX,
        "dispatch_cg_and_sync_dp replaces dispatch + sync_cudagraph_and_dp_padding (DP only; one DP rank: the "
        "same descriptor)",
    ),
    ("0.20.1", POST_FIX, "as 0.20.0"),
    ("0.20.2", POST_FIX, "as 0.20.0"),
    ("0.21.0", POST_FIX, "capture prepares attention state outside the graph (CapturedAttentionState; no address)"),
    (
        "0.22.0",
        POST_FIX,
        "execute_model passes prompt_mapping to LoRA; capture refactors (no buffer, order or count change)",
    ),
    ("0.22.1", POST_FIX, "as 0.22.0"),
    (
        "0.23.0",
        POST_FIX,
        "breakable PIECEWISE graphs (run_pw_graph: same inputs as PIECEWISE); execute_model(dummy_run=True) "
        "skips the copy-in (dummy runs: not modelled); PPHandler replaces pp_receive",
    ),
    ("0.24.0", POST_FIX, "LoRA dispatch keys (num_active_loras); dummy-run LoRA; no PP change"),
    ("0.25.0", POST_FIX, "dynamic speculative decoding: several uniform decode graphs per size (left out)"),
    ("0.25.1", POST_FIX, "as 0.25.0"),
    ("0.26.0", POST_FIX, "CreateForwardFn(desc, warmup): warm-up and capture prepare inputs separately"),
    (
        "0.27.0",
        POST_FIX,
        "attention metadata built for every PIECEWISE capture; _dummy_run spreads the remainder of tokens",
    ),
    ("0.27.1", POST_FIX, "as 0.27.0"),
    (
        "0.28.0",
        POST_FIX,
        "max_query_len in descriptors; varlen FULL decode graphs with adaptive verification (an option: left out)",
    ),
    (
        "0.29.0",
        POST_FIX,
        "cudagraph memory profiling; Worker waits only the device handles of isend (the metadata is reaped "
        "lazily: the same buffers)",
    ),
    (
        "0.30.0",
        POST_FIX,
        "DBO microbatch twins of FULL graphs (num_ubatches; left out); relay_aux_hidden_states sends slices of "
        "the persistent buffer onward (EAGLE3 with PP: left out)",
    ),
    (
        "0.31.0",
        POST_FIX,
        "capture's model_inputs default intermediate_tensors None (non-first ranks: the slice); "
        "_dummy_run caps speculator requests",
    ),
    ("0.32.0", POST_FIX, "release_graphs clears _graphs_captured (dispatch then NONE: eager on the persistent buffer)"),
    ("0.33.0", POST_FIX, "set_dcp_capture_context (DCP); DP sync pads num_reqs to the DP maximum (DP only)"),
)
