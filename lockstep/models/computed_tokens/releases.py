"""Every vLLM release from v0.20.0 to v0.33.0 mapped to a computed-tokens variant.

Found by diffing, release against release (the PyPI wheels), the functions the model mirrors
(``sources.py``): the V2 runner's ``execute_model``, ``add_requests``, ``update_requests``,
``prepare_inputs``, ``sample_tokens``, ``sample``, ``postprocess`` (from v0.23.0
``postprocess_sampled``, ``postprocess_num_computed_tokens`` and ``update_pp_decode_requests``),
``RequestState.add_request``, ``post_update``, ``get_num_sampled_and_rejected``, ``pp_utils.py``,
``model_states/default.py`` ``prepare_attn``; ``Scheduler.schedule``, ``_make_cached_request_data``,
``_update_after_schedule``, ``update_from_output``, ``_update_request_with_output``,
``update_draft_token_ids``; ``AsyncScheduler``; ``EngineCore.step``, ``step_with_batch_queue`` and
``post_step``. Each change is listed at the first release that has it; ``docs/models/computed-tokens.md``
gives the source lines.

``BISECTION`` maps each release to its variant and says what differs that no variant models. With one
pipeline stage (``ranks`` 1) no release after v0.22.0 changes what the model has; with ``ranks`` > 1
v0.23.0 replaced ``pp_receive`` by the ``PPHandler`` ring, which no variant models yet (the ledger
says so), so the verdicts of the instances with ``ranks`` > 1 speak for v0.20.0-v0.22.1 only.
"""

from __future__ import annotations

from lockstep.spec.protocol import POST_FIX, PRE_FIX

_PP_RING = " (ranks > 1: not modelled, see the ledger)"

BISECTION: tuple[tuple[str, str, str], ...] = (
    (
        "0.20.0",
        PRE_FIX,
        "PR #40654: the CPU mirror advanced in postprocess; is_prefilling read per row in prepare_attn "
        "(the same predicate as v0.21.0's inline one)",
    ),
    ("0.20.1", PRE_FIX, "as 0.20.0"),
    ("0.20.2", PRE_FIX, "as 0.20.0"),
    ("0.21.0", PRE_FIX, "is_prefilling computed inline in prepare_inputs; postprocess_state (no mirror)"),
    ("0.22.0", POST_FIX, "PR #42202: update_requests overwrites the mirror with the scheduler's value"),
    ("0.22.1", POST_FIX, "as 0.22.0"),
    (
        "0.23.0",
        POST_FIX,
        "PR #42187 PPHandler: non-last ranks add query_len at sample_tokens and subtract the rejected drafts "
        "pp_size steps later, only for rows of the need mask; the decode cadence next_decode_eligible_step; "
        "batch queue pp_size + 1" + _PP_RING + "; one rank: the cadence is one step, the queue two",
    ),
    (
        "0.24.0",
        POST_FIX,
        "the max_model_len clamp subtracts num_sampled_tokens_per_step (1 for autoregressive models, the same "
        "bound); placeholders += num_sampled_tokens_per_step + drafts; dynamic_sd_lookup may schedule fewer "
        "than k drafts (left out: the ledger)",
    ),
    ("0.25.0", POST_FIX, "defer_prefills, stale-frame discard (preemption and prefix-cache reset: not modelled)"),
    ("0.25.1", POST_FIX, "as 0.25.0"),
    ("0.26.0", POST_FIX, "update_requests copies KV blocks in place (no counter)"),
    (
        "0.27.0",
        POST_FIX,
        "preemption makes in-flight output stale; a stale output does not roll back rejections "
        "(preemption: not modelled)",
    ),
    ("0.27.1", POST_FIX, "as 0.27.0"),
    (
        "0.28.0",
        POST_FIX,
        "adaptive verification (an option, off by default: the bound uses the scheduler's num_scheduled "
        "while the GPU reallocates drafts; left out)",
    ),
    ("0.29.0", POST_FIX, "the V2 runner is the default where it supports the configuration"),
    (
        "0.30.0",
        POST_FIX,
        "the need mask drops not_finishing (PR #54436)" + _PP_RING + "; update_requests block_table_updates",
    ),
    (
        "0.31.0",
        POST_FIX,
        "the need mask excludes final prefill chunks that end their request; decode_stagger" + _PP_RING,
    ),
    ("0.32.0", POST_FIX, "block_table_updates removed again; prefix replay (prefix caching: not modelled)"),
    (
        "0.33.0",
        POST_FIX,
        "_update_request_with_output trims num_computed_tokens at a stop and resolves every returned "
        "placeholder (a finished request is never read again); post_update copies drafts; _sample_len" + _PP_RING,
    ),
)
