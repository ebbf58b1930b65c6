"""cudagraph-pp: CUDA graphs with pipeline parallelism in the V2 model runner (vLLM PR #35162).

Mirrors vLLM **v0.18.0** (``pre-fix``) and **v0.19.0** (``post-fix``):
``vllm/v1/worker/gpu/cudagraph_utils.py`` (``BatchExecutionDescriptor``, ``_is_compatible``,
``CudaGraphManager._init_candidates``/``capture``/``dispatch``/``run_fullgraph``,
``ModelCudaGraphManager.capture`` and its ``create_forward_fn``), ``vllm/v1/worker/gpu/model_runner.py``
(``load_model``: the persistent ``intermediate_tensors``; ``capture_model``; ``_dummy_run``;
``execute_model``: the copy-in on non-first ranks) and ``vllm/v1/worker/gpu_worker.py``
(``Worker.execute_model``: wait on ``_pp_send_work``, ``irecv_tensor_dict`` into
``AsyncIntermediateTensors``, ``isend_tensor_dict``).

The story. A pipeline of ``ranks`` stages runs one forward per step; every stage but the first
receives the previous stage's intermediate tensors (hidden states, residual) and every stage
but the last sends its own. A CUDA graph replays the kernels it recorded, reading the *addresses*
it saw at capture. The worker's ``irecv`` allocates fresh tensors every step, so a graph captured
on a non-first stage must never be handed those: v0.19.0 allocates one persistent buffer per
non-first stage in ``load_model``, captures every graph with slices of it as inputs, and at run
time copies every key of the received tensors into it before the replay. v0.18.0 did not capture
at all once PP was on ("Pipeline parallel is currently eager-only"): correct, but no graph ever
runs on a non-first stage, which the ``sometimes`` property ``graph_replayed_on_non_first_rank``
reports as a violation (a witness that must exist and does not).

Capture (per rank, before the engine schedules anything): modes PIECEWISE then FULL, within a
mode descriptors by ``num_tokens`` descending; each descriptor is one ``capture`` step (the
warm-up run in mode NONE and the capture). A graph records its intermediate-input address
(``graph.input``) and the request count its dummy batch had (``graph.requests``). Runtime, per
step: the engine schedules a batch (tokens, requests, uniform decode or not); rank 0 dispatches
and runs its forward, then ``send``s; a non-first rank ``receive``s into a fresh tensor
(``FRESH_k`` for step k), ``prepare_inputs`` (dispatch, copy-in), ``forward`` (replay or eager),
and ``send``s unless it is the last. A stage's next step begins by waiting on its send handles.

Addresses are a finite sort of buffer identities (``Address``): the capture-time buffer, the
persistent buffer, the fresh receive tensor of step k, the manager's FULL output buffer, a
piecewise graph's own output, an eager output (a fresh allocation that ``record_stream`` keeps
alive until its send completes, so it is never overwritten while sent) and the first stage's
input buffers. Data are step numbers; -1 is the garbage a capture or dummy run leaves. The
initial state is after ``load_model`` (the persistent buffer exists, holding garbage).

Variants: ``pre-fix`` (v0.18.0, eager with PP), ``post-fix`` (v0.19.0), and mutants of v0.19.0
that the properties must catch: ``no-persistent-buffer`` (graphs captured on a capture-time
buffer, received tensors handed straight in: A1), ``no-copy-in`` (the persistent buffer without
the copy, as vLLM V1 had between #13353 and #13417: A2), ``missing-key`` (the sender's tensors
lack the residual: K1), ``full-adjustment`` (#35162's proposed num_reqs adjustment applied when
capturing FULL graphs: R1) and ``no-send-wait`` (a step does not first wait on its previous
isend: A3). The properties are protocols.md P5(d): A1, A2, A3, K1, S1, C1, D1, R1, each an
``always`` over what the last capture, receive and forward of each rank recorded.

Faithfulness notes (read from the v0.18.0/v0.19.0 wheels; where they differ from protocols.md,
the source wins):
- The manager's output buffers are sized by the **first warm-up run of the first descriptor
  captured, PIECEWISE included**, not by the first FULL capture (protocols.md P5(a)/C1): the
  warm-up calls ``forward_fn(CUDAGraphMode.NONE)``, which takes the output-copy branch
  (``torch.empty_like`` on the first call) for every descriptor. The first descriptor captured
  is the largest overall, so C1 still holds; the model sizes the buffer at the first capture.
- ``dispatch`` returns NONE (eager) unless graphs were captured, so v0.18.0 with PP is eager on
  every rank. v0.18.0's eager path hands the received tensors straight to the model, and its
  ``_dummy_run`` allocates new intermediate tensors per call (the capture-time buffer).
- The request count a FULL graph is captured with is ``desc.num_reqs or min(num_tokens,
  max_num_reqs)``; the PR's proposed divisibility adjustment (``adjusted_num_reqs``) is not in
  v0.19.0 and appears here only as the ``full-adjustment`` mutant. ``prepare_inputs`` pads the
  runtime batch to ``desc.num_reqs`` rows, so a FULL graph must have been captured with exactly
  ``desc.num_reqs`` requests (R1).
- The DP sync of the descriptor is ``sync_cudagraph_and_dp_padding`` (``gpu/dp_utils.py``, called
  after ``dispatch`` in ``execute_model``); protocols.md's ``dispatch_cg_and_sync_dp`` is not a
  v0.19.0 function. ``InputBatch.make_dummy`` asserts ``0 < num_reqs <= num_tokens`` (D1).
- The second half of K1 (the manager's FULL output buffer has the model output's keys) holds by
  construction (``IntermediateTensors.empty_like`` of the model output) and is not a state here.
- Not modelled: DP (dispatch is then synced by ``sync_cudagraph_and_dp_padding``; with one DP
  rank every stage dispatches the same batch identically), dummy batches between steps (a DP
  rank's ``execute_dummy_batch`` does not wait the send handles, but in the order exec(N),
  sample(N) the non-last stage's ``sample_tokens`` has made its stream wait on ``pp_receive``'s
  broadcast, which completes only after the last stage consumed step N, so after isend(N)), sampling, TP all-gather of the sent slices, spec decode
  beyond ``decode_query_len``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lockstep.models.cudagraph_pp.descriptors import (
    MODE_NAMES,
    Descriptor,
    adjusted_num_reqs,
    capture_plan,
    capture_sizes,
    dispatch_plan,
)
from lockstep.models.cudagraph_pp.sources import sources
from lockstep.spec.machine import Machine, Step
from lockstep.spec.protocol import InstanceSpec, ParameterSpec, Protocol, VariantSpec
from lockstep.spec.sorts import BOOL, EnumSort, IndexSort, MapSort, Sort, enum, integers
from lockstep.spec.terms import (
    Term,
    TermLike,
    all_of,
    any_of,
    conjunction,
    constant,
    disjunction,
    if_then_else,
    lift,
    map_of,
)

PRE_FIX, POST_FIX = "pre-fix", "post-fix"
NO_PERSISTENT_BUFFER = "no-persistent-buffer"  # v0.19.0 capture, received tensors handed straight in
NO_COPY_IN = "no-copy-in"  # persistent buffer without the copy (vLLM V1 #13353 before #13417)
MISSING_KEY = "missing-key"  # the sender's tensors lack a key the persistent buffer has
FULL_ADJUSTMENT = "full-adjustment"  # #35162's proposed num_reqs adjustment applied to FULL graphs
NO_SEND_WAIT = "no-send-wait"  # the next step does not wait on the previous step's send handles

Key = enum("Key", ["hidden_states", "residual"])
Phase = enum("Phase", ["CAPTURING", "IDLE", "RECEIVED", "INPUTS_READY", "OUTPUT_READY"])
GraphMode = enum("GraphMode", ["NONE", "PIECEWISE", "FULL"])
CAPTURING, IDLE, RECEIVED, INPUTS_READY, OUTPUT_READY = (constant(member, Phase) for member in Phase.members)
EAGER, PIECEWISE, FULL = (constant(member, GraphMode) for member in GraphMode.members)

# The reference runtime's events (lockstep/impl/cudagraph_pp) -> the model's actions; the runtime
# records every action under its model name.
RUNTIME_ACTIONS: dict[str, str] = {name: name for name in (
    "capture", "schedule", "first_forward", "receive", "prepare_inputs", "forward", "send",
)}


def build(variant: str, parameters: Mapping[str, int]) -> Machine:
    """The cudagraph-pp machine for ``variant`` at the given parameter values."""
    size, steps = parameters["ranks"], parameters["steps"]
    max_num_tokens = parameters["max_num_tokens"]
    largest = min(parameters["largest_capture_size"], max_num_tokens)  # capped at max_num_batched_tokens
    max_num_reqs, decode_query_len = parameters["max_num_reqs"], parameters["decode_query_len"]
    mode_name = MODE_NAMES[parameters["cudagraph_mode"]]
    eager_only = variant == PRE_FIX  # v0.18.0: capture_model returns early with PP
    persistent_buffer = variant not in (PRE_FIX, NO_PERSISTENT_BUFFER)
    copies_in = persistent_buffer and variant != NO_COPY_IN
    waits_on_sends = variant != NO_SEND_WAIT
    sent_keys = ("hidden_states",) if variant == MISSING_KEY else Key.members
    persistent_keys = Key.members if persistent_buffer else ()

    by_size, order = capture_plan(mode_name, capture_sizes(largest, decode_query_len), max_num_reqs, decode_query_len)
    if eager_only:
        order = []
    table = {} if eager_only else dispatch_plan(by_size, max_num_tokens, max_num_reqs, decode_query_len)
    descriptors = list(dict.fromkeys(order))

    machine = Machine(f"cudagraph-pp/{variant}")
    Rank = IndexSort("Rank", size)
    StepIndex = IndexSort("Step", steps)
    Steps = integers(0, steps)
    Data = integers(-1, steps - 1)
    Tokens, Requests = integers(0, max_num_tokens), integers(0, max_num_reqs)
    Desc = EnumSort("Descriptor", ("NONE", *(d.label for d in descriptors)))
    Address = EnumSort("Address", ("NO_BUFFER", "INPUT_BUFFERS", "CAPTURE_BUFFER", "PERSISTENT", "MANAGER_OUTPUT",
                                   "GRAPH_OUTPUT", "EAGER_OUTPUT", *(f"FRESH_{k}" for k in range(steps))))
    last = size - 1

    def desc_term(descriptor: Descriptor | None) -> Term:
        return constant("NONE" if descriptor is None else descriptor.label, Desc)

    def address(name: str) -> Term:
        return constant(name, Address)

    def per_rank(value: object) -> tuple[object, ...]:
        return tuple(value for _ in range(size))

    def static(values: Sequence[object], key_sort: Sort, value_sort: Sort) -> Term:
        return lift(tuple(values), MapSort(key_sort, value_sort))

    previous = static([max(r - 1, 0) for r in range(size)], Rank, Rank)
    fresh = static([Address.index(f"FRESH_{k}") for k in range(steps)], StepIndex, Address)
    capture_order = static([Desc.index(d.label) for d in order] or [0], IndexSort("CaptureIndex", max(len(order), 1)), Desc)
    mode_of = static([0] + [GraphMode.index(d.mode) for d in descriptors], Desc, GraphMode)
    tokens_of = static([0] + [d.num_tokens for d in descriptors], Desc, integers(0, largest))
    nominal_requests = [0] + [d.num_reqs or min(d.num_tokens, max_num_reqs) for d in descriptors]
    capture_requests_of = static(nominal_requests, Desc, Requests)

    # ------------------------------------------------------------------------------- the engine
    scheduled = machine.variable("engine.scheduled", Steps, 0, "steps the engine has scheduled")
    batch_tokens = machine.variable("batch.tokens", MapSort(StepIndex, Tokens), tuple(0 for _ in range(steps)))
    batch_requests = machine.variable("batch.requests", MapSort(StepIndex, Requests), tuple(0 for _ in range(steps)))
    batch_decode = machine.variable("batch.decode", MapSort(StepIndex, BOOL), tuple(False for _ in range(steps)),
                                    "every request has decode_query_len tokens (uniform decode)")

    # ------------------------------------------------------------------------ the stages (ranks)
    phase = machine.variable("phase", MapSort(Rank, Phase), per_rank(0 if order else 1), "where each rank is")
    step = machine.variable("step", MapSort(Rank, Steps), per_rank(0), "the step each rank works on")
    captured = machine.variable("captured", MapSort(Rank, integers(0, len(order))), per_rank(0), "descriptors captured")
    graph_input = machine.variable("graph.input", MapSort(Rank, MapSort(Desc, Address)), per_rank(tuple(0 for _ in Desc.members)),
                                   "intermediate-input address each graph recorded at capture")
    graph_requests = machine.variable("graph.requests", MapSort(Rank, MapSort(Desc, Requests)), per_rank(tuple(0 for _ in Desc.members)),
                                      "requests of each graph's dummy capture batch (0: not captured)")
    output_rows = machine.variable("manager.output_rows", MapSort(Rank, integers(0, largest)), per_rank(0),
                                   "rows of the manager's output buffers (0: not allocated)")
    persistent = machine.variable("persistent", MapSort(Rank, MapSort(Key, Data)), per_rank((-1, -1)),
                                  "the data in the persistent intermediate-tensor buffer, per key")
    descriptor = machine.variable("descriptor", MapSort(Rank, Desc), per_rank(0), "this step's dispatched descriptor")
    received_keys = machine.variable("received.keys", MapSort(Rank, MapSort(Key, BOOL)), per_rank((False, False)))
    received_data = machine.variable("received.data", MapSort(Rank, Data), per_rank(-1))
    received_rows = machine.variable("received.rows", MapSort(Rank, Tokens), per_rank(0))
    forward_step = machine.variable("forward.step", MapSort(Rank, integers(-1, steps - 1)), per_rank(-1), "step of the last forward")
    forward_descriptor = machine.variable("forward.descriptor", MapSort(Rank, Desc), per_rank(0), "descriptor of the last forward")
    forward_given = machine.variable("forward.given", MapSort(Rank, Address), per_rank(0), "intermediate inputs handed to the model")
    forward_data = machine.variable("forward.data", MapSort(Rank, MapSort(Key, Data)), per_rank((-1, -1)), "data the forward read")
    output_data = machine.variable("output.data", MapSort(Rank, Data), per_rank(-1), "the step whose output the last forward wrote")
    send_pending = machine.variable("send.pending", MapSort(Rank, BOOL), per_rank(False), "an isend not yet received")
    send_step = machine.variable("send.step", MapSort(Rank, StepIndex), per_rank(0))
    send_source = machine.variable("send.source", MapSort(Rank, Address), per_rank(0), "the tensor the pending isend reads")
    send_data = machine.variable("send.data", MapSort(Rank, Data), per_rank(-1), "what that tensor holds now")
    send_rows = machine.variable("send.rows", MapSort(Rank, Tokens), per_rank(0))

    def dispatch(at: Term) -> Term:
        """The descriptor for step ``at``'s batch (CudaGraphManager.dispatch over the plan)."""
        chosen = desc_term(None)
        for (tokens, requests, decode), found in table.items():
            chosen = if_then_else(conjunction(batch_tokens[at] == tokens, batch_requests[at] == requests,
                                              batch_decode[at] == decode), desc_term(found), chosen)
        return chosen

    def padded(chosen: Term, at: Term) -> Term:
        """num_tokens_after_padding: the descriptor's tokens, or the batch's own when eager."""
        return if_then_else(chosen == desc_term(None), batch_tokens[at], tokens_of[chosen])

    def output_address(chosen: Term) -> Term:
        mode = mode_of[chosen]
        return if_then_else(mode == FULL, address("MANAGER_OUTPUT"),
                            if_then_else(mode == PIECEWISE, address("GRAPH_OUTPUT"), address("EAGER_OUTPUT")))

    def write_output(rank: Term, chosen: Term, data: Term) -> dict[Term, Term]:
        """The forward writes its output; a pending isend reading the same buffer now sends this."""
        target = output_address(chosen)
        clobbers = send_pending[rank] & (send_source[rank] == target) & (target != address("EAGER_OUTPUT"))
        return {output_data: output_data.set(rank, data),
                send_data: send_data.set(rank, if_then_else(clobbers, data, send_data[rank]))}

    # -------------------------------------------------------------------------------- capture
    def capture(rank: Term) -> Step:
        """ModelCudaGraphManager.capture, one descriptor: warm-up (mode NONE) and capture; non-first
        ranks take slices of the persistent buffer as inputs (the mutant: a capture-time buffer)."""
        index = captured[rank]
        chosen = capture_order[index]
        nominal = capture_requests_of[chosen]
        requests = adjusted_num_reqs(nominal, tokens_of[chosen]) if variant == FULL_ADJUSTMENT else nominal
        recorded = if_then_else(rank == 0, address("INPUT_BUFFERS"), address("PERSISTENT" if persistent_buffer else "CAPTURE_BUFFER"))
        done = index + 1 == len(order)
        return Step(phase[rank] == CAPTURING, {
            graph_input: graph_input.set(rank, graph_input[rank].set(chosen, recorded)),
            graph_requests: graph_requests.set(rank, graph_requests[rank].set(chosen, requests)),
            output_rows: output_rows.set(rank, if_then_else(output_rows[rank] == 0, tokens_of[chosen], output_rows[rank])),
            captured: captured.set(rank, index + 1),
            phase: phase.set(rank, if_then_else(done, IDLE, CAPTURING)),
        })

    if order:  # v0.18.0 with PP captures nothing
        machine.add_action("capture", capture, actor="rank:{rank}", description=(capture.__doc__ or "").strip(), rank=Rank)

    captures_done = all_of(Rank, lambda r: phase[r] != CAPTURING)

    # -------------------------------------------------------------------------------- runtime
    @machine.action(actor="engine", tokens=integers(1, max_num_tokens), requests=integers(1, max_num_reqs), decode=BOOL)
    def schedule(tokens: Term, requests: Term, decode: Term) -> Step:
        """The scheduler's next batch; every stage runs the same scheduler output."""
        uniform_ok = decode.implies(tokens == requests * decode_query_len)
        if decode_query_len == 1:  # one token per request is a uniform decode
            uniform_ok = decode == (tokens == requests)
        return Step(conjunction(captures_done, scheduled < steps, requests <= tokens, uniform_ok), {
            batch_tokens: batch_tokens.set(scheduled, tokens),
            batch_requests: batch_requests.set(scheduled, requests),
            batch_decode: batch_decode.set(scheduled, decode),
            scheduled: scheduled + 1,
        })

    def waited(rank: Term) -> Term:
        """Worker.execute_model first waits on the previous step's send handles."""
        return ~send_pending[rank] if waits_on_sends else lift(True)

    @machine.action(actor="rank:0")
    def first_forward() -> Step:
        """Rank 0's execute_model: wait on its sends, dispatch, forward from its input buffers."""
        at = step[0]
        chosen = dispatch(at)
        return Step(conjunction(phase[0] == IDLE, at < scheduled, waited(lift(0))), {
            descriptor: descriptor.set(0, chosen),
            forward_step: forward_step.set(0, at),
            forward_descriptor: forward_descriptor.set(0, chosen),
            forward_given: forward_given.set(0, address("INPUT_BUFFERS")),
            phase: phase.set(0, OUTPUT_READY),
            **write_output(lift(0), chosen, at),
        })

    @machine.action(actor="rank:{rank}", rank=Rank)
    def receive(rank: Term) -> Step:
        """Worker.execute_model on a non-first rank: wait on its own sends, irecv_tensor_dict into a
        fresh tensor; the lazy wait of AsyncIntermediateTensors completes it (and the sender's isend)."""
        sender = previous[rank]
        at = step[rank]
        return Step(conjunction(rank >= 1, phase[rank] == IDLE, at < scheduled, waited(rank),
                                send_pending[sender], send_step[sender] == at), {
            received_keys: received_keys.set(rank, lift(tuple(name in sent_keys for name in Key.members), MapSort(Key, BOOL))),
            received_data: received_data.set(rank, send_data[sender]),
            received_rows: received_rows.set(rank, send_rows[sender]),
            send_pending: send_pending.set(sender, False),
            phase: phase.set(rank, RECEIVED),
        })

    @machine.action(actor="rank:{rank}", rank=Rank)
    def prepare_inputs(rank: Term) -> Step:
        """Dispatch, then (v0.19.0) copy every key of the persistent buffer from the received
        tensors, rows [:num_tokens_after_padding]; a missing key is vLLM's KeyError (K1)."""
        at = step[rank]
        updates: dict[Term, TermLike] = {descriptor: descriptor.set(rank, dispatch(at)), phase: phase.set(rank, INPUTS_READY)}
        if copies_in:
            updates[persistent] = persistent.set(rank, map_of(Key, lambda key: if_then_else(
                received_keys[rank][key], received_data[rank], persistent[rank][key]), Data))
        return Step((rank >= 1) & (phase[rank] == RECEIVED), updates)  # type: ignore[arg-type]

    def read(rank: Term, where: Term, key: Term) -> Term:
        """The data at ``where`` for ``key`` on ``rank``."""
        return if_then_else(where == address("PERSISTENT"), persistent[rank][key],
                            if_then_else((where == fresh[step[rank]]) & received_keys[rank][key], received_data[rank], -1))

    @machine.action(actor="rank:{rank}", rank=Rank)
    def forward(rank: Term) -> Step:
        """The forward of a non-first rank: FULL replays (run_fullgraph), PIECEWISE replays each piece,
        NONE runs eagerly; a graph reads the address it recorded, eager the tensors it is given."""
        at = step[rank]
        chosen = descriptor[rank]
        given = address("PERSISTENT") if persistent_buffer else fresh[at]
        source = if_then_else(mode_of[chosen] == EAGER, given, graph_input[rank][chosen])
        data = map_of(Key, lambda key: read(rank, source, key), Data)
        updates: dict[Term, TermLike] = {
            forward_step: forward_step.set(rank, at),
            forward_descriptor: forward_descriptor.set(rank, chosen),
            forward_given: forward_given.set(rank, given),
            forward_data: forward_data.set(rank, data),
            phase: phase.set(rank, if_then_else(rank == last, IDLE, OUTPUT_READY)),
            step: step.set(rank, if_then_else(rank == last, at + 1, at)),
            **write_output(rank, chosen, at),
        }
        return Step((rank >= 1) & (phase[rank] == INPUTS_READY), updates)  # type: ignore[arg-type]

    @machine.action(actor="rank:{rank}", rank=Rank)
    def send(rank: Term) -> Step:
        """isend_tensor_dict of the forward's output (FULL: the manager's buffer [:num_tokens];
        PIECEWISE: the graph's own output; eager: a fresh tensor); the step ends."""
        at = step[rank]
        return Step(conjunction(rank < last, phase[rank] == OUTPUT_READY, ~send_pending[rank]), {
            send_pending: send_pending.set(rank, True),
            send_step: send_step.set(rank, at),
            send_source: send_source.set(rank, output_address(descriptor[rank])),
            send_data: send_data.set(rank, output_data[rank]),
            send_rows: send_rows.set(rank, padded(descriptor[rank], at)),
            phase: phase.set(rank, IDLE),
            step: step.set(rank, at + 1),
        })

    # -------------------------------------------------------------------------------- properties
    machine.set_final(all_of(Rank, lambda r: (phase[r] == IDLE) & (step[r] == steps)))
    replayed = lambda r: (forward_step[r] >= 0) & (mode_of[forward_descriptor[r]] != EAGER)  # noqa: E731
    non_first = lambda r: r >= 1  # noqa: E731
    machine.always("A1_address_stability", all_of(Rank, lambda r: (non_first(r) & replayed(r)).implies(
        forward_given[r] == graph_input[r][forward_descriptor[r]])),
        "a replayed graph on a non-first rank is given its inputs at the address it recorded at capture")
    machine.always("A2_freshness", all_of(Rank, lambda r: (non_first(r) & (forward_step[r] >= 0)).implies(
        all_of(Key, lambda key: forward_data[r][key] == forward_step[r]))),
        "a non-first rank's forward of step N reads step N's received data, every key")
    machine.always("A3_sender_reuse", all_of(Rank, lambda r: send_pending[r].implies(send_data[r] == send_step[r])),
                   "the tensor handed to isend(N) still holds step N's output until the receiver has it")
    machine.always("K1_key_sets", all_of(Rank, lambda r: (phase[r] == RECEIVED).implies(
        conjunction(*(received_keys[r][constant(name, Key)] for name in persistent_keys)))),
        "the received tensors have every key of the persistent buffer")
    machine.always("S1_sizes", all_of(Rank, lambda r: (non_first(r) & (phase[r] == INPUTS_READY)).implies(
        (padded(descriptor[r], step[r]) <= max_num_tokens) & (received_rows[r] >= padded(descriptor[r], step[r])))),
        "num_tokens_after_padding fits the persistent buffer and the received tensors have that many rows")
    machine.always("C1_capture_order", all_of(Rank, lambda r: conjunction(*(
        (graph_requests[r][desc_term(d)] > 0).implies(d.num_tokens <= output_rows[r]) for d in descriptors))),
        "every capture's output fits the manager's buffers, sized at the first capture")

    def dummy_bounds(r: Term, d: Descriptor) -> Term:
        requests = graph_requests[r][desc_term(d)]
        nominal = d.num_reqs or min(d.num_tokens, max_num_reqs)
        facts = [requests >= 1, requests <= min(d.num_tokens, max_num_reqs)]
        if d.uniform_token_count is not None:
            facts.append(requests * decode_query_len == d.num_tokens)
        if variant == FULL_ADJUSTMENT:
            facts.extend([lift(d.num_tokens) % requests == 0, requests <= nominal])
        return (requests > 0).implies(conjunction(*facts))

    machine.always("D1_dummy_batch_bounds", all_of(Rank, lambda r: conjunction(*(dummy_bounds(r, d) for d in descriptors))),
                   "each captured dummy batch has 1 <= num_reqs <= min(num_tokens, max_num_reqs), uniform ones divide")

    def compatible(r: Term) -> Term:
        chosen, at = forward_descriptor[r], forward_step[r]
        parts = []
        for d in descriptors:
            fits = conjunction(d.num_tokens >= batch_tokens[at],
                               lift(True) if d.num_reqs is None else (batch_requests[at] <= d.num_reqs),
                               lift(True) if d.uniform_token_count is None else batch_decode[at])
            if d.mode == "FULL":
                fits = fits & (graph_requests[r][desc_term(d)] == d.num_reqs)
            parts.append((chosen == desc_term(d)) & fits)
        return disjunction(*parts)

    machine.always("R1_replay_compatibility", all_of(Rank, lambda r: replayed(r).implies(compatible(r))),
                   "a replayed descriptor fits the batch, and a FULL graph was captured with desc.num_reqs requests")
    machine.sometimes("graph_replayed_on_non_first_rank", any_of(Rank, lambda r: non_first(r) & replayed(r)),
                      "a CUDA graph runs on a non-first pipeline stage")
    declared = {action.name for action in machine.actions}
    machine.mirror({name: text for name, text in sources(variant).items() if name in declared})
    return machine



_MUTANTS = (NO_PERSISTENT_BUFFER, NO_COPY_IN, MISSING_KEY, FULL_ADJUSTMENT, NO_SEND_WAIT)

PROTOCOL = Protocol(
    name="cudagraph-pp",
    title="CUDA graphs with pipeline parallelism in the V2 model runner",
    change="vLLM PR #35162",
    variants=(
        VariantSpec(PRE_FIX, "V2 + PP is eager-only: capture_model returns early, no graph on any stage", "vLLM v0.18.0"),
        VariantSpec(POST_FIX, "persistent intermediate-tensor buffer, captured as graph input, copied into each step",
                    "vLLM v0.19.0"),
        VariantSpec(NO_PERSISTENT_BUFFER, "mutant: graphs captured, received tensors handed straight to them (A1)",
                    "v0.19.0 capture + v0.18.0 inputs"),
        VariantSpec(NO_COPY_IN, "mutant: persistent buffer captured, received values never copied into it (A2)",
                    "vLLM V1 #13353 before #13417"),
        VariantSpec(MISSING_KEY, "mutant: the sender's tensors lack a key of the persistent buffer (K1)", "v0.19.0 + model"),
        VariantSpec(FULL_ADJUSTMENT, "mutant: #35162's proposed num_reqs adjustment applied to FULL captures (R1)",
                    "v0.19.0 + #35162 description"),
        VariantSpec(NO_SEND_WAIT, "mutant: a step does not wait on the previous step's send handles (A3)",
                    "v0.19.0 - gpu_worker _pp_send_work wait"),
    ),
    parameters=(
        ParameterSpec("ranks", 2, "pipeline-parallel size", minimum=2, maximum=4),
        ParameterSpec("steps", 2, "scheduled steps", minimum=1, maximum=3),
        ParameterSpec("largest_capture_size", 3, "largest cudagraph capture size (sizes 1, 2, 4, ... and it)",
                      minimum=1, maximum=8),
        ParameterSpec("max_num_tokens", 3, "max_num_batched_tokens: persistent buffer rows (default: the largest capture size)",
                      minimum=1, maximum=8, derived=lambda values: values["largest_capture_size"]),
        ParameterSpec("max_num_reqs", 2, "max_num_seqs", minimum=1, maximum=4),
        ParameterSpec("decode_query_len", 1, "1 + num_speculative_tokens", minimum=1, maximum=2),
        ParameterSpec("cudagraph_mode", 0, "0 FULL, 1 FULL_AND_PIECEWISE, 2 PIECEWISE, 3 FULL_DECODE_ONLY", minimum=0, maximum=3),
    ),
    instances=(
        InstanceSpec(
            "seed",
            "#35162: two stages, FULL graphs of 1..3 tokens with max_num_seqs 2 (FULL(3,2) does not divide), two steps",
            {},
            {PRE_FIX: "violated", POST_FIX: "holds", **{mutant: "violated" for mutant in _MUTANTS}},
        ),
        InstanceSpec(
            "full-and-piecewise",
            "vLLM's default cudagraph_mode: PIECEWISE mixed graphs and FULL uniform-decode graphs",
            {"cudagraph_mode": 1},
            {PRE_FIX: "violated", POST_FIX: "holds", **{mutant: "violated" for mutant in _MUTANTS}, FULL_ADJUSTMENT: "holds"},
        ),
    ),
    build=build,
    rank_parameter="ranks",
)
