"""async-placeholders: the -1 placeholders of async scheduling and their repair (vLLM PR #42938).

Mirrors vLLM **v0.21.0** (``pre-fix``: forward scan), **v0.22.0** (``post-fix``: backward
scan, to v0.26.x) and **v0.27.0** (``v0.27.0``, to v0.33.0: preemption zeroes the placeholders and
in-flight output is delivered stale; ``releases.py`` maps every release from v0.19.0,
``docs/models/async-placeholders.md`` is the ledger of what the model leaves out):
``vllm/v1/worker/gpu_input_batch.py`` (``InputBatch.add_request``,
``set_async_sampled_token_ids``, ``update_async_output_token_ids``, ``_make_sampling_metadata``),
``vllm/v1/worker/gpu_model_runner.py`` (``_update_states``: the optimistic spec-decode extend,
the trim, the rebuild of resumed requests; ``_sample``; ``_bookkeeping_sync``;
``sample_tokens``), ``vllm/v1/core/sched/scheduler.py`` (``_make_cached_request_data``,
``update_from_output``) and ``vllm/v1/core/sched/async_scheduler.py``
(``_update_after_schedule``, ``_update_request_with_output``), ``vllm/v1/engine/core.py``
(``step_with_batch_queue``, ``batch_queue`` steps in flight: 2, or ``pp_size`` with PP).

The story. With async scheduling the engine schedules step N+1 before step N's sampled tokens
reach the CPU. The last pipeline rank's runner keeps, per request, ``output_token_ids``: the
tokens generated so far, where a token that is still on the GPU is the sentinel -1. Every
sampled step appends one -1 (``_bookkeeping_sync``, A1); with spec decode the next step first
appends one -1 per draft, assuming all were accepted (``_update_states``, A2). When a request in
the batch needs its history (penalties, bad words, a logits processor, a thinking budget), the
next ``_sample`` replaces the trailing -1 run by the ids copied back from the previous step
(``update_async_output_token_ids``, "the repair"). To find where the run begins, v0.21.0 calls
``ids.index(-1)``: it reads the whole history, every step, for every row. PR #42938 walks back
from the end instead, reading the run and one token more. The two agree on every list of the
form real* (-1)+ (``lemmas.py`` proves it for every length), so the PR is a pure speed-up *if*
placeholders always form a suffix (I1) and the list stays aligned with the scheduler's counts.

Actors: the scheduler (``scheduler.py``: ``schedule``, ``update_from_output``, a KV-load
failure) and the last rank's runner thread (``runner.py``), which handles step N in three
actions: ``update_states`` (A2, trim, rebuild, batch membership), ``sample`` (the repair) and
``bookkeeping`` (A1, the previous-row map, the sampled-ids registration, the reply). One request
is tracked; the other requests of the batch show only through one bit per step, ``history``:
whether any row needs output ids (``sampling_metadata.output_token_ids`` non-empty), which also
decides whether that step's sampled ids are registered for the next repair
(``set_async_sampled_token_ids``). ``state.py`` declares the state they share.

Tokens carry their identity: the output token at position p is the value p, so "the list holds
the right token at the right place" is a property (``tokens_aligned``); ``Sizes.prompt`` stands for a
prompt token. The list is a bounded array: ``Position -> Token`` plus a length, with unused slots
holding -1, so the scans of ``scans.py`` (the same folds the lemmas use) run over the whole
array: padding with -1 changes neither the first -1 of a list that ends with -1 nor its trailing
run. Each repair records what the scan read (``repair.scan_steps``) and the run it found.

Properties (protocols.md P3(d), ``properties.py``): I1 ``suffix_form``, I2
``repair_postcondition``, I3 ``scans_agree``, I4 ``batch_aliases_request_list``,
``scan_cost_bounded``, and K1 ``list_matches_scheduler_count``, K2 ``tokens_aligned``, K3
``placeholders_nonnegative``, ``placeholders_count_in_flight`` (and, in ``v0.27.0``,
``stale_output_drains``); a violation of K1/K2 in post-fix is a finding or a model error. The
ledger ``docs/models/async-placeholders.md`` names each property's source line.

Faithfulness notes (read from the v0.21.0/v0.22.0 wheels; where they differ from protocols.md,
the source wins; the notes on one actor or property are in its module):
- v0.21.0's ``_make_sampling_metadata`` needs output ids ``or not thinking_budget_tracks_reqs``
  (inverted; v0.22.0 drops the ``not``): in v0.21.0 the repair runs on almost every step, and a
  step without it needs a thinking budget that tracks requests. ``history`` is a free choice in
  both variants when ``history_toggles`` is 1, which over-approximates v0.21.0 by that much.
- A3 (non-last ranks append -1 in ``_pp_receive_prev_sampled_token_ids_to_input_batch``) is left
  out: those lists are never repaired, only appended to and rebuilt, so they are real* (-1)*.
  Not modelled: the forced preemption of ``reset_prefix_cache`` (``async_tokens_to_discard``),
  max_tokens/stop (a step is scheduled only while the outputs fit ``max_tokens``), structured
  output, ngram-GPU drafts, several tracked requests.
"""

from __future__ import annotations

from collections.abc import Mapping

from lockstep.models.async_placeholders.properties import add_invariants, add_witnesses, set_final
from lockstep.models.async_placeholders.releases import BISECTION, RELEASE_VARIANTS, V0_27_0
from lockstep.models.async_placeholders.runner import bookkeeping, sample, update_states
from lockstep.models.async_placeholders.scheduler import kv_load_failure, schedule, update_from_output
from lockstep.models.async_placeholders.sources import PROPERTY_SOURCES, sources
from lockstep.models.async_placeholders.state import POST_FIX, PRE_FIX, Kind, declare
from lockstep.spec.delay import bound_delay, max_delay_parameter
from lockstep.spec.machine import Machine
from lockstep.spec.protocol import InstanceSpec, ParameterSpec, Protocol, VariantSpec
from lockstep.spec.sorts import BOOL, integers

__all__ = ["POST_FIX", "PRE_FIX", "PROTOCOL", "V0_27_0", "build"]


def build(variant: str, parameters: Mapping[str, int]) -> Machine:
    """The async-placeholders machine for ``variant`` at the given parameter values."""
    machine = Machine(f"async-placeholders/{variant}")
    state = declare(machine, parameters, stale_output=variant == V0_27_0)
    # the scheduler
    machine.add(schedule, state, kind=Kind, chunk=BOOL, drafts=state.Drafts, history=BOOL)
    machine.add(update_from_output, state)
    if state.sizes.kv_load_failures:
        machine.add(kv_load_failure, state, discarded=integers(1, 2))
    # the last rank's runner
    machine.add(update_states, state)
    machine.add(sample, state, variant)
    machine.add(bookkeeping, state, accepted=state.Drafts)
    # properties
    set_final(machine, state)
    add_invariants(machine, state)
    add_witnesses(machine, state)
    declared = {action.name for action in machine.actions}
    machine.mirror({name: text for name, text in sources(variant).items() if name in declared})
    machine.cite(PROPERTY_SOURCES)
    bound_delay(machine, parameters["max_delay"], ["queue.scheduled", "queue.executed"])
    return machine


PROTOCOL = Protocol(
    name="async-placeholders",
    title="Async output placeholders and their repair",
    change="vLLM PR #42938",
    variants=(
        VariantSpec(PRE_FIX, "forward scan: first_placeholder = ids.index(-1)", "vLLM v0.21.0"),
        VariantSpec(POST_FIX, "backward scan over the trailing -1 run", "vLLM v0.22.0"),
        *RELEASE_VARIANTS,
    ),
    parameters=(
        ParameterSpec(
            "max_tokens", 4, "output tokens the request may produce (the list's bound)", minimum=1, maximum=8
        ),
        ParameterSpec("num_spec_tokens", 0, "drafts per step (async spec decode)", minimum=0, maximum=2),
        ParameterSpec(
            "history_toggles", 0, "1: other rows decide per step whether output ids are needed", minimum=0, maximum=1
        ),
        ParameterSpec(
            "preemptions", 0, "1: the request may be skipped or preempted (rebuild on return)", minimum=0, maximum=1
        ),
        ParameterSpec(
            "chunked_prefill", 0, "1: (re)prefill may take non-final chunks (discarded rows)", minimum=0, maximum=1
        ),
        ParameterSpec("kv_load_failures", 0, "sync KV-load failures that discard outputs", minimum=0, maximum=2),
        ParameterSpec(
            "batch_queue",
            2,
            "steps in flight: 2 (async, one stage); pp_size with the V1 runner and PP (v0.19.0-v0.30.x)",
            minimum=2,
            maximum=3,
        ),
        max_delay_parameter(),
    ),
    instances=(
        InstanceSpec(
            "seed",
            "PR #42938: plain async decode with penalties; the forward scan reads the whole history",
            {},
            {PRE_FIX: "violated", POST_FIX: "holds", V0_27_0: "holds"},
        ),
        InstanceSpec(
            "spec-decode",
            "async spec decode, two drafts: optimistic placeholders, fewer accepted",
            {"num_spec_tokens": 2},
            {PRE_FIX: "violated", POST_FIX: "holds", V0_27_0: "holds"},
        ),
        InstanceSpec(
            "kv-load-failure",
            "spec decode with a sync KV-load failure that discards outputs: trims",
            {"num_spec_tokens": 1, "kv_load_failures": 1},
            {PRE_FIX: "violated", POST_FIX: "holds", V0_27_0: "holds"},
        ),
        InstanceSpec(
            "preemption",
            "skipped and preempted steps, chunked re-prefill, rebuilt lists",
            {"preemptions": 1, "chunked_prefill": 1},
            {PRE_FIX: "violated", POST_FIX: "holds", V0_27_0: "holds"},
        ),
        InstanceSpec(
            "all-operations",
            "every operation of P3(b) at once, output ids always needed",
            {"num_spec_tokens": 1, "preemptions": 1, "chunked_prefill": 1, "kv_load_failures": 1},
            {PRE_FIX: "violated", POST_FIX: "holds", V0_27_0: "holds"},
        ),
        InstanceSpec(
            "pipeline-queue",
            "the V1 runner with three pipeline stages and async scheduling: three steps in flight; a running request "
            "skipped for a step is scheduled again while its first step's output is in flight, and the rebuild of "
            "its list takes a prompt token for that output",
            {"preemptions": 1, "batch_queue": 3},
            {PRE_FIX: "violated", POST_FIX: "violated", V0_27_0: "violated"},
            finding="`Scheduler._make_cached_request_data` (num_output_tokens counts the placeholder of a step in "
            "flight; all_token_ids for a request not scheduled in the previous step), `GPUModelRunner._update_states` "
            "(an unscheduled request leaves the batch; on its return `output_token_ids = "
            "resumed_token_ids[-num_output_tokens:]`), `EngineCore.step_with_batch_queue` (pp_size steps in flight) "
            "(V1 with PP >= 3 and async scheduling, v0.19.0-v0.30.x; v0.31.0 refuses it; upstream: not reported)",
            finding_properties=("tokens_aligned",),
            upstream="related: PR #41177 (closed, not merged) describes the gap; not reported",
        ),
        InstanceSpec(
            "history-toggle",
            "the rows needing output ids come and go: a step without them registers no sampled ids, the next "
            "repair is skipped, and the repair after that writes one row over two steps' placeholders",
            {"history_toggles": 1},
            {PRE_FIX: "violated", POST_FIX: "violated", V0_27_0: "violated"},
            finding="`InputBatch.set_async_sampled_token_ids` (None when no row needs output ids), "
            "`update_async_output_token_ids` (k = min(num_sampled, num_placeholders) over an accumulated run, then "
            "truncation), `_make_sampling_metadata` (v0.22.0 gates output ids per step), `_update_states` (the trim "
            "only shortens) (v0.22.0-v0.33.0; upstream: not reported, PR #27910 made rows without penalties tolerate "
            "-1, not this misalignment)",
            finding_properties=("tokens_aligned",),
            upstream="related: issue #52461 (open: the repair runs only when a row needs output ids) and PR #27910 "
            "(merged: rows without penalties tolerate -1); the misalignment not reported",
        ),
    ),
    build=build,
    rank_parameter=None,
    release_table=tuple((release, variant) for release, variant, _ in BISECTION),
)
