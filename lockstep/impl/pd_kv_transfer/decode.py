"""The decode engine (D, rank 1): its scheduler and its NIXL worker (pull mode).

Mirrors ``lockstep/models/pd_kv_transfer/decode.py`` (vLLM v0.33.0 post-fix, v0.29.0 pre-fix:
``Scheduler.add_request``, ``schedule`` parking a request in ``WAITING_FOR_REMOTE_KVS``,
``finish_requests`` with ``delay_free_blocks``, ``_update_from_kv_xfer_finished`` with both its
asserts; the connector's ``request_finished`` queuing a notify-only read for a request aborted
before allocation; the worker's ``start_load_kv``, ``_read_blocks_for_req`` and
``get_transfer_results``). ``requests`` is the scheduler's ``self.requests``; ``jobs`` the
worker's reads in flight (``READ``) and notify-only reads queued (``NOTIFY``);
``recving_metadata`` its ``_recving_metadata``; ``finished_recving`` its reports the scheduler
has not handled yet.

A read that completes pulls P's block for real: D asks P for the block, receives its tensor over
``torch.distributed`` into the request's own block, and checks the bytes (``blocks.holder``): a
freed block or another request's KV is ``CorruptionDetected``, as is a read whose D block another
request owns by then. A good read notifies P and releases P's lease (``unneeded``: D's heartbeats
for the request stop); so does an abort before allocation. A failed read is reported in
``finished_recving`` and the prompt is recomputed on D when the request runs. The variants differ
where the model's do: v0.29.0's ``start_load_kv`` registers the notify-only read of an aborted
request in ``_recving_metadata``, and reports its failure as done receiving.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from lockstep.impl.pd_kv_transfer.blocks import BlockPool, holder
from lockstep.impl.pd_kv_transfer.engine import CorruptionDetected, Engine, EngineCoreDied, EngineParts
from lockstep.impl.pd_kv_transfer.reproduction import PREFILL, option
from lockstep.models.pd_kv_transfer.state import NOBODY, PRE_FIX
from lockstep.traces import JSONValue

WAITING, REMOTE, HELD = "WAITING (do_remote_prefill)", "WAITING_FOR_REMOTE_KVS", "FINISHED_ABORTED (blocks held)"
READY, RUNNING = "finished_recving_kv_req_ids", "RUNNING"
READ, NOTIFY = "READ", "NOTIFY"
SCHEDULER, WORKER = "decode-scheduler", "decode-worker"


class DecodeEngine(Engine):
    """D's scheduler and worker in one process (see the module doc)."""

    def __init__(self, common: EngineParts, variant: str, blocks: BlockPool, group: Any, aborts: int) -> None:
        """``variant``: pre-fix or post-fix; ``blocks``: D's pool; ``group``: the ``kv`` group; ``aborts``: D's."""
        super().__init__(common)
        self.variant, self.pool, self.group = variant, blocks, group
        self.arrived: dict[int, tuple[int, dict[str, int]]] = {}  # hand-offs not yet admitted, with clocks
        self.requests: dict[int, str] = {}
        self.remote_block: dict[int, int] = {}
        self.block_of: dict[int, int] = {}
        self.jobs: dict[int, str] = {}
        self.recving_metadata: set[int] = set()
        self.finished_recving: collections.Counter[int] = collections.Counter()
        self.recompute: set[int] = set()
        self.aborts_left = aborts
        self.failures_left = self.parameters["transfer_failures"]
        self.reads = 0

    # ------------------------------------------------------------------------------ messages
    def handle(self, message: dict[str, Any]) -> None:
        if message["kind"] != "handoff":
            raise RuntimeError(f"D cannot handle a {message['kind']!r} message")
        request = int(message["request"])
        self.arrived[request] = (int(message["block"]), self.recorder.receive(f"handoff:{request}"))

    # ------------------------------------------------------------------------------ steps
    def options(self) -> dict[str, Callable[[], None]]:
        found: dict[str, Callable[[], None]] = {}
        for request in self.arrived:
            found[option("decode_admit", request=request)] = self._binder(self.admit, request)
        for request, status in self.requests.items():
            if status == WAITING:
                for block in self.pool.free():
                    found[option("decode_schedule", request=request, block=block)] = self._binder(
                        self.schedule, request, block
                    )
            if status == READY:
                found[option("decode_run", request=request)] = self._binder(self.run_request, request)
            if status == RUNNING:
                found[option("decode_finish", request=request)] = self._binder(self.finish, request)
            if status in (WAITING, REMOTE, READY, RUNNING) and self.aborts_left > 0:
                found[option("decode_abort", request=request)] = self._binder(self.abort, request)
        for request, job in self.jobs.items():
            step = self.read_done if job == READ else self.notify_only
            name = "decode_read_done" if job == READ else "decode_notify_only"
            for ok in (True, False) if self.failures_left > 0 else (True,):
                found[option(name, request=request, ok=ok)] = self._binder(step, request, ok)
        for request, count in self.finished_recving.items():
            if count > 0:
                found[option("decode_finished_recving", request=request)] = self._binder(
                    self.finished_recving_step, request
                )
        return found

    @staticmethod
    def _binder(method: Callable[..., None], *arguments: Any) -> Callable[[], None]:
        return lambda: method(*arguments)

    def admit(self, request: int) -> None:
        """``add_request`` with ``do_remote_prefill`` and P's ``remote_block_ids``."""
        block, clock = self.arrived.pop(request)
        self.requests[request] = WAITING
        self.remote_block[request] = block
        self.record(SCHEDULER, "decode_admit", clock, request=request)

    def schedule(self, request: int, block: int) -> None:
        """``schedule``: allocate, park in ``WAITING_FOR_REMOTE_KVS``; the worker starts the read."""
        self.pool.allocate(block, request)
        self.block_of[request] = block
        self.requests[request] = REMOTE
        self.jobs[request] = READ
        self.recving_metadata.add(request)
        self.record(SCHEDULER, "decode_schedule", request=request, block=block)

    def read_done(self, request: int, ok: bool) -> None:
        """``get_transfer_results``: the read completed (pulled for real) or failed; either way the
        request is reported in ``finished_recving``; a good read notifies P."""
        del self.jobs[request]
        self.recving_metadata.discard(request)
        self.finished_recving[request] += 1  # done or failed: reported either way
        problem = self._pull(request) if ok else None
        if not ok:
            self.failures_left -= 1
            self.recompute.add(request)
        clock = self.recorder.send(f"unneeded:{request}")
        if ok:
            clock.update(self.recorder.send(f"notify:{request}"))
        self.record(WORKER, "decode_read_done", clock, request=request, ok=ok)
        if problem is not None:
            raise CorruptionDetected(problem)
        if ok:
            self.link.send("notify", request=request)
        self.link.send("unneeded", request=request)

    def _pull(self, request: int) -> str | None:
        """Read P's block into the request's D block; what is wrong with what arrived, if anything."""
        block, remote = self.block_of[request], self.remote_block[request]
        self.reads += 1
        self.link.send("read", request=request, block=remote)
        received = torch.empty_like(self.pool.kv[block])
        self.status.update("collective", f"recv<-{PREFILL}(kv)#{self.reads}")
        dist.recv(received, src=PREFILL, group=self.group)
        self.status.update("running")
        owner = self.pool.owner[block]
        if owner != request:
            return f"D's read of request {request} wrote into D block {block}, which request {owner} owns"
        self.pool.kv[block].copy_(received)
        try:
            found, generation = holder(received)
        except ValueError as error:
            return f"D's read of request {request} from P block {remote}: {error}"
        if found == NOBODY:
            return (
                f"D read P block {remote} for request {request}, but P had freed it (generation {generation}): "
                "a block freed while a transfer may touch it"
            )
        if found != request:
            return (
                f"D read request {found}'s KV (P block {remote}, generation {generation}) as request {request}'s: "
                "a read into a block the request no longer owns"
            )
        return None

    def notify_only(self, request: int, ok: bool) -> None:
        """The notify-only read of a request aborted before allocation: tell P to free its blocks.
        If it fails, v0.29.0 reports the request (registered in ``_recving_metadata``) as done
        receiving; v0.30.0 on drops the failure of a request it does not track."""
        del self.jobs[request]
        reported = not ok and request in self.recving_metadata and self.variant == PRE_FIX
        self.recving_metadata.discard(request)
        if reported:
            self.finished_recving[request] += 1
        if not ok:
            self.failures_left -= 1
        clock = self.recorder.send(f"notify:{request}") if ok else {}
        self.record(WORKER, "decode_notify_only", clock, request=request, ok=ok)
        if ok:
            self.link.send("notify", request=request)

    def finished_recving_step(self, request: int) -> None:
        """``_update_from_kv_xfer_finished``: ``assert req_id in self.requests``; a parked request
        becomes ready; an aborted one whose blocks were held is freed; else ``assert is_finished``."""
        self.finished_recving[request] -= 1
        status = self.requests.get(request)
        if status == REMOTE:
            self.requests[request] = READY
        elif status == HELD:
            self._free(request)
        self.record(SCHEDULER, "decode_finished_recving", request=request)
        if status is None:
            raise EngineCoreDied(
                f"D's EngineCore died: finished_recving of request {request}, which D's scheduler no longer has "
                "(Scheduler._update_from_kv_xfer_finished: assert req_id in self.requests)"
            )
        if status not in (REMOTE, HELD):
            raise EngineCoreDied(
                f"D's EngineCore died: finished_recving of request {request} in state {status} "
                "(Scheduler._update_from_kv_xfer_finished: assert RequestStatus.is_finished(req.status))"
            )

    def run_request(self, request: int) -> None:
        """``_update_waiting_for_remote_kv`` promotes the request and it decodes from its block (a
        failed read's prompt recomputed first); its block must hold its KV."""
        block = self.block_of[request]
        if request in self.recompute:
            self.recompute.discard(request)
            self.pool.write(block, request)
        self.requests[request] = RUNNING
        self.record(SCHEDULER, "decode_run", request=request)
        try:
            found, _ = holder(self.pool.kv[block])
        except ValueError as error:
            raise CorruptionDetected(f"request {request} decodes from D block {block}: {error}") from None
        if found != request:
            raise CorruptionDetected(
                f"request {request} decodes from D block {block}, which holds request {found}'s KV"
            )

    def finish(self, request: int) -> None:
        """The request finished decoding: ``_free_request`` frees its blocks at once."""
        self._free(request)
        self.record(SCHEDULER, "decode_finish", request=request)

    def abort(self, request: int) -> None:
        """``finish_requests(FINISHED_ABORTED)``: before allocation, a notify-only read is queued
        for P (and the lease released); in ``WAITING_FOR_REMOTE_KVS`` the blocks are held until
        ``finished_recving`` (``delay_free_blocks``); after, freed at once."""
        status = self.requests[request]
        self.aborts_left -= 1
        clock: dict[str, int] = {}
        if status == REMOTE:  # delay_free_blocks: the read may still touch the blocks
            self.requests[request] = HELD
        else:
            self._free(request)
        if status == WAITING:
            self.jobs[request] = NOTIFY
            if self.variant == PRE_FIX:
                self.recving_metadata.add(request)
            clock = self.recorder.send(f"unneeded:{request}")
        self.record(SCHEDULER, "decode_abort", clock, request=request)
        if status == WAITING:
            self.link.send("unneeded", request=request)

    def _free(self, request: int) -> None:
        del self.requests[request]
        self.pool.release(request)  # block_of keeps the block id, as the model's decode.block does

    # ------------------------------------------------------------------------------ the end
    def settled(self) -> bool:
        return (
            not self.requests
            and not self.arrived
            and not self.jobs
            and not any(self.finished_recving.values())
            and self.pool.all_free()
        )

    def observed(self) -> dict[str, JSONValue]:
        requests = range(self.parameters["requests"])
        phases = {WAITING: "WAITING", REMOTE: "REMOTE", HELD: "HELD", READY: "READY", RUNNING: "RUNNING"}

        def phase(request: int) -> str:
            if request in self.requests:
                return phases[self.requests[request]]
            return "DONE" if request in self.remote_block else "NONE"

        return {
            "decode.phase": [phase(request) for request in requests],
            "decode.block": [self.block_of.get(request, NOBODY) for request in requests],
            "decode.owner": list(self.pool.owner),
            "decode.remote_block": [self.remote_block.get(request, NOBODY) for request in requests],
            "decode.job": [self.jobs.get(request, "NONE") for request in requests],
            "decode.recving_metadata": [request in self.recving_metadata for request in requests],
            "decode.finished_recving": [self.finished_recving[request] for request in requests],
            "fault.failures": self.failures_left,
        }

    def holdings(self) -> str:
        held = [f"block {block} of request {owner}" for block, owner in enumerate(self.pool.owner) if owner >= 0]
        alive = [f"request {request} {status}" for request, status in sorted(self.requests.items())]
        jobs = [f"a {job} of request {request}" for request, job in sorted(self.jobs.items())]
        return "holds " + (", ".join(held + alive + jobs) or "nothing")
