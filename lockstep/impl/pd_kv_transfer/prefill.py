"""The prefill engine (P, rank 0): its scheduler, its NIXL worker, and the network's faults on
the notifications it receives.

Mirrors ``lockstep/models/pd_kv_transfer/prefill.py`` (vLLM v0.33.0: ``Scheduler.schedule``,
``update_from_output`` -> ``_free_request`` with ``delay_free_blocks``, ``finish_requests``,
``_update_from_kv_xfer_finished``; the NIXL worker's ``_reqs_to_send`` with its lease,
``_get_new_notifs`` and ``_reap_expired_send_leases``). ``requests`` is the scheduler's
``self.requests`` (a request is deleted when its blocks are freed); ``sending`` is the worker's
``_reqs_to_process``/``_reqs_to_send``; ``finished_sending`` the worker's reports its scheduler
has not handled yet. Scheduling a request runs its prefill: its KV is written into its block
(``blocks.BlockPool.write``). D's read requests are answered at once, whatever P is doing, with
the block's tensor as it is then (NIXL's reads are one-sided: P's scheduler takes no part).
A notification taken from the connection may be lost or delivered twice (the ``network`` actor)
within the run's budgets. The lease: with ``lease_expiry`` 1 it may expire once D released it
(``unneeded``: D's heartbeats stopped), with 2 at any moment.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from lockstep.impl.pd_kv_transfer.blocks import BlockPool
from lockstep.impl.pd_kv_transfer.engine import Engine, EngineCoreDied, EngineParts
from lockstep.impl.pd_kv_transfer.reproduction import DECODE, option
from lockstep.models.pd_kv_transfer.state import NOBODY
from lockstep.traces import JSONValue

WAITING, RUNNING, HELD = "WAITING", "RUNNING", "FINISHED_LENGTH_CAPPED (blocks held)"
SCHEDULER, WORKER, NETWORK = "prefill-scheduler", "prefill-worker", "network"


class PrefillEngine(Engine):
    """P's scheduler and worker in one process (see the module doc)."""

    def __init__(self, common: EngineParts, blocks: BlockPool, group: Any, aborts: int) -> None:
        """``blocks``: P's pool; ``group``: the ``kv`` group D's reads use; ``aborts``: P's share."""
        super().__init__(common)
        count = self.parameters["requests"]
        self.pool, self.group = blocks, group
        self.requests: dict[int, str] = {request: WAITING for request in range(count)}
        self.block_of: dict[int, int] = {}
        self.sending: set[int] = set()
        self.finished_sending: collections.Counter[int] = collections.Counter()
        self.notifications: dict[int, collections.deque[dict[str, int]]] = collections.defaultdict(collections.deque)
        self.released: dict[int, dict[str, int]] = {}  # D's lease releases, with their receive clocks
        self.aborts_left = aborts
        self.lost_left = self.parameters["lost_notifications"]
        self.duplicated_left = self.parameters["duplicated_notifications"]
        self.lease = self.parameters["lease_expiry"]
        self.reads = 0

    # ------------------------------------------------------------------------------ messages
    def handle(self, message: dict[str, Any]) -> None:
        kind, request = message["kind"], int(message["request"])
        if kind == "notify":
            self.notifications[request].append(self.recorder.receive(f"notify:{request}"))
        elif kind == "unneeded":
            self.released[request] = self.recorder.receive(f"unneeded:{request}")
        elif kind == "read":
            self._serve_read(int(message["block"]))
        else:
            raise RuntimeError(f"P cannot handle a {kind!r} message")

    def _serve_read(self, block: int) -> None:
        """D pulls P's block: its tensor as it is now goes to D over torch.distributed."""
        self.reads += 1
        self.status.update("collective", f"send->{DECODE}(kv)#{self.reads}")
        dist.send(self.pool.kv[block].contiguous(), dst=DECODE, group=self.group)
        self.status.update("running")

    # ------------------------------------------------------------------------------ steps
    def options(self) -> dict[str, Callable[[], None]]:
        found: dict[str, Callable[[], None]] = {}
        for request, status in self.requests.items():
            if status == WAITING:
                for block in self.pool.free():
                    found[option("prefill_schedule", request=request, block=block)] = self._binder(
                        self.schedule, request, block
                    )
            if status == RUNNING:
                found[option("prefill_finish", request=request)] = self._binder(self.finish, request)
            if status in (WAITING, RUNNING) and self.aborts_left > 0:
                found[option("prefill_abort", request=request)] = self._binder(self.abort, request)
            if (
                status == HELD
                and request in self.sending
                and (self.lease == 2 or (self.lease == 1 and request in self.released))
            ):
                found[option("prefill_lease_expires", request=request)] = self._binder(self.lease_expires, request)
        for request, queue in self.notifications.items():
            if not queue:
                continue
            found[option("prefill_receive_notification", request=request)] = self._binder(
                self.receive_notification, request
            )
            if self.lost_left > 0:
                found[option("lose_notification", request=request)] = self._binder(self.lose_notification, request)
            if self.duplicated_left > 0 and len(queue) == 1:
                found[option("duplicate_notification", request=request)] = self._binder(
                    self.duplicate_notification, request
                )
        for request, count in self.finished_sending.items():
            if count > 0:
                found[option("prefill_finished_sending", request=request)] = self._binder(
                    self.finished_sending_step, request
                )
        return found

    @staticmethod
    def _binder(method: Callable[..., None], *arguments: int) -> Callable[[], None]:
        return lambda: method(*arguments)

    def schedule(self, request: int, block: int) -> None:
        """``Scheduler.schedule`` allocates the prompt's block; the prefill forward writes its KV;
        ``start_load_kv`` adds the request to ``_reqs_to_process``."""
        self.pool.allocate(block, request)
        self.pool.write(block, request)
        self.requests[request] = RUNNING
        self.block_of[request] = block
        self.sending.add(request)
        self.record(SCHEDULER, "prefill_schedule", request=request, block=block)

    def finish(self, request: int) -> None:
        """``update_from_output`` finishes the prefill; ``request_finished`` answers
        ``delay_free_blocks`` and the block ids go to D in ``kv_transfer_params``."""
        self.requests[request] = HELD
        clock = self.recorder.send(f"handoff:{request}")
        self.record(SCHEDULER, "prefill_finish", clock, request=request)
        self.link.send("handoff", request=request, block=self.block_of[request])

    def abort(self, request: int) -> None:
        """``finish_requests(FINISHED_ABORTED)`` before the prefill finished: no delay, freed at once."""
        del self.requests[request]
        self.pool.release(request)
        self.sending.discard(request)
        self.aborts_left -= 1
        self.record(SCHEDULER, "prefill_abort", request=request)

    def receive_notification(self, request: int) -> None:
        """``_get_new_notifs``: a tracked request is done sending; an untracked one is logged and dropped."""
        clock = self.notifications[request].popleft()
        if request in self.sending:
            self.sending.discard(request)
            self.finished_sending[request] += 1
        self.record(WORKER, "prefill_receive_notification", clock, request=request)

    def lose_notification(self, request: int) -> None:
        clock = self.notifications[request].popleft()
        self.lost_left -= 1
        self.record(NETWORK, "lose_notification", clock, request=request)

    def duplicate_notification(self, request: int) -> None:
        clock = self.notifications[request][0]
        self.notifications[request][0] = {}
        self.notifications[request].append({})
        self.duplicated_left -= 1
        self.record(NETWORK, "duplicate_notification", clock, request=request)

    def lease_expires(self, request: int) -> None:
        """``_reap_expired_send_leases``: the lease ran out; the worker reports the request done sending."""
        self.sending.discard(request)
        self.finished_sending[request] += 1
        clock = self.released.pop(request, {}) if self.lease == 1 else {}
        self.record(WORKER, "prefill_lease_expires", clock, request=request)

    def finished_sending_step(self, request: int) -> None:
        """``_update_from_kv_xfer_finished``: ``assert req_id in self.requests``, then ``_free_blocks``."""
        self.finished_sending[request] -= 1
        present = self.requests.get(request) == HELD
        if present:
            del self.requests[request]
            self.pool.release(request)
        self.record(SCHEDULER, "prefill_finished_sending", request=request)
        if not present:
            raise EngineCoreDied(
                f"P's EngineCore died: finished_sending of request {request}, which P's scheduler no longer "
                "has (Scheduler._update_from_kv_xfer_finished: assert req_id in self.requests)"
            )

    # ------------------------------------------------------------------------------ the end
    def settled(self) -> bool:
        return (
            not self.requests
            and self.pool.all_free()
            and not any(self.notifications.values())
            and not any(self.finished_sending.values())
        )

    def observed(self) -> dict[str, JSONValue]:
        requests = range(self.parameters["requests"])
        phases = {WAITING: "WAITING", RUNNING: "RUNNING", HELD: "HELD"}
        return {
            "prefill.phase": [phases.get(self.requests.get(request, ""), "DONE") for request in requests],
            "prefill.block": [self.block_of.get(request, NOBODY) for request in requests],
            "prefill.owner": list(self.pool.owner),
            "prefill.tracked": [request in self.sending for request in requests],
            "prefill.finished_sending": [self.finished_sending[request] for request in requests],
            "fault.lost": self.lost_left,
            "fault.duplicated": self.duplicated_left,
        }

    def holdings(self) -> str:
        held = [f"block {block} of request {owner}" for block, owner in enumerate(self.pool.owner) if owner >= 0]
        alive = [f"request {request} {status}" for request, status in sorted(self.requests.items())]
        return "holds " + (", ".join(held + alive) or "nothing")
