"""The state of the dp-pause model: its variants, its options, its sorts and every state variable,
declared once.

``declare`` turns the protocol's parameters into ``Options``, builds the sorts, and declares the
state variables of the engine cores, the three communicators, the coordinator and the client, in
that order. It returns them as a ``State`` whose fields are Terms, which ``engine.py``,
``coordinator.py``, ``client.py`` and ``properties.py`` share: each action reads and writes the
fields it needs, so no module looks a variable up by name.

A variable that only some variants or parameters have (``pending_pause`` post-fix,
``running_requests`` with ``request_steps`` = 2, ...) is still a field, a Term of the variable's
name and sort: the machine rejects (``DefinitionError``) an action that reads or writes a variable
it does not have, so an action touches one only under the ``if`` that says when it exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lockstep.models.dp_pause.releases import RELEASES, Release, release_of
from lockstep.spec.collectives import Communicator, OpSpec, all_reduce_max, all_reduce_sum
from lockstep.spec.collectives import barrier as barrier_op
from lockstep.spec.expressions import Variable
from lockstep.spec.machine import Machine
from lockstep.spec.protocol import POST_FIX as POST_FIX  # the variant names, defined once in spec
from lockstep.spec.protocol import PRE_FIX as PRE_FIX
from lockstep.spec.sorts import BOOL, IndexSort, MapSort, RecordSort, SequenceSort, Sort, enum, integers, record
from lockstep.spec.terms import Term, TermLike, record_of

# Rejected alternatives of PR #39366's discussion, as mutants (they show why the fix has its shape):
IGNORE_WHILE_PAUSED = "ignore-wave-while-paused"  # #36608/#38009: v0.20.0 + drop START_DP_WAVE while paused
NO_LOCAL_WAKEUP = "no-local-wakeup"  # an intermediate #39366: add_request's stale branch without running = True

MessageKind = enum(
    "MessageKind",
    ["ADD", "START_WAVE", "PAUSE", "RPC", "RESUME", "PAUSE_ABORT", "PAUSE_WAIT", "BARRIER", "ABORT", "SLEEP", "WAKE"],
)
ReportKind = enum("ReportKind", ["WAVE_COMPLETE", "START_WAVE"])
# DUMMY_SKIPPED (v0.25.0 on): an asleep engine in a wave skips the dummy batch; DEVICE_SYNC: the idle
# callback waits for the device (v0.29.0 on: _finish_pause's collective_rpc("synchronize_device"); v0.25.0
# on, a sleep: model_executor.sleep → Worker.sleep's torch.accelerator.synchronize)
Mode = enum(
    "Mode",
    [
        "TOP",
        "FORWARD_REAL",
        "FORWARD_DUMMY",
        "SYNC",
        "RPC",
        "RESUME_BARRIER",
        "BARRIER",
        "DUMMY_SKIPPED",
        "DEVICE_SYNC",
    ],
)
PauseState = enum("PauseState", ["UNPAUSED", "PAUSED_NEW", "PAUSED_ALL"])
ClientPhase = enum("ClientPhase", ["REQUESTS", "PAUSE", "RPC", "RESUME", "DONE"])
PauseMode = enum("PauseMode", ["KEEP", "ABORT", "WAIT"])


@dataclass(frozen=True)
class Variant:
    """The variant being built (``PRE_FIX``, ``POST_FIX`` or a mutant)."""

    name: str

    @property
    def fixed(self) -> bool:
        """The two-phase pause of v0.21.0 (post-fix, its mutant no-local-wakeup and the later releases)."""
        return self.name in (POST_FIX, NO_LOCAL_WAKEUP) or self.name in RELEASES

    @property
    def release(self) -> Release:
        """What the later release this variant mirrors changed (nothing for the v0.20.0/v0.21.0 variants)."""
        return release_of(self.name)


@dataclass(frozen=True)
class Options:
    """The protocol's parameters, typed (see ``model.PROTOCOL`` for each one's meaning)."""

    ranks: int
    requests: int  # added before pausing
    late_requests: int  # added in the phases late_window names
    late_window: int  # bit mask: 1 pausing, 2 paused, 4 resuming, 8 resumed, 16 between two resume calls
    pause_modes: int  # bit mask: 1 keep, 2 abort, 4 wait
    two_step: bool  # request_steps = 2 or 0: scheduler.running is tracked (admitted requests)
    any_length: bool  # request_steps = 0: a request finishes after any number of forwards (the forward chooses)
    barrier: bool  # rpc = 1: the client runs the test-only barrier instead of collective_rpc
    resumes: int
    sync_interval: int
    max_wave: int
    settle_before_resume: int
    abort_request: int  # 1: abort the last request once; free_client: up to this many ABORTs
    stale_publications: int
    lazy_first_request: bool
    bounded_liveness: bool
    response_bound: int
    fair_liveness: bool
    sleep_level: int  # 0: pause_generation / resume_generation; 1: sleep(level=1) / wake_up (later releases)
    clients: int  # front-end clients (API server processes); the second adds one request (clients.py)
    sleep_with_pause: int  # sleep_level = 1: 1 pause_generation, then sleep; 2 sleep, then pause_generation
    partial_wake: bool  # sleep_level = 1, resumes = 2: wake_up(["weights"]), then wake_up(["kv_cache"])
    cycles: int  # pause_cycles: pause, collective_rpc (or barrier), resume, as many times
    free: bool  # free_client: the client's calls in any order and number, within the budgets (client.py)

    @property
    def total(self) -> int:
        """Every request the client may add."""
        return self.requests + self.late_requests

    @property
    def resume_calls(self) -> int:
        """Every resume_generation (or wake_up) call the free client may make: ``resumes`` per pause cycle."""
        return self.resumes * self.cycles

    @property
    def every_request(self) -> int:
        """Every request the front-end clients may add together (the second client adds one)."""
        return self.total + self.clients - 1


def options_of(parameters: Mapping[str, int]) -> Options:
    return Options(
        ranks=parameters["ranks"],
        requests=parameters["requests"],
        late_requests=parameters["late_requests"],
        late_window=parameters["late_window"],
        pause_modes=parameters["pause_modes"],
        two_step=parameters["request_steps"] in (0, 2),
        any_length=parameters["request_steps"] == 0,
        barrier=parameters["rpc"] == 1,
        resumes=parameters["resumes"],
        sync_interval=parameters["sync_interval"],
        max_wave=parameters["max_wave"],
        settle_before_resume=parameters["settle_before_resume"],
        abort_request=parameters["abort_request"],
        stale_publications=parameters["stale_publications"],
        lazy_first_request=bool(parameters["lazy_first_request"]),
        bounded_liveness=bool(parameters["bounded_liveness"]),
        response_bound=parameters["response_bound"],
        fair_liveness=bool(parameters["fair_liveness"]),
        sleep_level=parameters.get("sleep_level", 0),
        clients=parameters.get("clients", 1),
        sleep_with_pause=parameters.get("sleep_with_pause", 0),
        partial_wake=bool(parameters.get("partial_wake", 0)),
        cycles=parameters.get("pause_cycles", 1),
        free=bool(parameters.get("free_client", 0)),
    )


def pause_modes(options: Options) -> tuple[tuple[Term, Term], ...]:
    """The modes ``pause_modes`` allows, in PauseMode order, each with the message it sends."""
    every = (
        (PauseMode.KEEP, MessageKind.PAUSE),
        (PauseMode.ABORT, MessageKind.PAUSE_ABORT),
        (PauseMode.WAIT, MessageKind.PAUSE_WAIT),
    )
    return tuple(pair for bit, pair in enumerate(every) if options.pause_modes & (1 << bit))


@dataclass(frozen=True)
class Sorts:
    """The sorts of the model's values."""

    Rank: IndexSort
    Wave: Sort
    # START_DP_WAVE(wave, exclude): `excluding` is false on the FIRST_REQ path (exclusion ineffective).
    Message: RecordSort
    Report: RecordSort
    Publication: RecordSort
    Inbox: SequenceSort
    FromClient: SequenceSort
    FromCoordinator: SequenceSort
    Reports: SequenceSort
    Publications: SequenceSort
    Requests: Sort


def sorts_of(options: Options) -> Sorts:
    Rank, Wave, count = IndexSort("Rank", options.ranks), integers(0, options.max_wave), options.every_request
    Message = record("Message", kind=MessageKind, wave=Wave, excluding=BOOL, exclude=Rank)
    Report = record("Report", kind=ReportKind, wave=Wave)
    Publication = record("Publication", wave=Wave, running=BOOL)
    # ADD per request, PAUSE, RPC, RESUME per call, the ABORT of a request
    capacity = count + 2 + options.resumes + options.abort_request
    return Sorts(
        Rank=Rank,
        Wave=Wave,
        Message=Message,
        Report=Report,
        Publication=Publication,
        Inbox=SequenceSort(Message, capacity + count + 2),
        FromClient=SequenceSort(Message, capacity),
        FromCoordinator=SequenceSort(Message, count + 2),
        Reports=SequenceSort(Report, options.max_wave + 2),
        Publications=SequenceSort(Publication, options.stale_publications),
        Requests=integers(0, count),
    )


@dataclass(frozen=True)
class SecondClient:
    """A second API server's client (``clients`` = 2): its socket to every engine, its stats task's
    view of the coordinator's publications, and whether it has added its one request."""

    channel: Term  # channel.second_client: per rank, its ADD on the way to the engine
    running: Term  # second_client.engines_running: its view
    wave: Term  # second_client.current_wave: its view
    sent: Term  # second_client.sent: it added its request


@dataclass(frozen=True)
class State:
    """The options, sorts, communicators and state variables (Terms) of one built machine; the
    comment after a field gives its variable's name where it differs, and when it exists."""

    options: Options
    sorts: Sorts
    Rank: IndexSort
    release: Release  # what the later release changed (releases.py); nothing for v0.20.0/v0.21.0
    # engine cores (vllm/v1/engine/core.py, DPEngineCoreProc), per rank
    mode: Term  # where the core thread is
    engines_running: Term
    current_wave: Term
    step_counter: Term
    pause_state: Term
    requests: Term  # unfinished local requests
    finished_pending: Term  # requests finished since the last schedule() (has_requests() still counts them)
    pause_future: Term  # a deferred pause reply
    input_queue: Term
    from_client: Term  # channel.client
    from_coordinator: Term  # channel.coordinator
    to_coordinator: Term  # channel.to_coordinator: wave_complete and start_wave reports
    pending_pause: Term  # two-phase variants only
    ignore_start_dp_wave: Term  # two-phase variants only
    running_requests: Term  # request_steps = 2 only: scheduler.running, admitted with their last forward to go
    # later releases only (releases.py says which)
    executor_sleep: Term  # 0 awake, 1 sleep requested (after the pause completes), 2 model_executor.is_sleeping
    device_busy: Term  # the last forward's kernels still run on the device (the CPU thread went on)
    was_running: Term  # engines_running at the top of this loop iteration (run_busy_loop's was_running)
    reject_new_requests: Term  # EngineCoreProc.reject_new_requests
    rejected: Term  # client.rejected: an ADD was answered "engine_paused"
    last_served: Term  # ghost wave.last_served: the latest wave in which a real forward ran (-1: none)
    # communicators (see model.py)
    engine_dp: Communicator
    worker_dp: Communicator
    worker_world: Communicator
    # coordinator (vllm/v1/engine/coordinator.py)
    coordinator_running: Term  # coordinator.engines_running
    coordinator_wave: Term  # coordinator.current_wave
    first_request: Term  # channel.first_request: FIRST_REQ with the client's wave
    # client (vllm/v1/engine/core_client.py, async_llm.py)
    client_phase: Term  # client.phase
    client_running: Term  # client.engines_running: the stats task's view
    client_wave: Term  # client.current_wave: the stats task's view
    requests_sent: Term  # client.requests_sent
    sent_to: Term  # client.sent_to: this phase's call sent to rank
    replies: Term  # client.replies: replies to this phase's call
    publications: Term  # channel.publication, with stale_publications only
    first_request_inproc: Term  # channel.first_request_inproc, with lazy_first_request only
    resume_round: Term  # client.resume_round, with resumes > 1 or the free client only
    cycle: Term  # client.cycle, with pause_cycles > 1 or the free client only
    last_request_rank: Term  # client.last_request_rank, with abort_request only
    aborted: Term  # client.aborted, with abort_request only (free_client: client.aborts, the ABORTs sent)
    pause_mode: Term  # client.pause_mode, with more than one of pause_modes only
    # the second front-end client (clients.py), with clients = 2 only
    second: SecondClient | None = None


def engine_operations(variant: Variant, options: Options) -> dict[str, OpSpec]:
    """The ops of the engines' dp_group: the engine all-reduce of ``_has_global_unfinished_reqs``
    (post-fix ``sync_dp_state``, SUM of two lanes; pre-fix ``has_unfinished_dp``, MAX), post-fix
    the MAX of ``resume_scheduler``'s barrier, and with ``rpc`` = 1 the test-only barrier."""
    if variant.fixed:
        operations: dict[str, OpSpec] = {"sync_sum": all_reduce_sum(), "resume_max": all_reduce_max()}
    else:
        operations = {"sync_max": all_reduce_max()}
    if options.barrier:  # the test-only barrier utility: dist.barrier on the same dp_group
        operations["barrier"] = barrier_op()
    return operations


@dataclass(frozen=True)
class _Declaration:
    """Declares the variables of one machine, or only their Terms where they are not ``present``."""

    machine: Machine
    Rank: IndexSort
    size: int

    def variable(self, name: str, sort: Sort, initial: object, description: str = "", present: bool = True) -> Term:
        """Declare the variable if it is ``present``; either way the Term that reads it."""
        return self.machine.variable(name, sort, initial, description) if present else Term(Variable(name, sort))

    def per_rank(self, name: str, sort: Sort, initial: object, description: str = "", present: bool = True) -> Term:
        """A per-rank variable: Rank -> sort, every rank starting at ``initial``."""
        initials = tuple(initial for _ in range(self.size))
        return self.variable(name, MapSort(self.Rank, sort), initials, description, present)


def _engine_variables(declared: _Declaration, variant: Variant, options: Options, sorts: Sorts) -> dict[str, Term]:
    """The engine cores' variables, per rank (their State fields by name)."""
    per_rank, Requests, fixed, release = declared.per_rank, sorts.Requests, variant.fixed, variant.release
    counter_top = options.sync_interval if release.sync_at_step_one else options.sync_interval - 1
    return dict(
        mode=per_rank("mode", Mode, 0, "where the core thread is"),
        engines_running=per_rank("engines_running", BOOL, False),
        current_wave=per_rank("current_wave", sorts.Wave, 0),
        step_counter=per_rank("step_counter", integers(0, counter_top), 0),
        pause_state=per_rank("pause_state", PauseState, 0),
        requests=per_rank("requests", Requests, 0, "unfinished local requests"),
        finished_pending=per_rank("finished_pending", BOOL, False),
        pause_future=per_rank("pause_future", BOOL, False, "a deferred pause reply"),
        input_queue=per_rank("input_queue", sorts.Inbox, ()),
        from_client=per_rank("channel.client", sorts.FromClient, ()),
        from_coordinator=per_rank("channel.coordinator", sorts.FromCoordinator, ()),
        to_coordinator=per_rank("channel.to_coordinator", sorts.Reports, ()),
        pending_pause=per_rank("pending_pause", BOOL, False, present=fixed),
        ignore_start_dp_wave=per_rank("ignore_start_dp_wave", BOOL, False, present=fixed),
        running_requests=per_rank("running_requests", Requests, 0, "admitted local requests", present=options.two_step),
        executor_sleep=per_rank(
            "executor_sleep",
            integers(0, 4 if options.partial_wake else 2),
            0,
            "1 sleep requested, 2 asleep, 3 kv_cache asleep, 4 weights asleep",
            present=release.sleeps,
        ),
        device_busy=per_rank("device_busy", BOOL, False, "kernels still running", present=release.later),
        was_running=per_rank("was_running", BOOL, False, present=release.reports_wave_start),
        reject_new_requests=per_rank("reject_new_requests", BOOL, False, present=release.rejects_while_paused),
        last_served=declared.variable(
            "wave.last_served",
            integers(-1, options.max_wave),
            -1,
            "ghost: the latest wave in which a rank ran a real forward",
            release.later,
        ),
    )


def _communicators(
    machine: Machine, variant: Variant, options: Options, Rank: IndexSort
) -> tuple[Communicator, Communicator, Communicator]:
    """The engines' dp_group, the workers' DP group and the group a collective_rpc body uses."""
    engine_dp = Communicator(
        machine,
        "engine_dp",
        Rank,
        engine_operations(variant, options),
        payload=integers(0, 1),
        width=2 if variant.fixed else 1,
        description="engine-level gloo dp_group",
    )
    worker_dp = Communicator(
        machine,
        "worker_dp",
        Rank,
        {"forward": all_reduce_sum()},
        payload=integers(0, 0),
        description="workers' DP group: coordinate_batch_across_dp in every forward",
    )
    worker_world = Communicator(
        machine,
        "worker_world",
        Rank,
        {"rpc": all_reduce_sum()},
        payload=integers(0, 0),
        description="the group a collective_rpc body uses",
    )
    return engine_dp, worker_dp, worker_world


def _coordinator_variables(declared: _Declaration, options: Options, sorts: Sorts) -> dict[str, Term]:
    """The coordinator's variables and the client's FIRST_REQ channel to it."""
    return dict(
        coordinator_running=declared.variable("coordinator.engines_running", BOOL, False),
        coordinator_wave=declared.variable("coordinator.current_wave", sorts.Wave, 0),
        first_request=declared.variable("channel.first_request", SequenceSort(sorts.Wave, options.every_request), ()),
    )


def _client_variables(declared: _Declaration, options: Options, sorts: Sorts) -> dict[str, Term]:
    """The client's variables (its stats task's view included) and the channels it reads."""
    variable, Requests = declared.variable, sorts.Requests
    modes = pause_modes(options)  # (PauseMode, MessageKind) pairs
    return dict(
        client_phase=variable(
            "client.phase", ClientPhase, ClientPhase.REQUESTS if options.requests else ClientPhase.PAUSE
        ),
        client_running=variable("client.engines_running", BOOL, False),
        client_wave=variable("client.current_wave", sorts.Wave, 0),
        requests_sent=variable("client.requests_sent", Requests, 0),
        sent_to=declared.per_rank("client.sent_to", BOOL, False, "this phase's call sent to rank"),
        replies=variable("client.replies", integers(0, options.ranks), 0, "replies to this phase's call"),
        # superseded publications still on their way to the stats task
        publications=variable(
            "channel.publication",
            sorts.Publications,
            (),
            "publications the coordinator has superseded that the client may still apply, oldest first",
            options.stale_publications > 0,
        ),
        # FIRST_REQ queued on the inproc socket, not yet forwarded by the stats task
        first_request_inproc=variable(
            "channel.first_request_inproc",
            Requests,
            0,
            "FIRST_REQs add_request_async queued for the stats task",
            options.lazy_first_request,
        ),
        resume_round=variable(
            "client.resume_round",
            integers(0, options.resume_calls) if options.free else integers(0, options.resumes - 1),
            0,
            "resume calls begun" if options.free else "resume calls already answered",
            options.resumes > 1 or options.free,
        ),
        cycle=variable(
            "client.cycle",
            integers(0, options.cycles) if options.free else integers(0, options.cycles - 1),
            0,
            "pause calls begun" if options.free else "pause/resume cycles already completed",
            options.cycles > 1 or options.free,
        ),
        last_request_rank=variable(
            "client.last_request_rank",
            sorts.Rank,
            0,
            "the engine the last request went to",
            bool(options.abort_request) and not options.free,
        ),
        aborted=(
            variable("client.aborts", integers(0, options.abort_request), 0, "ABORTs sent", bool(options.abort_request))
            if options.free
            else variable(
                "client.aborted", BOOL, False, "the client aborted its last request", bool(options.abort_request)
            )
        ),
        pause_mode=variable("client.pause_mode", PauseMode, modes[0][0], "the mode of the pause call", len(modes) > 1),
    )


def _release_client_variables(declared: _Declaration, release: Release) -> dict[str, Term]:
    """The client's variables that only later releases have."""
    return dict(
        rejected=declared.variable(
            "client.rejected", BOOL, False, "a request was rejected: engine_paused", release.rejects_while_paused
        )
    )


def _second_client(declared: _Declaration, options: Options, sorts: Sorts) -> SecondClient | None:
    """The second front-end client's variables (``clients`` = 2; none otherwise)."""
    if options.clients < 2:
        return None
    return SecondClient(
        channel=declared.per_rank(
            "channel.second_client", SequenceSort(sorts.Message, 1), (), "the second client's ADD on its socket"
        ),
        running=declared.variable("second_client.engines_running", BOOL, False),
        wave=declared.variable("second_client.current_wave", sorts.Wave, 0),
        sent=declared.variable("second_client.sent", BOOL, False, "the second client added its request"),
    )


def declare(machine: Machine, variant: Variant, parameters: Mapping[str, int]) -> State:
    """Declare every state variable and communicator of the dp-pause machine for ``variant``: the
    engine cores', the three communicators, the coordinator's and the client's, in that order."""
    options = options_of(parameters)
    sorts = sorts_of(options)
    declared = _Declaration(machine, sorts.Rank, options.ranks)
    engine = _engine_variables(declared, variant, options, sorts)
    engine_dp, worker_dp, worker_world = _communicators(machine, variant, options, sorts.Rank)
    coordinator = _coordinator_variables(declared, options, sorts)
    client = _client_variables(declared, options, sorts)
    client.update(_release_client_variables(declared, variant.release))
    second = _second_client(declared, options, sorts)
    return State(
        options=options,
        sorts=sorts,
        Rank=sorts.Rank,
        release=variant.release,
        engine_dp=engine_dp,
        worker_dp=worker_dp,
        worker_world=worker_world,
        **engine,
        **coordinator,
        **client,
        second=second,
    )


def message(model: State, kind: Term, wave: TermLike = 0, exclude: Term | None = None) -> Term:
    """A Message record: ``kind`` with ``wave``; START_DP_WAVE excluding ``exclude`` if given."""
    return record_of(
        model.sorts.Message,
        kind=kind,
        wave=wave,
        excluding=exclude is not None,
        exclude=0 if exclude is None else exclude,
    )


def report(model: State, kind: Term, wave: Term) -> Term:
    """A Report record an engine sends the coordinator (wave_complete or start_wave)."""
    return record_of(model.sorts.Report, kind=kind, wave=wave)
