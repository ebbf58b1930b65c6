"""The dp-pause machine of the releases after v0.21.0 (``releases.py``): which actions each
release's variant binds, and the variant and parameter declarations ``model.PROTOCOL`` adds.

The engine cores keep v0.21.0's actions where the release kept the code (the busy loop, START_DP_WAVE,
collective_rpc, the coordinator); ``sleep.py`` adds sleep, wake_up, the device synchronisation and
v0.33.0's pause_generation, resume_scheduler and add_request; ``frontend.py`` the v0.33.0 front-end
and the drain-time properties. ``sleep_level`` = 1 makes the client call sleep(level=1) and wake_up
where it calls pause_generation and resume_generation otherwise.
"""

from __future__ import annotations

from lockstep.models.dp_pause import client, coordinator, engine, frontend, sleep
from lockstep.models.dp_pause.clients import add_second_client
from lockstep.models.dp_pause.properties import add_properties
from lockstep.models.dp_pause.releases import V0_23_0, V0_25_0, V0_29_0, V0_30_0, V0_33_0
from lockstep.models.dp_pause.state import PauseMode, State, Variant, pause_modes
from lockstep.spec.machine import Machine
from lockstep.spec.protocol import ParameterSpec, UsageError, VariantSpec
from lockstep.spec.sorts import integers

RELEASE_VARIANTS = (
    VariantSpec(
        V0_23_0,
        "v0.25.0's pause code; wake_up resumes after a partial wake, a dummy batch while asleep",
        "vLLM v0.21.0-v0.23.0",
        later_release=True,
    ),
    VariantSpec(
        V0_25_0, "v0.21.0 + sleep/wake_up: no dummy batch while the executor sleeps", "vLLM v0.25.0", later_release=True
    ),
    VariantSpec(
        V0_29_0,
        "v0.25.0 + a pause completes after synchronize_device; rank 0 reports its idle → running edge",
        "vLLM v0.29.0",
        later_release=True,
    ),
    VariantSpec(
        V0_30_0,
        "v0.29.0 + sync at step 1 of a wave and every dp_sync_interval",
        "vLLM v0.30.0-v0.32.0",
        later_release=True,
    ),
    VariantSpec(
        V0_33_0,
        "v0.29.0 + reject_new_requests, sync at step 1 and every dp_sync_interval, no FIRST_REQ path",
        "vLLM v0.33.0",
        later_release=True,
    ),
)

SLEEP_WITH_PAUSE_PARAMETER = ParameterSpec(
    "sleep_with_pause",
    0,
    "sleep_level = 1: 1 = pause_generation, then sleep while paused (in place of collective_rpc), then wake_up; "
    "2 = sleep, then pause_generation while asleep, then wake_up",
    minimum=0,
    maximum=2,
)

PARTIAL_WAKE_PARAMETER = ParameterSpec(
    "partial_wake",
    0,
    "sleep_level = 1, resumes = 2: the first wake_up round wakes tags=['weights'], the second ['kv_cache']",
    minimum=0,
    maximum=1,
)

SLEEP_PARAMETER = ParameterSpec(
    "sleep_level",
    0,
    "later releases: 1 = the client calls sleep(level=1) and wake_up instead of pause and resume",
    minimum=0,
    maximum=1,
)


def _add_engine_actions(machine: Machine, model: State, variant: Variant) -> None:
    """The engine cores: the input path, _handle_client_request, the idle callbacks, the busy loop."""
    options, release, Rank = model.options, model.release, model.Rank
    machine.add(engine.arrive_from_client, model, rank=Rank)
    machine.add(engine.arrive_from_coordinator, model, rank=Rank)
    if release.no_first_request:
        machine.add(sleep.handle_add_request, model, rank=Rank)
    else:
        machine.add(engine.handle_add, model, variant, rank=Rank)
    if options.abort_request:
        machine.add(engine.handle_abort, model, sorts={"rank": Rank, **engine.abort_choice(model)})
    machine.add(engine.handle_start_wave, model, variant, rank=Rank)
    if options.sleep_level:
        machine.add(sleep.handle_sleep, model, rank=Rank)
    pauses = not options.sleep_level or options.sleep_with_pause  # else sleep takes pause_generation's place
    if pauses and release.rejects_while_paused:
        machine.add(sleep.handle_pause_generation, model, variant, rank=Rank)
    elif pauses:
        machine.add(engine.handle_pause, model, variant, rank=Rank)
    if not options.sleep_with_pause:  # else the second call takes collective_rpc's place
        machine.add(engine.handle_collective_rpc, model, rank=Rank)
        machine.add(engine.finish_collective_rpc, model, rank=Rank)
    if options.barrier:
        machine.add(engine.handle_barrier, model, rank=Rank)
        machine.add(engine.finish_barrier, model, rank=Rank)
    if options.sleep_level:
        machine.add(sleep.handle_wake, model, variant, rank=Rank)
    elif release.rejects_while_paused:
        machine.add(sleep.handle_resume_scheduler, model, variant, rank=Rank)
    else:
        machine.add(engine.handle_resume, model, variant, rank=Rank)
    machine.add(engine.finish_resume, model, rank=Rank)
    if engine.callbacks_wait_for_device(model):
        machine.add(sleep.fire_idle_callbacks, model, rank=Rank)
        machine.add(sleep.synchronize_device, model, rank=Rank)
    else:
        machine.add(engine.notify_idle, model, rank=Rank)
    machine.add(engine.step, model, sorts={"rank": Rank, **engine.drain_choice(model)})
    machine.add(engine.finish_forward, model, variant, sorts={"rank": Rank, **engine.finish_choice(model)})
    machine.add(engine.finish_sync, model, variant, rank=Rank)
    machine.add(sleep.device_idle, model, rank=Rank)


def _add_client_actions(machine: Machine, model: State) -> None:
    """The client: its stats task, requests, then pause (or sleep), collective_rpc (or barrier), resume (or wake_up)."""
    options, release, Rank = model.options, model.release, model.Rank
    machine.add(frontend.client_read_view, model)
    if options.stale_publications:
        machine.add(client.client_read_stale_publication, model, index=integers(0, options.stale_publications - 1))
    if options.lazy_first_request and not release.no_first_request:
        machine.add(client.client_forward_first_request, model)
    if release.no_first_request:
        machine.add(frontend.client_submit_request, model, rank=Rank)
    else:
        machine.add(client.client_add_request, model, rank=Rank)
    if options.abort_request:
        machine.add(client.client_abort_request, model, rank=Rank)
    if len(pause_modes(options)) > 1 and (options.sleep_with_pause or not options.sleep_level):
        machine.add(client.client_choose_pause_mode, model, mode=PauseMode)
    sleeps_first = options.sleep_level and options.sleep_with_pause != 1
    machine.add(frontend.client_sleep if sleeps_first else client.client_pause, model, rank=Rank)
    machine.add(client.client_pause_returned, model)
    if options.sleep_with_pause:  # the second call (sleep while paused, or pause while asleep) takes the RPC's place
        second = (
            frontend.client_sleep_while_paused if options.sleep_with_pause == 1 else frontend.client_pause_while_asleep
        )
        machine.add(second, model, rank=Rank)
        machine.add(client.client_collective_rpc_returned, model)
    elif options.barrier:
        machine.add(client.client_barrier, model, rank=Rank)
        machine.add(client.client_barrier_returned, model)
    else:
        machine.add(client.client_collective_rpc, model, rank=Rank)
        machine.add(client.client_collective_rpc_returned, model)
    machine.add(frontend.client_wake_up if options.sleep_level else client.client_resume, model, rank=Rank)
    machine.add(client.client_resume_returned, model)


def check_sleep_options(model: State) -> None:
    """Refuse ``sleep_with_pause`` without a sleep, or with the barrier in place of collective_rpc; refuse
    ``partial_wake`` without a sleep, two wake_up rounds and one client (the engine reads the round's tags)."""
    options = model.options
    if options.partial_wake and (options.sleep_level != 1 or options.resumes != 2 or options.clients != 1):
        raise UsageError("dp-pause: partial_wake needs sleep_level = 1, resumes = 2 and clients = 1")
    if options.sleep_with_pause and (options.sleep_level != 1 or options.barrier):
        raise UsageError(
            "dp-pause: sleep_with_pause needs sleep_level = 1 and rpc = 0 (it takes collective_rpc's place)"
        )


def build_release(machine: Machine, model: State, variant: Variant) -> Machine:
    """Bind the actions of a later release's variant, its symmetry and its properties."""
    check_sleep_options(model)
    _add_engine_actions(machine, model, variant)
    if not model.release.no_first_request:  # v0.33.0: the coordinator logs a front-end message as unexpected
        machine.add(coordinator.coordinator_first_request, model)
    machine.add(coordinator.coordinator_report, model, rank=model.Rank)
    _add_client_actions(machine, model)
    add_second_client(machine, model)  # clients = 2: a second API server's client (clients.py)
    if model.options.ranks >= 3:  # rank 0 reports wave_complete; the other ranks are interchangeable
        machine.declare_symmetric(model.Rank, tuple(range(1, model.options.ranks)))
    add_properties(machine, model, variant)
    frontend.add_release_properties(machine, model)
    return machine
