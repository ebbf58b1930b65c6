"""dp-pause: data-parallel engine waves and the two-phase pause of vLLM PR #39366.

Mirrors vLLM **v0.20.0** (``pre-fix``) and **v0.21.0** (``post-fix``), ``vllm/v1/engine/core.py``
(``DPEngineCoreProc``: ``run_busy_loop``, ``_process_input_queue``, ``add_request``,
``_handle_client_request``, ``pause_scheduler``/``_pause_complete``, ``resume_scheduler``,
``_has_global_unfinished_reqs``), ``vllm/config/parallel.py`` (``has_unfinished_dp`` MAX,
``sync_dp_state`` SUM), ``vllm/v1/engine/coordinator.py`` and ``vllm/v1/engine/core_client.py``.

The story (vLLM issue #36594). DP engines of a MoE model run in *waves*: while a wave runs every
engine does one forward per loop iteration, a dummy one if it has nothing to run, because every
forward posts an all-reduce across the DP ranks. A client adds a request to engine 0 and, since
it believes the engines idle, asks the coordinator to start a wave (FIRST_REQ); the coordinator
broadcasts START_DP_WAVE. The client then pauses every engine and, once all pauses returned,
runs a ``collective_rpc`` (say, a weight update) whose collective spans every rank. Before the
fix an idle engine returned from pause at once, and a START_DP_WAVE that was still in flight
could wake it afterwards: it entered a dummy forward while its peer was inside the weight-update
collective. Each waits for the other: a hang. The fix pauses in two phases: each engine keeps
stepping with ``pending_pause`` set until an all-reduce (SUM of [unfinished, pending]) shows that
every rank has paused; from that consensus on START_DP_WAVE is ignored, and the wave ends.

Communicators (each its own ordered op sequence per rank):
- ``engine_dp``: the engine-level stateless gloo ``dp_group`` of the engine cores. It carries the
  all-reduce every ``sync_interval`` steps (vLLM: 32): ``sync_max`` (pre-fix
  ``has_unfinished_dp``, MAX of the local flag) or ``sync_sum`` (post-fix ``sync_dp_state``, SUM
  of [unfinished, pending_pause]), and post-fix ``resume_max``, the MAX all-reduce that
  ``resume_scheduler`` uses as a barrier.
- ``worker_dp``: the workers' DP group; ``coordinate_batch_across_dp`` all-reduces on it in every
  forward, real or dummy (``forward``). The core thread blocks in ``execute_model`` /
  ``execute_dummy_batch`` until it completes.
- ``worker_world``: the group a user's ``collective_rpc`` body uses (a weight update across every
  rank's workers, ``rpc``). It is distinct from ``worker_dp``, so the pre-fix failure is a hang
  (each rank blocks in a different group), not a mismatch.

Faithfulness notes (read from the v0.20.0/v0.21.0 wheels):
- ``_has_global_unfinished_reqs`` returns True off the ``sync_interval`` boundary, so any stepped
  iteration forces ``engines_running``; every rank bumps ``current_wave`` when a wave ends and
  only rank 0 tells the coordinator (``wave_complete``).
- PAUSED_ALL (keep) makes the unfinished count 0, so kept requests do not keep ``has_work()``
  true; ``has_requests()`` also counts requests finished in the last step until the next
  ``schedule()`` (``finished_pending``).
- The FIRST_REQ path's START_DP_WAVE excludes no engine: the client sends the engine identity as
  bytes and the engine compares it with its integer index (core_client.py, core.py), so it never
  matches. START_DP_WAVE from an engine's ``start_wave`` excludes that engine.
- The client stamps requests with its published view of the wave and sends FIRST_REQ when its
  view says the engines are idle, then marks them running; the coordinator's publication later
  overwrites the view. Replies reach the client at once (their delay only delays the client).
- Requests run one forward (they finish in the forward that first schedules them).
"""

from __future__ import annotations

from collections.abc import Mapping

from lockstep.spec.collectives import Communicator, OpSpec, all_reduce_max, all_reduce_sum
from lockstep.spec.machine import Machine, Step
from lockstep.spec.protocol import InstanceSpec, ParameterSpec, Protocol, VariantSpec
from lockstep.spec.sorts import BOOL, IndexSort, MapSort, SequenceSort, enum, integers, record
from lockstep.spec.terms import Term, all_of, conjunction, if_then_else, record_of

PRE_FIX, POST_FIX = "pre-fix", "post-fix"
# A rejected alternative of PR #39366's discussion, as a mutant (it shows why the fix has its shape):
IGNORE_WHILE_PAUSED = "ignore-wave-while-paused"  # #36608/#38009: v0.20.0 + drop START_DP_WAVE while paused

MessageKind = enum("MessageKind", ["ADD", "START_WAVE", "PAUSE", "RPC", "RESUME"])
ReportKind = enum("ReportKind", ["WAVE_COMPLETE", "START_WAVE"])
Mode = enum("Mode", ["TOP", "FORWARD_REAL", "FORWARD_DUMMY", "SYNC", "RPC", "RESUME_BARRIER"])
PauseState = enum("PauseState", ["UNPAUSED", "PAUSED_NEW", "PAUSED_ALL"])
ClientPhase = enum("ClientPhase", ["REQUESTS", "PAUSE", "RPC", "RESUME", "DONE"])


def build(variant: str, parameters: Mapping[str, int]) -> Machine:
    """The dp-pause machine for ``variant`` at the given parameter values."""
    fixed = variant == POST_FIX
    size, request_count = parameters["ranks"], parameters["requests"]
    sync_interval, max_wave = parameters["sync_interval"], parameters["max_wave"]
    machine = Machine(f"dp-pause/{variant}")
    machine.hang_bound = parameters["hang_bound"]  # type: ignore[attr-defined]
    Rank = IndexSort("Rank", size)
    Wave = integers(0, max_wave)
    # START_DP_WAVE(wave, exclude): `excluding` is false on the FIRST_REQ path (exclusion ineffective).
    Message = record("Message", kind=MessageKind, wave=Wave, excluding=BOOL, exclude=Rank)
    Report = record("Report", kind=ReportKind, wave=Wave)
    capacity = request_count + 3  # ADD per request, PAUSE, RPC, RESUME
    Inbox = SequenceSort(Message, capacity + request_count + 2)
    FromClient = SequenceSort(Message, capacity)
    FromCoordinator = SequenceSort(Message, request_count + 2)
    Reports = SequenceSort(Report, max_wave + 2)
    Count = integers(0, size)
    Requests = integers(0, request_count)

    def per_rank(sort: object, value: object) -> tuple[object, ...]:
        return tuple(value for _ in range(size))

    # ------------------------------------------------------------------ engine cores (one per rank)
    mode = machine.variable("mode", MapSort(Rank, Mode), per_rank(Mode, 0), "where the core thread is")
    running = machine.variable("engines_running", MapSort(Rank, BOOL), per_rank(BOOL, False))
    wave = machine.variable("current_wave", MapSort(Rank, Wave), per_rank(Wave, 0))
    counter = machine.variable("step_counter", MapSort(Rank, integers(0, sync_interval - 1)), per_rank(None, 0))
    pause_state = machine.variable("pause_state", MapSort(Rank, PauseState), per_rank(PauseState, 0))
    requests = machine.variable("requests", MapSort(Rank, Requests), per_rank(None, 0), "unfinished local requests")
    finished_pending = machine.variable("finished_pending", MapSort(Rank, BOOL), per_rank(BOOL, False))
    pause_future = machine.variable("pause_future", MapSort(Rank, BOOL), per_rank(BOOL, False), "a deferred pause reply")
    inbox = machine.variable("input_queue", MapSort(Rank, Inbox), per_rank(None, ()))
    from_client = machine.variable("channel.client", MapSort(Rank, FromClient), per_rank(None, ()))
    from_coordinator = machine.variable("channel.coordinator", MapSort(Rank, FromCoordinator), per_rank(None, ()))
    reports = machine.variable("channel.to_coordinator", MapSort(Rank, Reports), per_rank(None, ()))
    if fixed:
        pending = machine.variable("pending_pause", MapSort(Rank, BOOL), per_rank(BOOL, False))
        ignore = machine.variable("ignore_start_dp_wave", MapSort(Rank, BOOL), per_rank(BOOL, False))

    engine_ops: dict[str, OpSpec] = {"sync_sum": all_reduce_sum(), "resume_max": all_reduce_max()} if fixed else {"sync_max": all_reduce_max()}
    engine_dp = Communicator(machine, "engine_dp", Rank, engine_ops, payload=integers(0, 1), width=2 if fixed else 1,
                             description="engine-level gloo dp_group")
    worker_dp = Communicator(machine, "worker_dp", Rank, {"forward": all_reduce_sum()}, payload=integers(0, 0),
                             description="workers' DP group: coordinate_batch_across_dp in every forward")
    worker_world = Communicator(machine, "worker_world", Rank, {"rpc": all_reduce_sum()}, payload=integers(0, 0),
                                description="the group a collective_rpc body uses")

    # ------------------------------------------------------------------------------- coordinator
    coordinator_running = machine.variable("coordinator.engines_running", BOOL, False)
    coordinator_wave = machine.variable("coordinator.current_wave", Wave, 0)
    first_requests = machine.variable("channel.first_request", SequenceSort(Wave, request_count), ())

    # ------------------------------------------------------------------------------------ client
    phase = machine.variable("client.phase", ClientPhase, 0)
    view_running = machine.variable("client.engines_running", BOOL, False)
    view_wave = machine.variable("client.current_wave", Wave, 0)
    sent = machine.variable("client.requests_sent", Requests, 0)
    delivered = machine.variable("client.sent_to", MapSort(Rank, BOOL), per_rank(BOOL, False), "this phase's call sent to rank")
    replies = machine.variable("client.replies", Count, 0, "replies to this phase's call")

    def message(kind: str, wave_value: object = 0, exclude: Term | None = None) -> Term:
        return record_of(Message, kind=kind, wave=wave_value, excluding=exclude is not None,
                         exclude=0 if exclude is None else exclude)

    def unfinished(rank: Term, state: Term | None = None) -> Term:
        """scheduler.get_num_unfinished_requests() > 0 (pause-aware: 0 when PAUSED_ALL)."""
        current = pause_state[rank] if state is None else state
        return (current != PauseState.PAUSED_ALL) & (requests[rank] > 0)

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
            running: running.set(rank, running[rank] | wake),
            reports: reports.set(rank, if_then_else(
                wake, reports[rank].append(record_of(Report, kind="START_WAVE", wave=wave[rank])), reports[rank])),
        })
        return Step(handling(rank, "ADD"), updates)

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
        """pause_scheduler(mode="keep"): PAUSED_ALL; reply now if idle (pre-fix) or defer (post-fix)."""
        updates = consume(rank)
        updates[pause_state] = pause_state.set(rank, PauseState.PAUSED_ALL)
        if fixed:  # DPEngineCoreProc._pause_complete: vote, kick-start, always defer
            updates[pending] = pending.set(rank, True)
            updates[running] = running.set(rank, True)
            updates[pause_future] = pause_future.set(rank, True)
        else:  # base _pause_complete: not has_work()
            idle = ~has_work(rank, state=PauseState.PAUSED_ALL)
            updates[pause_future] = pause_future.set(rank, ~idle)
            updates[replies] = if_then_else(idle, replies + 1, replies)
        return Step(handling(rank, "PAUSE"), updates)

    @machine.action(actor="rank:{rank}", rank=Rank)
    def handle_collective_rpc(rank: Term) -> Step:
        """collective_rpc runs in the core thread: its body enters a collective on worker_world."""
        updates = consume(rank)
        updates.update({mode: mode.set(rank, Mode.RPC), **worker_world.post(rank, "rpc")})
        return Step(handling(rank, "RPC"), updates)

    @machine.action(actor="rank:{rank}", rank=Rank)
    def finish_collective_rpc(rank: Term) -> Step:
        return Step((mode[rank] == Mode.RPC) & worker_world.done(rank), {mode: mode.set(rank, Mode.TOP), **reply(rank)})

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
        executed = (pause_state[rank] == PauseState.UNPAUSED) & (requests[rank] > 0)
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
        remaining = if_then_else(real, 0, requests[rank])
        local = if_then_else((pause_state[rank] != PauseState.PAUSED_ALL) & (remaining > 0), 1, 0)
        next_count = counter[rank] + 1
        sync = next_count == sync_interval
        vote = (local, if_then_else(pending[rank], 1, 0)) if fixed else (local,)
        posted = engine_dp.post(rank, "sync_sum" if fixed else "sync_max", vote)
        return Step(((mode[rank] == Mode.FORWARD_REAL) | (mode[rank] == Mode.FORWARD_DUMMY)) & worker_dp.done(rank), {
            requests: requests.set(rank, remaining),
            finished_pending: finished_pending.set(rank, finished_pending[rank] | (real & (requests[rank] > 0))),
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

    # ------------------------------------------------------------------------------- coordinator
    def broadcast(wave_value: Term, exclude: Term | None) -> dict[Term, Term]:
        return {from_coordinator: machine_map(Rank, lambda r: from_coordinator[r].append(message("START_WAVE", wave_value, exclude)), from_coordinator)}

    @machine.action(actor="coordinator")
    def coordinator_first_request() -> Step:
        """FIRST_REQ: if no wave runs, start one (exclusion is ineffective on this path, see module doc)."""
        starts = ~coordinator_running
        started = broadcast(coordinator_wave, None)[from_coordinator]
        return Step(~first_requests.is_empty(), {
            first_requests: first_requests.tail(),
            coordinator_running: True,
            from_coordinator: if_then_else(starts, started, from_coordinator),
        })

    @machine.action(actor="coordinator", rank=Rank)
    def coordinator_report(rank: Term) -> Step:
        """wave_complete(w) ends the wave; start_wave(w) from an engine restarts it, excluding that engine."""
        head = reports[rank].head()
        complete = (head.field("kind") == ReportKind.WAVE_COMPLETE) & (coordinator_wave <= head.field("wave"))
        restart = (head.field("kind") == ReportKind.START_WAVE) & (
            (head.field("wave") > coordinator_wave) | ((head.field("wave") == coordinator_wave) & ~coordinator_running))
        started = broadcast(head.field("wave"), rank)[from_coordinator]
        return Step(~reports[rank].is_empty(), {
            reports: reports.set(rank, reports[rank].tail()),
            coordinator_wave: if_then_else(complete, head.field("wave") + 1, if_then_else(restart, head.field("wave"), coordinator_wave)),
            coordinator_running: if_then_else(complete, False, coordinator_running | restart),
            from_coordinator: if_then_else(restart, started, from_coordinator),
        })

    # ------------------------------------------------------------------------------------ client
    @machine.action(actor="client")
    def client_read_publication() -> Step:
        """The client's stats task applies the coordinator's latest publication (wave, running).

        The coordinator publishes on every change and the client applies the last one it has, so
        reading the coordinator's current values at an arbitrary later moment is the same thing.
        The view is read only to add requests, so it is not updated once none are left to add."""
        differs = (view_running != coordinator_running) | (view_wave != coordinator_wave)
        return Step(differs & (sent < request_count), {view_running: coordinator_running, view_wave: coordinator_wave})

    @machine.action(actor="client", rank=Rank)
    def client_add_request(rank: Term) -> Step:
        """add_request_async: ADD stamped with the client's wave; FIRST_REQ if it believes engines idle."""
        last = sent + 1 == request_count
        return Step((phase == ClientPhase.REQUESTS) & (sent < request_count), {
            from_client: from_client.set(rank, from_client[rank].append(message("ADD", view_wave))),
            first_requests: if_then_else(view_running, first_requests, first_requests.append(view_wave)),
            view_running: True,
            sent: sent + 1,
            phase: if_then_else(last, ClientPhase.PAUSE, phase),
        })

    # With settle_before_resume, the client sends resume only once every control message already
    # sent (FIRST_REQ, START_DP_WAVE, start_wave/wave_complete) has reached its receiver's queue.
    settle = parameters["settle_before_resume"] == 1
    settled = first_requests.is_empty() & all_of(Rank, lambda r: from_coordinator[r].is_empty() & reports[r].is_empty())

    def client_call(name: str, this: str, kind: str, following: str) -> None:
        def call(rank: Term) -> Step:
            ready = (phase == this) & ~delivered[rank]
            if kind == "RESUME" and settle:
                ready = ready & settled
            return Step(ready, {
                from_client: from_client.set(rank, from_client[rank].append(message(kind))),
                delivered: delivered.set(rank, True),
            })

        def advance() -> Step:
            return Step((phase == this) & (replies == size), {
                phase: following,
                delivered: machine_map(Rank, lambda r: False, delivered),
                replies: 0,
            })

        machine.add_action(f"client_{name}", call, actor="client", rank=Rank, description=f"send {kind} to one engine")
        machine.add_action(f"client_{name}_returned", advance, actor="client", description=f"every engine answered {kind}")

    client_call("pause", "PAUSE", "PAUSE", "RPC")
    client_call("collective_rpc", "RPC", "RPC", "RESUME")
    client_call("resume", "RESUME", "RESUME", "DONE")

    if size >= 3:  # rank 0 reports wave_complete; the other ranks are interchangeable
        machine.declare_symmetric(Rank, tuple(range(1, size)))

    # -------------------------------------------------------------------------------- properties
    quiet = all_of(Rank, lambda r: conjunction(
        mode[r] == Mode.TOP, inbox[r].is_empty(), from_client[r].is_empty(), from_coordinator[r].is_empty(),
        reports[r].is_empty(), ~has_work(r)))
    machine.set_final((phase == ClientPhase.DONE) & first_requests.is_empty() & quiet)
    machine.always(
        "quiescent_during_rpc",
        all_of(Rank, lambda r: (mode[r] == Mode.RPC).implies(
            all_of(Rank, lambda other: (mode[other] != Mode.FORWARD_REAL) & (mode[other] != Mode.FORWARD_DUMMY)))),
        "S1: no rank is in a forward while a rank runs the collective_rpc issued after every pause returned",
    )
    machine.sometimes("resumed", (phase == ClientPhase.DONE), "the scenario can run to its end")
    if fixed:
        machine.always(
            "paused_ranks_agree",
            all_of(Rank, lambda r: all_of(Rank, lambda other: ((mode[r] == Mode.TOP) & (mode[other] == Mode.TOP)
                   & (counter[r] == 0) & (counter[other] == 0) & ~running[r] & ~running[other]).implies(ignore[r] == ignore[other]))),
            "S3: idle ranks agree on ignore_start_dp_wave",
        )
    return machine


def sync_dp_state(unfinished_sum: Term, votes: Term, size: Term | int) -> tuple[Term, Term]:
    """ParallelConfig.sync_dp_state's decision from the SUM all-reduce of [unfinished, pending_pause]:
    (keep running, pause consensus). Shared by the model and by its lemma for all sizes."""
    return (unfinished_sum > 0) | (votes % size != 0), votes == size


def machine_map(sort: IndexSort, body: object, like: Term) -> Term:
    """A per-rank map built from ``body(rank)``, with the value sort of ``like``."""
    from lockstep.spec.sorts import MapSort as _MapSort
    from lockstep.spec.terms import map_of

    assert isinstance(like.sort, _MapSort)
    return map_of(sort, body, like.sort.value)  # type: ignore[arg-type]


PROTOCOL = Protocol(
    name="dp-pause",
    title="DP engine waves and the two-phase pause",
    change="vLLM PR #39366 (issue #36594)",
    variants=(
        VariantSpec(PRE_FIX, "single-phase pause: an idle engine returns from pause at once", "vLLM v0.20.0"),
        VariantSpec(POST_FIX, "two-phase pause with the SUM all-reduce vote and ignore_start_dp_wave", "vLLM v0.21.0"),
        VariantSpec(IGNORE_WHILE_PAUSED, "mutant: a paused engine drops START_DP_WAVE (breaks liveness)",
                    "v0.20.0 + PRs #36608/#38009 (closed)"),
    ),
    parameters=(
        ParameterSpec("ranks", 2, "DP engine cores", minimum=2, maximum=6),
        ParameterSpec("requests", 1, "requests the client adds before pausing", minimum=1, maximum=3),
        ParameterSpec("sync_interval", 1, "steps between engine all-reduces (vLLM: 32)", minimum=1, maximum=32),
        ParameterSpec("max_wave", 4, "largest wave number the model tracks (default: requests + 3)", minimum=1, maximum=8,
                      derived=lambda values: values["requests"] + 3),
        ParameterSpec("settle_before_resume", 1, "1: control messages in flight reach their queues before the client resumes", minimum=0, maximum=1),
        ParameterSpec("hang_bound", 24, "steps within which every posted collective must complete", minimum=1, maximum=64),
    ),
    instances=(
        InstanceSpec(
            "seed",
            "issue #36594: requests on any rank, pause(keep) to all, collective_rpc after all pauses returned, resume",
            {},
            {PRE_FIX: "violated", POST_FIX: "holds", IGNORE_WHILE_PAUSED: "violated"},
        ),
        InstanceSpec(
            "stale-wave-after-resume",
            "finding: the seed without settle_before_resume; a FIRST_REQ handled after the pause wave ended "
            "broadcasts START_DP_WAVE, one rank drops it while paused, its peer applies it after resume and "
            "steps a dummy batch alone",
            {"settle_before_resume": 0},
            {PRE_FIX: "violated", POST_FIX: "violated", IGNORE_WHILE_PAUSED: "violated"},
        ),
    ),
    build=build,
    rank_parameter="ranks",
)
