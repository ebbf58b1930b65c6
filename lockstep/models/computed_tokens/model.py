"""computed-tokens: the V2 model runner's CPU mirror of ``num_computed_tokens`` (vLLM PRs #40654, #42202).

Mirrors vLLM **v0.21.0** (``pre-fix``) and **v0.22.0** (``post-fix``, PR #42202 "[Model Runner
V2] Fix seq_lens_cpu_upper_bound"), on top of PR #40654 ("[Core] Avoid seq_lens_cpu GPU->CPU
sync", v0.20.0). The functions it mirrors:
``vllm/v1/worker/gpu/model_runner.py`` (``execute_model``, ``add_requests``,
``update_requests``, ``prepare_inputs``, ``sample_tokens``, ``postprocess``),
``vllm/v1/worker/gpu/states.py`` (``RequestState.add_request``, ``is_prefilling``; v0.21.0
computed it inline in ``prepare_inputs``), ``vllm/v1/worker/gpu/input_batch.py``
(``get_num_sampled_and_rejected``, ``post_update``), ``vllm/v1/worker/gpu/pp_utils.py``
(``pp_broadcast``, ``pp_receive``), ``vllm/v1/worker/gpu/model_states/default.py``
(``max_seq_len``), ``vllm/v1/core/sched/scheduler.py`` (``schedule``,
``_make_cached_request_data``, ``_update_after_schedule``, ``update_from_output``,
``_update_request_with_output``), ``vllm/v1/core/sched/async_scheduler.py`` and
``vllm/v1/engine/core.py`` (``step``, ``step_with_batch_queue``, ``post_step``).

The story. The scheduler owns each request's ``num_computed_tokens`` (``c``). When it schedules
a step it sends, for every cached request, ``c`` *before* the step's tokens, and then advances
``c`` by the scheduled count at once, optimistically: with MTP a decode step schedules 1 + k
tokens (k draft tokens), and only ``update_from_output`` learns how many drafts were accepted and
subtracts the rejected ones. With async scheduling the engine schedules step N+1 before it has
updated from step N, so the value it sends for N+1 still counts N's drafts as accepted.

Every rank's V2 runner keeps the authoritative count on the GPU (``num_computed_tokens``,
advanced by ``post_update`` by ``query_len - num_rejected``), and, since #40654, a CPU mirror
``num_computed_tokens_np`` from which it builds ``seq_lens_cpu_upper_bound = mirror +
num_scheduled`` for the attention backends without a GPU->CPU sync, and ``max_seq_len`` from
it. v0.21.0 advanced the mirror in ``postprocess`` by ``num_scheduled`` ("assume all scheduled
accepted") and never looked at the scheduler's value again: every rejected draft stays in the
mirror forever, so the bound drifts away from the truth without limit (PR #42202: "would diverge
indefinitely for MTP"). v0.22.0 overwrites the mirror in ``update_requests`` with the value the
scheduler sent, and derives ``num_computed_prefill_tokens = min(mirror, prefill_len)`` there
too; the bound is then off only by the drafts of steps the scheduler had not yet updated from.

What the model has:
- the scheduler per request (status, ``num_computed_tokens``, ``num_output_placeholders``,
  output count, ``spec_token_ids``, ``is_prefill_chunk``), a token ``budget`` per step, so
  prompts longer than the budget are **chunked prefills**, and MTP with ``drafts`` (k) draft
  tokens per decode step; the **number accepted** is the parameter ``accepted`` of the last
  rank's ``sample_tokens``.
- the engine's batch queue: ``async_scheduling`` 1 (default, vLLM's default) schedules while
  fewer than ``max_concurrent_batches`` steps are unprocessed (2 with one rank: **one step in
  flight** when the next is scheduled); 0 is ``EngineCore.step`` (schedule, run, update).
- ``ranks`` pipeline stages, each with its own runner (mirror, GPU value, prefill progress,
  ``prefill_len``); a stage runs step N after the stage before it; the last stage samples and
  ``pp_broadcast`` s (num_sampled, num_rejected) that the others ``pp_receive`` before their
  ``postprocess``. With ranks > 1 the batch queue holds ``ranks`` steps (PP fills the pipeline).
- ``padded_rows``: FULL CUDA-graph request padding of the metadata (rows with bound 0).
- every rank records the attention metadata of the last step it ran (``metadata.*``), which
  the properties U1-U6 of protocols.md P4(d) read.

Faithfulness notes (read from the v0.21.0/v0.22.0 wheels; where they differ from protocols.md,
the source wins):
- U6 ("if a request has no in-flight step, the mirror equals the GPU value") cannot hold at
  every moment in v0.22.0: the mirror is written only in ``add_requests``/``update_requests``,
  so between a step's ``postprocess`` and the next ``update_requests`` it holds the pre-step
  value while the GPU value has moved on (in sync mode without drafts as well). The mirror is
  read only in ``prepare_inputs``, so the model checks U6 there: a row of a request that had
  no step unprocessed by the scheduler when this step was scheduled has mirror == GPU value.
- U5: with FULL graphs ``prepare_attn`` takes ``max_seq_len`` over the *padded* rows
  (``num_reqs = num_reqs_after_padding``), not over real rows only; padded rows are 0, so it
  equals the maximum over real rows. The model takes it over every row, as the source does.
- U3's allowance is read at schedule time: the drafts of the request's steps that were
  scheduled but not yet updated from when this step was scheduled (``allowed``). The
  corollary ``upper <= max_model_len + k`` is checked as ``U3_within_max_model_len``.
- ``max_concurrent_batches`` is ``MultiprocExecutor``'s in v0.21.0/v0.22.0 (2 if PP = 1 and
  async, else pp_size); protocols.md's "one step in flight" is the PP = 1 case.
- The engine's order is ``step_with_batch_queue``'s: it schedules whenever the queue has room
  and ``schedule()`` would return tokens, and updates from the oldest step only when the queue
  is full or nothing can be scheduled (an empty ``SchedulerOutput`` changes no mirror and is not
  modelled as a step).
- Each rank runs ``execute_model(N)``, ``sample_tokens(N)``, ``execute_model(N+1)`` in order,
  and the GPU value a step's kernels read is the one after the previous step's ``post_update``
  (stream order); ``pp_receive``'s broadcast is waited before the non-last rank's postprocess.
- Synchronous drafts (``post_step``): the model gives a request ``k`` drafts when the scheduler
  updates from one of its steps (none for a prefill chunk or a finished request). In v0.22.0
  ``take_draft_token_ids`` is queued behind the ``sample_tokens`` RPCs already sent, so it
  returns [-1]*k for the *last* sampled batch, and ``update_draft_token_ids`` reads the request's
  *latest* ``is_prefill_chunk``. With PP (batch queue = pp_size) that lets a request be scheduled
  again while its final prefill chunk is unprocessed: the finding ``sync-pipeline-early-drafts``
  (U2 violated in v0.22.0 too).
- k-induction: ``invariants.py`` states how the scheduler's count, the queued records and each
  rank's GPU value hang together; with them U1, U3 and U4 of ``post-fix`` are 1-inductive.
- Not modelled: preemption and resumption (``prefill_len > prompt_len``), prefix caching and
  KV-connector loads (``num_computed_tokens > 0`` at admission), EOS/stop strings (requests
  stop at ``max_tokens``), structured output, removal of finished requests from the runner,
  ``long_prefill_token_threshold``, the order of rows (sorted by ``num_scheduled``; every
  property is per row).
"""

from __future__ import annotations

from collections.abc import Mapping

from lockstep.models.computed_tokens.invariants import invariants
from lockstep.models.computed_tokens.runner import add_runner_actions
from lockstep.models.computed_tokens.scheduler import FINISHED, add_scheduler_actions
from lockstep.models.computed_tokens.sources import sources
from lockstep.models.computed_tokens.state import declare
from lockstep.spec.machine import Machine
from lockstep.spec.protocol import InstanceSpec, ParameterSpec, Protocol, VariantSpec
from lockstep.spec.terms import Term, all_of, any_of, conjunction, disjunction, if_then_else, maximum, minimum

PRE_FIX, POST_FIX = "pre-fix", "post-fix"

RUNTIME_ACTIONS: dict[str, str] = {name: name for name in (
    "schedule", "update_from_output", "execute_model", "sample_tokens", "pp_receive",
)}
"""Runtime event -> model action (``lockstep.impl.computed_tokens`` records these names)."""


def build(variant: str, parameters: Mapping[str, int], *, invariants_as_properties: bool = False) -> Machine:
    """The computed-tokens machine for ``variant`` at the given parameter values.

    ``invariants_as_properties`` also declares the post-fix strengthening invariants as
    ``always`` properties (tests check them over every reachable state)."""
    fixed = variant == POST_FIX
    machine = Machine(f"computed-tokens/{variant}")
    state = declare(machine, parameters)
    sizes = state.sizes
    add_scheduler_actions(machine, state)
    add_runner_actions(machine, state, fixed)
    Rank, Request, Row = state.Rank, state.Request, state.Row
    count = sizes.requests

    def rows(body: object) -> Term:
        """``body(rank, request)`` on every real row of every rank's last metadata."""
        return all_of(Rank, lambda r: conjunction(*[
            (state.built[r] & state.real[r][q]).implies(body(r, q)) for q in range(count)]))  # type: ignore[operator]

    def slack(r: Term, q: Term | int) -> Term:
        return state.upper[r][q] - state.seq_len[r][q]

    machine.always("U1_sound", rows(lambda r, q: state.upper[r][q] >= state.seq_len[r][q]),
                   "U1: seq_lens_cpu_upper_bound >= the GPU seq_lens on every real row")
    exact_everywhere = not (sizes.asynchronous and sizes.drafts > 0)
    machine.always("U2_exact", rows(lambda r, q: (state.prefilling[r][q] | exact_everywhere).implies(
        state.upper[r][q] == state.seq_len[r][q])),
        "U2: exact on prefill rows, and on every row outside async spec decode")
    machine.always("U3_bounded_slack", rows(lambda r, q: slack(r, q) <= state.allowed[r][q]),
                   "U3: bound - seq_len <= Σ drafts of the request's steps unprocessed when this step was scheduled")
    machine.always("U3_within_max_model_len", rows(lambda r, q: state.upper[r][q] <= sizes.max_model_len + sizes.drafts),
                   "U3 (corollary): the bound stays within max_model_len + num_spec")
    machine.always("U4_prefill_progress", rows(lambda r, q: conjunction(
        state.seen_prefill_tokens[r][q] == minimum(state.seen_mirror[r][q], state.seen_prefill_len[r][q]),
        state.prefilling[r][q] == (state.sent[r][q] < state.seen_prefill_len[r][q]))),
        "U4: num_computed_prefill_tokens = min(mirror, prefill_len); is_prefilling iff the scheduler's pre-step value < prefill_len")
    machine.always("U5_padding", all_of(Rank, lambda r: state.built[r].implies(conjunction(
        all_of(Row, lambda row: (row >= count).implies(state.upper[r][row] == 0)),
        state.max_seq_len[r] == maximum(*[if_then_else(state.real[r][q], state.upper[r][q], 0) for q in range(count)])))),
        "U5: padded rows have bound 0; max_seq_len equals the maximum over real rows")
    machine.always("U6_mirror_converges", rows(lambda r, q: state.alone[r][q].implies(state.seen_mirror[r][q] == state.seen_gpu[r][q])),
                   "U6: a request with no step in flight when scheduled has mirror == GPU num_computed_tokens")
    finished = all_of(Request, lambda q: state.status[q] == FINISHED)
    machine.set_final(finished & state.batch.is_empty())
    machine.sometimes("all_finished", finished, "every request can run to max_tokens")
    if sizes.asynchronous and sizes.drafts > 0:
        machine.sometimes("optimistic_bound", any_of(Rank, lambda r: disjunction(*[state.built[r] & state.real[r][q] & (slack(r, q) > 0) for q in range(count)])),
                          "async spec decode: a bound above the GPU seq_len (drafts of the step in flight)")
    if fixed:
        for name, predicate in invariants(state):
            machine.strengthen(predicate)
            if invariants_as_properties:
                machine.always(f"invariant_{name}", predicate, "strengthening invariant for k-induction")
    declared = {action.name for action in machine.actions}
    machine.mirror({name: text for name, text in sources(variant).items() if name in declared})
    return machine


PROTOCOL = Protocol(
    name="computed-tokens",
    title="V2 runner CPU mirror of num_computed_tokens and seq_lens_cpu_upper_bound",
    change="vLLM PRs #40654, #42202",
    variants=(
        VariantSpec(PRE_FIX, "the mirror advances by num_scheduled in postprocess (drifts by every rejected draft)", "vLLM v0.21.0"),
        VariantSpec(POST_FIX, "update_requests refreshes the mirror from the scheduler each step", "vLLM v0.22.0"),
    ),
    parameters=(
        ParameterSpec("ranks", 1, "pipeline stages, each with its own runner and mirror", minimum=1, maximum=3),
        ParameterSpec("requests", 1, "requests, all waiting at the start", minimum=1, maximum=3),
        ParameterSpec("prefill_len", 1, "prompt tokens of each request", minimum=1, maximum=8),
        ParameterSpec("budget", 2, "max_num_scheduled_tokens per step (chunked prefill below prefill_len)", minimum=1, maximum=8),
        ParameterSpec("drafts", 1, "num_speculative_tokens (MTP k)", minimum=0, maximum=3),
        ParameterSpec("max_tokens", 4, "output tokens after which a request stops", minimum=1, maximum=8),
        ParameterSpec("max_model_len", 7, "max_model_len (default: prefill_len + max_tokens + drafts + 1, so that the "
                      "context limit does not cut the last drafts)", minimum=2, maximum=32,
                      derived=lambda values: values["prefill_len"] + values["max_tokens"] + values["drafts"] + 1),
        ParameterSpec("async_scheduling", 1, "1: AsyncScheduler with the batch queue; 0: EngineCore.step", minimum=0, maximum=1),
        ParameterSpec("padded_rows", 0, "rows of FULL CUDA-graph request padding", minimum=0, maximum=2),
    ),
    instances=(
        InstanceSpec(
            "seed",
            "PR #42202: one request, MTP k=1 with async scheduling; two decode steps reject their draft and the "
            "third step's bound exceeds the truth by more than the drafts in flight",
            {},
            {PRE_FIX: "violated", POST_FIX: "holds"},
        ),
        InstanceSpec(
            "sync-scheduling",
            "the seed with async_scheduling=0: the bound must be exact; pre-fix it is off after one rejected draft",
            {"async_scheduling": 0, "max_tokens": 3},
            {PRE_FIX: "violated", POST_FIX: "holds"},
        ),
        InstanceSpec(
            "chunked-prefill",
            "a prompt of 3 tokens in chunks of at most 2, then MTP decode, with one padded row",
            {"prefill_len": 3, "padded_rows": 1},
            {PRE_FIX: "violated", POST_FIX: "holds"},
        ),
        InstanceSpec(
            "pipeline",
            "two pipeline stages, each with its own mirror; the last samples and broadcasts",
            {"ranks": 2},
            {PRE_FIX: "violated", POST_FIX: "holds"},
        ),
        InstanceSpec(
            "context-limit",
            "the seed generating up to the context limit (max_model_len = prefill_len + max_tokens): pre-fix the "
            "bound exceeds max_model_len + num_spec",
            {"max_tokens": 6, "max_model_len": 7},
            {PRE_FIX: "violated", POST_FIX: "holds"},
        ),
        InstanceSpec(
            "sync-pipeline-early-drafts",
            "sync scheduling with two PP stages (batch queue of 2) and a chunked prompt: after the first chunk is "
            "updated from, post_step takes the drafts of the *last* sampled batch (the final chunk, still unprocessed), "
            "so the next step schedules the request while its final chunk is in flight and the bound is not exact",
            {"async_scheduling": 0, "ranks": 2, "prefill_len": 3, "max_tokens": 2},
            {PRE_FIX: "violated", POST_FIX: "violated"},
            finding="`EngineCore.step_with_batch_queue` (batch queue = pp_size without async scheduling), "
            "`EngineCore.post_step` -> `take_draft_token_ids` (ordered after the queued sample_tokens RPCs), "
            "V2 `DraftTokensHandler.get_draft_tokens` ([-1]*k for the last sampled batch), "
            "`Scheduler.update_draft_token_ids` (reads the latest `is_prefill_chunk`), `Scheduler.schedule` (v0.22.0)",
        ),
    ),
    build=build,
    rank_parameter="ranks",
)
