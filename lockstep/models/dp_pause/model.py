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

The model is split by actor: ``state.py`` declares the state once (the variables and the
communicators, as a typed ``State`` of Terms); ``engine.py`` holds the engine cores' actions,
``coordinator.py`` the coordinator's, ``client.py`` the front-end client's (each action a
module-level unit that names the v0.21.0 function it mirrors); ``properties.py`` S1–S6, L1 and L2;
``sources.py`` the v0.20.0 functions where they differ. This module binds the actions into a
machine (``build``) and declares the parameters and instances.

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
  By default the view is read atomically from the coordinator and FIRST_REQ goes out with the
  add; in vLLM (``core_client.py``, the same in both releases) the stats task applies the last
  publication that has *arrived*, and ``add_request_async`` only queues FIRST_REQ for the stats
  task, which marks the engines running and forwards it with its wave when it runs. Parameters
  ``stale_publications`` and ``lazy_first_request`` model both (see ``client.py``); instances
  ``seed-stats-task``, ``stale-client-view`` and ``stale-view-across-resume`` check them.
- Idle callbacks fire when an idle engine takes a message (``consume``) or has none
  (``notify_idle``); vLLM fires them only at the head of ``_process_input_queue``'s idle loop,
  not for messages drained after ``has_work()`` became true. The two differ only if a handled
  message turned ``has_work()`` from true to false while a pause future is pending: none does
  (only a pre-fix pause can, and it then replies at once; a post-fix pause sets
  ``engines_running``), so the model fires them exactly when vLLM would.
- Requests run one forward (they finish in the forward that first schedules them); ``request_steps`` = 2
  admits them in one forward and finishes them in the next; ``request_steps`` = 0 lets every real forward
  end any number of the requests it ran (``engine.finish_choice``), so a request may run any number of
  forwards (a real run's 16-token requests replay; a request that never ends is then a behaviour, and L1/L2
  are refused).
- The mutant ``no-local-wakeup`` (P2(d)) differs from v0.21.0 only while the engine that took a
  stale-wave request has nothing to run: with the request it steps anyway (``has_work()``), and
  every stepped iteration sets ``engines_running`` off the sync boundary. So it needs the request
  gone before the engine's next step, e.g. aborted by the client (``abort_request``, instance
  ``aborted-stale-request``): post-fix the engine joins the wave its ``start_wave`` started for the
  peers; the mutant stays idle, excluded from that START_DP_WAVE, while its peer waits in a dummy
  forward. (A later ``resume_scheduler`` also tells them apart: post-fix it is a no-op on the
  woken engine, but that scenario is the ``double-resume`` finding, violated post-fix too.)
"""

from __future__ import annotations

from collections.abc import Mapping

from lockstep.models.dp_pause import client, coordinator, engine
from lockstep.models.dp_pause.clients import CLIENT_INSTANCES, CLIENTS_PARAMETER, add_second_client
from lockstep.models.dp_pause.engine import sync_dp_state
from lockstep.models.dp_pause.properties import add_properties
from lockstep.models.dp_pause.release_model import (
    PARTIAL_WAKE_PARAMETER,
    RELEASE_VARIANTS,
    SLEEP_PARAMETER,
    SLEEP_WITH_PAUSE_PARAMETER,
    build_release,
)
from lockstep.models.dp_pause.release_verdicts import with_release_verdicts
from lockstep.models.dp_pause.releases import BISECTION
from lockstep.models.dp_pause.sources import PROPERTY_SOURCES, variant_sources
from lockstep.models.dp_pause.state import (
    IGNORE_WHILE_PAUSED,
    NO_LOCAL_WAKEUP,
    POST_FIX,
    PRE_FIX,
    PauseMode,
    State,
    Variant,
    declare,
    pause_modes,
)
from lockstep.spec.delay import bound_delay, max_delay_parameter
from lockstep.spec.machine import Machine
from lockstep.spec.protocol import InstanceSpec, ParameterSpec, Protocol, UsageError, VariantSpec
from lockstep.spec.sorts import integers

__all__ = [
    "IGNORE_WHILE_PAUSED",
    "NO_LOCAL_WAKEUP",
    "POST_FIX",
    "PRE_FIX",
    "PROTOCOL",
    "build",
    "sync_dp_state",
]


def build(variant_name: str, parameters: Mapping[str, int]) -> Machine:
    """The dp-pause machine for ``variant_name`` at the given parameter values: the state, then
    every action in the order the machine lists them (per actor: engine cores, coordinator, client),
    the symmetry, the properties and the variant's sources."""
    variant = Variant(variant_name)
    machine = Machine(f"dp-pause/{variant_name}", hang_bound=parameters["hang_bound"])
    model = declare(machine, variant, parameters)  # every variable and communicator
    check_request_options(model)
    if variant.release.later:  # a release after v0.21.0: release_model.py binds its actions
        released = build_release(machine, model, variant)  # max_delay bounds its channels too
        released.cite(PROPERTY_SOURCES)
        bound_delay(
            released, parameters["max_delay"], [name for name in released.variables if name.startswith("channel.")]
        )
        return released
    options, Rank = model.options, model.Rank
    # engine cores: the input path, _handle_client_request, the idle callbacks, the busy loop
    machine.add(engine.arrive_from_client, model, rank=Rank)
    machine.add(engine.arrive_from_coordinator, model, rank=Rank)
    machine.add(engine.handle_add, model, variant, rank=Rank)
    if options.abort_request:
        machine.add(engine.handle_abort, model, sorts={"rank": Rank, **engine.abort_choice(model)})
    machine.add(engine.handle_start_wave, model, variant, rank=Rank)
    machine.add(engine.handle_pause, model, variant, rank=Rank)
    machine.add(engine.handle_collective_rpc, model, rank=Rank)
    machine.add(engine.finish_collective_rpc, model, rank=Rank)
    if options.barrier:
        machine.add(engine.handle_barrier, model, rank=Rank)
        machine.add(engine.finish_barrier, model, rank=Rank)
    machine.add(engine.handle_resume, model, variant, rank=Rank)
    if variant.fixed:
        machine.add(engine.finish_resume, model, rank=Rank)
    machine.add(engine.notify_idle, model, rank=Rank)
    machine.add(engine.step, model, sorts={"rank": Rank, **engine.drain_choice(model)})
    machine.add(engine.finish_forward, model, variant, sorts={"rank": Rank, **engine.finish_choice(model)})
    machine.add(engine.finish_sync, model, variant, rank=Rank)
    # the coordinator
    machine.add(coordinator.coordinator_first_request, model)
    machine.add(coordinator.coordinator_report, model, rank=Rank)
    # the client: its stats task, requests, then pause, collective_rpc (or barrier) and resume
    machine.add(client.client_read_publication, model)
    if options.stale_publications:
        machine.add(client.client_read_stale_publication, model, index=integers(0, options.stale_publications - 1))
    if options.lazy_first_request:
        machine.add(client.client_forward_first_request, model)
    machine.add(client.client_add_request, model, rank=Rank)
    if options.abort_request:
        machine.add(client.client_abort_request, model, rank=Rank)
    if len(pause_modes(options)) > 1:
        machine.add(client.client_choose_pause_mode, model, mode=PauseMode)
    machine.add(client.client_pause, model, rank=Rank)
    machine.add(client.client_pause_returned, model)
    if options.barrier:
        machine.add(client.client_barrier, model, rank=Rank)
        machine.add(client.client_barrier_returned, model)
    else:
        machine.add(client.client_collective_rpc, model, rank=Rank)
        machine.add(client.client_collective_rpc_returned, model)
    machine.add(client.client_resume, model, rank=Rank)
    machine.add(client.client_resume_returned, model)
    add_second_client(machine, model)  # clients = 2: a second API server's client (clients.py)

    if options.ranks >= 3:  # rank 0 reports wave_complete; the other ranks are interchangeable
        machine.declare_symmetric(Rank, tuple(range(1, options.ranks)))
    add_properties(machine, model, variant)
    machine.mirror(variant_sources(variant))
    machine.cite(PROPERTY_SOURCES)
    bound_delay(machine, parameters["max_delay"], [name for name in machine.variables if name.startswith("channel.")])
    return machine


def check_request_options(model: State) -> None:
    """Refuse L1/L2 with requests of any length (``request_steps`` = 0): a request may run for ever, so no
    bound on serving it holds, and a fair cycle of forwards that end nothing is a real behaviour; and with
    the free client, which may pause again before a request is served. The free client's calls are those
    of one front-end client with pause and resume (or sleep and wake_up) as separate calls."""
    options = model.options
    if options.free and (options.bounded_liveness or options.fair_liveness):
        raise UsageError(
            "dp-pause: free_client = 1 checks no response bound (the client may pause again before a request is "
            "served); set bounded_liveness and fair_liveness to 0"
        )
    if options.free and (options.clients > 1 or options.partial_wake or options.sleep_with_pause):
        raise UsageError("dp-pause: free_client = 1 needs clients = 1, partial_wake = 0 and sleep_with_pause = 0")
    if options.abort_request > 1 and not options.free:
        raise UsageError(
            "dp-pause: abort_request > 1 needs free_client = 1 (the scripted client aborts its last request once)"
        )
    if options.any_length and (options.bounded_liveness or options.fair_liveness):
        raise UsageError(
            "dp-pause: request_steps = 0 (requests of any length) checks no response bound; set bounded_liveness "
            "and fair_liveness to 0, or request_steps to 1 or 2"
        )


def max_wave_default(values: Mapping[str, int]) -> int:
    """The default wave bound (see the parameter ``max_wave``): a wave per request, and per pause cycle the
    pause's kick-start wave, one per resume and one more."""
    requests = values["requests"] + values["late_requests"]
    cycles = values.get("pause_cycles", 1)
    if values.get("free_client", 0):
        return requests + cycles * (values["resumes"] + 2)
    return requests + values["resumes"] + 2 + 2 * (values.get("clients", 1) - 1) + 3 * (cycles - 1)


def response_bound_default(parameters: Mapping[str, int]) -> int:
    """The default L1/L2 bound n, in model steps (every actor's). Once every rank has handled its pause
    the wave may need two engine all-reduces to end (the one under way may miss a vote), each after up
    to ``sync_interval`` forwards; one forward costs every rank a step and a finish plus the
    communicator's completion (2·ranks + 1 steps), an all-reduce a finish per rank and a completion,
    the idle callbacks one step per rank: (2·ranks + 1)·(2·sync_interval + 1) covers them. The other
    actors' steps interleaved meanwhile (client calls, coordinator reports, START_DP_WAVE deliveries
    and handling) add 8 + 2 per request. Measured minimal bounds at 2 ranks and sync_interval 1
    (bisection, post-fix): seed 19, request-while-paused 13, staggered-pause 21; the default is 25."""
    ranks, interval = parameters["ranks"], parameters["sync_interval"]
    return (2 * ranks + 1) * (2 * interval + 1) + 8 + 2 * (parameters["requests"] + parameters["late_requests"])


PROTOCOL = Protocol(
    name="dp-pause",
    title="DP engine waves and the two-phase pause",
    change="vLLM PR #39366 (issue #36594)",
    release_table=(("0.20.0", PRE_FIX), *((release, variant) for release, variant, _ in BISECTION)),
    variants=(
        VariantSpec(PRE_FIX, "single-phase pause: an idle engine returns from pause at once", "vLLM v0.20.0"),
        VariantSpec(POST_FIX, "two-phase pause with the SUM all-reduce vote and ignore_start_dp_wave", "vLLM v0.21.0"),
        VariantSpec(
            IGNORE_WHILE_PAUSED,
            "mutant: a paused engine drops START_DP_WAVE (breaks liveness)",
            "v0.20.0 + PRs #36608/#38009 (closed)",
        ),
        VariantSpec(
            NO_LOCAL_WAKEUP,
            "mutant: add_request's stale-wave branch only tells the coordinator, which excludes the sender",
            "v0.21.0 without the local engines_running = True (an intermediate #39366, caught in review)",
        ),
        *RELEASE_VARIANTS,
    ),
    parameters=(
        ParameterSpec("ranks", 2, "DP engine cores", minimum=2, maximum=8),
        ParameterSpec(
            "requests",
            1,
            "requests the client adds before pausing (free_client: at any time)",
            minimum=0,
            maximum=12,
        ),
        ParameterSpec(
            "late_requests",
            0,
            "requests the client may add after it began to pause (see late_window)",
            minimum=0,
            maximum=6,
        ),
        ParameterSpec(
            "late_window",
            15,
            "phases late requests may come in: 1 pausing, 2 paused, 4 resuming, 8 resumed, 16 between two resume calls",
            minimum=1,
            maximum=31,
        ),
        ParameterSpec(
            "pause_modes",
            1,
            "pause modes the client may use: 1 keep, 2 abort, 4 wait (a bit mask)",
            minimum=1,
            maximum=7,
        ),
        ParameterSpec(
            "request_steps",
            1,
            "forwards a request needs (2: a request can be running when pause comes; 0: any number, each forward "
            "chooses how many of its requests end)",
            minimum=0,
            maximum=2,
        ),
        ParameterSpec(
            "rpc",
            0,
            "what the client runs while paused: 0 collective_rpc, 1 the test-only barrier",
            minimum=0,
            maximum=1,
        ),
        ParameterSpec(
            "resumes",
            1,
            "how many times the client calls resume_generation (free_client: per pause cycle, in all resumes × "
            "pause_cycles)",
            minimum=1,
            maximum=8,
        ),
        ParameterSpec(
            "pause_cycles",
            1,
            "how many times the client pauses, runs collective_rpc (or the barrier) and resumes; late requests may "
            "come in every cycle's phases (free_client: how many pause calls it may make)",
            minimum=1,
            maximum=8,
        ),
        ParameterSpec(
            "free_client",
            0,
            "1: no client script: adds at any time, pause (any allowed mode, also while paused), collective_rpc "
            "(while paused) and resume in any order and number within the budgets pause_cycles and resumes × "
            "pause_cycles (client.py)",
            minimum=0,
            maximum=1,
        ),
        ParameterSpec("sync_interval", 1, "steps between engine all-reduces (vLLM: 32)", minimum=1, maximum=32),
        ParameterSpec(
            "max_wave",
            4,
            "largest wave number the model tracks (default: requests + late_requests + resumes + 2, 2 more "
            "with a second client, 3 more per pause cycle after the first; free_client: requests + late_requests "
            "+ (resumes + 2) per pause cycle)",
            minimum=1,
            maximum=32,
            derived=lambda values: max_wave_default(values),
        ),
        ParameterSpec(
            "settle_before_resume",
            1,
            "1: control messages in flight reach their queues before the client "
            "resumes; 2: also every message sent to an engine has been handled",
            minimum=0,
            maximum=2,
        ),
        ParameterSpec(
            "hang_bound", 24, "steps within which every posted collective must complete", minimum=1, maximum=64
        ),
        max_delay_parameter(),
        ParameterSpec(
            "bounded_liveness",
            0,
            "1: check L1/L2 as bounded responses (within response_bound steps)",
            minimum=0,
            maximum=1,
        ),
        ParameterSpec(
            "response_bound",
            25,
            "L1/L2 bound in model steps (default: response_bound_default, "
            "(2·ranks + 1)·(2·sync_interval + 1) + 8 + 2·(requests + late_requests))",
            minimum=1,
            maximum=4000,
            derived=lambda values: response_bound_default(values),
        ),
        ParameterSpec(
            "abort_request",
            0,
            "1: the client may abort its last request once (AsyncLLM.abort → ABORT to its engine); free_client: "
            "up to this many ABORTs, of any request at any time",
            minimum=0,
            maximum=4,
        ),
        ParameterSpec(
            "fair_liveness",
            0,
            "1: also check L1/L2 as leads-to under weak fairness (needs the whole state graph)",
            minimum=0,
            maximum=1,
        ),
        ParameterSpec(
            "stale_publications",
            0,
            "publications the coordinator has superseded that the client's stats "
            "task may still apply (in flight on the pub socket); 0: the client reads the coordinator's "
            "current wave and running",
            minimum=0,
            maximum=3,
        ),
        ParameterSpec(
            "lazy_first_request",
            0,
            "1: add_request_async queues FIRST_REQ for the stats task, which sets "
            "engines_running and forwards it with its current wave later (two requests before it runs send "
            "two); 0: both at once",
            minimum=0,
            maximum=1,
        ),
        SLEEP_PARAMETER,
        SLEEP_WITH_PAUSE_PARAMETER,
        PARTIAL_WAKE_PARAMETER,
        CLIENTS_PARAMETER,
    ),
    instances=with_release_verdicts(
        InstanceSpec(
            "seed",
            "issue #36594: requests on any rank, pause(keep) to all, collective_rpc after all pauses returned, resume",
            {},
            {PRE_FIX: "violated", POST_FIX: "holds", IGNORE_WHILE_PAUSED: "violated", NO_LOCAL_WAKEUP: "holds"},
        ),
        InstanceSpec(
            "stale-wave-after-resume",
            "the seed without settle_before_resume; a FIRST_REQ handled after the pause wave ended "
            "broadcasts START_DP_WAVE, one rank drops it while paused, its peer applies it after resume and "
            "steps a dummy batch alone",
            {"settle_before_resume": 0},
            {PRE_FIX: "violated", POST_FIX: "violated", IGNORE_WHILE_PAUSED: "violated"},
            finding="`DPEngineCoreProc._handle_client_request` (START_DP_WAVE drop/apply), `resume_scheduler`, "
            "`run_busy_loop` → `execute_dummy_batch`; coordinator `process_input_socket` (FIRST_REQ with a stale "
            "wave excludes nobody); `DPAsyncMPClient` stats task (v0.21.0)",
            finding_properties=("no_hang",),
            upstream="new (vLLM's issues and PRs searched for a START_DP_WAVE applied after resume)",
        ),
        InstanceSpec(
            "modes",
            "the seed with pause_generation in mode keep, abort or wait (the client chooses) and requests that "
            "need two forwards, so a request can be running when pause comes",
            {"pause_modes": 7, "request_steps": 2},
            {PRE_FIX: "violated", POST_FIX: "holds", IGNORE_WHILE_PAUSED: "violated"},
        ),
        InstanceSpec(
            "request-while-paused",
            "pause(keep) to all, then a request while paused (ADD and FIRST_REQ), collective_rpc, resume; "
            "L1/L2 checked",
            {"requests": 0, "late_requests": 1, "late_window": 2, "bounded_liveness": 1},
            {PRE_FIX: "violated", POST_FIX: "holds"},
        ),
        InstanceSpec(
            "staggered-pause",
            "test_dp_pause_keep_race_staggered_engines: pause(keep) reaches the ranks one by one with a request in "
            "between (the test's two requests reduced to one); L1/L2 checked",
            {"requests": 0, "late_requests": 1, "late_window": 1, "bounded_liveness": 1},
            {PRE_FIX: "violated", POST_FIX: "holds"},
        ),
        InstanceSpec(
            "barrier-request",
            "test_dp_pause_barrier_request_deadlock: after pause(keep), the test-only barrier reaches the ranks one by "
            "one with a request in between; then resume serves it; L1/L2 checked",
            {"requests": 0, "rpc": 1, "late_requests": 1, "late_window": 2, "bounded_liveness": 1},
            {PRE_FIX: "violated", POST_FIX: "holds"},
        ),
        InstanceSpec(
            "double-resume",
            "resume_generation called twice with a request during the resume calls: a rank whose wave runs "
            "answers resume as a no-op while an idle peer enters the resume barrier all-reduce alone",
            {"requests": 0, "resumes": 2, "late_requests": 1, "late_window": 4},
            {PRE_FIX: "holds", POST_FIX: "violated", NO_LOCAL_WAKEUP: "violated"},
            finding="`DPEngineCoreProc.resume_scheduler` (the `engines_running` no-op vs `has_unfinished_dp` barrier, "
            "decided per rank), `run_busy_loop` → `execute_dummy_batch` / `_has_global_unfinished_reqs` (v0.21.0)",
            finding_properties=("no_hang",),
            upstream="related: PR #55229 (open) makes a duplicate resume idempotent, the same mechanism",
        ),
        InstanceSpec(
            "request-after-resume",
            "the seed with a request after resume: the seed's FIRST_REQ, handled after the pause consensus, makes the "
            "coordinator send a START_DP_WAVE that every paused engine drops, so it believes a wave runs; the next "
            "request gets no START_DP_WAVE and its engine steps alone",
            {"late_requests": 1, "late_window": 8},
            {POST_FIX: "violated"},
            finding="`DPEngineCoreProc._handle_client_request` (START_DP_WAVE dropped under `ignore_start_dp_wave`), "
            "coordinator `process_input_socket` (FIRST_REQ sets `engines_running`; only `wave_complete` clears it), "
            "`DPEngineCoreProc.add_request` (no wake-up for a current-wave request) (v0.21.0)",
            finding_properties=("coordinator_idle_when_quiet",),
            upstream="known: RFC #51476 (problem 1), fixed by PR #51481 (first in 0.29.0)",
        ),
        InstanceSpec(
            "aborted-stale-request",
            "after pause and resume, the client adds a request stamped with its stale view of the wave and aborts "
            "it: the engine's stale-wave wake-up in add_request is all that makes it join the wave the coordinator "
            "starts for its peers (it is excluded from that START_DP_WAVE); the mutant no-local-wakeup hangs",
            {"requests": 0, "late_requests": 1, "late_window": 8, "abort_request": 1},
            {POST_FIX: "holds", NO_LOCAL_WAKEUP: "violated"},
        ),
        InstanceSpec(
            "fair-liveness",
            "the seed with L1 and L2 also checked as leads-to under weak fairness of message delivery and stepping "
            "(the whole state graph); the mutant ignore-wave-while-paused never answers the pause on one rank",
            {"fair_liveness": 1},
            {PRE_FIX: "violated", POST_FIX: "holds", IGNORE_WHILE_PAUSED: "violated", NO_LOCAL_WAKEUP: "holds"},
        ),
        InstanceSpec(
            "sync-interval-2",
            "the seed with an engine all-reduce every 2 steps (vLLM: 32): consensus may need a second all-reduce",
            {"sync_interval": 2},
            {PRE_FIX: "violated", POST_FIX: "holds"},
        ),
        InstanceSpec(
            "sync-interval-32",
            "the seed with vLLM's real sync_interval of 32: an idle group is kick-started into up to 32 dummy "
            "forwards per rank per pause",
            {"sync_interval": 32},
            {POST_FIX: "holds"},
        ),
        InstanceSpec(
            "seed-stats-task",
            "the seed with the client's stats task as in vLLM: add_request_async queues FIRST_REQ, the stats task "
            "marks the engines running and forwards it with its wave when it runs, and a publication the "
            "coordinator has superseded may still reach it",
            {"stale_publications": 1, "lazy_first_request": 1},
            {PRE_FIX: "violated", POST_FIX: "holds", IGNORE_WHILE_PAUSED: "violated", NO_LOCAL_WAKEUP: "holds"},
        ),
        InstanceSpec(
            "stale-client-view",
            "pause and resume on idle engines, then two requests: the client's stats task may apply a publication "
            "the coordinator has superseded (a wave that ended, engines_running false after its own FIRST_REQ), and "
            "both requests may queue a FIRST_REQ before it runs",
            {"requests": 0, "late_requests": 2, "late_window": 8, "stale_publications": 1, "lazy_first_request": 1},
            {PRE_FIX: "holds", POST_FIX: "holds", NO_LOCAL_WAKEUP: "holds"},
        ),
        InstanceSpec(
            "stale-view-across-resume",
            "one request while paused, one after resume: the stats task may apply, after resume returned, a "
            "publication the coordinator superseded while the engines were paused",
            {"requests": 0, "late_requests": 2, "late_window": 10, "stale_publications": 1},
            {PRE_FIX: "violated", POST_FIX: "holds"},
        ),
        InstanceSpec(
            "large",
            "the seed at 8 ranks and vLLM's sync_interval of 32 (hang_bound 64): beyond exhaustive search, for "
            "`lockstep fuzz` (no pinned verdict, so `check --all` skips it)",
            {"ranks": 8, "sync_interval": 32, "hang_bound": 64},
        ),
    )
    + CLIENT_INSTANCES,
    build=build,
    rank_parameter="ranks",
)
