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

What the model has (P ranks, rank P-1 the last stage), one module per part: the state in
``state.py``, the variants in ``variants.py``, the properties in ``properties.py``;
``build`` below binds the actions in order.
- The engine (``engine.py``): ``schedule`` (at most P steps in flight; async scheduling schedules the next chunk
  or decode of a request while its previous step is in flight) and ``process_output`` (the oldest
  step's reply, which the output rank sends once its GPU has finished the step).
- Requests: request 0 has a long prompt of ``chunks`` chunks, request 1 (``requests=2``) a prompt
  of one chunk; each then decodes ``decodes`` tokens. A chunk or a decode is one token of the
  model, so ``num_computed_tokens`` counts a request's scheduled pieces. With ``gaps`` > 0 the
  scheduler may leave an unfinished request out of a step (as a full token budget does).
- Per rank (``worker.py``), the CPU thread handling RPCs in order (``execute_model``, ``sample_tokens``) and its
  local runner state: ``output_token_ids`` lengths (the -1 placeholders), ``prev_req_id_to_index``
  (which requests it maps) and where ``prev_sampled_token_ids`` came from.
- Per rank (``stream.py``), one GPU stream: per step [recv (r > 0)] forward [send (r < P-1)] [sample (last)]
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

- Empty steps (``empty_steps``; read in v0.19.0 to v0.22.0, identical in all four): a SchedulerOutput
  with no scheduled tokens gets ``execute_model`` on every rank and no ``sample_tokens``
  (``EngineCore.step_with_batch_queue``: ``model_executed`` is False). ``Worker.execute_model`` posts no
  irecv (``forward_pass`` is False) and ``GPUModelRunner.execute_model`` returns
  ``EMPTY_MODEL_RUNNER_OUTPUT`` at ``if not num_scheduled_tokens`` (v0.19.0 line 3826, v0.20.0 3843,
  v0.21.0 3909, v0.22.0 4007) after ``_update_states``, so ``execute_model_state`` stays None on every
  rank and nothing reaches the PP group. The KV-connector variant of that return
  (``kv_connector_no_forward``) is the same path; KV transfer is not modelled. ``_update_states``
  takes every request out of the persistent batch but leaves ``prev_req_id_to_index`` and
  ``prev_sampled_token_ids``, so the next step reads the mapping of the last sampled step: S3 as
  protocols.md states it ("the broadcast of step N", N the previous step) assumes every step samples,
  and with empty steps it reads "N: the last step sample_tokens ran for". With the statement
  unchanged every release fails it on an empty step between a decode and the next, though the
  token read is the request's latest (``reads_latest_token`` holds): a wording of S3, not a finding.

Later releases and features (``releases.py``, ``release_verdicts.py``; ``docs/models/pp-broadcast.md`` is the
ledger: every mirrored function, every code path of v0.33.0 modelled or left out, every property's source line).
v0.21.0 and v0.22.0 change the V1 receive's guard and counters; from v0.31.0 the V1 runner runs PP without async
scheduling (``async_scheduling=0`` is that path in every release: the scheduler sends the tokens). ``runner=2``
is the V2 runner: up to v0.22.x a broadcast on every step, from v0.23.0 the PPHandler (``handler.py``), whose
received tokens a non-last rank applies pp_size steps later while the scheduler spaces a request's decodes by
pp_size. ``drafts`` adds speculative decoding where drafts and sampled ids cross the boundary (the V1 shape
assert, the V2 widths and draft broadcast), ``structured_output`` the engine's deferred sample_tokens.

Properties: S1-S5 of protocols.md P1(e), ``reads_latest_token``, ``no_false_dependency`` (rank 0's
stream never waits on the broadcast of an all-chunked step: the pre-fix failure), with empty steps
``no_sample_on_empty_step`` and ``no_pp_op_on_empty_step``, the witness
``L2_pipelined_prefill``, and the built-ins ``no_collective_mismatch``, ``no_hang``, ``no_deadlock``.
"""

from __future__ import annotations

from collections.abc import Mapping

from lockstep.models.pp_broadcast import engine, handler, stream, worker
from lockstep.models.pp_broadcast.properties import add_properties
from lockstep.models.pp_broadcast.release_verdicts import with_release_verdicts
from lockstep.models.pp_broadcast.releases import BISECTION, FEATURE_PARAMETERS, RELEASE_VARIANTS
from lockstep.models.pp_broadcast.sources import PROPERTY_SOURCES, sources
from lockstep.models.pp_broadcast.state import Phase, Sizes, declare
from lockstep.models.pp_broadcast.variants import (
    POST_FIX,
    PRE_FIX,
    SKIP_DISAGREE,
    SKIP_WHOLE_RECEIVE,
    V0_21_0,
    V0_22_0,
    release_of,
)
from lockstep.spec.delay import bound_delay, max_delay_parameter
from lockstep.spec.machine import Machine
from lockstep.spec.protocol import InstanceSpec, ParameterSpec, Protocol, UsageError, VariantSpec

__all__ = [
    "POST_FIX",
    "PRE_FIX",
    "PROTOCOL",
    "Phase",
    "SKIP_DISAGREE",
    "SKIP_WHOLE_RECEIVE",
    "build",
]


def check_features(variant: str, sizes: Sizes) -> None:
    """Refuse what the model leaves out (``docs/models/pp-broadcast.md`` says why). What vLLM's config changes it
    follows: from v0.31.0 the V1 runner with PP runs without async scheduling (``sizes_of``); a mutant of the V1
    skip runs its base release's (v0.20.0's) V2 path."""
    if sizes.runner == 2 and not sizes.async_scheduling:
        raise UsageError("pp-broadcast: the V2 runner without async scheduling is not modelled (see the ledger)")


def build(variant: str, parameters: Mapping[str, int]) -> Machine:
    """The pp-broadcast machine for ``variant`` at the given parameter values."""
    machine = Machine(f"pp-broadcast/{variant}", hang_bound=parameters["hang_bound"])
    state = declare(machine, parameters, release_of(variant))  # the variables, then pp and its actions
    check_features(variant, state.sizes)
    machine.add(engine.schedule, state, leave_out=state.LeaveOut)
    if state.sizes.empties:
        machine.add(engine.schedule_empty, state)
    machine.add(engine.process_output, state)
    machine.add(worker.execute_model, state, rank=state.Rank)
    if state.sizes.empties:
        machine.add(worker.execute_model_empty, state, rank=state.Rank)
    if state.sizes.failures:
        machine.add(worker.execute_model_raises, state, rank=state.Rank)
        machine.add(engine.engine_raises, state)
    if state.sizes.shape_asserts:
        machine.add(engine.engine_raises_on_sample, state)
    if state.sizes.structured:
        machine.add(engine.sample_deferred, state)
    machine.add(worker.sample_tokens, state, variant, rank=state.Rank)
    machine.add(stream.gpu_compute, state, rank=state.Rank)
    machine.add(stream.gpu_post, state, rank=state.Rank)
    machine.add(stream.gpu_complete, state, rank=state.Rank)
    if state.sizes.empties:
        machine.add(stream.gpu_pass, state, rank=state.Rank)
    if state.sizes.handler:
        machine.add(handler.side_post, state, rank=state.Rank)
        machine.add(handler.side_complete, state, rank=state.Rank)
        machine.add(handler.side_pass, state, rank=state.Rank)
    add_properties(machine, state)
    declared = {action.name for action in machine.actions}
    mirrored = sources(variant, state.sizes.runner, state.sizes.async_scheduling, state.sizes.handler)
    machine.mirror({name: text for name, text in mirrored.items() if name in declared})
    machine.cite(PROPERTY_SOURCES)
    queues = [group.queue.expression.name for group in (state.pp, state.ppb) if group is not None]  # type: ignore[union-attr]
    bound_delay(machine, parameters["max_delay"], queues)
    return machine


PROTOCOL = Protocol(
    name="pp-broadcast",
    title="PP + async scheduling: the sampled-token broadcast skipped on all-chunked steps",
    change="vLLM PR #38726",
    variants=(
        VariantSpec(PRE_FIX, "every sampled step broadcasts, all-chunked ones included", "vLLM v0.19.0"),
        VariantSpec(
            POST_FIX, "the broadcast is skipped where every row of discard_request_mask is set", "vLLM v0.20.0"
        ),
        VariantSpec(
            SKIP_DISAGREE,
            "mutant: the last rank skips when every row is discarded, the others when no row decodes",
            "v0.20.0 with a different predicate on non-last ranks",
        ),
        VariantSpec(
            SKIP_WHOLE_RECEIVE,
            "mutant: non-last ranks skip all of the receive function on all-chunked steps",
            "v0.20.0 as first proposed in PR #38726's review",
        ),
        VariantSpec(
            V0_21_0,
            "v0.20.0's skip; a rank without execute_model_state receives only if it is not the last rank",
            "vLLM v0.21.0",
            later_release=True,
        ),
        VariantSpec(
            V0_22_0,
            "v0.21.0's guard; the receive also advances num_tokens_no_spec (not tracked by the model)",
            "vLLM v0.22.0",
            later_release=True,
        ),
        *RELEASE_VARIANTS,
    ),
    parameters=(
        ParameterSpec("ranks", 2, "PP stages", minimum=2, maximum=4),
        ParameterSpec("chunks", 2, "chunks of request 0's long prompt", minimum=1, maximum=64),
        ParameterSpec("decodes", 0, "tokens each request decodes after its prompt", minimum=0, maximum=3),
        ParameterSpec("requests", 1, "requests: 0 has the long prompt, 1 a one-chunk prompt", minimum=1, maximum=2),
        ParameterSpec(
            "gaps", 0, "steps from which the token budget may leave an unfinished request out", minimum=0, maximum=2
        ),
        ParameterSpec("hang_bound", 30, "steps within which every posted PP op must complete", minimum=1, maximum=64),
        ParameterSpec("failures", 0, "1: the last rank's execute_model may raise once", minimum=0, maximum=1),
        ParameterSpec(
            "empty_steps", 0, "steps the scheduler may leave empty (no scheduled tokens)", minimum=0, maximum=5
        ),
        max_delay_parameter(),
        *FEATURE_PARAMETERS,
    ),
    instances=with_release_verdicts(
        InstanceSpec(
            "seed",
            "PR #38726: one long prompt in two chunks on two stages; the first step is all non-final chunks",
            {},
            {
                PRE_FIX: "violated",
                POST_FIX: "holds",
                SKIP_DISAGREE: "violated",
                SKIP_WHOLE_RECEIVE: "holds",
                V0_21_0: "holds",
                V0_22_0: "holds",
            },
        ),
        InstanceSpec(
            "chunks-then-decode",
            "the long prompt in three chunks (a run of two all-chunked steps, both in flight), then a decode",
            {"chunks": 3, "decodes": 1},
            {
                PRE_FIX: "violated",
                POST_FIX: "holds",
                SKIP_DISAGREE: "violated",
                SKIP_WHOLE_RECEIVE: "holds",
                V0_21_0: "holds",
                V0_22_0: "holds",
            },
        ),
        InstanceSpec(
            "decode-gap",
            "a one-chunk request decodes, the token budget leaves it out of an all-chunked step of the long prompt, "
            "then it decodes again",
            {"requests": 2, "chunks": 3, "decodes": 1, "gaps": 1},
            {
                PRE_FIX: "violated",
                POST_FIX: "holds",
                SKIP_DISAGREE: "violated",
                SKIP_WHOLE_RECEIVE: "violated",
                V0_21_0: "holds",
                V0_22_0: "holds",
            },
        ),
        InstanceSpec(
            "failed-forward",
            "the seed where the last rank's execute_model may raise before its forward (execute_model_state "
            "stays None): v0.19.0 and v0.20.0 send its sample_tokens into the receive path, whose "
            "assert not pp.is_last_rank fails instead of returning None (receive_only_on_non_last; v0.21.0 and "
            "v0.22.0 return None and hold it). The engine then raises and the executor's shutdown takes the "
            "last rank's still-posted irecv with the worker processes (not a hang)",
            {"failures": 1},
            {
                PRE_FIX: "violated",
                POST_FIX: "violated",
                SKIP_DISAGREE: "violated",
                SKIP_WHOLE_RECEIVE: "violated",
                V0_21_0: "holds",
                V0_22_0: "holds",
            },
            finding="`GPUModelRunner.sample_tokens` (no `execute_model_state`: the receive path under "
            "`use_async_scheduling and pp.world_size > 1`), `_pp_receive_prev_sampled_token_ids_to_input_batch` "
            "(`assert not pp.is_last_rank`), `Worker.execute_model`, `EngineCore.step_with_batch_queue` (None from "
            "sample_tokens means execute_model failed) (v0.20.0; v0.21.0 guards with `not pp.is_last_rank`)",
            finding_properties=("receive_only_on_non_last",),
            upstream="known: issue #41612, fixed by PR #40749 (first in 0.21.0)",
        ),
        InstanceSpec(
            "empty-step",
            "chunks-then-decode with one step of no scheduled tokens anywhere the scheduler has requests (paused "
            "with keep, the last token in flight, finished_req_ids to send): every rank returns "
            "EMPTY_MODEL_RUNNER_OUTPUT from execute_model, the engine sends no sample_tokens, no rank broadcasts "
            "or receives, and the next step reads the mapping of the last sampled step (the same in every release)",
            {"chunks": 2, "decodes": 1, "empty_steps": 1},
            {
                PRE_FIX: "violated",
                POST_FIX: "holds",
                SKIP_DISAGREE: "violated",
                SKIP_WHOLE_RECEIVE: "holds",
                V0_21_0: "holds",
                V0_22_0: "holds",
            },
        ),
    ),
    build=build,
    rank_parameter="ranks",
    release_table=tuple((release, variant) for release, variant, _ in BISECTION),
)
