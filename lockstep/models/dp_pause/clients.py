"""dp-pause with several front-end clients (``clients`` = 2): a second API server process whose
client adds one request, beside the client that also carries the controller's utility calls.

What vLLM allows (read from the v0.21.0, v0.25.0, v0.29.0 and v0.33.0 wheels; line numbers 0.33.0
unless said otherwise):
- ``vllm serve`` with internal load balancing starts ``api_server_count`` API server processes, by
  default ``data_parallel_size`` of them (``entrypoints/cli/serve.py`` 104-126; 0.21.0 83-105), each
  with its own ``DPLBAsyncMPClient`` (``client_index`` i of ``client_count``, ``core_client.py``
  1710-1749). So a DP=2 MoE server has two front-end clients unless the user asks for one.
- Each client's stats task subscribes to the coordinator's one XPUB socket (``stats_update_address``,
  ``coordinator.py`` ``publish_front``): every publication (counts, wave, running) reaches every
  client, and each applies the last one it has drained (``core_client.py`` 1574-1590), so each has
  its own lagging view. Before v0.33.0 each client also has its own FIRST_REQ path (0.21.0
  ``add_request_async`` 1296-1310, stats task 1255-1264), and the coordinator takes FIRST_REQ from
  any client on that socket (0.21.0 ``process_input_socket`` 306-366). The model keeps one FIRST_REQ
  channel: the coordinator's handling does not depend on which client sent it, nor on the order of
  two of them (START_DP_WAVE carries the coordinator's wave and excludes nobody on this path).
- Every API server serves the RL routes (``/pause``, ``/resume``, ``/collective_rpc``, ``/sleep``,
  ``/wake_up``; ``entrypoints/rl/online/api_router.py`` 31-86): a controller's HTTP call lands on any
  one of them, whose ``call_utility_async`` fans it out to every engine (``DPLBAsyncMPClient``
  1814-1816). The pause is the engines' state, not a client's: nothing ties a pause to the client
  that sent it, and ``resume_scheduler`` from any client resumes it.
- Each engine core reads every client's socket in one IO thread (``EngineCoreProc.
  process_input_sockets`` 1933-2027, one DEALER per front-end, polled) into its one ``input_queue``:
  messages of one client stay in order, those of two clients interleave in any order. Requests and
  replies carry ``client_index``: a utility's reply and a rejected request's ``engine_paused``
  (v0.33.0 ``_reject_add_while_paused`` 1796-1816, on the engine-wide ``reject_new_requests``) go to
  the client that sent it.
- ``AsyncLLM.wait_for_requests_to_drain`` reads the client's view of the coordinator's global
  ``engines_running`` (all clients' requests), but its only caller is elastic EP scaling, and
  ``serve.py`` caps ``api_server_count`` at 1 when elastic EP is on (all four releases; 0.33.0
  139-145): the drain never runs with several clients, so the drain-time properties D1/D1a are not
  declared with ``clients`` = 2.

The model: the controller's calls (pause, collective_rpc or barrier, resume, or sleep/wake_up) go
through the first client, as before; the second client adds one request at any moment, to any
engine, stamped with its own view of the wave and (before v0.33.0) with its own FIRST_REQ when its
view says the engines are idle; it travels on its own socket to that engine. "Any moment" is narrowed
by ``late_window`` (``second_window``): its default 15 leaves it free; an instance that studies one
phase names it. Its stats task applies the coordinator's current publication while the request is
still to be added (the view is read for nothing else). A call of the controller that lands on the
second server is the same up to naming the clients (the second client's request is unordered with
respect to every call, the first client's are ordered before them); a pause on one server and
resume on the other is not modelled. ``stale_publications``, ``lazy_first_request`` and
``settle_before_resume`` = 2 stay single-client options (``check_options`` refuses them).
"""

from __future__ import annotations

from lockstep.models.dp_pause.client import WINDOW_PHASES
from lockstep.models.dp_pause.releases import V0_25_0, V0_29_0, V0_33_0
from lockstep.models.dp_pause.state import (
    POST_FIX,
    PRE_FIX,
    ClientPhase,
    MessageKind,
    SecondClient,
    State,
    message,
)
from lockstep.spec.actions import action
from lockstep.spec.machine import Machine, Step
from lockstep.spec.protocol import InstanceSpec, ParameterSpec, UsageError
from lockstep.spec.terms import Term, TermLike, any_of, disjunction, if_then_else

CLIENTS_PARAMETER = ParameterSpec(
    "clients",
    1,
    "front-end clients (API server processes, vLLM's api_server_count): 2 adds a second client that adds one "
    "request at any time with its own view of the wave",
    minimum=1,
    maximum=2,
)


def second_client(model: State) -> SecondClient:
    """The second client's variables (only built with ``clients`` = 2)."""
    if model.second is None:
        raise UsageError("dp-pause: the second client exists only with clients = 2")
    return model.second


@action(actor="client:1", mirrors="DPAsyncMPClient run_engine_stats_update_task (second API server)")
def second_client_read_view(model: State) -> Step:
    """The second client's stats task applies the coordinator's latest publication (wave, running),
    while its request is still to be added."""
    second = second_client(model)
    differs = (second.running != model.coordinator_running) | (second.wave != model.coordinator_wave)
    return Step(
        ~second.sent & differs, {second.running: model.coordinator_running, second.wave: model.coordinator_wave}
    )


def second_window(model: State) -> Term:
    """When the second client may add its request: while the first adds its own, and in the phases of
    the first client's calls that ``late_window`` names (bits 1 pausing, 2 paused, 4 resuming, 8
    resumed; bit 16 is the first client's own)."""
    phase, window = model.client_phase, model.options.late_window
    named = [phase == name for bit, name in enumerate(WINDOW_PHASES) if window & (1 << bit)]
    return disjunction(phase == ClientPhase.REQUESTS, *named)


@action(
    actor="client:1",
    mirrors="AsyncLLM.add_request → DPLBAsyncMPClient.add_request_async (second API server: ADD stamped with its "
    "current_wave; FIRST_REQ if its engines_running is false, before v0.33.0)",
)
def second_client_add_request(model: State, rank: Term) -> Step:
    """The second client adds its request to one engine, with its own view of the wave; before
    v0.33.0, FIRST_REQ to the coordinator if its view says the engines are idle."""
    second, first_request = second_client(model), model.first_request
    channel = second.channel
    updates: dict[Term, TermLike] = {
        channel: channel.set(rank, channel[rank].append(message(model, MessageKind.ADD, second.wave))),
        second.sent: True,
    }
    if not model.release.no_first_request:
        updates[first_request] = if_then_else(second.running, first_request, first_request.append(second.wave))
        updates[second.running] = True
    return Step(~second.sent & second_window(model), updates)


@action(actor="rank:{rank}", mirrors="EngineCoreProc.process_input_sockets (the second client's socket → input_queue)")
def arrive_from_second_client(model: State, rank: Term) -> Step:
    """The second client's ADD reaches the engine's input queue, in any order with the first client's messages."""
    channel, inbox = second_client(model).channel, model.input_queue
    return Step(
        ~channel[rank].is_empty(),
        {
            channel: channel.set(rank, channel[rank].tail()),
            inbox: inbox.set(rank, inbox[rank].append(channel[rank].head())),
        },
    )


def second_channel_empty(model: State, rank: Term) -> Term | None:
    """Nothing of the second client's on its way to ``rank`` (None with one client)."""
    return None if model.second is None else model.second.channel[rank].is_empty()


def check_options(model: State) -> None:
    """Refuse the single-client options with ``clients`` = 2, naming them."""
    options = model.options
    if options.clients < 2:
        return
    single = {
        "stale_publications": options.stale_publications,
        "lazy_first_request": int(options.lazy_first_request),
        "settle_before_resume=2": int(options.settle_before_resume == 2),
    }
    refused = [name for name, value in single.items() if value]
    if refused:
        raise UsageError(f"dp-pause: clients=2 models the second client without {', '.join(refused)}; set them to 0/1")


def add_second_client(machine: Machine, model: State) -> None:
    """Bind the second client's actions and its witnesses (``clients`` = 2; nothing otherwise)."""
    if model.second is None:
        return
    check_options(model)
    machine.add(arrive_from_second_client, model, rank=model.Rank)
    machine.add(second_client_read_view, model)
    machine.add(second_client_add_request, model, rank=model.Rank)
    second = model.second
    if not model.options.late_window & 2:  # the second client never adds while the pause is in effect
        return
    machine.sometimes(
        "second_client_adds_while_paused",
        (model.client_phase == ClientPhase.RPC)
        & second.sent
        & any_of(model.Rank, lambda r: ~second.channel[r].is_empty()),
        "the second client's request is on its way while the first client's pause is in effect",
    )


CLIENT_INSTANCES = (
    InstanceSpec(
        "second-client-during-resume",
        "two API servers: the controller pauses (keep) the idle engines, runs collective_rpc and resumes through "
        "the first, waiting for control messages to settle before resume; the second adds one request while "
        "resume is on its way (late_window 4). Its FIRST_REQ, taken after the pause wave ended, makes the "
        "coordinator send START_DP_WAVE: one rank drops it (still paused), the other applies it after its resume "
        "barrier and steps a dummy batch alone",
        {"requests": 0, "clients": 2, "late_window": 4},
        {PRE_FIX: "holds", POST_FIX: "violated", V0_25_0: "violated", V0_29_0: "violated", V0_33_0: "violated"},
        finding="`no_hang` in 46 (v0.21.0), 49 (v0.25.0), 51 (v0.29.0) steps: the second API server's "
        "`DPAsyncMPClient.add_request_async` (FIRST_REQ: its view says idle) → coordinator "
        "`process_input_socket` (FIRST_REQ → `_send_start_wave`), `DPEngineCoreProc._handle_client_request` "
        "(START_DP_WAVE dropped under `ignore_start_dp_wave` on one rank, applied after `resume_scheduler` on the "
        "other), `run_busy_loop` → `execute_dummy_batch` alone (v0.21.0, v0.25.0, v0.29.0; v0.33.0 has no "
        "FIRST_REQ and no hang: its verdict is the known `wave_seen_before_complete`)",
        finding_properties=("no_hang",),
        upstream="new (searched for several API servers, FIRST_REQ and resume)",
    ),
    InstanceSpec(
        "second-client-while-paused",
        "two API servers: the controller pauses with mode abort through the first; the second adds one request "
        "while the pause is in effect (late_window 2). Its FIRST_REQ makes the coordinator believe a wave runs "
        "(the paused engines drop START_DP_WAVE); its ADD, on another socket than the controller's resume, "
        "reaches the engine after resume: a current-wave request wakes nobody and its engine steps alone. "
        "v0.33.0 rejects the request (engine_paused) until resume",
        {"requests": 0, "clients": 2, "late_window": 2, "pause_modes": 2},
        {PRE_FIX: "violated", POST_FIX: "violated", V0_25_0: "violated", V0_29_0: "violated", V0_33_0: "holds"},
        finding="`no_hang` in 48 (v0.21.0), 51 (v0.25.0), 53 (v0.29.0) steps: the second API server's "
        "`DPAsyncMPClient.add_request_async` (FIRST_REQ while paused), coordinator `process_input_socket` "
        "(FIRST_REQ sets `engines_running`, v0.21.0/v0.25.0), `DPEngineCoreProc._handle_client_request` "
        "(START_DP_WAVE dropped), `EngineCoreProc.process_input_sockets` (two clients' sockets in any order: the "
        "ADD after `resume_scheduler`), `DPEngineCoreProc.add_request` (no wake-up for a current-wave request), "
        "`run_busy_loop` (v0.29.0: rank 0's `start_wave` only after the forward) (v0.21.0, v0.25.0, v0.29.0)",
        finding_properties=("no_hang",),
        upstream="new; PR #38761 (closed) is the one-client form PR #39366 fixed; 0.33.0's rejection closes it",
    ),
)
