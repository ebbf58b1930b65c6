"""The dp-pause engine-core utilities of the releases after v0.21.0 (``releases.py``): sleep and
wake_up with the executor's sleep state, the idle callback that waits for the device before a
pause (v0.29.0 on) or a sleep (v0.25.0 on) completes, the device finishing a forward's kernels,
and v0.33.0's ``pause_generation`` / ``resume_scheduler`` with ``reject_new_requests`` and its
``add_request`` (a wake-up for any request to an idle, unpaused engine; no FIRST_REQ exists).

Sleep is modelled at level 1 with the default mode ``abort`` (``EngineCore.sleep(level=1)``):
``pause_scheduler`` (the DP two-phase pause, no ``reject_new_requests``), and when its future
resolves the executor sleeps (``executor_sleep`` 1 → 2). ``wake_up`` with every tag wakes the
executor and, fully awake, runs ``DPEngineCoreProc.resume_scheduler`` (the error, the no-op or the
barrier of ``engine.handle_resume``). A sleep still waiting for its pause is not undone by
``wake_up``: the callback puts the executor to sleep when the pause completes, as vLLM's does.

Levels (read in 0.21.0, 0.25.0 and 0.33.0): level 1 and level 2 differ only in memory.
``EngineCore.sleep`` (core.py 0.21.0:677-713, 0.25.0:761-797, 0.33.0:993-1029) runs the same pause and
the same ``model_executor.sleep(level)`` for every level >= 1; the executor sets the same
``sleeping_tags`` = {weights, kv_cache} whatever the level (executor/abstract.py 0.25.0:318-326,
0.33.0:400-407); only ``Worker.sleep`` differs (gpu_worker.py: level 2 saves the buffers and offloads no
weights), which the DP loop, the pause state and the collectives never see. So level 1 covers level 2.
Level 0 is ``pause_scheduler(mode, clear_cache=False)`` alone (no executor sleep) and ``wake_up(["scheduling"])``
is ``resume_scheduler``: the plain pause and resume, without v0.33.0's ``reject_new_requests``.

Partial ``wake_up(tags)`` (``partial_wake`` = 1, with ``resumes`` = 2): the client's first wake_up
round sends ``tags=["weights"]``, its second ``["kv_cache"]``. ``Executor.wake_up`` (abstract.py 0.21.0:335-360)
wakes the tags still in ``sleeping_tags`` (a tag not asleep: a warning, nothing woken) and stays
``is_sleeping`` until the set is empty (``executor_sleep`` 3: kv_cache asleep, 4: weights asleep). From 0.24.0
``wake_up`` resumes only when ``model_executor.is_sleeping`` is false (core.py 0.25.0:812-815); 0.21.0-0.23.0
(the v0.23.0 variant) resume after any wake (core.py 0.21.0:715-729). ``forward_only_awake`` (W2) states what
the forward assumes: a scheduled request runs only on an executor whose memory is all resident (the
CuMemAllocator unmapped the kv_cache pool at sleep, cumem.py 0.21.0:206-207, and maps it again only at
wake_up, 221-234; ``post_kv_cache_wake_up`` re-initialises it, gpu_worker.py 0.21.0:197-198).

``sleep_with_pause`` (default 0): 1 = ``pause_generation``, then ``sleep`` on the paused group (the DP
``pause_scheduler`` has no already-paused early return: it sets the pause again and kicks another
consensus round, core.py 0.25.0:1665-1707, 0.33.0:2181-2220); 2 = ``sleep``, then ``pause_generation``
on the sleeping group; each then ``wake_up``.
"""

from __future__ import annotations

from lockstep.models.dp_pause import engine
from lockstep.models.dp_pause.engine import REPLY, UTILITY, callback_due, consume, handling, reply
from lockstep.models.dp_pause.state import MessageKind, Mode, PauseState, ReportKind, State, Variant, report
from lockstep.spec.actions import action
from lockstep.spec.machine import Step
from lockstep.spec.terms import Term, TermLike, if_then_else


@action(
    actor="rank:{rank}",
    mirrors=UTILITY + "EngineCore.sleep(level=1, mode='abort') → EngineCoreProc.pause_scheduler → "
    "DPEngineCoreProc._pause_complete",
)
def handle_sleep(model: State, rank: Term) -> Step:
    """sleep(level=1): abort every request, PAUSED_NEW, vote to pause and kick-start; the executor
    sleeps once the pause future resolves."""
    requests, finished_pending, asleep = model.requests, model.finished_pending, model.executor_sleep
    updates = consume(model, rank)
    updates.update(
        {
            model.pause_state: model.pause_state.set(rank, PauseState.PAUSED_NEW),
            requests: requests.set(rank, 0),
            finished_pending: finished_pending.set(rank, finished_pending[rank] | (requests[rank] > 0)),
            model.pending_pause: model.pending_pause.set(rank, True),
            model.engines_running: model.engines_running.set(rank, True),
            model.pause_future: model.pause_future.set(rank, True),
            asleep: asleep.set(rank, 1),
        }
    )
    if model.options.two_step:
        updates[model.running_requests] = model.running_requests.set(rank, 0)
    return Step(handling(model, rank, MessageKind.SLEEP), updates)


def resumes(model: State, rank: Term) -> Term:
    """DPEngineCoreProc.resume_scheduler takes the barrier path (neither the error nor the no-op)."""
    running, ignore = model.engines_running, model.ignore_start_dp_wave
    return ~(model.pending_pause[rank] | (running[rank] & ignore[rank])) & ~running[rank]


def cleared_rejection(model: State, rank: Term) -> dict[Term, Term]:
    """v0.33.0: EngineCoreProc.resume_scheduler (reached only on the barrier path) clears reject_new_requests."""
    if not model.release.rejects_while_paused:
        return {}
    reject = model.reject_new_requests
    return {reject: reject.set(rank, reject[rank] & ~resumes(model, rank))}


@action(
    actor="rank:{rank}",
    mirrors=UTILITY + "EngineCore.wake_up(tags=None) → model_executor.wake_up; fully awake → "
    "DPEngineCoreProc.resume_scheduler",
)
def handle_wake(model: State, variant: Variant, rank: Term) -> Step:
    """wake_up: the executor wakes (a sleep still waiting for its pause stays requested), then the
    DP resume_scheduler: error while the pause is in flight, no-op while running, else the barrier."""
    base = engine.handle_resume.function(model, variant, rank)
    asleep = model.executor_sleep
    updates: dict[Term, TermLike] = dict(base.updates)
    awake = woken(model, asleep[rank])
    updates[asleep] = asleep.set(rank, awake)
    updates.update(cleared_rejection(model, rank))
    if model.options.partial_wake and not model.release.resumes_partially_awake:  # 0.24.0 on
        still_asleep = awake >= 2  # model_executor.is_sleeping: no resume_scheduler, the reply goes out
        replies = model.replies
        unchanged = [model.pause_state, model.ignore_start_dp_wave, model.mode, model.engine_dp.queue]
        for variable in unchanged:  # the engine is at the top of its loop while it handles a message
            updates[variable] = if_then_else(still_asleep, variable, updates[variable])
        updates[replies] = if_then_else(still_asleep, consume(model, rank)[replies] + 1, updates[replies])
    return Step(handling(model, rank, MessageKind.WAKE), updates)


def woken(model: State, asleep: Term) -> Term:
    """The executor's sleep state after ``model_executor.wake_up(tags)``: every tag (2 → 0), or with
    ``partial_wake`` the first round's ``["weights"]`` (2 → 3, 4 → 0) and the second's ``["kv_cache"]``
    (2 → 4, 3 → 0); a sleep still waiting for its pause (1) is not ``is_sleeping``: nothing wakes."""
    if not model.options.partial_wake:
        return if_then_else(asleep == 2, 0, asleep)
    first = model.resume_round == 0  # the engine handles a round's WAKE before the client sends the next round
    weights = if_then_else(asleep == 2, 3, if_then_else(asleep == 4, 0, asleep))
    cache = if_then_else(asleep == 2, 4, if_then_else(asleep == 3, 0, asleep))
    return if_then_else(first, weights, cache)


@action(
    actor="rank:{rank}",
    mirrors=UTILITY + "EngineCoreProc.pause_generation → pause_scheduler → DPEngineCoreProc._pause_complete; "
    "reject_new_requests = mode != 'keep'",
)
def handle_pause_generation(model: State, variant: Variant, rank: Term) -> Step:
    """v0.33.0 pause_generation: the two-phase pause, then abort and wait reject new requests."""
    base = engine.handle_pause.function(model, variant, rank)
    reject = model.reject_new_requests
    keep = model.input_queue[rank].head().field("kind") == MessageKind.PAUSE
    return Step(base.guard, {**base.updates, reject: reject.set(rank, ~keep)})


@action(
    actor="rank:{rank}",
    mirrors=UTILITY + "DPEngineCoreProc.resume_scheduler (barrier path: EngineCoreProc.resume_scheduler "
    "clears reject_new_requests)",
)
def handle_resume_scheduler(model: State, variant: Variant, rank: Term) -> Step:
    """v0.33.0 resume_scheduler: as v0.21.0's; only the barrier path clears reject_new_requests."""
    base = engine.handle_resume.function(model, variant, rank)
    return Step(base.guard, {**base.updates, **cleared_rejection(model, rank)})


@action(
    actor="rank:{rank}",
    mirrors="_handle_client_request(ADD) → _reject_add_while_paused / DPEngineCoreProc.add_request (v0.33.0)",
)
def handle_add_request(model: State, rank: Term) -> Step:
    """v0.33.0: a paused engine that rejects new requests answers engine_paused; otherwise the
    request is added, a newer wave adopted, and an idle unpaused engine starts running and asks the
    coordinator to wake the others (start_wave with its wave)."""
    wave, running, reports, reject = (
        model.current_wave,
        model.engines_running,
        model.to_coordinator,
        model.reject_new_requests,
    )
    request_wave = model.input_queue[rank].head().field("wave")
    accepted = ~reject[rank]
    adopted = if_then_else(accepted & (request_wave > wave[rank]), request_wave, wave[rank])
    wake = accepted & ~running[rank] & (model.pause_state[rank] == PauseState.UNPAUSED)
    start = report(model, ReportKind.START_WAVE, adopted)
    updates = consume(model, rank)
    updates.update(
        {
            model.requests: model.requests.set(
                rank, if_then_else(accepted, model.requests[rank] + 1, model.requests[rank])
            ),
            wave: wave.set(rank, adopted),
            running: running.set(rank, running[rank] | wake),
            reports: reports.set(rank, if_then_else(wake, reports[rank].append(start), reports[rank])),
            model.rejected: model.rejected | ~accepted,
        }
    )
    return Step(handling(model, rank, MessageKind.ADD), updates)


@action(
    actor="rank:{rank}",
    mirrors="_process_input_queue → _notify_idle_state_callbacks → engine_idle_callback → "
    "EngineCore._finish_pause (collective_rpc('synchronize_device'), v0.29.0 on) / sleep's pause_complete → "
    "model_executor.sleep → collective_rpc('sleep') → Worker.sleep (torch.accelerator.synchronize)",
)
def fire_idle_callbacks(model: State, rank: Term) -> Step:
    """An idle engine runs its pause callback before it takes a message; the callback first waits
    for the device: v0.29.0 on, every pause (synchronize_device); v0.25.0 on, a sleep (Worker.sleep
    synchronises before it suspends, and collective_rpc waits for every worker)."""
    mode, future = model.mode, model.pause_future
    return Step(
        (mode[rank] == Mode.TOP) & callback_due(model, rank),
        {future: future.set(rank, False), mode: mode.set(rank, Mode.DEVICE_SYNC)},
    )


@action(
    actor="rank:{rank}",
    mirrors="synchronize_device (or Worker.sleep's synchronize) returns → future.set_result "
    "(sleep: model_executor.sleep, is_sleeping)" + REPLY,
)
def synchronize_device(model: State, rank: Term) -> Step:
    """The device is idle: the pause completes (a sleep's executor sleeps) and the reply goes out."""
    mode, asleep = model.mode, model.executor_sleep
    return Step(
        (mode[rank] == Mode.DEVICE_SYNC) & ~model.device_busy[rank],
        {
            mode: mode.set(rank, Mode.TOP),
            asleep: asleep.set(rank, if_then_else(asleep[rank] == 1, 2, asleep[rank])),
            **reply(model),
        },
    )


@action(actor="rank:{rank}", mirrors="the device finishes the last forward's kernels (asynchronously)")
def device_idle(model: State, rank: Term) -> Step:
    """The kernels the last forward launched complete on the device."""
    busy = model.device_busy
    return Step(busy[rank], {busy: busy.set(rank, False)})
