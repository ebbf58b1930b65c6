"""The dp-pause engine cores: one ``DPEngineCoreProc`` per DP rank (vLLM v0.21.0 / v0.20.0
``vllm/v1/engine/core.py``).

``add_engine`` adds every engine action to a machine whose variables and communicators
``model.build`` declared: message delivery into ``input_queue`` (``process_input_sockets``), the
handlers of ``_handle_client_request`` (ADD, START_DP_WAVE and the utilities pause_scheduler,
collective_rpc, barrier and resume_scheduler), the idle callbacks of ``_process_input_queue``, and
the busy loop (``run_busy_loop``: a real or dummy forward, then ``_has_global_unfinished_reqs``
with the engine all-reduce every ``sync_interval`` steps). It returns the predicates the client
and the properties share (``message``, ``has_work``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from lockstep.models.dp_pause.context import (
    IGNORE_WHILE_PAUSED,
    NO_LOCAL_WAKEUP,
    Mode,
    PauseState,
    variable_reader,
)
from lockstep.spec.collectives import Communicator
from lockstep.spec.machine import Machine, Step
from lockstep.spec.sorts import IndexSort, RecordSort
from lockstep.spec.terms import Term, conjunction, disjunction, if_then_else, record_of


@dataclass(frozen=True)
class Groups:
    """The engines' communicators (see the model's docstring)."""

    engine_dp: Communicator  # the engine-level gloo dp_group
    worker_dp: Communicator  # coordinate_batch_across_dp in every forward
    worker_world: Communicator  # the group a collective_rpc body uses


def add_engine(
    machine: Machine, parameters: Mapping[str, int], variant: str, fixed: bool, Rank: IndexSort,  # noqa: N803
    Message: RecordSort, Report: RecordSort, groups: Groups,  # noqa: N803
) -> tuple[Callable[..., Term], Callable[..., Term]]:
    """Add the engine actions; return ``message(kind, wave=0, exclude=None)`` and ``has_work(rank)``."""
    size, sync_interval = Rank.count, parameters["sync_interval"]
    two_step, with_barrier = parameters["request_steps"] == 2, parameters["rpc"] == 1
    engine_dp, worker_dp, worker_world = groups.engine_dp, groups.worker_dp, groups.worker_world
    read = variable_reader(machine)
    mode, running, wave, counter = read("mode"), read("engines_running"), read("current_wave"), read("step_counter")
    pause_state, requests, finished_pending = read("pause_state"), read("requests"), read("finished_pending")
    pause_future, inbox, from_client = read("pause_future"), read("input_queue"), read("channel.client")
    from_coordinator, reports, replies = read("channel.coordinator"), read("channel.to_coordinator"), read("client.replies")
    if fixed:
        pending, ignore = read("pending_pause"), read("ignore_start_dp_wave")
    if two_step:
        admitted = read("running_requests")

    def message(kind: str, wave_value: object = 0, exclude: Term | None = None) -> Term:
        return record_of(Message, kind=kind, wave=wave_value, excluding=exclude is not None,
                         exclude=0 if exclude is None else exclude)

    def unfinished(rank: Term, state: Term | None = None, local: Term | None = None, admitted_now: Term | None = None) -> Term:
        """scheduler.get_num_unfinished_requests() > 0, pause-aware: waiting + running when
        UNPAUSED, running only when PAUSED_NEW, none when PAUSED_ALL."""
        current = pause_state[rank] if state is None else state
        count = requests[rank] if local is None else local
        result = (current == PauseState.UNPAUSED) & (count > 0)
        if two_step:
            on = admitted[rank] if admitted_now is None else admitted_now
            result = result | ((current == PauseState.PAUSED_NEW) & (on > 0))
        return result

    def has_work(rank: Term, state: Term | None = None, is_running: Term | None = None) -> Term:
        """engines_running or scheduler.has_requests() (unfinished, or finished since the last schedule)."""
        flag = running[rank] if is_running is None else is_running
        return flag | unfinished(rank, state) | finished_pending[rank]

    def reply(rank: Term) -> dict[Term, Term]:
        return {replies: replies + 1}

    def idle_callbacks(rank: Term) -> dict[Term, Term]:
        """Fire the pending pause future if the engine is idle (before it blocks on its queue)."""
        fire = ~has_work(rank) & pause_future[rank]
        return {
            pause_future: pause_future.set(rank, pause_future[rank] & ~fire),
            replies: if_then_else(fire, replies + 1, replies),
        }

    # --------------------------------------------------------------------------- message delivery
    @machine.action(actor="rank:{rank}", rank=Rank)
    def arrive_from_client(rank: Term) -> Step:
        """A client message reaches the engine's input queue."""
        return Step(~from_client[rank].is_empty(), {
            from_client: from_client.set(rank, from_client[rank].tail()),
            inbox: inbox.set(rank, inbox[rank].append(from_client[rank].head())),
        })

    @machine.action(actor="rank:{rank}", rank=Rank)
    def arrive_from_coordinator(rank: Term) -> Step:
        """A coordinator message (START_DP_WAVE) reaches the engine's input queue."""
        return Step(~from_coordinator[rank].is_empty(), {
            from_coordinator: from_coordinator.set(rank, from_coordinator[rank].tail()),
            inbox: inbox.set(rank, inbox[rank].append(from_coordinator[rank].head())),
        })

    def handling(rank: Term, kind: str) -> Term:
        return conjunction(mode[rank] == Mode.TOP, ~inbox[rank].is_empty(), inbox[rank].head().field("kind") == kind)

    def consume(rank: Term) -> dict[Term, Term]:
        """Pop the handled message; if the engine was idle, its idle callbacks fired first."""
        return {inbox: inbox.set(rank, inbox[rank].tail()), **idle_callbacks(rank)}

    @machine.action(actor="rank:{rank}", rank=Rank)
    def handle_add(rank: Term) -> Step:
        """DPEngineCoreProc.add_request: adopt a newer wave; a stale wave wakes an idle, unpaused engine."""
        request_wave = inbox[rank].head().field("wave")
        stale = (request_wave < wave[rank])
        wake = stale & ~running[rank] & (pause_state[rank] == PauseState.UNPAUSED)
        updates = consume(rank)
        updates.update({
            requests: requests.set(rank, requests[rank] + 1),
            wave: wave.set(rank, if_then_else(request_wave > wave[rank], request_wave, wave[rank])),
            # the mutant no-local-wakeup only tells the coordinator, which excludes this engine
            running: running if variant == NO_LOCAL_WAKEUP else running.set(rank, running[rank] | wake),
            reports: reports.set(rank, if_then_else(
                wake, reports[rank].append(record_of(Report, kind="START_WAVE", wave=wave[rank])), reports[rank])),
        })
        return Step(handling(rank, "ADD"), updates)

    if parameters["abort_request"]:
        @machine.action(actor="rank:{rank}", rank=Rank)
        def handle_abort(rank: Term) -> Step:
            """EngineCore.abort_requests: finish the request as aborted if it is still unfinished (its
            id stays in finished_req_ids, so has_requests() holds until the next schedule)."""
            held = requests[rank] > 0
            updates = consume(rank)
            updates[requests] = requests.set(rank, if_then_else(held, requests[rank] - 1, 0))
            updates[finished_pending] = finished_pending.set(rank, finished_pending[rank] | held)
            if two_step:
                left = if_then_else(held, requests[rank] - 1, 0)
                updates[admitted] = admitted.set(rank, if_then_else(admitted[rank] > left, left, admitted[rank]))
            return Step(handling(rank, "ABORT"), updates)

    @machine.action(actor="rank:{rank}", rank=Rank)
    def handle_start_wave(rank: Term) -> Step:
        """START_DP_WAVE(wave, exclude): join the wave unless excluded or stale (post-fix: or ignoring)."""
        head = inbox[rank].head()
        excluded = head.field("excluding") & (head.field("exclude") == rank)
        applies = ~excluded & (head.field("wave") >= wave[rank])
        if fixed:
            applies = applies & ~ignore[rank]
        if variant == IGNORE_WHILE_PAUSED:
            applies = applies & (pause_state[rank] == PauseState.UNPAUSED)
        updates = consume(rank)
        updates.update({
            wave: wave.set(rank, if_then_else(applies, head.field("wave"), wave[rank])),
            running: running.set(rank, running[rank] | applies),
        })
        return Step(handling(rank, "START_WAVE"), updates)

    @machine.action(actor="rank:{rank}", rank=Rank)
    def handle_pause(rank: Term) -> Step:
        """pause_scheduler(mode): keep → PAUSED_ALL; abort → finish every request (aborted), then
        PAUSED_NEW; wait → PAUSED_NEW. Reply now if idle (pre-fix) or defer (post-fix)."""
        kind = inbox[rank].head().field("kind")
        keep, abort = kind == "PAUSE", kind == "PAUSE_ABORT"
        new_state = if_then_else(keep, PauseState.PAUSED_ALL, PauseState.PAUSED_NEW)
        updates = consume(rank)
        updates[pause_state] = pause_state.set(rank, new_state)
        updates[requests] = requests.set(rank, if_then_else(abort, 0, requests[rank]))
        updates[finished_pending] = finished_pending.set(rank, finished_pending[rank] | (abort & (requests[rank] > 0)))
        if two_step:
            updates[admitted] = admitted.set(rank, if_then_else(abort, 0, admitted[rank]))
        if fixed:  # DPEngineCoreProc._pause_complete: vote, kick-start, always defer
            updates[pending] = pending.set(rank, True)
            updates[running] = running.set(rank, True)
            updates[pause_future] = pause_future.set(rank, True)
        else:  # base _pause_complete: not has_work() (aborted ids keep has_requests() until the next schedule)
            busy = running[rank] | (~abort & unfinished(rank, new_state)) | finished_pending[rank] | (abort & (requests[rank] > 0))
            updates[pause_future] = pause_future.set(rank, busy)
            updates[replies] = if_then_else(busy, replies, replies + 1)
        pausing = disjunction(*[inbox[rank].head().field("kind") == name for name in ("PAUSE", "PAUSE_ABORT", "PAUSE_WAIT")])
        return Step(conjunction(mode[rank] == Mode.TOP, ~inbox[rank].is_empty(), pausing), updates)

    @machine.action(actor="rank:{rank}", rank=Rank)
    def handle_collective_rpc(rank: Term) -> Step:
        """collective_rpc runs in the core thread: its body enters a collective on worker_world."""
        updates = consume(rank)
        updates.update({mode: mode.set(rank, Mode.RPC), **worker_world.post(rank, "rpc")})
        return Step(handling(rank, "RPC"), updates)

    @machine.action(actor="rank:{rank}", rank=Rank)
    def finish_collective_rpc(rank: Term) -> Step:
        return Step((mode[rank] == Mode.RPC) & worker_world.done(rank), {mode: mode.set(rank, Mode.TOP), **reply(rank)})

    if with_barrier:
        @machine.action(actor="rank:{rank}", rank=Rank)
        def handle_barrier(rank: Term) -> Step:
            """DPEngineCoreProc.barrier (test-only utility): dist.barrier on the engines' dp_group."""
            updates = consume(rank)
            updates.update({mode: mode.set(rank, Mode.BARRIER), **engine_dp.post(rank, "barrier")})
            return Step(handling(rank, "BARRIER"), updates)

        @machine.action(actor="rank:{rank}", rank=Rank)
        def finish_barrier(rank: Term) -> Step:
            return Step((mode[rank] == Mode.BARRIER) & engine_dp.done(rank),
                        {mode: mode.set(rank, Mode.TOP), **reply(rank), **engine_dp.consume(rank)})

    @machine.action(actor="rank:{rank}", rank=Rank)
    def handle_resume(rank: Term) -> Step:
        """resume_scheduler: pre-fix unpause (+ start_wave); post-fix error / no-op / unpause + barrier."""
        updates = consume(rank)
        if not fixed:
            wake = ~running[rank] & (requests[rank] > 0)
            updates.update({
                pause_state: pause_state.set(rank, PauseState.UNPAUSED),
                reports: reports.set(rank, if_then_else(
                    wake, reports[rank].append(record_of(Report, kind="START_WAVE", wave=wave[rank])), reports[rank])),
                replies: updates[replies] + 1,
            })
            return Step(handling(rank, "RESUME"), updates)
        in_flight = pending[rank] | (running[rank] & ignore[rank])
        barrier = ~in_flight & ~running[rank]
        local = if_then_else(requests[rank] > 0, 1, 0)  # has_unfinished_requests() once UNPAUSED
        posted = engine_dp.post(rank, "resume_max", local)
        updates.update({
            pause_state: pause_state.set(rank, if_then_else(barrier, PauseState.UNPAUSED, pause_state[rank])),
            ignore: ignore.set(rank, ignore[rank] & ~barrier),
            mode: mode.set(rank, if_then_else(barrier, Mode.RESUME_BARRIER, Mode.TOP)),
            engine_dp.queue: if_then_else(barrier, posted[engine_dp.queue], engine_dp.queue),
            replies: if_then_else(barrier, updates[replies], updates[replies] + 1),  # error or no-op: reply now
        })
        return Step(handling(rank, "RESUME"), updates)

    if fixed:
        @machine.action(actor="rank:{rank}", rank=Rank)
        def finish_resume(rank: Term) -> Step:
            """The resume barrier returned: any rank with work starts the wave on every rank."""
            return Step((mode[rank] == Mode.RESUME_BARRIER) & engine_dp.done(rank), {
                mode: mode.set(rank, Mode.TOP),
                running: running.set(rank, engine_dp.result_of(rank) > 0),
                **reply(rank),
                **engine_dp.consume(rank),
            })

    @machine.action(actor="rank:{rank}", rank=Rank)
    def notify_idle(rank: Term) -> Step:
        """_process_input_queue: an idle engine fires its idle callbacks before blocking."""
        return Step(conjunction(mode[rank] == Mode.TOP, inbox[rank].is_empty(), ~has_work(rank), pause_future[rank]),
                    idle_callbacks(rank))

    # ------------------------------------------------------------------------------- the busy loop
    @machine.action(actor="rank:{rank}", rank=Rank)
    def step(rank: Term) -> Step:
        """_process_engine_step, then (if nothing ran) the dummy batch or the idle `continue`."""
        executed = unfinished(rank)  # schedule() finds tokens: none when PAUSED_ALL, no admission unless UNPAUSED
        dummy = ~executed & (unfinished(rank) | running[rank])
        forward = executed | dummy
        posted = worker_dp.post(rank, "forward")
        return Step(conjunction(mode[rank] == Mode.TOP, inbox[rank].is_empty(), has_work(rank)), {
            finished_pending: finished_pending.set(rank, False),  # schedule() clears finished ids
            mode: mode.set(rank, if_then_else(executed, Mode.FORWARD_REAL, if_then_else(dummy, Mode.FORWARD_DUMMY, Mode.TOP))),
            worker_dp.queue: if_then_else(forward, posted[worker_dp.queue], worker_dp.queue),
        })

    @machine.action(actor="rank:{rank}", rank=Rank)
    def finish_forward(rank: Term) -> Step:
        """The forward's DP all-reduce returned; _has_global_unfinished_reqs counts the step."""
        real = mode[rank] == Mode.FORWARD_REAL
        extra: dict[Term, Term] = {}
        if two_step:  # the admitted requests finish; when UNPAUSED the waiting ones are admitted now
            finishing = admitted[rank]
            remaining = if_then_else(real, requests[rank] - finishing, requests[rank])
            now_admitted = if_then_else(real, if_then_else(pause_state[rank] == PauseState.UNPAUSED, remaining, 0), admitted[rank])
            extra[admitted] = admitted.set(rank, now_admitted)
            local = if_then_else(unfinished(rank, local=remaining, admitted_now=now_admitted), 1, 0)
        else:  # requests finish in the forward that admits them
            finishing = requests[rank]
            remaining = if_then_else(real, 0, requests[rank])
            local = if_then_else(unfinished(rank, local=remaining), 1, 0)
        next_count = counter[rank] + 1
        sync = next_count == sync_interval
        vote = (local, if_then_else(pending[rank], 1, 0)) if fixed else (local,)
        posted = engine_dp.post(rank, "sync_sum" if fixed else "sync_max", vote)
        return Step(((mode[rank] == Mode.FORWARD_REAL) | (mode[rank] == Mode.FORWARD_DUMMY)) & worker_dp.done(rank), {
            requests: requests.set(rank, remaining),
            finished_pending: finished_pending.set(rank, finished_pending[rank] | (real & (finishing > 0))),
            **extra,
            counter: counter.set(rank, if_then_else(sync, 0, next_count)),
            running: running.set(rank, running[rank] | ~sync),  # off the boundary: returns True
            mode: mode.set(rank, if_then_else(sync, Mode.SYNC, Mode.TOP)),
            engine_dp.queue: if_then_else(sync, posted[engine_dp.queue], engine_dp.queue),
        })

    @machine.action(actor="rank:{rank}", rank=Rank)
    def finish_sync(rank: Term) -> Step:
        """The engine all-reduce returned: decide whether the wave goes on; rank 0 reports its end."""
        unfinished_sum = engine_dp.result_of(rank, 0)
        updates: dict[Term, Term] = {mode: mode.set(rank, Mode.TOP), **engine_dp.consume(rank)}
        if fixed:
            still, consensus = sync_dp_state(unfinished_sum, engine_dp.result_of(rank, 1), size)
            updates[ignore] = ignore.set(rank, ignore[rank] | consensus)
            updates[pending] = pending.set(rank, pending[rank] & ~consensus)
        else:
            still = unfinished_sum > 0
        ends = ~still
        updates.update({
            running: running.set(rank, still),
            wave: wave.set(rank, if_then_else(ends, wave[rank] + 1, wave[rank])),
            reports: reports.set(rank, if_then_else(
                ends & (rank == 0), reports[rank].append(record_of(Report, kind="WAVE_COMPLETE", wave=wave[rank])), reports[rank])),
        })
        return Step((mode[rank] == Mode.SYNC) & engine_dp.done(rank), updates)

    return message, has_work


def sync_dp_state(unfinished_sum: Term, votes: Term, size: Term | int) -> tuple[Term, Term]:
    """ParallelConfig.sync_dp_state's decision from the SUM all-reduce of [unfinished, pending_pause]:
    (keep running, pause consensus). Shared by the model and by its lemma for all sizes."""
    return (unfinished_sum > 0) | (votes % size != 0), votes == size
