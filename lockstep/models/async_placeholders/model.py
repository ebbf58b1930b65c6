"""async-placeholders: the -1 placeholders of async scheduling and their repair (vLLM PR #42938).

Mirrors vLLM **v0.21.0** (``pre-fix``: forward scan) and **v0.22.0** (``post-fix``: backward
scan): ``vllm/v1/worker/gpu_input_batch.py`` (``InputBatch.add_request``,
``set_async_sampled_token_ids``, ``update_async_output_token_ids``, ``_make_sampling_metadata``),
``vllm/v1/worker/gpu_model_runner.py`` (``_update_states``: the optimistic spec-decode extend,
the trim, the rebuild of resumed requests; ``_sample``; ``_bookkeeping_sync``;
``sample_tokens``), ``vllm/v1/core/sched/scheduler.py`` (``_make_cached_request_data``,
``update_from_output``) and ``vllm/v1/core/sched/async_scheduler.py``
(``_update_after_schedule``, ``_update_request_with_output``), ``vllm/v1/engine/core.py``
(``step_with_batch_queue``, a queue of two steps).

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

Actors: the scheduler (``schedule``, ``update_from_output``, a KV-load failure) and the last
rank's runner thread, which handles step N in three actions: ``update_states`` (A2, trim,
rebuild, batch membership), ``sample`` (the repair) and ``bookkeeping`` (A1, the previous-row
map, the sampled-ids registration, the reply). One request is tracked; the other requests of
the batch show only through one bit per step, ``history``: whether any row needs output ids
(``sampling_metadata.output_token_ids`` non-empty), which also decides whether that step's
sampled ids are registered for the next repair (``set_async_sampled_token_ids``).

Tokens carry their identity: the output token at position p is the value p, so "the list holds
the right token at the right place" is a property (``tokens_aligned``); ``PROMPT`` stands for a
prompt token. The list is a bounded array: ``Position -> Token`` plus a length, with unused slots
holding -1, so the scans of ``scans.py`` (the same folds the lemmas use) run over the whole
array: padding with -1 changes neither the first -1 of a list that ends with -1 nor its trailing
run. Each repair records what the scan read (``repair.scan_steps``) and the run it found.

Properties (protocols.md P3(d)); a violation of K1/K2 in post-fix is a finding or a model error:
- I1 ``suffix_form``: no -1 precedes a real token. I2 ``repair_postcondition``: after a repair
  no -1 remains, the length is first_placeholder + k and the written values are the first k
  valid ids of the previous row. I3 ``scans_agree``: on a suffix-form list ending with -1 both
  scans return the same index. I4 ``batch_aliases_request_list``. ``scan_cost_bounded``: a
  repair reads at most 1 + (length of the trailing -1 run) elements.
- K1 ``list_matches_scheduler_count``: after ``_update_states`` the list is exactly as long as
  the ``num_output_tokens`` the scheduler sent (the trim only shortens; nothing lengthens).
  K2 ``tokens_aligned``: every real token sits at its own output position. K3
  ``placeholders_nonnegative`` (the scheduler's ``assert num_output_placeholders >= 0``).

Faithfulness notes (read from the v0.21.0/v0.22.0 wheels; where they differ from protocols.md,
the source wins):
- The cost bound is exact for the backward scan; the forward scan reads first_placeholder + 1
  elements, so it breaks the bound once the real tokens before the run outnumber the run, not
  at the first real token: the seed's first violation is the list [0, 1, -1] (3 reads > 2).
- v0.21.0's ``_make_sampling_metadata`` needs output ids ``or not thinking_budget_tracks_reqs``
  (inverted; v0.22.0 drops the ``not``): in v0.21.0 the repair runs on almost every step, and a
  step without it needs a thinking budget that tracks requests. ``history`` is a free choice in
  both variants when ``history_toggles`` is 1, which over-approximates v0.21.0 by that much.
- The repair's "empty row" skip cannot fire: rows come from a tensor of width >= 1, and the
  first id of a non-discarded row is valid (the rejection sampler always emits one token). The
  model keeps the test in ``sample`` but never samples an empty row.
- KV-load failure: in v0.22.0 ``update_from_output`` skips the failed request before
  ``_update_request_with_output`` and truncates ``num_computed_tokens``; no line there drops
  output tokens. The model follows the runner's comment in ``_update_states`` ("some output
  tokens were discarded due to a sync-KV-load failure"): between steps the scheduler drops the
  last ``discarded`` outputs, so the next ``num_output_tokens`` is below the runner's length.
- A rebuild (``req_index is None``) takes the last ``num_output_tokens`` of the scheduler's
  ``all_token_ids`` (prompt + outputs); ``num_output_tokens`` counts placeholders too, so a
  rebuild with placeholders in flight would copy prompt tokens (K2 would show it). With a batch
  queue of two, a request that missed step N has no step in flight when it is scheduled again.
- A3 (non-last ranks append -1 in ``_pp_receive_prev_sampled_token_ids_to_input_batch``) is left
  out: those lists are never repaired, only appended to and rebuilt, so they are real* (-1)*.
  Not modelled: the forced preemption of ``reset_prefix_cache`` (``async_tokens_to_discard``),
  max_tokens/stop (a step is scheduled only while the outputs fit ``max_tokens``), structured
  output, ngram-GPU drafts, several tracked requests.
"""

from __future__ import annotations

from collections.abc import Mapping

from lockstep.models.async_placeholders.scans import BACKWARD, FORWARD, PLACEHOLDER, Scan, first_placeholder, scan_cost
from lockstep.models.async_placeholders.sources import sources
from lockstep.spec.machine import Machine, Step
from lockstep.spec.protocol import InstanceSpec, ParameterSpec, Protocol, VariantSpec
from lockstep.spec.sorts import BOOL, IndexSort, MapSort, SequenceSort, enum, integers, record
from lockstep.spec.terms import (
    Term,
    all_of,
    conjunction,
    constant,
    count_of,
    if_then_else,
    map_of,
    maximum,
    minimum,
    record_of,
)

PRE_FIX, POST_FIX = "pre-fix", "post-fix"
SCANS: dict[str, Scan] = {PRE_FIX: FORWARD, POST_FIX: BACKWARD}

Phase = enum("Phase", ["IDLE", "UPDATED", "SAMPLED"])
Kind = enum("Kind", ["RUN", "SKIP", "PREEMPT"])  # scheduled; running but not scheduled; preempted
IDLE, UPDATED, SAMPLED = (constant(member, Phase) for member in Phase.members)
RUN = constant("RUN", Kind)

RUNTIME_ACTIONS: dict[str, str] = {name: name for name in (
    "schedule", "update_from_output", "kv_load_failure", "update_states", "sample", "bookkeeping",
)}
"""Runtime event -> model action (``lockstep.impl.async_placeholders`` records these names)."""


def build(variant: str, parameters: Mapping[str, int]) -> Machine:
    """The async-placeholders machine for ``variant`` at the given parameter values."""
    scan = SCANS[variant]
    capacity, spec = parameters["max_tokens"], parameters["num_spec_tokens"]
    toggles, skips = parameters["history_toggles"] == 1, parameters["preemptions"] == 1
    chunking, failures = parameters["chunked_prefill"] == 1, parameters["kv_load_failures"]
    machine = Machine(f"async-placeholders/{variant}")
    PROMPT = capacity  # a prompt token (outputs are 0 .. capacity - 1)
    Position = IndexSort("Position", capacity)
    Token = integers(PLACEHOLDER, PROMPT)
    Count = integers(0, capacity)
    Drafts = integers(0, spec)
    RowCount = integers(0, spec + 1)
    Scheduled = record("Scheduled", kind=Kind, chunk=BOOL, drafts=Drafts, sent=Count, outputs=Count, history=BOOL)
    Result = record("Result", kind=Kind, chunk=BOOL, drafts=Drafts, accepted=Drafts)

    # --------------------------------------------------------------------------------- scheduler
    outputs = machine.variable("scheduler.outputs", Count, 0, "request.num_output_tokens: outputs the scheduler knows")
    placeholders = machine.variable("scheduler.placeholders", integers(-capacity, capacity), 0,
                                    "request.num_output_placeholders: outputs scheduled, not yet processed")
    prefilling = machine.variable("scheduler.prefilling", BOOL, True, "the next scheduled step is (re)computing the prompt")
    to_runner = machine.variable("queue.scheduled", SequenceSort(Scheduled, 2), (), "steps scheduled, not yet executed")
    to_scheduler = machine.variable("queue.executed", SequenceSort(Result, 2), (), "steps executed, output not yet processed")
    kv_failures = machine.variable("scheduler.kv_load_failures", integers(0, failures), 0)

    # ------------------------------------------------------------------------- last-rank runner
    tokens = machine.variable("runner.output_token_ids", MapSort(Position, Token), tuple(PLACEHOLDER for _ in range(capacity)),
                              "CachedRequestState.output_token_ids (unused slots hold -1)")
    length = machine.variable("runner.length", Count, 0, "len(output_token_ids)")
    in_batch = machine.variable("runner.in_batch", BOOL, False, "the request has a row of the persistent batch")
    alias = machine.variable("runner.batch_aliases_list", BOOL, True, "req_output_token_ids[row] is the request's list")
    draft_length = machine.variable("runner.prev_num_draft_len", Drafts, 0)
    phase = machine.variable("runner.phase", Phase, 0)
    prev_row = machine.variable("runner.has_prev_row", BOOL, False, "the request is in prev_req_id_to_index")
    prev_start = machine.variable("runner.prev_row_start", Count, 0, "first output position of the previous row")
    prev_count = machine.variable("runner.prev_row_count", RowCount, 0, "valid ids of the previous row")
    sampled_cpu = machine.variable("runner.sampled_token_ids_cpu", BOOL, False, "the previous step's ids are registered")
    generated = machine.variable("runner.generated", Count, 0, "ghost: output tokens sampled so far")
    repaired = machine.variable("repair.done", BOOL, False)
    repair_start = machine.variable("repair.first_placeholder", Count, 0)
    repair_written = machine.variable("repair.written", RowCount, 0)
    repair_run = machine.variable("repair.run_length", Count, 0, "the trailing -1 run the repair replaced")
    repair_steps = machine.variable("repair.scan_steps", integers(0, capacity + 1), 0, "list elements the scan read")

    slots = [tokens[position] for position in range(capacity)]
    last = tokens[maximum(0, minimum(capacity - 1, length - 1))]
    ends_with_placeholder = (length > 0) & (last == PLACEHOLDER)

    def list_of(new_length: Term | int, value: object) -> Term:
        """A list of ``new_length`` tokens, ``value(position)`` each, unused slots -1."""
        return map_of(Position, lambda p: if_then_else(p < new_length, value(p), PLACEHOLDER), Token)  # type: ignore[operator]

    # ---------------------------------------------------------------------------- scheduler side
    @machine.action(actor="scheduler", kind=Kind, chunk=BOOL, drafts=Drafts, history=BOOL)
    def schedule(kind: Term, chunk: Term, drafts: Term, history: Term) -> Step:
        """schedule(): RUN sends num_output_tokens = outputs + placeholders, then adds 1 + drafts
        placeholders unless the step is a non-final prefill chunk (_update_after_schedule)."""
        run = kind == RUN
        produces = run & ~chunk
        guard = conjunction(
            to_runner.length() + to_scheduler.length() < 2,  # the batch queue holds two steps
            produces.implies(outputs + placeholders + 1 + drafts <= capacity),
            chunk.implies(run & prefilling) if chunking else ~chunk,
            (drafts > 0).implies(produces & ~prefilling),
            history if not toggles else True,
        )
        if not skips:
            guard = conjunction(guard, run)
        entry = record_of(Scheduled, kind=kind, chunk=chunk, drafts=drafts, sent=outputs + placeholders,
                          outputs=outputs, history=history)
        return Step(guard, {
            to_runner: to_runner.append(entry),
            placeholders: if_then_else(produces, placeholders + 1 + drafts, placeholders),
            prefilling: if_then_else(kind == "PREEMPT", True, if_then_else(produces, False, prefilling)),
        })

    @machine.action(actor="scheduler")
    def update_from_output() -> Step:
        """update_from_output: accepted + 1 new tokens; placeholders lose the rejected drafts and the new tokens."""
        head = to_scheduler.head()
        produced = (head.field("kind") == RUN) & ~head.field("chunk")
        accepted, drafts = head.field("accepted"), head.field("drafts")
        rejected_taken = if_then_else((drafts > 0) & (placeholders > 0), placeholders - (drafts - accepted), placeholders)
        return Step(~to_scheduler.is_empty(), {
            to_scheduler: to_scheduler.tail(),
            outputs: if_then_else(produced, outputs + accepted + 1, outputs),
            placeholders: if_then_else(produced, rejected_taken - (accepted + 1), placeholders),
        })

    if failures:
        @machine.action(actor="scheduler", discarded=integers(1, 2))
        def kv_load_failure(discarded: Term) -> Step:
            """A sync KV-load failure discards the last outputs; the request recomputes (see module doc)."""
            idle = conjunction(to_runner.is_empty(), to_scheduler.is_empty(), phase == IDLE)
            return Step(conjunction(idle, kv_failures < failures, outputs >= discarded), {
                outputs: outputs - discarded,
                generated: generated - discarded,
                prefilling: True,
                kv_failures: kv_failures + 1,
            })

    # ------------------------------------------------------------------------------- runner side
    current = to_runner.head()
    scheduled_here = current.field("kind") == RUN
    sent = current.field("sent")

    @machine.action(actor="runner")
    def update_states() -> Step:
        """_update_states: drop an unscheduled row; A2 extend; trim to num_output_tokens; rebuild a re-added request."""
        stays = scheduled_here & in_batch
        extended = length + if_then_else(stays, draft_length, 0)  # A2: optimistic -1 per previous draft
        trimmed = minimum(extended, sent)
        # A re-added request (req_index is None) gets the last `sent` ids of prompt + outputs.
        rebuilt = list_of(sent, lambda p: if_then_else(p < sent - current.field("outputs"), PROMPT,
                                                       p - (sent - current.field("outputs"))))
        rebuild = scheduled_here & ~in_batch & (sent > 0)
        kept = list_of(trimmed, lambda p: tokens[p])
        return Step((phase == IDLE) & ~to_runner.is_empty(), {
            phase: UPDATED,
            tokens: if_then_else(rebuild, rebuilt, if_then_else(scheduled_here, kept, tokens)),
            length: if_then_else(rebuild, sent, if_then_else(scheduled_here, trimmed, length)),
            in_batch: scheduled_here,
            alias: if_then_else(scheduled_here, True, alias),  # add_request re-aliases the new list
            # update_req_spec_token_ids; a row that left the batch is reset on its return anyway.
            draft_length: if_then_else(scheduled_here, current.field("drafts"), 0),
        })

    @machine.action(actor="runner")
    def sample() -> Step:
        """_sample → update_async_output_token_ids: replace the trailing -1 run by the previous row's ids."""
        applies = conjunction(sampled_cpu, current.field("history"), scheduled_here, prev_row,
                              ends_with_placeholder, prev_count > 0)
        start = first_placeholder(scan, slots, length)
        run = length - start
        written = minimum(prev_count, run)
        repaired_list = list_of(start + written, lambda p: if_then_else(p < start, tokens[p], prev_start + (p - start)))
        return Step(phase == UPDATED, {
            phase: SAMPLED,
            tokens: if_then_else(applies, repaired_list, tokens),
            length: if_then_else(applies, start + written, length),
            repaired: applies,
            repair_start: if_then_else(applies, start, 0),
            repair_written: if_then_else(applies, written, 0),
            repair_run: if_then_else(applies, length - first_placeholder(BACKWARD, slots, length), 0),
            repair_steps: if_then_else(applies, scan_cost(scan, slots, length), 0),
        })

    @machine.action(actor="runner", accepted=Drafts)
    def bookkeeping(accepted: Term) -> Step:
        """_bookkeeping_sync: A1 appends one -1; prev_req_id_to_index; set_async_sampled_token_ids; reply."""
        produced = scheduled_here & ~current.field("chunk")
        result = record_of(Result, kind=current.field("kind"), chunk=current.field("chunk"),
                           drafts=current.field("drafts"), accepted=accepted)
        return Step((phase == SAMPLED) & (accepted <= current.field("drafts")), {
            phase: IDLE,
            to_runner: to_runner.tail(),
            to_scheduler: to_scheduler.append(result),
            length: if_then_else(produced, length + 1, length),  # the -1 lands in an unused slot, already -1
            prev_row: produced,
            prev_start: if_then_else(produced, generated, prev_start),
            prev_count: if_then_else(produced, accepted + 1, prev_count),
            generated: if_then_else(produced, generated + accepted + 1, generated),
            sampled_cpu: current.field("history"),
            repaired: False, repair_start: 0, repair_written: 0, repair_run: 0, repair_steps: 0,
        })

    # -------------------------------------------------------------------------------- properties
    def is_real(p: Term) -> Term:
        return (p < length) & (tokens[p] != PLACEHOLDER)

    machine.set_final(conjunction(to_runner.is_empty(), to_scheduler.is_empty(), phase == IDLE,
                                  outputs + placeholders + 1 > capacity))
    machine.always("suffix_form", all_of(Position, lambda p: (tokens[p] == PLACEHOLDER).implies(
        all_of(Position, lambda q: (q > p).implies(tokens[q] == PLACEHOLDER)))),
        "I1: every list is real* (-1)*: no -1 precedes a real token")
    machine.always("unused_slots_empty", all_of(Position, lambda p: (p >= length).implies(tokens[p] == PLACEHOLDER)),
                   "model sanity: slots past the length hold -1")
    machine.always("repair_postcondition", repaired.implies(conjunction(
        count_of(Position, lambda p: (p < length) & (tokens[p] == PLACEHOLDER)) == 0,
        length == repair_start + repair_written,
        all_of(Position, lambda p: ((p >= repair_start) & (p < length)).implies(tokens[p] == prev_start + (p - repair_start))),
    )), "I2: after a repair no -1 remains, len = first_placeholder + k, and the k written ids are the previous row's")
    suffix = all_of(Position, lambda p: ((p + 1 < capacity) & (tokens[p] == PLACEHOLDER)).implies(
        tokens[minimum(p + 1, capacity - 1)] == PLACEHOLDER))
    machine.always("scans_agree", (suffix & ends_with_placeholder).implies(
        first_placeholder(FORWARD, slots, length) == first_placeholder(BACKWARD, slots, length)),
        "I3: on a suffix-form list ending with -1 the forward and backward scans return the same index")
    machine.always("batch_aliases_request_list", in_batch.implies(alias),
                   "I4: the batch's req_output_token_ids row is the request's own list object")
    machine.always("scan_cost_bounded", repair_steps <= 1 + repair_run,
                   "cost: a repair reads at most 1 + (length of the trailing -1 run) list elements")
    machine.always("list_matches_scheduler_count", ((phase == UPDATED) & scheduled_here).implies(length == sent),
                   "K1: after _update_states the list is as long as the scheduler's num_output_tokens")
    machine.always("tokens_aligned", all_of(Position, lambda p: is_real(p).implies(tokens[p] == p)),
                   "K2: every real token sits at its own output position")
    machine.always("placeholders_nonnegative", placeholders >= 0, "K3: num_output_placeholders >= 0")
    machine.sometimes("repaired", repaired & (repair_start > 0), "a repair after real tokens happens")
    sampled = (phase == SAMPLED) & scheduled_here
    waiting_repair = conjunction(sampled, current.field("history"), prev_row)
    if spec:
        machine.sometimes("fewer_drafts_accepted", repaired & (repair_written < repair_run),
                          "spec decode: fewer ids than optimistic placeholders; the excess is truncated")
    if failures:
        machine.sometimes("trim_left_no_placeholder", conjunction(waiting_repair, sampled_cpu, ~repaired, length > 0,
                                                                  last != PLACEHOLDER),
                          "after a KV-load failure's trim the list ends with a real token: the repair skips it")
    if failures and spec:
        machine.sometimes("more_ids_than_placeholders", repaired & (repair_written < prev_count),
                          "after a trim the previous row has more ids than the list has placeholders")
    if skips:
        machine.sometimes("rejoins_with_history", conjunction(phase == UPDATED, scheduled_here, ~prev_row, length > 0),
                          "a request that missed a step rejoins the batch with its rebuilt list")
    if chunking:
        machine.sometimes("discarded_chunk", sampled & current.field("chunk"), "a non-final prefill chunk's row is discarded")
    if toggles:
        machine.sometimes("repair_without_sampled_ids", conjunction(waiting_repair, ends_with_placeholder, ~sampled_cpu),
                          "the previous step registered no sampled ids: the repair is skipped, placeholders stay")
    declared = {action.name for action in machine.actions}
    machine.mirror({name: text for name, text in sources(variant).items() if name in declared})
    return machine


PROTOCOL = Protocol(
    name="async-placeholders",
    title="Async output placeholders and their repair",
    change="vLLM PR #42938",
    variants=(
        VariantSpec(PRE_FIX, "forward scan: first_placeholder = ids.index(-1)", "vLLM v0.21.0"),
        VariantSpec(POST_FIX, "backward scan over the trailing -1 run", "vLLM v0.22.0"),
    ),
    parameters=(
        ParameterSpec("max_tokens", 4, "output tokens the request may produce (the list's bound)", minimum=1, maximum=8),
        ParameterSpec("num_spec_tokens", 0, "drafts per step (async spec decode)", minimum=0, maximum=2),
        ParameterSpec("history_toggles", 0, "1: other rows decide per step whether output ids are needed", minimum=0, maximum=1),
        ParameterSpec("preemptions", 0, "1: the request may be skipped or preempted (rebuild on return)", minimum=0, maximum=1),
        ParameterSpec("chunked_prefill", 0, "1: (re)prefill may take non-final chunks (discarded rows)", minimum=0, maximum=1),
        ParameterSpec("kv_load_failures", 0, "sync KV-load failures that discard outputs", minimum=0, maximum=2),
    ),
    instances=(
        InstanceSpec("seed", "PR #42938: plain async decode with penalties; the forward scan reads the whole history",
                     {}, {PRE_FIX: "violated", POST_FIX: "holds"}),
        InstanceSpec("spec-decode", "async spec decode, two drafts: optimistic placeholders, fewer accepted",
                     {"num_spec_tokens": 2}, {PRE_FIX: "violated", POST_FIX: "holds"}),
        InstanceSpec("kv-load-failure", "spec decode with a sync KV-load failure that discards outputs: trims",
                     {"num_spec_tokens": 1, "kv_load_failures": 1}, {PRE_FIX: "violated", POST_FIX: "holds"}),
        InstanceSpec("preemption", "skipped and preempted steps, chunked re-prefill, rebuilt lists",
                     {"preemptions": 1, "chunked_prefill": 1}, {PRE_FIX: "violated", POST_FIX: "holds"}),
        InstanceSpec("all-operations", "every operation of P3(b) at once, output ids always needed",
                     {"num_spec_tokens": 1, "preemptions": 1, "chunked_prefill": 1, "kv_load_failures": 1},
                     {PRE_FIX: "violated", POST_FIX: "holds"}),
        InstanceSpec(
            "history-toggle",
            "the rows needing output ids come and go: a step without them registers no sampled ids, the next "
            "repair is skipped, and the repair after that writes one row over two steps' placeholders",
            {"history_toggles": 1},
            {PRE_FIX: "violated", POST_FIX: "violated"},
            finding="`InputBatch.set_async_sampled_token_ids` (None when no row needs output ids), "
            "`update_async_output_token_ids` (k = min(num_sampled, num_placeholders) over an accumulated run, then "
            "truncation), `_make_sampling_metadata` (v0.22.0 gates output ids per step), `_update_states` (the trim "
            "only shortens) (v0.22.0)",
        ),
    ),
    build=build,
    rank_parameter=None,
)
