"""The DP engine cores of dp-step-coordination: ``DPEngineCoreProc.run_busy_loop``, one iteration
at a time, and the client's requests.

Mirrors vLLM v0.33.0's ``vllm/v1/engine/core.py``. Each iteration of ``run_busy_loop``:
``_process_input_queue`` (requests arrive: ``add_request``), then ``_process_engine_step`` ->
``EngineCore.step``, which schedules and runs the model when the scheduler has requests
(``execute_model``; executed when ``total_num_scheduled_tokens > 0``); otherwise, while
``engines_running``, ``execute_dummy_batch``; an idle rank whose wave is over does nothing
(``continue``). Then ``_has_global_unfinished_reqs``: ``step_counter += 1``, and only on the
counter's sync steps an all-reduce of the local ``has_unfinished_requests()`` over the engine
``dp_group`` (v0.30.0 on: step 1 of a wave and every ``dp_sync_interval``-th step; before, every
32nd); off those steps it answers True. When the answer is False the wave ends: the counter
restarts.

An iteration's local decisions (real or dummy step, whether the batch fits the drafter, whether
the counter says sync) choose the sequence of collectives it posts (``worker.py``); the engine
actions below fix that sequence when the iteration starts, ``worker.post_collective`` posts it one
op at a time, and ``end_iteration`` reads the sync's answer.

Waves start and stop through the DP coordinator (``START_DP_WAVE``, ``wave_complete``): that
protocol is dp-pause's model. Here one wave runs from the initial state (every rank's
``engines_running``) to its end; requests arrive only while it runs.
"""

from __future__ import annotations

from lockstep.models.dp_step_coordination.state import Phase, State, skips_drafter, syncs_at_step_one
from lockstep.models.dp_step_coordination.worker import TARGET, drafter_ops, program
from lockstep.spec.actions import action
from lockstep.spec.machine import Step
from lockstep.spec.terms import Term, TermLike, conjunction, if_then_else

_CORE = "vllm/v1/engine/core.py"
_RUNNER = "vllm/v1/worker/gpu_model_runner.py"


def _sync_now(state: State, variant: str, rank: Term) -> Term:
    """``_has_global_unfinished_reqs``: the all-reduce runs on this iteration (after
    ``step_counter += 1``): v0.30.0 on at step 1 and every ``dp_sync_interval``-th step; before,
    every ``32``-nd (the interval as a parameter: the release's 32 made small)."""
    counter = state.step_counter[rank]
    following = counter % state.sizes.sync_interval + 1
    on_interval = following == state.sizes.sync_interval
    if syncs_at_step_one(variant):
        return on_interval | (counter == 0)
    return on_interval


def _begin(state: State, variant: str, rank: Term, ops: tuple[TermLike, ...]) -> dict[Term, TermLike]:
    """The updates that start an iteration posting ``ops`` (and the sync, if due)."""
    sync = _sync_now(state, variant, rank)
    counter = state.step_counter[rank]
    return {
        state.phase: state.phase.set(rank, Phase.STEPPING),
        state.program: state.program.set(rank, program(state.Program, ops, sync)),
        state.syncs: state.syncs.set(rank, sync),
        state.step_counter: state.step_counter.set(rank, counter % state.sizes.sync_interval + 1),
    }


def _at_loop_head(state: State, rank: Term) -> Term:
    return state.phase[rank] == Phase.LOOP


@action(
    actor="rank:{rank}",
    mirrors=f"{_CORE} DPEngineCoreProc._process_input_queue -> add_request (a client's request reaches the rank)",
)
def add_request(state: State, rank: Term) -> Step:
    """A client's request reaches the rank while the wave runs; it shares the rank's batch."""
    return Step(
        conjunction(state.requests_left > 0, _at_loop_head(state, rank), state.engines_running[rank]),
        {
            state.work: state.work.set(rank, state.sizes.steps),
            state.requests_left: state.requests_left - 1,
        },
    )


@action(
    actor="rank:{rank}",
    mirrors=f"{_CORE} EngineCore.step (schedule; model_executor.execute_model, sample_tokens); {_RUNNER} "
    "GPUModelRunner.execute_model -> _determine_batch_execution_and_padding; sample_tokens "
    "(_input_fits_in_drafter -> propose_draft_token_ids, else drafter.dummy_run(num_tokens=1) when "
    "data_parallel_size > 1)",
)
def execute_model(state: State, variant: str, rank: Term, fits: Term) -> Step:
    """The rank's scheduler has requests: it runs a real step. The target forward, then the
    drafter: ``propose`` if the batch fits it; if not, v0.25.0 on runs the drafter's dummy_run
    (the same collectives), v0.24.0 skips the drafter."""
    sizes = state.sizes
    drafter = drafter_ops(sizes)
    updates = _begin(state, variant, rank, TARGET + drafter)
    if sizes.drafts and sizes.overlong and skips_drafter(variant):
        sync = _sync_now(state, variant, rank)
        updates[state.program] = state.program.set(
            rank,
            if_then_else(fits, program(state.Program, TARGET + drafter, sync), program(state.Program, TARGET, sync)),
        )
    if sizes.drafts and sizes.overlong:
        updates[state.draft_skipped] = state.draft_skipped | ~fits
    updates[state.work] = state.work.set(rank, state.work[rank] - 1)
    allowed = fits | (sizes.overlong and sizes.drafts > 0)
    return Step(conjunction(_at_loop_head(state, rank), state.work[rank] > 0, allowed), updates)


@action(
    actor="rank:{rank}",
    mirrors=f"{_CORE} DPEngineCoreProc.run_busy_loop (not executed, engines_running) -> execute_dummy_batch; "
    f"vllm/v1/worker/gpu_worker.py Worker.execute_dummy_batch -> {_RUNNER} GPUModelRunner._dummy_run "
    "(_determine_batch_execution_and_padding; self.drafter.dummy_run)",
)
def execute_dummy_batch(state: State, variant: str, rank: Term) -> Step:
    """The rank has nothing to run while the wave runs: a dummy forward, with the drafter's dummy
    run, posts the same collectives as a real step."""
    updates = _begin(state, variant, rank, TARGET + drafter_ops(state.sizes))
    updates[state.dummy_ran] = True
    return Step(conjunction(_at_loop_head(state, rank), state.work[rank] == 0, state.engines_running[rank]), updates)


@action(
    actor="rank:{rank}",
    mirrors=f"{_CORE} DPEngineCoreProc.run_busy_loop (3) self.engines_running = "
    "_has_global_unfinished_reqs(local_unfinished_reqs); wave end: current_wave += 1, step_counter = 0",
)
def end_iteration(state: State, rank: Term) -> Step:
    """The iteration's collectives are done: if it synced, the all-reduce's answer says whether the
    wave goes on (off the sync steps it does); at the wave's end the step counter restarts."""
    engine_dp = state.engine_dp
    synced = state.syncs[rank]
    still = ~synced | (engine_dp.result_of(rank) > 0)
    return Step(
        conjunction(
            state.phase[rank] == Phase.STEPPING,
            state.program[rank].is_empty(),
            state.worker_dp.done(rank),
            state.worker_ep.done(rank),
            engine_dp.done(rank),
        ),
        {
            state.phase: state.phase.set(rank, Phase.LOOP),
            state.engines_running: state.engines_running.set(rank, still),
            state.step_counter: state.step_counter.set(rank, if_then_else(still, state.step_counter[rank], 0)),
            state.syncs: state.syncs.set(rank, False),
            **engine_dp.consume(rank),
        },
    )


@action(
    actor="rank:{rank}",
    mirrors=f"{_CORE} DPEngineCoreProc.run_busy_loop (a fault: the engine process dies or leaves the loop)",
)
def stop_rank(state: State, rank: Term) -> Step:
    """A fault: the rank's engine stops at its loop head while the wave runs; it posts nothing more."""
    return Step(
        conjunction(state.stops_left > 0, _at_loop_head(state, rank), state.engines_running[rank]),
        {state.phase: state.phase.set(rank, Phase.STOPPED), state.stops_left: state.stops_left - 1},
    )
