"""Every vLLM release from v0.19.0 to v0.33.0 as a pp-broadcast variant, and the features' parameters.

Found by diffing, release against release (the PyPI wheels), the functions the model mirrors
(``sources.py``): the V1 runner's ``sample_tokens``, ``_pp_broadcast_prev_sampled_token_ids``,
``_pp_receive_prev_sampled_token_ids_to_input_batch``, ``_is_all_reqs_chunked_prefill``,
``_prepare_inputs`` (the discard mask), ``_prepare_input_ids``, ``_bookkeeping_sync``, ``_update_states``
and ``execute_model``; the V2 runner's ``sample_tokens``, ``execute_model``, ``update_pp_decode_requests``
and ``pp_utils.py``; ``Worker.execute_model``, ``GroupCoordinator.isend_tensor_dict`` /
``irecv_tensor_dict``, ``EngineCore.step_with_batch_queue``, ``Scheduler.schedule`` (the decode
cadence), ``AsyncScheduler._update_after_schedule``, ``Scheduler._make_cached_request_data``,
``max_concurrent_batches`` and the config's runner and async-scheduling choice. Each change is listed
at the first release that has it; ``docs/models/pp-broadcast.md`` gives the source lines.

``BISECTION`` maps each release to its variant and says what differs that no variant models, and why
it cannot change a verdict. The model's ``release_table`` is built from it, so
``PROTOCOL.release_variant("0.32.0")`` is ``v0.31.0``.
"""

from __future__ import annotations

from lockstep.models.pp_broadcast.variants import (
    POST_FIX,
    PRE_FIX,
    V0_21_0,
    V0_22_0,
    V0_23_0,
    V0_30_0,
    V0_31_0,
    V0_33_0,
)
from lockstep.spec.protocol import ParameterSpec, VariantSpec

BISECTION: tuple[tuple[str, str, str], ...] = (
    ("0.19.0", PRE_FIX, "V1: every sampled step broadcasts; V2: pp_broadcast / pp_receive on every step"),
    ("0.19.1", PRE_FIX, "as 0.19.0"),
    ("0.20.0", POST_FIX, "V1: the skip (_is_all_reqs_chunked_prefill, PR #38726); V2 as 0.19.0"),
    ("0.20.1", POST_FIX, "as 0.20.0"),
    ("0.20.2", POST_FIX, "as 0.20.0"),
    (
        "0.21.0",
        V0_21_0,
        "V1: the receive guard `not pp.is_last_rank`; _update_states advances a non-last rank's "
        "num_tokens_no_spec from num_computed_tokens (not tracked)",
    ),
    ("0.22.0", V0_22_0, "V1: the receive advances num_tokens_no_spec and is_token_ids (not tracked)"),
    ("0.22.1", V0_22_0, "as 0.22.0"),
    (
        "0.23.0",
        V0_23_0,
        "V2: the PPHandler (PR #42187) and the decode cadence, batch queue pp_size + 1; V1 as 0.22.0: without "
        "execute_model_state sample_tokens returns EMPTY_MODEL_RUNNER_OUTPUT (the engine still raises, in "
        "update_from_output); step_with_batch_queue returns without blocking while the queue has room and the "
        "scheduler has requests (within the model's free processing order)",
    ),
    ("0.24.0", V0_23_0, "as 0.23.0"),
    ("0.25.0", V0_23_0, "V2: broadcast() synchronizes the main stream on XPU only"),
    ("0.25.1", V0_23_0, "as 0.25.0"),
    ("0.26.0", V0_23_0, "as 0.25.0"),
    ("0.27.0", V0_23_0, "as 0.25.0"),
    ("0.27.1", V0_23_0, "as 0.25.0"),
    (
        "0.28.0",
        V0_23_0,
        "V1: the receive posts its broadcast with async_op=True, waited at the top of _prepare_input_ids before "
        "the forward (the same order for every op the model has)",
    ),
    (
        "0.29.0",
        V0_23_0,
        "isend_tensor_dict sends its metadata with isend_object (the model's metadata was already a buffered "
        "send); V2 is the default runner",
    ),
    (
        "0.30.0",
        V0_30_0,
        "V2: the sender pads the sampled ids to max_sample_len; broadcast_drafts / the receiver's drafts; the need "
        "mask keeps final chunks that end their request",
    ),
    (
        "0.31.0",
        V0_31_0,
        "the V1 runner refuses PP with async scheduling (PR #56250, issue #45014); V2: the need mask drops final "
        "chunks that end their request again; XPU ring depth 1 (XPU only)",
    ),
    ("0.32.0", V0_31_0, "as 0.31.0 (V1 execute_model: cascade attention removed, not on this path)"),
    (
        "0.33.0",
        V0_33_0,
        "V2: _sample_len (one column unless the step schedules drafts) on both sides, the sender asserts it; "
        "receive(recv_drafts=num_spec_tokens > 0), broadcast_drafts only after a sampled broadcast",
    ),
)

RELEASE_VARIANTS = (
    VariantSpec(
        V0_23_0,
        "V1 as v0.22.0; V2: the PPHandler (side stream, pp_broadcast group, need-mask skip, ring of pp_size, "
        "decode cadence)",
        "vLLM v0.23.0",
        later_release=True,
    ),
    VariantSpec(
        V0_30_0,
        "V1 as v0.22.0; V2: sampled ids padded to 1 + k columns, drafts broadcast and applied with the ring",
        "vLLM v0.30.0",
        later_release=True,
    ),
    VariantSpec(
        V0_31_0,
        "V1 refuses PP with async scheduling (sync only); V2 as v0.30.0, the need mask drops final chunks that "
        "end their request",
        "vLLM v0.31.0",
        later_release=True,
    ),
    VariantSpec(
        V0_33_0,
        "V1 as v0.31.0; V2: the sampled ids 1 + k wide only where the step schedules drafts, on both sides",
        "vLLM v0.33.0",
        later_release=True,
    ),
)

FEATURE_PARAMETERS = (
    ParameterSpec(
        "async_scheduling",
        1,
        "1: async scheduling (the broadcast path; from v0.31.0 vLLM turns it off for the V1 runner with PP); 0: the "
        "Scheduler sends the sampled tokens",
        minimum=0,
        maximum=1,
    ),
    ParameterSpec("drafts", 0, "speculative decoding: draft tokens scheduled with every decode", minimum=0, maximum=2),
    ParameterSpec("runner", 1, "1: the V1 GPUModelRunner; 2: the V2 runner (vllm/v1/worker/gpu)", minimum=1, maximum=2),
    ParameterSpec(
        "structured_output",
        0,
        "1: the last request has a grammar (the engine defers its sample_tokens while its last token is in flight)",
        minimum=0,
        maximum=1,
    ),
)
