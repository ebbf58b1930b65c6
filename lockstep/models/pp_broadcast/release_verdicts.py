"""The expected verdicts of pp-broadcast's later releases and features: those added to the instances the
v0.19.0-v0.22.0 variants share, and the instances of the features (``releases.FEATURE_PARAMETERS``)."""

from __future__ import annotations

from dataclasses import replace

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
from lockstep.spec.protocol import InstanceSpec

RELEASED = (PRE_FIX, POST_FIX, V0_21_0, V0_22_0, V0_23_0, V0_30_0, V0_31_0, V0_33_0)
V1_ASYNC = RELEASED[:6]  # the releases whose config lets the V1 runner run PP with async scheduling
BEFORE_HANDLER = (PRE_FIX, POST_FIX, V0_21_0, V0_22_0)  # the V2 runner's pp_broadcast / pp_receive


def every(verdict: str, variants: tuple[str, ...] = RELEASED) -> dict[str, str]:
    return dict.fromkeys(variants, verdict)


def split(before: tuple[str, ...], verdict: str, after: str) -> dict[str, str]:
    """``verdict`` for the ``before`` releases, ``after`` for the rest."""
    return {variant: verdict if variant in before else after for variant in RELEASED}


# The V1 runner with async scheduling is v0.22.0's in v0.23.0 to v0.30.0 (releases.BISECTION); from v0.31.0
# VllmConfig turns async scheduling off for the V1 runner with PP, so there the shared instances run the sync path.
LATER = {V0_23_0: "holds", V0_30_0: "holds", V0_31_0: "holds", V0_33_0: "holds"}
SHARED: dict[str, dict[str, str]] = {
    name: LATER for name in ("seed", "chunks-then-decode", "decode-gap", "empty-step")
} | {"failed-forward": dict.fromkeys(LATER, "violated")}  # failure_reaches_engine (finding: sync-failed-forward)

RELEASE_INSTANCES: tuple[InstanceSpec, ...] = (
    InstanceSpec(
        "spec-decode",
        "speculative decoding on the V1 runner: a two-chunk prompt, then a decode with one draft token. The decode "
        "step samples [num_reqs, 2] ids; the last rank's _pp_broadcast_prev_sampled_token_ids asserts one column and "
        "raises before broadcasting, and rank 0 embeds placeholders for the draft it never received. From v0.31.0 "
        "the V1 runner runs PP synchronously: the scheduler sends the drafts and no broadcast asserts",
        {"chunks": 2, "decodes": 1, "drafts": 1},
        split(V1_ASYNC, "violated", "holds"),
        finding="`GPUModelRunner.sample_tokens` → `_pp_broadcast_prev_sampled_token_ids` (`assert "
        "sampled_token_ids.dim() == 2 and sampled_token_ids.shape[-1] == 1`, 'PP+async expects ...'): the rejection "
        "sampler's [num_reqs, 1 + k] ids raise on the output rank, the engine dies on the step's result; "
        "`_prepare_input_ids` on a non-last rank returns before the draft scatter (`self._draft_token_ids is None`): "
        "its draft inputs are the scheduler's -1 placeholders (v0.19.0-v0.30.0; v0.31.0 refuses the V1 runner with "
        "PP and async scheduling). Upstream: known, issue #57755 and failure 2 of issue #49355 (open; PR #49443 open); "
        "v0.31.0 turns async scheduling off for V1 with PP (PR #56250)",
        finding_properties=("sampled_one_column", "draft_inputs_known"),
        upstream="known: issues #57755 and #49355 (open; PR #49443 open); 0.31.0 runs V1 PP synchronously",
    ),
    InstanceSpec(
        "structured-output",
        "structured output on the V1 runner with three stages (batch queue 3): a two-chunk prompt with a grammar, "
        "then a decode. The decode is scheduled while the final chunk's token is in flight, so step_with_batch_queue "
        "defers its sample_tokens, pops the oldest step (the first chunk, not the final one) and computes the grammar "
        "bitmask before the grammar has accepted the final chunk's token ('Failed to advance FSM', issue #45014)",
        {"structured_output": 1, "ranks": 3, "chunks": 2, "decodes": 1},
        split(V1_ASYNC, "violated", "holds"),
        finding="`AsyncScheduler._update_after_schedule` (`pending_structured_output_tokens` when a structured row "
        "has output placeholders), `EngineCore.step_with_batch_queue` (defers sample_tokens, `batch_queue.pop()` the "
        "oldest step, `update_from_output`, then `get_grammar_bitmask(deferred_scheduler_output)`): with pp_size >= 3 "
        "the oldest step is not the one whose token the grammar lacks (v0.19.0-v0.30.0). Upstream: known, issue "
        "#45014, closed by refusing V1 with PP and async scheduling (PR #56250, v0.31.0)",
        finding_properties=("grammar_bitmask_current",),
        upstream="known: issue #45014, closed by PR #56250 (0.31.0 refuses V1 PP with async scheduling)",
    ),
    InstanceSpec(
        "sync",
        "the seed without async scheduling (the V1 runner; from v0.31.0 the only way it runs PP): no rank broadcasts "
        "or receives, the scheduler sends each request's new token with its next step, the chunks still pipeline",
        {"async_scheduling": 0},
        every("holds"),
    ),
    InstanceSpec(
        "sync-decode-gap",
        "decode-gap without async scheduling: a decode waits until the engine processed the request's last "
        "sampled step, and the non-last ranks learn the token from the scheduler's new_token_ids",
        {"async_scheduling": 0, "requests": 2, "chunks": 3, "decodes": 1, "gaps": 1},
        every("holds"),
    ),
    InstanceSpec(
        "sync-failed-forward",
        "failed-forward without async scheduling (no receive path): the last rank's execute_model raises, its "
        "sample_tokens finds no execute_model_state and returns None up to v0.22.x, so step_with_batch_queue re-raises "
        "the failure; from v0.23.0 it returns EMPTY_MODEL_RUNNER_OUTPUT (ModelRunnerOutput.with_kv_conn_output_only"
        "(None), whose docstring promises None): the engine skips the re-raise and dies on a KeyError in "
        "update_from_output instead, the failure itself only in the worker's log (the same with async scheduling)",
        {"async_scheduling": 0, "failures": 1},
        split(BEFORE_HANDLER, "holds", "violated"),
        finding="`failure_reaches_engine` in 4 steps: V1 `GPUModelRunner.sample_tokens` (no `execute_model_state`: "
        "`return ModelRunnerOutput.with_kv_conn_output_only(kv_connector_output)` → `EMPTY_MODEL_RUNNER_OUTPUT` for "
        "None), `EngineCore.step_with_batch_queue` (`if model_output is None: exec_model_fut.result()` skipped), "
        "`Scheduler.update_from_output` (`model_runner_output.req_id_to_index[req_id]`: KeyError), "
        "`WorkerProc.worker_busy_loop` (the execute_model exception only logged and replied to the exec future) "
        "(v0.23.0-v0.33.0; the V2 runner returns None). Upstream: not found (issues and PRs searched): new",
        finding_properties=("failure_reaches_engine",),
        upstream="new (searched for the empty output after a failed execute_model)",
    ),
    InstanceSpec(
        "sync-structured-output",
        "structured-output without async scheduling: no deferral (the Scheduler schedules a decode only after its "
        "last token was processed), so every bitmask sees the request's tokens",
        {"structured_output": 1, "ranks": 3, "chunks": 2, "decodes": 1, "async_scheduling": 0},
        every("holds"),
    ),
    InstanceSpec(
        "v2-seed",
        "the seed on the V2 runner: up to v0.22.x pp_receive waits on the compute stream for every step's "
        "broadcast, the all-chunked one included (the V2 stuck pipeline, fixed by the PPHandler in v0.23.0, "
        "PR #42187); from v0.23.0 no broadcast at all (no row needs its sample: the final chunk ends the request, "
        "except in v0.30.0)",
        {"runner": 2},
        split(BEFORE_HANDLER, "violated", "holds"),
        finding="V2 `GPUModelRunner.sample_tokens` → `pp_receive` (`torch.distributed.broadcast` on "
        "`pp.device_group`, blocking form, every step) before `PPHandler` (v0.19.0-v0.22.1). Upstream: known, fixed "
        "by PR #42187 (v0.23.0)",
        finding_properties=("no_false_dependency",),
        upstream="known: fixed by PR #42187 (first in 0.23.0)",
    ),
    InstanceSpec(
        "v2-chunks-then-decode",
        "the V2 runner with a chunked prompt and a decode: the PPHandler skips the all-chunked step, the final "
        "chunk's token reaches rank 0's req_states pp_size steps later, and the scheduler's cadence schedules the "
        "decode no earlier (empty steps in between)",
        {"runner": 2, "chunks": 2, "decodes": 1, "hang_bound": 64},
        split(BEFORE_HANDLER, "violated", "holds"),
    ),
    InstanceSpec(
        "v2-decode-gap",
        "decode-gap on the V2 runner: two requests, a token budget that may leave one out; every decode reads its "
        "request's latest token from req_states",
        {"runner": 2, "requests": 2, "chunks": 2, "decodes": 1, "gaps": 1, "hang_bound": 64},
        split(BEFORE_HANDLER, "violated", "holds"),
    ),
    InstanceSpec(
        "v2-failed-forward",
        "failed-forward on the V2 runner: the last rank's sample_tokens returns None without execute_model_state "
        "(every release); the receives the other ranks posted go with the shutdown",
        {"runner": 2, "failures": 1},
        split(BEFORE_HANDLER, "violated", "holds"),
    ),
    InstanceSpec(
        "v2-structured-output",
        "structured output on the V2 runner (two stages): the deferral waits for the oldest step, which the decode "
        "cadence makes the final chunk's (three stages hold too: 56,386,937 states, not pinned)",
        {"runner": 2, "structured_output": 1, "chunks": 2, "decodes": 1, "hang_bound": 64},
        split(BEFORE_HANDLER, "violated", "holds"),
    ),
    InstanceSpec(
        "v2-spec-decode",
        "speculative decoding on the V2 runner, one draft: a two-chunk prompt and a decode. Up to v0.29.0 every "
        "receiver allocates [num_reqs, 1 + k] ids while the last rank sends the plain sampler's [num_reqs, 1] on a "
        "step without drafts (a count mismatch NCCL does not detect: the ranks hang), and the non-last ranks never "
        "receive the drafts they embed; v0.30.0 pads and broadcasts the drafts, v0.33.0 sizes both sides by the "
        "step's drafts",
        {"runner": 2, "chunks": 2, "decodes": 1, "drafts": 1, "hang_bound": 64},
        split(RELEASED[:5], "violated", "holds"),
        finding="V2 `pp_broadcast` / `pp_receive` (v0.19.0-v0.22.1) and `PPHandler.broadcast` / `receive` "
        "(v0.23.0-v0.29.0): the receiver's `torch.empty(num_reqs, max_sample_len)` against the sender's "
        "`sampler_output.sampled_token_ids` ([num_reqs, 1] from `self.sampler` when `input_batch.num_draft_tokens "
        "== 0`); the drafts stay on the last rank (`req_states.draft_tokens` written by the speculator only), read by "
        "`combine_sampled_and_draft_tokens` on every rank (v0.19.0-v0.29.0; v0.30.0 pads and adds "
        "`broadcast_drafts`). Upstream: known, both reported in PR #46994 (merged; the transport is PR #50514, "
        "v0.30.0); PR #52295 (open) proposes the draft sync again",
        finding_properties=("no_collective_mismatch", "draft_inputs_known"),
        upstream="known: PR #46994 (merged) and its transport PR #50514 (first in 0.30.0); PR #52295 (open)",
    ),
)


def with_release_verdicts(*instances: InstanceSpec) -> tuple[InstanceSpec, ...]:
    """The shared instances with the later releases' verdicts added, then the features' own."""
    merged = tuple(
        replace(instance, expected={**instance.expected, **SHARED.get(instance.name, {})}) for instance in instances
    )
    return merged + RELEASE_INSTANCES
