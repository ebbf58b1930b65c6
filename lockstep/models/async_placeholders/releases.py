"""Every vLLM release from v0.19.0 to v0.33.0 as an async-placeholders variant.

Found by diffing, release against release (the PyPI wheels), the functions the model mirrors
(``sources.py``): ``InputBatch.add_request``, ``set_async_sampled_token_ids``,
``update_async_output_token_ids``, ``_make_sampling_metadata`` and ``update_req_spec_token_ids``;
``GPUModelRunner._update_states``, ``_sample``, ``_bookkeeping_sync`` and ``sample_tokens``;
``Scheduler.schedule``, ``_make_cached_request_data``, ``_preempt_request``, ``update_from_output``,
``_update_request_with_output`` and ``_handle_invalid_blocks``; ``AsyncScheduler._update_after_schedule``
and ``_update_request_with_output``; ``EngineCore.step_with_batch_queue``. Each change is listed at the
first release that has it; ``docs/models/async-placeholders.md`` gives the source lines.

``BISECTION`` maps each release to its variant and says what differs that no variant models, and why
it cannot change a verdict. The model's ``release_table`` is built from it, so
``PROTOCOL.release_variant("0.32.0")`` is ``v0.27.0``.
"""

from __future__ import annotations

from lockstep.spec.protocol import POST_FIX, PRE_FIX, VariantSpec

V0_27_0 = "v0.27.0"  # _preempt_request zeroes num_output_placeholders; in-flight output is stale

BISECTION: tuple[tuple[str, str, str], ...] = (
    (
        "0.19.0",
        PRE_FIX,
        "the forward scan; _make_sampling_metadata needs output ids for penalties, bad words or logits processors",
    ),
    ("0.19.1", PRE_FIX, "as 0.19.0"),
    ("0.20.0", PRE_FIX, "logprob_token_ids in the sampling metadata; drafter fallbacks (no list state)"),
    ("0.20.1", PRE_FIX, "as 0.20.0"),
    ("0.20.2", PRE_FIX, "as 0.20.0"),
    (
        "0.21.0",
        PRE_FIX,
        "_make_sampling_metadata also needs output ids `or not thinking_budget_tracks_reqs` (the model's history bit "
        "is free); _update_states advances a non-last PP rank's num_tokens_no_spec (PP: not modelled)",
    ),
    ("0.22.0", POST_FIX, "the backward scan (PR #42938); _make_sampling_metadata needs output ids per step"),
    ("0.22.1", POST_FIX, "as 0.22.0"),
    (
        "0.23.0",
        POST_FIX,
        "AsyncScheduler._update_after_schedule sets next_decode_eligible_step (V2 runner only); "
        "_preempt_request discards _inflight_prefills (not counted by the model)",
    ),
    (
        "0.24.0",
        POST_FIX,
        "placeholders += num_sampled_tokens_per_step (1 for autoregressive models) + drafts; the drafts a step "
        "schedules come from dynamic_sd_lookup (any 0..k, as the model's free choice); _make_cached_request_data "
        "drops `assert not scheduled_in_prev_step` for resumed requests",
    ),
    (
        "0.25.0",
        POST_FIX,
        "sample_tokens drafts after bookkeeping for CPU-token drafters and dummy-runs on DP disagreement (the "
        "drafts the scheduler sends next are the model's free choice); preempted_req_ids from "
        "reset_preempted_req_ids",
    ),
    ("0.25.1", POST_FIX, "as 0.25.0"),
    ("0.26.0", POST_FIX, "_update_states copies KV blocks in place; num_in_flight_tokens counted (no list state)"),
    (
        "0.27.0",
        V0_27_0,
        "_preempt_request zeroes num_output_placeholders and marks in-flight output stale; a stale output is "
        "delivered without decrementing placeholders or rolling back rejections (is_stale); a preempted request "
        "resumes only after its stale output drained",
    ),
    ("0.27.1", V0_27_0, "as 0.27.0"),
    ("0.28.0", V0_27_0, "_bookkeeping_sync keeps NaN counts on device (no list state)"),
    ("0.29.0", V0_27_0, "the V2 runner is the default (no placeholder list: see the ledger); metrics only"),
    ("0.30.0", V0_27_0, "as 0.29.0 (_update_states: XD-RoPE positions moved)"),
    (
        "0.31.0",
        V0_27_0,
        "routed-experts copies moved; _handle_invalid_blocks refuses several KV cache groups (one group modelled)",
    ),
    ("0.32.0", V0_27_0, "as 0.31.0 (metrics, iteration details)"),
    (
        "0.33.0",
        V0_27_0,
        "_update_request_with_output moves to Scheduler and resolves placeholders before a stop trims the new "
        "tokens (stops are not modelled: the ledger says what this leaves uncovered)",
    ),
)

RELEASE_VARIANTS = (
    VariantSpec(
        V0_27_0,
        "the backward scan; preemption zeroes the placeholders and in-flight output is delivered stale",
        "vLLM v0.27.0",
        later_release=True,
    ),
)
