"""pp-broadcast: pipeline parallelism with async scheduling, and the sampled-token broadcast that
vLLM PR #38726 skips on steps whose rows are all non-final prefill chunks.

Mirrors vLLM **v0.19.0** (``pre-fix``) and **v0.20.0** (``post-fix``):
``vllm/v1/worker/gpu_model_runner.py`` (``GPUModelRunner._prepare_inputs`` computing
``discard_request_mask``, ``_compute_prev_positions``/``_prepare_input_ids``, ``execute_model``,
``sample_tokens``, ``_bookkeeping_sync``, ``_is_all_reqs_chunked_prefill`` (v0.20.0 only),
``_pp_broadcast_prev_sampled_token_ids`` and ``_pp_receive_prev_sampled_token_ids_to_input_batch``),
``vllm/v1/worker/gpu_worker.py`` (``Worker.execute_model``: ``_pp_send_work``, ``irecv_tensor_dict``
wrapped in ``AsyncIntermediateTensors``, ``isend_tensor_dict``), ``vllm/v1/engine/core.py``
(``EngineCore.step_with_batch_queue``) and ``vllm/v1/core/sched/scheduler.py`` /
``async_scheduler.py`` (``_update_after_schedule``: ``num_computed_tokens`` advances at schedule time).

The story. With pipeline parallelism (P stages) and async scheduling, the engine keeps up to P
steps in flight in its batch queue and sends every worker the same RPCs in the same order:
``execute_model(N)``, ``sample_tokens(N)``, ``execute_model(N+1)``, ... Stage r runs the forward of
step N on its GPU, sends the hidden states to stage r+1 (NCCL isend/irecv on the PP group) and the
last stage samples. Rank 0 needs the token sampled at step N as the input of step N+1 (a decode),
and since the scheduler no longer sends it, the last stage broadcasts the sampled ids on the same
PP group and every other stage receives them in ``sample_tokens``. The broadcast is a blocking NCCL
call: the CPU returns, but the compute stream waits for it, and forward(N+1) is enqueued behind it.
For a step whose rows are all non-final chunks of a chunked prefill, the sampled tokens are
garbage and dropped, yet before the fix rank 0 still waited for them: forward(N+1) could not start
until the last stage had finished step N, so the chunks went through the pipeline one stage at a
time (the PR's "stuck" pipeline: no overlap, no hang). v0.20.0 skips the broadcast on both sides
when ``_is_all_reqs_chunked_prefill()``: every row of ``discard_request_mask`` is set. The skip is
safe only because every rank computes the mask from its own copy of the same state, and because
the receiving side still rebuilds ``prev_req_id_to_index`` (empty) and appends no placeholder.

What the model has (P ranks, rank P-1 the last stage):
- The engine: ``schedule`` (at most P steps in flight; async scheduling schedules the next chunk
  or decode of a request while its previous step is in flight) and ``process_output`` (the oldest
  step's reply, which the output rank sends once its GPU has finished the step).
- Requests: request 0 has a long prompt of ``chunks`` chunks, request 1 (``requests=2``) a prompt
  of one chunk; each then decodes ``decodes`` tokens. A chunk or a decode is one token of the
  model, so ``num_computed_tokens`` counts a request's scheduled pieces. With ``gaps`` > 0 the
  scheduler may leave an unfinished request out of a step (as a full token budget does).
- Per rank, the CPU thread handling RPCs in order (``execute_model``, ``sample_tokens``) and its
  local runner state: ``output_token_ids`` lengths (the -1 placeholders), ``prev_req_id_to_index``
  (which requests it maps) and where ``prev_sampled_token_ids`` came from.
- Per rank, one GPU stream: per step [recv (r > 0)] forward [send (r < P-1)] [sample (last)]
  [broadcast (if this rank issued it)]. An op behind a pending collective waits for it.
- The PP communicator ``pp`` (NCCL ``device_group``): p2p send/recv of the intermediate tensors
  and the broadcast from the last rank, each member's ops completing in its posting order.

Faithfulness notes (read from the v0.19.0/v0.20.0 sources; where they differ from protocols.md the
source wins):
- One stream per rank. PyTorch's NCCL ops run on the group's NCCL stream, which first waits for
  the compute work enqueued before them; a blocking broadcast makes the compute stream wait for
  it; forward(N) waits the irecv lazily (``AsyncIntermediateTensors``) and ``execute_model(N+1)``
  waits the sends of N (``_pp_send_work``). These edges make the two streams of a rank behave as
  one FIFO for the ops modelled here.
- The reply of step N waits for the broadcast of N: ``AsyncGPUModelRunnerOutput`` makes its copy
  stream wait for the compute stream after the blocking broadcast.
- The gloo metadata of ``isend_tensor_dict`` is modelled as a buffered send: rank r may run
  ``execute_model(N)`` once rank r-1's CPU has run it.
- ``discard_request_mask`` is recomputed by ``sample_tokens(N)`` from the same local state that
  ``_prepare_inputs`` used in ``execute_model(N)``: nothing between them changes it on that rank.
- The engine may schedule or process in any order the batch queue allows (an over-approximation:
  the real loop processes a finished oldest step right after scheduling).
- ``gaps`` over-approximates the token budget: any unfinished request may be left out, not only the
  last ones in ``running``. Preemption (which resets ``num_computed_tokens``) is not modelled.
- S5 (exec(N) < sample(N) < exec(N+1) per rank) holds by construction: the executor gives every
  worker one RPC order. It is still checked, with the GPU never running ahead of its CPU.
- protocols.md P1(d) says that skipping the whole receive function would also make
  ``output_token_ids`` lengths differ. The source says otherwise: the function appends -1 only for
  rows not discarded, and on a skipped (all-discarded) step there are none, so the mutant
  ``skip-whole-receive`` breaks S3 (a stale ``prev_req_id_to_index``) but not S4.
- For the same reason the mutant's stale mapping needs a request that was kept at N-1 and is
  absent from the all-chunked step N (the token budget left it out, instance ``decode-gap``): a
  request in step N as a non-final chunk cannot have been kept at N-1 without preemption. The id
  it then scatters is that request's latest token, from N-1: S3 (read from step N) fails, while
  ``reads_latest_token`` (S3 by value: the id is the last one sampled for the request) holds.

Properties: S1-S5 of protocols.md P1(e), ``reads_latest_token``, ``no_false_dependency`` (rank 0's
stream never waits on the broadcast of an all-chunked step: the pre-fix failure), the witness
``L2_pipelined_prefill``, and the built-ins ``no_collective_mismatch``, ``no_hang``, ``no_deadlock``.
"""

from __future__ import annotations

from collections.abc import Mapping

from lockstep.models.pp_broadcast.sources import sources
from lockstep.spec.collectives import Communicator, broadcast
from lockstep.spec.machine import Machine, Step
from lockstep.spec.protocol import InstanceSpec, ParameterSpec, Protocol, VariantSpec
from lockstep.spec.sorts import BOOL, IndexSort, MapSort, enum, integers
from lockstep.spec.terms import (
    Term,
    TermLike,
    all_of,
    any_of,
    conjunction,
    disjunction,
    if_then_else,
    lift,
    map_of,
    max_of,
    minimum,
)

PRE_FIX, POST_FIX = "pre-fix", "post-fix"
SKIP_DISAGREE = "skip-disagree"  # the last rank skips when all rows are discarded, others when no row decodes
SKIP_WHOLE_RECEIVE = "skip-whole-receive"  # non-last ranks skip all of the receive on all-chunked steps

Phase = enum("Phase", ["RECV", "FORWARD", "SEND", "SAMPLE", "BROADCAST"])

# Runtime trace event -> model action (the reference runtime, ``lockstep.impl.pp_broadcast``, records
# the model's names; collectives add ``enter``/``complete`` events of their own).
RUNTIME_ACTIONS: dict[str, str] = {name: name for name in (
    "schedule", "process_output", "execute_model", "sample_tokens", "gpu_compute", "gpu_post", "gpu_complete",
)}


def build(variant: str, parameters: Mapping[str, int]) -> Machine:
    """The pp-broadcast machine for ``variant`` at the given parameter values."""
    size, chunks, decodes = parameters["ranks"], parameters["chunks"], parameters["decodes"]
    request_count, gaps = parameters["requests"], parameters["gaps"]
    prompts = [chunks] + [1] * (request_count - 1)
    lengths = [prompt + decodes for prompt in prompts]
    step_count = max(lengths) + gaps  # every step is non-empty; each gap delays one request one step
    last = size - 1
    machine = Machine(f"pp-broadcast/{variant}", hang_bound=parameters["hang_bound"])

    Rank = IndexSort("Rank", size)
    Request = IndexSort("Request", request_count)
    StepIndex = IndexSort("Step", step_count)  # 0-based: step N of the story is index N-1
    Pieces = integers(0, max(lengths))
    Steps = integers(0, step_count)
    Rpcs = integers(0, 2 * step_count)
    Planned = integers(0, max(lengths))  # 0: not in the step; k+1: in it with num_computed_tokens k

    def table(values: list[int], key: IndexSort, value: object) -> Term:
        return lift(tuple(values), MapSort(key, value))  # type: ignore[arg-type]

    prompt_of = table(prompts, Request, Pieces)
    length_of = table(lengths, Request, Pieces)
    previous_rank = table([max(r - 1, 0) for r in range(size)], Rank, Rank)

    # ---------------------------------------------------------------------- engine and scheduler
    scheduled = machine.variable("engine.scheduled", Steps, 0, "steps scheduled (exec and sample RPCs sent)")
    processed = machine.variable("engine.processed", Steps, 0, "steps whose output the engine processed")
    computed = machine.variable("scheduler.num_computed_tokens", MapSort(Request, Pieces), (0,) * request_count)
    plan = machine.variable("scheduler.steps", MapSort(StepIndex, MapSort(Request, Planned)),
                            tuple((0,) * request_count for _ in range(step_count)),
                            "per step and request: 0 absent, k+1 scheduled with num_computed_tokens k")
    gaps_left = machine.variable("scheduler.gaps_left", integers(0, gaps), gaps)

    # ------------------------------------------------------------------------------ per rank
    def per_rank(value: object) -> tuple[object, ...]:
        return tuple(value for _ in range(size))

    rpc = machine.variable("rank.rpcs", MapSort(Rank, Rpcs), per_rank(0), "RPCs handled: exec(N) is 2N-2, sample(N) 2N-1")
    issued = machine.variable("rank.broadcast_issued", MapSort(Rank, MapSort(StepIndex, BOOL)),
                              per_rank((False,) * step_count), "sample_tokens(N) called torch.distributed.broadcast")
    output_length = machine.variable("rank.output_token_ids", MapSort(Rank, MapSort(Request, Pieces)),
                                     per_rank((0,) * request_count), "len(requests[q].output_token_ids)")
    mapped = machine.variable("rank.prev_req_id_to_index", MapSort(Rank, MapSort(Request, BOOL)),
                              per_rank((False,) * request_count), "the requests the mapping holds")
    map_step = machine.variable("rank.prev_map_step", MapSort(Rank, Steps), per_rank(0),
                                "the step (1-based) whose rows built a non-empty mapping; 0 when empty")
    buffer_step = machine.variable("rank.prev_tokens_step", MapSort(Rank, Steps), per_rank(0),
                                   "the step whose sampled ids prev_sampled_token_ids holds; 0: uninitialised")
    gpu_step = machine.variable("gpu.step", MapSort(Rank, Steps), per_rank(0), "the step (0-based) of the stream's front")
    gpu_phase = machine.variable("gpu.phase", MapSort(Rank, Phase), tuple(1 if r == 0 else 0 for r in range(size)),
                                 "the op of the stream's front (rank 0 has no RECV)")
    posted = machine.variable("gpu.posted", MapSort(Rank, BOOL), per_rank(False), "the front op is posted on pp")
    pp = Communicator(machine, "pp", Rank, {"broadcast": broadcast(last)}, payload=integers(0, 0),
                      point_to_point=True, interleaved_point_to_point=True,
                      description="pp.device_group: intermediate tensors (send/recv) and the sampled-token broadcast")

    # -------------------------------------------------------------------------------- helpers
    def clamp(step: Term) -> Term:
        return minimum(step, step_count - 1)

    def present(step: Term, request: Term) -> Term:
        return plan[clamp(step)][request] > 0

    def computed_before(step: Term, request: Term) -> Term:
        return plan[clamp(step)][request] - 1

    def non_final_chunk(step: Term, request: Term) -> Term:
        """The scheduler's truth: this row does not reach the end of the prompt."""
        return present(step, request) & (computed_before(step, request) + 1 < prompt_of[request])

    def all_chunked(step: Term) -> Term:
        return all_of(Request, lambda q: present(step, q).implies(non_final_chunk(step, q)))

    def discarded(rank: Term, step: Term, request: Term) -> Term:
        """discard_request_mask from the rank's own state: num_computed + num_scheduled < num_tokens."""
        return present(step, request) & (
            computed_before(step, request) + 1 < prompt_of[request] + output_length[rank][request])

    def kept(rank: Term, step: Term, request: Term) -> Term:
        return present(step, request) & ~discarded(rank, step, request)

    def every_row_discarded(rank: Term, step: Term) -> Term:
        """_is_all_reqs_chunked_prefill() on this rank."""
        return all_of(Request, lambda q: present(step, q).implies(discarded(rank, step, q)))

    def skips(rank: Term, step: Term) -> Term:
        """Whether this rank's sample_tokens(step) leaves out the broadcast."""
        if variant == PRE_FIX:
            return lift(False)
        if variant == SKIP_DISAGREE:
            no_decode = all_of(Request, lambda q: present(step, q).implies(computed_before(step, q) < prompt_of[q]))
            return if_then_else(rank == last, every_row_discarded(rank, step), no_decode)
        return every_row_discarded(rank, step)

    def first_phase(rank: Term) -> Term:
        return if_then_else(rank > 0, lift("RECV", Phase), lift("FORWARD", Phase))

    def advanced(rank: Term, skip_known: Term) -> tuple[Term, Term]:
        """The stream position after its front op; a broadcast the CPU left out is passed at once."""
        step, phase = gpu_step[rank], gpu_phase[rank]
        after_forward = if_then_else(rank == last, lift("SAMPLE", Phase), lift("SEND", Phase))
        next_phase = if_then_else(phase == Phase.RECV, lift("FORWARD", Phase),
                                  if_then_else(phase == Phase.FORWARD, after_forward, lift("BROADCAST", Phase)))
        wrapped = phase == Phase.BROADCAST
        passes = ~wrapped & (next_phase == Phase.BROADCAST) & skip_known
        to_next = wrapped | passes
        return if_then_else(to_next, step + 1, step), if_then_else(to_next, first_phase(rank), next_phase)

    def left_out(rank: Term, step: Term) -> Term:
        """The CPU has run sample_tokens(step) and issued no broadcast."""
        return (rpc[rank] >= 2 * step + 2) & ~issued[rank][clamp(step)]

    def enqueued(rank: Term) -> Term:
        """The CPU has enqueued the stream's front op."""
        step, phase = gpu_step[rank], gpu_phase[rank]
        by_exec = disjunction(phase == Phase.RECV, phase == Phase.FORWARD, phase == Phase.SEND)
        return if_then_else(by_exec, rpc[rank] >= 2 * step + 1, rpc[rank] >= 2 * step + 2)

    def move(rank: Term, position: tuple[Term, Term]) -> dict[Term, Term]:
        return {gpu_step: gpu_step.set(rank, position[0]), gpu_phase: gpu_phase.set(rank, position[1])}

    # ------------------------------------------------------------------------------- engine
    @machine.action(actor="engine", leave_out=integers(-1, request_count - 1))
    def schedule(leave_out: Term) -> Step:
        """schedule() and the exec/sample RPCs of one step, while the batch queue has room.

        ``leave_out`` names a request the token budget leaves out of the step (-1: nobody)."""
        def unfinished(q: Term) -> Term:
            return computed[q] < length_of[q]

        def included(q: Term) -> Term:
            return unfinished(q) & (leave_out != q)

        nobody = leave_out < 0
        row = map_of(Request, lambda q: if_then_else(included(q), computed[q] + 1, 0), Planned)
        return Step(conjunction(
            scheduled - processed < size, scheduled < step_count, any_of(Request, included),
            nobody | ((gaps_left > 0) & any_of(Request, lambda q: (q == leave_out) & unfinished(q))),
        ), {
            plan: plan.set(clamp(scheduled), row),
            computed: map_of(Request, lambda q: if_then_else(included(q), computed[q] + 1, computed[q]), Pieces),
            scheduled: scheduled + 1,
            gaps_left: if_then_else(nobody, gaps_left, gaps_left - 1),
        })

    @machine.action(actor="engine")
    def process_output() -> Step:
        """The oldest step's reply arrived (its GPU work, broadcast included, finished on the output rank)."""
        return Step((processed < scheduled) & (gpu_step[last] > processed), {processed: processed + 1})

    # ------------------------------------------------------------------------------ CPU of a rank
    @machine.action(actor="rank:{rank}", rank=Rank)
    def execute_model(rank: Term) -> Step:
        """Worker.execute_model(N): wait the sends of N-1, irecv (r > 0), prepare inputs, forward, isend (r < P-1)."""
        step = rpc[rank] // 2
        metadata = (rank == 0) | (rpc[previous_rank[rank]] >= 2 * step + 1)
        return Step(conjunction(rpc[rank] % 2 == 0, step < scheduled, metadata), {rpc: rpc.set(rank, rpc[rank] + 1)})

    @machine.action(actor="rank:{rank}", rank=Rank)
    def sample_tokens(rank: Term) -> Step:
        """sample_tokens(N): the last rank samples and broadcasts, the others receive; both rebuild state."""
        step = rpc[rank] // 2
        skip = skips(rank, step)
        frozen = lift(variant == SKIP_WHOLE_RECEIVE) & skip & (rank != last)  # the mutant returns early
        any_kept = any_of(Request, lambda q: kept(rank, step, q))
        at_broadcast = (gpu_step[rank] == step) & (gpu_phase[rank] == Phase.BROADCAST)
        return Step(rpc[rank] % 2 == 1, {
            rpc: rpc.set(rank, rpc[rank] + 1),
            issued: issued.set(rank, issued[rank].set(clamp(step), ~skip)),
            output_length: output_length.set(rank, map_of(Request, lambda q: if_then_else(
                kept(rank, step, q) & ~frozen, output_length[rank][q] + 1, output_length[rank][q]), Pieces)),
            mapped: mapped.set(rank, map_of(Request, lambda q: if_then_else(frozen, mapped[rank][q], kept(rank, step, q)), BOOL)),
            map_step: map_step.set(rank, if_then_else(frozen, map_step[rank], if_then_else(any_kept, step + 1, 0))),
            buffer_step: buffer_step.set(rank, if_then_else(
                frozen, buffer_step[rank], if_then_else((rank == last) | ~skip, step + 1, 0))),
            gpu_step: gpu_step.set(rank, if_then_else(at_broadcast & skip, step + 1, gpu_step[rank])),
            gpu_phase: gpu_phase.set(rank, if_then_else(at_broadcast & skip, first_phase(rank), gpu_phase[rank])),
        })

    # ------------------------------------------------------------------------------ GPU of a rank
    def front_is(rank: TermLike, *phases: str) -> Term:
        return disjunction(*[gpu_phase[rank] == phase for phase in phases])

    @machine.action(actor="rank:{rank}", rank=Rank)
    def gpu_compute(rank: Term) -> Step:
        """The stream runs its front kernel: forward(N) or (last rank) sampling(N)."""
        return Step(front_is(rank, "FORWARD", "SAMPLE") & enqueued(rank),
                    move(rank, advanced(rank, left_out(rank, gpu_step[rank]))))

    @machine.action(actor="rank:{rank}", rank=Rank)
    def gpu_post(rank: Term) -> Step:
        """The stream reaches its front NCCL op and posts it on the PP group."""
        step, phase = gpu_step[rank], gpu_phase[rank]
        is_send, is_recv = phase == Phase.SEND, phase == Phase.RECV
        send = pp.send(rank, minimum(rank + 1, last))[pp.queue]
        recv = pp.recv(rank, previous_rank[rank])[pp.queue]
        bcast = pp.post(rank, "broadcast")[pp.queue]
        wanted = ~front_is(rank, "BROADCAST") | issued[rank][clamp(step)]
        return Step(conjunction(front_is(rank, "RECV", "SEND", "BROADCAST"), enqueued(rank), wanted, ~posted[rank]), {
            posted: posted.set(rank, True),
            pp.queue: if_then_else(is_send, send, if_then_else(is_recv, recv, bcast)),
        })

    @machine.action(actor="rank:{rank}", rank=Rank)
    def gpu_complete(rank: Term) -> Step:
        """The posted op completed; the stream moves on."""
        updates = move(rank, advanced(rank, left_out(rank, gpu_step[rank])))
        return Step(posted[rank] & pp.done(rank), {posted: posted.set(rank, False), **updates})

    # -------------------------------------------------------------------------------- properties
    def handled_sample(rank: TermLike, step: Term) -> Term:
        return rpc[rank] >= 2 * step + 2

    machine.always("S1_broadcast_matching", all_of(Rank, lambda r: all_of(StepIndex, lambda n: (
        handled_sample(r, n) & handled_sample(last, n)).implies(issued[r][n] == issued[last][n]))),
        "S1: for every sampled step the last rank broadcasts iff every other rank receives")

    def in_sample_window(rank: Term) -> Term:
        return rpc[rank] % 2 == 1

    machine.always("S2_predicate_agreement", all_of(Rank, lambda r: all_of(Rank, lambda other: (
        in_sample_window(r) & in_sample_window(other) & (rpc[r] == rpc[other])).implies(
        all_of(Request, lambda q: discarded(r, rpc[r] // 2, q) == discarded(other, rpc[r] // 2, q))))),
        "S2: ranks between exec(N) and sample(N) hold the same discard_request_mask for N")

    def reads_fresh(rank: Term) -> Term:
        """Before exec(N+1): every request of N+1 that the mapping holds was kept at N, received from N."""
        step = rpc[rank] // 2
        about_to_prepare = (rpc[rank] % 2 == 0) & (step < scheduled) & (step > 0)
        return about_to_prepare.implies(all_of(Request, lambda q: (present(step, q) & mapped[rank][q]).implies(
            (map_step[rank] == step) & (buffer_step[rank] == step))))

    machine.always("S3_no_stale_read", all_of(Rank, reads_fresh),
                   "S3: _prepare_input_ids(N+1) reads prev_sampled_token_ids only for rows kept at N, from N's broadcast")

    def latest_kept(request: Term, before: Term) -> Term:
        """The last step (1-based) before ``before`` whose sampled token of ``request`` was kept."""
        return max_of(StepIndex, lambda n: if_then_else(
            (n < before) & present(n, request) & ~non_final_chunk(n, request), n + 1, 0))

    def reads_latest(rank: Term) -> Term:
        """Before exec(N+1): a mapped request reads its latest sampled token, whatever step it came from."""
        step = rpc[rank] // 2
        about_to_prepare = (rpc[rank] % 2 == 0) & (step < scheduled) & (step > 0)
        return about_to_prepare.implies(all_of(Request, lambda q: (present(step, q) & mapped[rank][q]).implies(
            (map_step[rank] == buffer_step[rank]) & (buffer_step[rank] == latest_kept(q, step)))))

    machine.always("reads_latest_token", all_of(Rank, reads_latest),
                   "the id _prepare_input_ids scatters for a request is the last token sampled for it (S3 by value)")

    machine.always("S4_placeholder_agreement", all_of(Rank, lambda r: all_of(Rank, lambda other: (
        rpc[r] // 2 == rpc[other] // 2).implies(output_length[r] == output_length[other]))),
        "S4: ranks that have sampled the same steps hold equal output_token_ids lengths")

    machine.always("S5_rpc_order", all_of(Rank, lambda r: (rpc[r] <= 2 * scheduled) & (2 * gpu_step[r] <= rpc[r])),
                   "S5: every rank handles exec(N), sample(N), exec(N+1) as issued; its GPU never runs ahead")

    machine.always("no_false_dependency", ~(posted[0] & (gpu_phase[0] == Phase.BROADCAST) & all_chunked(gpu_step[0])),
                   "rank 0's stream never waits on the broadcast of a step whose rows are all non-final chunks")

    def pipelined(step: Term) -> Term:
        rank0_ran_next = (gpu_step[0] > step + 1) | ((gpu_step[0] == step + 1) & ~front_is(0, "FORWARD"))
        last_sampled = (gpu_step[last] > step) | ((gpu_step[last] == step) & front_is(last, "BROADCAST"))
        return all_chunked(step) & (step + 1 < scheduled) & rank0_ran_next & ~last_sampled

    machine.sometimes("L2_pipelined_prefill", any_of(StepIndex, pipelined),
                      "L2: rank 0 runs forward(N+1) before the last rank finishes sample(N) of an all-chunked step N")

    machine.set_final(conjunction(
        processed == scheduled, all_of(Request, lambda q: computed[q] == length_of[q]),
        all_of(Rank, lambda r: (gpu_step[r] == scheduled) & ~posted[r] & (rpc[r] == 2 * scheduled))))
    machine.mirror(sources(variant))
    return machine


PROTOCOL = Protocol(
    name="pp-broadcast",
    title="PP + async scheduling: the sampled-token broadcast skipped on all-chunked steps",
    change="vLLM PR #38726",
    variants=(
        VariantSpec(PRE_FIX, "every sampled step broadcasts, all-chunked ones included", "vLLM v0.19.0"),
        VariantSpec(POST_FIX, "the broadcast is skipped where every row of discard_request_mask is set", "vLLM v0.20.0"),
        VariantSpec(SKIP_DISAGREE, "mutant: the last rank skips when every row is discarded, the others when no row decodes",
                    "v0.20.0 with a different predicate on non-last ranks"),
        VariantSpec(SKIP_WHOLE_RECEIVE, "mutant: non-last ranks skip all of the receive function on all-chunked steps",
                    "v0.20.0 as first proposed in PR #38726's review"),
    ),
    parameters=(
        ParameterSpec("ranks", 2, "PP stages", minimum=2, maximum=4),
        ParameterSpec("chunks", 2, "chunks of request 0's long prompt", minimum=1, maximum=64),
        ParameterSpec("decodes", 0, "tokens each request decodes after its prompt", minimum=0, maximum=3),
        ParameterSpec("requests", 1, "requests: 0 has the long prompt, 1 a one-chunk prompt", minimum=1, maximum=2),
        ParameterSpec("gaps", 0, "steps from which the token budget may leave an unfinished request out", minimum=0, maximum=2),
        ParameterSpec("hang_bound", 30, "steps within which every posted PP op must complete", minimum=1, maximum=64),
    ),
    instances=(
        InstanceSpec(
            "seed",
            "PR #38726: one long prompt in two chunks on two stages; the first step is all non-final chunks",
            {},
            {PRE_FIX: "violated", POST_FIX: "holds", SKIP_DISAGREE: "violated", SKIP_WHOLE_RECEIVE: "holds"},
        ),
        InstanceSpec(
            "chunks-then-decode",
            "the long prompt in three chunks (a run of two all-chunked steps, both in flight), then a decode",
            {"chunks": 3, "decodes": 1},
            {PRE_FIX: "violated", POST_FIX: "holds", SKIP_DISAGREE: "violated", SKIP_WHOLE_RECEIVE: "holds"},
        ),
        InstanceSpec(
            "decode-gap",
            "a one-chunk request decodes, the token budget leaves it out of an all-chunked step of the long prompt, "
            "then it decodes again",
            {"requests": 2, "chunks": 3, "decodes": 1, "gaps": 1},
            {PRE_FIX: "violated", POST_FIX: "holds", SKIP_DISAGREE: "violated", SKIP_WHOLE_RECEIVE: "violated"},
        ),
    ),
    build=build,
    rank_parameter="ranks",
)
