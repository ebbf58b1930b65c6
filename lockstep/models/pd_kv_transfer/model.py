"""pd-kv-transfer: the disaggregated-prefill KV hand-off between a prefill and a decode instance.

Mirrors vLLM **v0.33.0** (``post-fix``) and **v0.29.0** (``pre-fix``) with the NIXL connector in
pull mode: ``vllm/v1/core/sched/scheduler.py`` (both instances' schedulers) and
``vllm/distributed/kv_transfer/kv_connector/v1/nixl/`` (``pull_scheduler.py``,
``pull_worker.py``, ``base_worker.py``).

The story. A request goes first to P with ``do_remote_decode``: P prefills it (``max_tokens``
1) and, when it finishes, the connector's ``request_finished`` answers ``delay_free_blocks``:
P keeps the blocks, stamps a lease on them (``_reqs_need_send``) and returns their ids in
``kv_transfer_params``. The proxy sends the request on to D with those ids
(``do_remote_prefill``). D's scheduler allocates blocks for it and parks it in
``WAITING_FOR_REMOTE_KVS``; its worker reads P's blocks into its own (``_read_blocks_for_req``),
then notifies P. Each worker's ``get_finished`` reports the request back to its scheduler: D's
as ``finished_recving`` (the request is promoted and decodes), P's as ``finished_sending`` on
the notification, or when the lease expires without one (P frees the blocks). Aborts can come
on either side at any point; notifications can be lost or duplicated; reads can fail.

Actors: ``prefill-scheduler`` and ``prefill-worker`` (``prefill.py``), ``decode-scheduler`` and
``decode-worker`` (``decode.py``), and the ``network`` that loses or duplicates notifications.
``state.py`` declares the state; ``properties.py`` the properties with their source lines.

The variants differ in one place: v0.29.0's ``start_load_kv`` registers ``_recving_metadata``
for the notify-only read D queues for a request aborted before it was allocated, and its
``get_finished`` reports a failure of that read as done receiving; D's scheduler, which has
already deleted the request, trips ``assert req_id in self.requests`` and EngineCore dies.
v0.30.0 registers only reads D awaits and drops failures of untracked requests.
"""

from __future__ import annotations

from collections.abc import Mapping

from lockstep.models.pd_kv_transfer.decode import (
    decode_abort,
    decode_admit,
    decode_finish,
    decode_finished_recving,
    decode_notify_only,
    decode_read_done,
    decode_run,
    decode_schedule,
    duplicate_notification,
    lose_notification,
)
from lockstep.models.pd_kv_transfer.prefill import (
    prefill_abort,
    prefill_finish,
    prefill_finished_sending,
    prefill_lease_expires,
    prefill_receive_notification,
    prefill_schedule,
)
from lockstep.models.pd_kv_transfer.properties import add_invariants, add_witnesses, set_final
from lockstep.models.pd_kv_transfer.state import POST_FIX, PRE_FIX, declare
from lockstep.spec.delay import bound_delay, max_delay_parameter
from lockstep.spec.machine import Machine
from lockstep.spec.protocol import InstanceSpec, ParameterSpec, Protocol, VariantSpec
from lockstep.spec.sorts import BOOL

__all__ = ["POST_FIX", "PRE_FIX", "PROTOCOL", "build"]


def build(variant: str, parameters: Mapping[str, int]) -> Machine:
    """The pd-kv-transfer machine for ``variant`` at the given parameter values."""
    machine = Machine(f"pd-kv-transfer/{variant}")
    state = declare(machine, parameters)
    sizes = state.sizes
    # P
    machine.add(prefill_schedule, state, request=state.Request, block=state.PrefillBlock)
    machine.add(prefill_finish, state, request=state.Request)
    machine.add(prefill_receive_notification, state, request=state.Request)
    if sizes.lease_expiry:
        machine.add(prefill_lease_expires, state, request=state.Request)
    machine.add(prefill_finished_sending, state, request=state.Request)
    # D
    machine.add(decode_admit, state, request=state.Request)
    machine.add(decode_schedule, state, request=state.Request, block=state.DecodeBlock)
    machine.add(decode_read_done, state, request=state.Request, ok=BOOL)
    machine.add(decode_finished_recving, state, request=state.Request)
    machine.add(decode_run, state, request=state.Request)
    machine.add(decode_finish, state, request=state.Request)
    # faults
    if sizes.aborts:
        machine.add(prefill_abort, state, request=state.Request)
        machine.add(decode_abort, state, variant, request=state.Request)
        machine.add(decode_notify_only, state, variant, request=state.Request, ok=BOOL)
    if sizes.lost:
        machine.add(lose_notification, state, request=state.Request)
    if sizes.duplicated:
        machine.add(duplicate_notification, state, request=state.Request)
    # properties
    set_final(machine, state)
    add_invariants(machine, state)
    add_witnesses(machine, state)
    bound_delay(machine, parameters["max_delay"], ["channel.handoff", "channel.notifications"])
    return machine


PROTOCOL = Protocol(
    name="pd-kv-transfer",
    title="Disaggregated prefill: the NIXL KV hand-off from P to D",
    change="vLLM v0.30.0 (start_load_kv: no _recving_metadata for aborted cleanup)",
    variants=(
        VariantSpec(
            PRE_FIX,
            "a failed notify-only read of a request D aborted is reported as finished_recving",
            "vLLM v0.29.0",
        ),
        VariantSpec(POST_FIX, "only awaited reads are tracked and reported", "vLLM v0.33.0"),
    ),
    parameters=(
        ParameterSpec("requests", 2, "requests handed from P to D", minimum=1, maximum=3),
        ParameterSpec("blocks", 1, "KV blocks in each instance's pool (one per request)", minimum=1, maximum=3),
        ParameterSpec("aborts", 0, "aborts injected on either side, at any point", minimum=0, maximum=2),
        ParameterSpec("lost_notifications", 0, "D->P notifications lost", minimum=0, maximum=1),
        ParameterSpec("duplicated_notifications", 0, "D->P notifications delivered twice", minimum=0, maximum=1),
        ParameterSpec("transfer_failures", 0, "reads (or notify-only reads) that fail on D", minimum=0, maximum=1),
        ParameterSpec(
            "lease_expiry",
            0,
            "P's lease on held blocks: 0 never expires, 1 expires once D no longer needs them, 2 at any moment",
            minimum=0,
            maximum=2,
        ),
        max_delay_parameter(),
    ),
    instances=(
        InstanceSpec(
            "seed",
            "two requests, one block per instance: the hand-off, block reuse on both sides",
            {},
            {PRE_FIX: "holds", POST_FIX: "holds"},
        ),
        InstanceSpec(
            "abort",
            "one abort on either side at any point, with the lease",
            {"aborts": 1, "lease_expiry": 1},
            {PRE_FIX: "holds", POST_FIX: "holds"},
        ),
        InstanceSpec(
            "abort-failed-cleanup",
            "D aborts a request before allocating it, and the notify-only read to P fails",
            {"requests": 1, "aborts": 1, "transfer_failures": 1, "lease_expiry": 1},
            {PRE_FIX: "violated", POST_FIX: "holds"},
        ),
        InstanceSpec(
            "duplicated-notification",
            "a notification arrives twice at P",
            {"duplicated_notifications": 1},
            {PRE_FIX: "holds", POST_FIX: "holds"},
        ),
        InstanceSpec(
            "lost-notification",
            "a notification is lost and no lease expires: P holds the blocks for ever",
            {"lost_notifications": 1},
            {PRE_FIX: "violated", POST_FIX: "violated"},
        ),
        InstanceSpec(
            "lost-notification-lease",
            "a notification is lost and the lease frees P's blocks",
            {"lost_notifications": 1, "lease_expiry": 1},
            {PRE_FIX: "holds", POST_FIX: "holds"},
        ),
        InstanceSpec(
            "untimely-lease",
            "the lease may expire while D waits or reads (vLLM's timing assumption dropped): P frees, reuses",
            {"lease_expiry": 2},
            {PRE_FIX: "violated", POST_FIX: "violated"},
        ),
    ),
    build=build,
    rank_parameter=None,
)
