"""The dp-pause engine cores: one ``DPEngineCoreProc`` per DP rank (vLLM v0.21.0 / v0.20.0
``vllm/v1/engine/core.py``).

Each engine action is a module-level unit over the model's ``State`` (``state.py``), in vLLM's
order: message delivery into ``input_queue`` (``process_input_sockets``), the handlers of
``_handle_client_request`` (ADD, ABORT, START_DP_WAVE and the utilities pause_scheduler,
collective_rpc, barrier and resume_scheduler), the idle callbacks of ``_process_input_queue``, and
the busy loop (``run_busy_loop``: a real or dummy forward, then ``_has_global_unfinished_reqs``
with the engine all-reduce every ``sync_interval`` steps). ``mirrors`` names the v0.21.0 source;
``sources.py`` has v0.20.0's where it differs. The predicates ``unfinished`` and ``has_work`` are
shared with the client and the properties; ``sync_dp_state`` with the lemma.
"""

from __future__ import annotations

from lockstep.models.dp_pause.state import (
    IGNORE_WHILE_PAUSED,
    NO_LOCAL_WAKEUP,
    MessageKind,
    Mode,
    PauseState,
    ReportKind,
    State,
    Variant,
    report,
)
from lockstep.spec.actions import action
from lockstep.spec.machine import Step
from lockstep.spec.sorts import BOOL, Sort
from lockstep.spec.terms import Term, conjunction, disjunction, if_then_else

# A utility call reaches its method through EngineCoreProc._handle_client_request (UTILITY) and
# _invoke_utility_method, which replies at once or when the returned Future resolves.
UTILITY = "_handle_client_request(UTILITY) → "
REPLY = " → _invoke_utility_method (reply)"


# ------------------------------------------------------------------------------ shared predicates
def unfinished(
    model: State, rank: Term, state: Term | None = None, local: Term | None = None, admitted_now: Term | None = None
) -> Term:
    """scheduler.get_num_unfinished_requests() > 0, pause-aware: waiting + running when
    UNPAUSED, running only when PAUSED_NEW, none when PAUSED_ALL."""
    current = model.pause_state[rank] if state is None else state
    count = model.requests[rank] if local is None else local
    result = (current == PauseState.UNPAUSED) & (count > 0)
    if model.options.two_step:
        on = model.running_requests[rank] if admitted_now is None else admitted_now
        result = result | ((current == PauseState.PAUSED_NEW) & (on > 0))
    return result


def has_work(model: State, rank: Term) -> Term:
    """engines_running or scheduler.has_requests() (unfinished, or finished since the last schedule)."""
    return model.engines_running[rank] | unfinished(model, rank) | model.finished_pending[rank]


def reply(model: State) -> dict[Term, Term]:
    """Answer the client's current call."""
    return {model.replies: model.replies + 1}


def callbacks_wait_for_device(model: State) -> bool:
    """The idle callback blocks the core thread until the device is idle: from v0.29.0 every pause's
    (``_finish_pause`` → ``synchronize_device``); from v0.25.0 a sleep's (``model_executor.sleep`` →
    ``collective_rpc("sleep")`` → ``Worker.sleep`` → ``torch.accelerator.synchronize``; v0.23.0's sleep is
    modelled alike: releases.py)."""
    release = model.release
    return release.synchronizes_device or (release.sleeps and model.options.sleep_level > 0)


def idle_callbacks(model: State, rank: Term) -> dict[Term, Term]:
    """Fire the pending pause future if the engine is idle (before it blocks on its queue). Where
    the callback waits for the device (``callbacks_wait_for_device``), ``sleep.fire_idle_callbacks``
    does it, as its own step, before the engine takes a message (``handling``)."""
    pause_future, replies = model.pause_future, model.replies
    if callbacks_wait_for_device(model):
        return {replies: replies}
    fire = ~has_work(model, rank) & pause_future[rank]
    updates = {
        pause_future: pause_future.set(rank, pause_future[rank] & ~fire),
        replies: if_then_else(fire, replies + 1, replies),
    }
    return updates  # a sleep's callback waits for the device: sleep.synchronize_device puts it to sleep


def callback_due(model: State, rank: Term) -> Term:
    """An idle engine with a pending pause future: its idle callbacks run before it takes a message."""
    return ~has_work(model, rank) & model.pause_future[rank]


def handling(model: State, rank: Term, kind: Term) -> Term:
    """The core thread is at the top of its loop and the head of its queue is a ``kind`` message."""
    inbox = model.input_queue
    guard = conjunction(model.mode[rank] == Mode.TOP, ~inbox[rank].is_empty(), inbox[rank].head().field("kind") == kind)
    if callbacks_wait_for_device(model):  # the callbacks (device synchronisation) come first
        guard = guard & ~callback_due(model, rank)
    return guard


def consume(model: State, rank: Term) -> dict[Term, Term]:
    """Pop the handled message; if the engine was idle, its idle callbacks fired first."""
    inbox = model.input_queue
    return {inbox: inbox.set(rank, inbox[rank].tail()), **idle_callbacks(model, rank)}


def sync_dp_state(unfinished_sum: Term, votes: Term, size: Term | int) -> tuple[Term, Term]:
    """ParallelConfig.sync_dp_state's decision from the SUM all-reduce of [unfinished, pending_pause]:
    (keep running, pause consensus). Shared by the model and by its lemma for all sizes."""
    return (unfinished_sum > 0) | (votes % size != 0), votes == size


# ------------------------------------------------------------------------------ message delivery
@action(actor="rank:{rank}", mirrors="EngineCoreProc.process_input_sockets (→ input_queue)")
def arrive_from_client(model: State, rank: Term) -> Step:
    """A client message reaches the engine's input queue."""
    from_client, inbox = model.from_client, model.input_queue
    return Step(
        ~from_client[rank].is_empty(),
        {
            from_client: from_client.set(rank, from_client[rank].tail()),
            inbox: inbox.set(rank, inbox[rank].append(from_client[rank].head())),
        },
    )


@action(actor="rank:{rank}", mirrors="EngineCoreProc.process_input_sockets (coordinator → input_queue)")
def arrive_from_coordinator(model: State, rank: Term) -> Step:
    """A coordinator message (START_DP_WAVE) reaches the engine's input queue."""
    from_coordinator, inbox = model.from_coordinator, model.input_queue
    return Step(
        ~from_coordinator[rank].is_empty(),
        {
            from_coordinator: from_coordinator.set(rank, from_coordinator[rank].tail()),
            inbox: inbox.set(rank, inbox[rank].append(from_coordinator[rank].head())),
        },
    )


# ------------------------------------------------------------------- _handle_client_request
@action(actor="rank:{rank}", mirrors="_handle_client_request(ADD) → DPEngineCoreProc.add_request")
def handle_add(model: State, variant: Variant, rank: Term) -> Step:
    """DPEngineCoreProc.add_request: adopt a newer wave; a stale wave wakes an idle, unpaused engine."""
    wave, running, reports = model.current_wave, model.engines_running, model.to_coordinator
    request_wave = model.input_queue[rank].head().field("wave")
    stale = request_wave < wave[rank]
    wake = stale & ~running[rank] & (model.pause_state[rank] == PauseState.UNPAUSED)
    updates = consume(model, rank)
    updates.update(
        {
            model.requests: model.requests.set(rank, model.requests[rank] + 1),
            wave: wave.set(rank, if_then_else(request_wave > wave[rank], request_wave, wave[rank])),
            # the mutant no-local-wakeup only tells the coordinator, which excludes this engine
            running: running if variant.name == NO_LOCAL_WAKEUP else running.set(rank, running[rank] | wake),
            reports: reports.set(
                rank,
                if_then_else(
                    wake, reports[rank].append(report(model, ReportKind.START_WAVE, wave[rank])), reports[rank]
                ),
            ),
        }
    )
    return Step(handling(model, rank, MessageKind.ADD), updates)


@action(
    actor="rank:{rank}", mirrors="_handle_client_request(ABORT) → EngineCore.abort_requests (scheduler.finish_requests)"
)
def handle_abort(model: State, rank: Term, **chosen: Term) -> Step:
    """EngineCore.abort_requests: finish the request as aborted if it is still unfinished (its
    id stays in finished_req_ids, so has_requests() holds until the next schedule)."""
    # With the free client (``abort_choice``) the ABORT names any request, which the engine may hold or not
    # (finished already, or aborted eagerly from ``aborts_queue`` during a step): ``finishes`` chooses.
    requests, admitted = model.requests, model.running_requests
    held = requests[rank] > 0
    unchanged: Term | int = 0  # what is left when the request is not held (none: the scripted client's one)
    if "finishes" in chosen:
        held, unchanged = held & chosen["finishes"], requests[rank]
    updates = consume(model, rank)
    updates[requests] = requests.set(rank, if_then_else(held, requests[rank] - 1, unchanged))
    updates[model.finished_pending] = model.finished_pending.set(rank, model.finished_pending[rank] | held)
    if model.options.two_step:
        left = if_then_else(held, requests[rank] - 1, unchanged)
        updates[admitted] = admitted.set(rank, if_then_else(admitted[rank] > left, left, admitted[rank]))
    return Step(handling(model, rank, MessageKind.ABORT), updates)


@action(
    actor="rank:{rank}",
    mirrors="DPEngineCoreProc._handle_client_request(START_DP_WAVE) (dropped under ignore_start_dp_wave)",
)
def handle_start_wave(model: State, variant: Variant, rank: Term) -> Step:
    """START_DP_WAVE(wave, exclude): join the wave unless excluded or stale (post-fix: or ignoring)."""
    wave, running = model.current_wave, model.engines_running
    head = model.input_queue[rank].head()
    excluded = head.field("excluding") & (head.field("exclude") == rank)
    applies = ~excluded & (head.field("wave") >= wave[rank])
    if variant.fixed:
        applies = applies & ~model.ignore_start_dp_wave[rank]
    if variant.name == IGNORE_WHILE_PAUSED:
        applies = applies & (model.pause_state[rank] == PauseState.UNPAUSED)
    updates = consume(model, rank)
    updates.update(
        {
            wave: wave.set(rank, if_then_else(applies, head.field("wave"), wave[rank])),
            running: running.set(rank, running[rank] | applies),
        }
    )
    return Step(handling(model, rank, MessageKind.START_WAVE), updates)


@action(actor="rank:{rank}", mirrors=UTILITY + "EngineCoreProc.pause_scheduler → DPEngineCoreProc._pause_complete")
def handle_pause(model: State, variant: Variant, rank: Term) -> Step:
    """pause_scheduler(mode): keep → PAUSED_ALL; abort → finish every request (aborted), then
    PAUSED_NEW; wait → PAUSED_NEW. Reply now if idle (pre-fix) or defer (post-fix)."""
    inbox, requests, finished_pending = model.input_queue, model.requests, model.finished_pending
    running, pause_future, replies = model.engines_running, model.pause_future, model.replies
    kind = inbox[rank].head().field("kind")
    keep, abort = kind == MessageKind.PAUSE, kind == MessageKind.PAUSE_ABORT
    new_state = if_then_else(keep, PauseState.PAUSED_ALL, PauseState.PAUSED_NEW)
    updates = consume(model, rank)
    updates[model.pause_state] = model.pause_state.set(rank, new_state)
    updates[requests] = requests.set(rank, if_then_else(abort, 0, requests[rank]))
    updates[finished_pending] = finished_pending.set(rank, finished_pending[rank] | (abort & (requests[rank] > 0)))
    if model.options.two_step:
        admitted = model.running_requests
        updates[admitted] = admitted.set(rank, if_then_else(abort, 0, admitted[rank]))
    if variant.fixed:  # DPEngineCoreProc._pause_complete: vote, kick-start, always defer
        updates[model.pending_pause] = model.pending_pause.set(rank, True)
        updates[running] = running.set(rank, True)
        updates[pause_future] = pause_future.set(rank, True)
    else:  # base _pause_complete: not has_work() (aborted ids keep has_requests() until the next schedule)
        busy = (
            running[rank]
            | (~abort & unfinished(model, rank, new_state))
            | finished_pending[rank]
            | (abort & (requests[rank] > 0))
        )
        updates[pause_future] = pause_future.set(rank, busy)
        updates[replies] = if_then_else(busy, replies, replies + 1)
    pausing = disjunction(
        *[
            inbox[rank].head().field("kind") == name
            for name in (MessageKind.PAUSE, MessageKind.PAUSE_ABORT, MessageKind.PAUSE_WAIT)
        ]
    )
    guard = conjunction(model.mode[rank] == Mode.TOP, ~inbox[rank].is_empty(), pausing)
    if callbacks_wait_for_device(model):
        guard = guard & ~callback_due(model, rank)
    return Step(guard, updates)


@action(actor="rank:{rank}", mirrors=UTILITY + "EngineCore.collective_rpc (body: a collective on the workers)")
def handle_collective_rpc(model: State, rank: Term) -> Step:
    """collective_rpc runs in the core thread: its body enters a collective on worker_world."""
    updates = consume(model, rank)
    updates.update({model.mode: model.mode.set(rank, Mode.RPC), **model.worker_world.post(rank, "rpc")})
    return Step(handling(model, rank, MessageKind.RPC), updates)


@action(actor="rank:{rank}", mirrors="EngineCore.collective_rpc returns" + REPLY)
def finish_collective_rpc(model: State, rank: Term) -> Step:
    # The body's collective on worker_world completed: the core thread returns to its loop and replies.
    mode = model.mode
    return Step(
        (mode[rank] == Mode.RPC) & model.worker_world.done(rank), {mode: mode.set(rank, Mode.TOP), **reply(model)}
    )


@action(actor="rank:{rank}", mirrors=UTILITY + "DPEngineCoreProc.barrier (dist.barrier(dp_group))")
def handle_barrier(model: State, rank: Term) -> Step:
    """DPEngineCoreProc.barrier (test-only utility): dist.barrier on the engines' dp_group."""
    updates = consume(model, rank)
    updates.update({model.mode: model.mode.set(rank, Mode.BARRIER), **model.engine_dp.post(rank, "barrier")})
    return Step(handling(model, rank, MessageKind.BARRIER), updates)


@action(actor="rank:{rank}", mirrors="DPEngineCoreProc.barrier returns" + REPLY)
def finish_barrier(model: State, rank: Term) -> Step:
    # dist.barrier completed on the dp_group: the core thread returns to its loop and replies.
    mode, engine_dp = model.mode, model.engine_dp
    return Step(
        (mode[rank] == Mode.BARRIER) & engine_dp.done(rank),
        {mode: mode.set(rank, Mode.TOP), **reply(model), **engine_dp.consume(rank)},
    )


@action(actor="rank:{rank}", mirrors=UTILITY + "DPEngineCoreProc.resume_scheduler (→ has_unfinished_dp barrier)")
def handle_resume(model: State, variant: Variant, rank: Term) -> Step:
    """resume_scheduler: pre-fix unpause (+ start_wave); post-fix error / no-op / unpause + barrier."""
    running, requests, pause_state, replies = model.engines_running, model.requests, model.pause_state, model.replies
    updates = consume(model, rank)
    if not variant.fixed:
        wake = ~running[rank] & (requests[rank] > 0)
        reports, start = model.to_coordinator, report(model, ReportKind.START_WAVE, model.current_wave[rank])
        updates.update(
            {
                pause_state: pause_state.set(rank, PauseState.UNPAUSED),
                reports: reports.set(rank, if_then_else(wake, reports[rank].append(start), reports[rank])),
                replies: updates[replies] + 1,
            }
        )
        return Step(handling(model, rank, MessageKind.RESUME), updates)
    ignore, mode, engine_dp = model.ignore_start_dp_wave, model.mode, model.engine_dp
    in_flight = model.pending_pause[rank] | (running[rank] & ignore[rank])
    barrier = ~in_flight & ~running[rank]
    local = if_then_else(requests[rank] > 0, 1, 0)  # has_unfinished_requests() once UNPAUSED
    posted = engine_dp.post(rank, "resume_max", local)
    updates.update(
        {
            pause_state: pause_state.set(rank, if_then_else(barrier, PauseState.UNPAUSED, pause_state[rank])),
            ignore: ignore.set(rank, ignore[rank] & ~barrier),
            mode: mode.set(rank, if_then_else(barrier, Mode.RESUME_BARRIER, Mode.TOP)),
            engine_dp.queue: if_then_else(barrier, posted[engine_dp.queue], engine_dp.queue),
            replies: if_then_else(barrier, updates[replies], updates[replies] + 1),  # error or no-op: reply now
        }
    )
    return Step(handling(model, rank, MessageKind.RESUME), updates)


@action(
    actor="rank:{rank}", mirrors="ParallelConfig.has_unfinished_dp returns in DPEngineCoreProc.resume_scheduler" + REPLY
)
def finish_resume(model: State, rank: Term) -> Step:
    """The resume barrier returned: any rank with work starts the wave on every rank."""
    mode, engine_dp = model.mode, model.engine_dp
    return Step(
        (mode[rank] == Mode.RESUME_BARRIER) & engine_dp.done(rank),
        {
            mode: mode.set(rank, Mode.TOP),
            model.engines_running: model.engines_running.set(rank, engine_dp.result_of(rank) > 0),
            **reply(model),
            **engine_dp.consume(rank),
        },
    )


@action(
    actor="rank:{rank}",
    mirrors="EngineCoreProc._process_input_queue → _notify_idle_state_callbacks (pause Future resolves)",
)
def notify_idle(model: State, rank: Term) -> Step:
    """_process_input_queue: an idle engine fires its idle callbacks before blocking."""
    idle = conjunction(
        model.mode[rank] == Mode.TOP,
        model.input_queue[rank].is_empty(),
        ~has_work(model, rank),
        model.pause_future[rank],
    )
    return Step(idle, idle_callbacks(model, rank))


# ---------------------------------------------------------------------------------- the busy loop
@action(
    actor="rank:{rank}",
    mirrors="DPEngineCoreProc.run_busy_loop → _process_engine_step / execute_dummy_batch / idle continue",
)
def step(model: State, rank: Term, **chosen: Term) -> Step:
    """_process_engine_step, then (if nothing ran) the dummy batch or the idle `continue`."""
    # With requests of any length (``drain_choice``) the step may schedule nothing because every request it
    # would run has its last token in flight (async scheduling: ``Scheduler.schedule`` skips a request whose
    # placeholders reach ``max_tokens``); processing that token finishes them (``drained``), and no forward runs.
    mode, worker_dp, release = model.mode, model.worker_dp, model.release
    executed = unfinished(model, rank)  # schedule() finds tokens: none when PAUSED_ALL, no admission unless UNPAUSED
    drained_updates: dict[Term, Term] = {}
    allowed: Term | None = None
    if model.options.any_length:
        requests, admitted, drained = model.requests, model.running_requests, chosen["drained"]
        unpaused = model.pause_state[rank] == PauseState.UNPAUSED
        scheduled = if_then_else(unpaused, requests[rank], admitted[rank])
        draining = drained > 0
        allowed = ~draining | (executed & (drained == admitted[rank]) & (drained == scheduled))
        executed = executed & ~draining
        drained_updates = {
            requests: requests.set(rank, requests[rank] - drained),
            admitted: admitted.set(rank, admitted[rank] - drained),
        }
    dummy = ~executed & (
        (unfinished(model, rank) & ~draining if allowed is not None else unfinished(model, rank))
        | model.engines_running[rank]
    )
    skipped = None
    if release.sleep_skips_dummy:  # v0.25.0 on: no dummy batch while model_executor.is_sleeping
        skipped = dummy & (model.executor_sleep[rank] == 2)
        dummy = dummy & ~skipped
    forward = executed | dummy
    posted = worker_dp.post(rank, "forward")
    ready = conjunction(mode[rank] == Mode.TOP, model.input_queue[rank].is_empty(), has_work(model, rank))
    otherwise = Mode.TOP if skipped is None else if_then_else(skipped, Mode.DUMMY_SKIPPED, Mode.TOP)
    # schedule() clears finished ids; a drained step's output processing finishes its requests after it
    finished: Term = (
        model.finished_pending.set(rank, chosen["drained"] > 0)
        if drained_updates
        else (model.finished_pending.set(rank, False))
    )
    updates: dict[Term, Term] = {
        model.finished_pending: finished,
        mode: mode.set(
            rank, if_then_else(executed, Mode.FORWARD_REAL, if_then_else(dummy, Mode.FORWARD_DUMMY, otherwise))
        ),
        worker_dp.queue: if_then_else(forward, posted[worker_dp.queue], worker_dp.queue),
        **drained_updates,
    }
    if release.reports_wave_start:  # the idle `continue`: the next iteration begins idle
        stepping = forward if skipped is None else forward | skipped
        updates[model.was_running] = model.was_running.set(rank, model.was_running[rank] & stepping)
    return Step(ready if allowed is None else ready & allowed, updates)


def drain_choice(model: State) -> dict[str, Sort]:
    """``step``'s parameters beyond the rank: with requests of any length (``request_steps`` = 0) how many
    requests a step that runs no forward finishes (``drained``: their last tokens were in flight); none
    otherwise, so the pinned machines keep their one parameter."""
    return {"drained": model.sorts.Requests} if model.options.any_length else {}


def cadence(model: State, rank: Term) -> tuple[Term, Term]:
    """_has_global_unfinished_reqs' step counter: (sync now, the counter after this step). v0.21.0:
    every ``sync_interval``-th step (the counter kept modulo the interval). v0.33.0: step 1 of a wave
    and every ``dp_sync_interval``-th; the counter (0 at a wave's start) is kept as 1..interval."""
    counter, interval = model.step_counter, model.options.sync_interval
    if not model.release.sync_at_step_one:
        next_count = counter[rank] + 1
        sync = next_count == interval
        return sync, if_then_else(sync, 0, next_count)
    next_count = if_then_else(counter[rank] == interval, 1, counter[rank] + 1)
    return (counter[rank] == 0) | (next_count == interval), next_count


def wave_start_report(model: State, rank: Term, running: Term, pending: Term) -> dict[Term, Term]:
    """v0.29.0 on, at the end of an iteration: rank 0 tells the coordinator that it runs a wave it
    began the iteration idle in (unless a pause is pending); ``was_running`` for the next one."""
    if not model.release.reports_wave_start:
        return {}
    reports, was_running = model.to_coordinator, model.was_running
    return {
        reports: reports.set(rank, wave_start_sequence(model, rank, running, pending)),
        was_running: was_running.set(rank, running),
    }


def wave_start_sequence(model: State, rank: Term, running: Term, pending: Term) -> Term:
    """Rank ``rank``'s reports to the coordinator after ``wave_start_report``'s edge (v0.29.0 on)."""
    reports = model.to_coordinator
    edge = running & ~model.was_running[rank] & (rank == 0) & ~pending
    start = report(model, ReportKind.START_WAVE, model.current_wave[rank])
    return if_then_else(edge, reports[rank].append(start), reports[rank])


@action(
    actor="rank:{rank}",
    mirrors="execute_model / execute_dummy_batch returns → DPEngineCoreProc._has_global_unfinished_reqs",
)
def finish_forward(model: State, variant: Variant, rank: Term, **chosen: Term) -> Step:
    """The forward's DP all-reduce returned; _has_global_unfinished_reqs counts the step. With requests
    of any length (``finish_choice``) the forward's ``finished`` requests are the ones that ended."""
    mode, requests, counter, engine_dp = model.mode, model.requests, model.step_counter, model.engine_dp
    running, finished_pending = model.engines_running, model.finished_pending
    real = mode[rank] == Mode.FORWARD_REAL
    extra: dict[Term, Term] = {}
    allowed: Term | None = None
    if model.options.any_length:  # any scheduled request may end in this forward: the choice says how many
        admitted, finishing = model.running_requests, chosen["finished"]
        unpaused = model.pause_state[rank] == PauseState.UNPAUSED
        scheduled = if_then_else(unpaused, requests[rank], admitted[rank])  # PAUSED_NEW admits nothing new
        allowed = if_then_else(real, finishing <= scheduled, finishing == 0)
        remaining = requests[rank] - finishing
        now_admitted = if_then_else(real, if_then_else(unpaused, remaining, admitted[rank] - finishing), admitted[rank])
        extra[admitted] = admitted.set(rank, now_admitted)
        local = if_then_else(unfinished(model, rank, local=remaining, admitted_now=now_admitted), 1, 0)
    elif model.options.two_step:  # the admitted requests finish; when UNPAUSED the waiting ones are admitted now
        admitted = model.running_requests
        finishing = admitted[rank]
        remaining = if_then_else(real, requests[rank] - finishing, requests[rank])
        unpaused = model.pause_state[rank] == PauseState.UNPAUSED
        now_admitted = if_then_else(real, if_then_else(unpaused, remaining, 0), admitted[rank])
        extra[admitted] = admitted.set(rank, now_admitted)
        local = if_then_else(unfinished(model, rank, local=remaining, admitted_now=now_admitted), 1, 0)
    else:  # requests finish in the forward that admits them
        finishing = requests[rank]
        remaining = if_then_else(real, 0, requests[rank])
        local = if_then_else(unfinished(model, rank, local=remaining), 1, 0)
    sync, next_count = cadence(model, rank)
    vote = (local, if_then_else(model.pending_pause[rank], 1, 0)) if variant.fixed else (local,)
    posted = engine_dp.post(rank, "sync_sum" if variant.fixed else "sync_max", vote)
    returned = ((mode[rank] == Mode.FORWARD_REAL) | (mode[rank] == Mode.FORWARD_DUMMY)) & model.worker_dp.done(rank)
    if model.release.later:  # the CPU thread goes on; the forward's kernels may still run on the device
        extra[model.device_busy] = model.device_busy.set(rank, model.device_busy[rank] | returned)
        served, wave = model.last_served, model.current_wave[rank]  # ghost: this wave served a request
        extra[served] = if_then_else(real & (wave > served), wave, served)
        if model.release.sleep_skips_dummy:
            returned = returned | (mode[rank] == Mode.DUMMY_SKIPPED)
        pending = model.pending_pause[rank]
        edge = wave_start_report(model, rank, ~sync, pending)
        if edge:  # off the sync boundary the wave goes on; at it, finish_sync decides
            reports, was_running = model.to_coordinator, model.was_running
            extra[reports] = if_then_else(sync, reports, edge[reports])
            extra[was_running] = if_then_else(sync, was_running, edge[was_running])
    return Step(
        returned if allowed is None else returned & allowed,
        {
            requests: requests.set(rank, remaining),
            finished_pending: finished_pending.set(rank, finished_pending[rank] | (real & (finishing > 0))),
            **extra,
            counter: counter.set(rank, next_count),
            running: running.set(rank, running[rank] | ~sync),  # off the boundary: returns True
            mode: mode.set(rank, if_then_else(sync, Mode.SYNC, Mode.TOP)),
            engine_dp.queue: if_then_else(sync, posted[engine_dp.queue], engine_dp.queue),
        },
    )


def abort_choice(model: State) -> dict[str, Sort]:
    """``handle_abort``'s parameters beyond the rank: with the free client whether the aborted request is still
    held (``finishes``); none otherwise, so the pinned machines keep their one parameter."""
    return {"finishes": BOOL} if model.options.free else {}


def finish_choice(model: State) -> dict[str, Sort]:
    """``finish_forward``'s parameters beyond the rank: with requests of any length (``request_steps`` = 0)
    how many of the forward's requests ended (``finished``), a nondeterministic choice; none otherwise."""
    return {"finished": model.sorts.Requests} if model.options.any_length else {}


@action(
    actor="rank:{rank}",
    mirrors="ParallelConfig.sync_dp_state returns → DPEngineCoreProc.run_busy_loop (wave end: wave_complete)",
)
def finish_sync(model: State, variant: Variant, rank: Term) -> Step:
    """The engine all-reduce returned: decide whether the wave goes on; rank 0 reports its end."""
    mode, engine_dp, wave, reports = model.mode, model.engine_dp, model.current_wave, model.to_coordinator
    unfinished_sum = engine_dp.result_of(rank, 0)
    updates: dict[Term, Term] = {mode: mode.set(rank, Mode.TOP), **engine_dp.consume(rank)}
    if variant.fixed:
        ignore, pending = model.ignore_start_dp_wave, model.pending_pause
        still, consensus = sync_dp_state(unfinished_sum, engine_dp.result_of(rank, 1), model.options.ranks)
        updates[ignore] = ignore.set(rank, ignore[rank] | consensus)
        updates[pending] = pending.set(rank, pending[rank] & ~consensus)
    else:
        still = unfinished_sum > 0
    ends = ~still
    complete = report(model, ReportKind.WAVE_COMPLETE, wave[rank])
    completed = if_then_else(ends & (rank == 0), reports[rank].append(complete), reports[rank])
    if model.release.reports_wave_start:  # v0.29.0 on: a wave that goes on may be rank 0's idle → running edge
        edge = wave_start_report(model, rank, still, updates[model.pending_pause][rank])
        updates[model.was_running] = edge[model.was_running]
        completed = if_then_else(
            ends, completed, wave_start_sequence(model, rank, still, updates[model.pending_pause][rank])
        )
    if model.release.sync_at_step_one:  # v0.33.0: the step counter restarts with the next wave
        counter = model.step_counter
        updates[counter] = counter.set(rank, if_then_else(ends, 0, counter[rank]))
    updates.update(
        {
            model.engines_running: model.engines_running.set(rank, still),
            wave: wave.set(rank, if_then_else(ends, wave[rank] + 1, wave[rank])),
            reports: reports.set(rank, completed),
        }
    )
    return Step((mode[rank] == Mode.SYNC) & engine_dp.done(rank), updates)
