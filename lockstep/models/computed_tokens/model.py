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
the source wins; the notes on the properties U3, U5 and U6 are in ``properties.py``, those on the
engine's order and on synchronous drafts in ``scheduler.py``, the rank order in ``runner.py``):
- ``max_concurrent_batches`` is ``MultiprocExecutor``'s in v0.21.0/v0.22.0 (2 if PP = 1 and
  async, else pp_size); protocols.md's "one step in flight" is the PP = 1 case.
- k-induction: ``invariants.py`` states how the scheduler's count, the queued records and each
  rank's GPU value hang together; with them U1, U3 and U4 of ``post-fix`` are 1-inductive.
- Later releases: ``releases.py`` maps v0.20.0-v0.33.0 to the two variants (with one pipeline
  stage nothing after v0.22.0 changes what the model has); ``docs/models/computed-tokens.md`` is
  the ledger of what the model leaves out, including the v0.23.0 ``PPHandler`` path of ranks > 1.
- Not modelled: preemption and resumption (``prefill_len > prompt_len``), prefix caching and
  KV-connector loads (``num_computed_tokens > 0`` at admission), EOS/stop strings (requests
  stop at ``max_tokens``), structured output, removal of finished requests from the runner,
  ``long_prefill_token_threshold``, the order of rows (sorted by ``num_scheduled``; every
  property is per row).
"""

from __future__ import annotations

from collections.abc import Mapping

from lockstep.models.computed_tokens.properties import add_properties, strengthen
from lockstep.models.computed_tokens.releases import BISECTION
from lockstep.models.computed_tokens.runner import add_sample_tokens, execute_model, pp_receive
from lockstep.models.computed_tokens.scheduler import schedule, update_from_output
from lockstep.models.computed_tokens.sources import PROPERTY_SOURCES, sources
from lockstep.models.computed_tokens.state import POST_FIX, PRE_FIX, declare
from lockstep.spec.delay import bound_delay, max_delay_parameter
from lockstep.spec.machine import Machine
from lockstep.spec.protocol import InstanceSpec, ParameterSpec, Protocol, VariantSpec

__all__ = ["POST_FIX", "PRE_FIX", "PROTOCOL", "build"]


def build(variant: str, parameters: Mapping[str, int], *, invariants_as_properties: bool = False) -> Machine:
    """The computed-tokens machine for ``variant`` at the given parameter values.

    ``invariants_as_properties`` also declares the post-fix strengthening invariants as
    ``always`` properties (tests check them over every reachable state)."""
    machine = Machine(f"computed-tokens/{variant}")
    state = declare(machine, parameters)
    # the scheduler and the engine
    machine.add(schedule, state)
    machine.add(update_from_output, state)
    # every rank's V2 runner
    machine.add(execute_model, state, variant, rank=state.Rank)
    add_sample_tokens(machine, state, variant)  # the last rank: one parameter per request
    if state.sizes.ranks > 1:
        machine.add(pp_receive, state, variant, rank=state.Rank)
    # properties
    add_properties(machine, state)
    if variant == POST_FIX:
        strengthen(machine, state, invariants_as_properties)
    declared = {action.name for action in machine.actions}
    machine.mirror({name: text for name, text in sources(variant).items() if name in declared})
    machine.cite(PROPERTY_SOURCES)
    bound_delay(machine, parameters["max_delay"], ["engine.batch", "engine.results"])
    return machine


PROTOCOL = Protocol(
    name="computed-tokens",
    title="V2 runner CPU mirror of num_computed_tokens and seq_lens_cpu_upper_bound",
    change="vLLM PRs #40654, #42202",
    variants=(
        VariantSpec(
            PRE_FIX,
            "the mirror advances by num_scheduled in postprocess (drifts by every rejected draft)",
            "vLLM v0.21.0",
        ),
        VariantSpec(POST_FIX, "update_requests refreshes the mirror from the scheduler each step", "vLLM v0.22.0"),
    ),
    parameters=(
        ParameterSpec("ranks", 1, "pipeline stages, each with its own runner and mirror", minimum=1, maximum=3),
        ParameterSpec("requests", 1, "requests, all waiting at the start", minimum=1, maximum=3),
        ParameterSpec("prefill_len", 1, "prompt tokens of each request", minimum=1, maximum=8),
        ParameterSpec(
            "budget", 2, "max_num_scheduled_tokens per step (chunked prefill below prefill_len)", minimum=1, maximum=8
        ),
        ParameterSpec("drafts", 1, "num_speculative_tokens (MTP k)", minimum=0, maximum=3),
        ParameterSpec("max_tokens", 4, "output tokens after which a request stops", minimum=1, maximum=8),
        ParameterSpec(
            "max_model_len",
            7,
            "max_model_len (default: prefill_len + max_tokens + drafts + 1, so that the "
            "context limit does not cut the last drafts)",
            minimum=2,
            maximum=32,
            derived=lambda values: values["prefill_len"] + values["max_tokens"] + values["drafts"] + 1,
        ),
        ParameterSpec(
            "async_scheduling", 1, "1: AsyncScheduler with the batch queue; 0: EngineCore.step", minimum=0, maximum=1
        ),
        ParameterSpec("padded_rows", 0, "rows of FULL CUDA-graph request padding", minimum=0, maximum=2),
        max_delay_parameter(),
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
            "updated from, post_step takes the drafts of the *last* sampled batch (the final chunk, still "
            "unprocessed), "
            "so the next step schedules the request while its final chunk is in flight and the bound is not exact",
            {"async_scheduling": 0, "ranks": 2, "prefill_len": 3, "max_tokens": 2},
            {PRE_FIX: "violated", POST_FIX: "violated"},
            finding="`EngineCore.step_with_batch_queue` (batch queue = pp_size without async scheduling), "
            "`EngineCore.post_step` -> `take_draft_token_ids` (ordered after the queued sample_tokens RPCs), "
            "V2 `DraftTokensHandler.get_draft_tokens` ([-1]*k for the last sampled batch), "
            "`Scheduler.update_draft_token_ids` (reads the latest `is_prefill_chunk`), `Scheduler.schedule` (v0.22.0)",
            finding_properties=("U2_exact",),
            upstream="related: issue #52071 and PR #52179 (open), the V2 PP form from 0.23.0",
        ),
    ),
    build=build,
    rank_parameter="ranks",
    release_table=tuple((release, variant) for release, variant, _ in BISECTION),
)
