"""The persistent batch of the last PP rank (vLLM ``InputBatch``), as far as placeholders go.

Owns the rows (``req_ids``, ``req_output_token_ids``: row i holds **the same list object** as
the request's ``output_token_ids``, set by ``add_request``), ``prev_req_id_to_index`` (the
previous step's row of each non-discarded request), and the previous step's sampled ids on their
way to the CPU (``set_async_sampled_token_ids``: registered only when some row needs output
ids, else None). ``update_async_output_token_ids`` is vLLM's repair, with the variant's scan
(``scans.SCANS``); it waits for the copy lazily, at the first row that needs it, and reports
what it did for each row.

``AsyncCopy`` is the device-to-host copy of one step's sampled ids: a real tensor copy into a
CPU tensor, done by the copy thread of ``CopyThread`` when the run's choice source says it
lands (at once, or only after the next step has been scheduled, unless someone waits for it
first; an ``inline`` one, as the benchmark's, lands each copy when it is issued); ``wait`` is
``async_copy_ready_event.synchronize()``. On CUDA the copy is a
``non_blocking`` copy into pinned memory followed by a CUDA event's synchronize.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from dataclasses import dataclass

import torch

from lockstep.impl.async_placeholders.scans import SCANS, RowRepair, repair_row
from lockstep.impl.choices import ChoiceSource

LAND_NOW, LAND_AFTER_SCHEDULE = "now", "after-next-schedule"


class AsyncCopy:
    """One step's sampled ids on their way from the device to a CPU tensor."""

    def __init__(self, source: torch.Tensor, scheduled_when_issued: int) -> None:
        self.source = source
        pinned = source.device.type == "cuda"
        self.host = torch.empty(source.shape, dtype=source.dtype, pin_memory=pinned)
        self.scheduled_when_issued = scheduled_when_issued
        self.landed = threading.Event()
        self.demanded = False

    def land(self) -> None:
        if self.source.device.type == "cuda":
            self.host.copy_(self.source, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            event.synchronize()
        else:
            self.host.copy_(self.source)
        self.landed.set()

    def wait(self) -> torch.Tensor:
        """async_copy_ready_event.synchronize(): the host tensor once the copy has landed."""
        self.landed.wait()
        return self.host


class CopyThread(threading.Thread):
    """Lands the issued copies in order; when each lands is asked of the choice source."""

    def __init__(self, choices: ChoiceSource | None, actor: str, inline: bool = False) -> None:
        super().__init__(name="lockstep-d2h-copy", daemon=True)
        self.choices, self.actor, self.inline = choices, actor, inline  # inline: land at issue (no thread)
        self.condition = threading.Condition()
        self.pending: collections.deque[AsyncCopy | None] = collections.deque()
        self.scheduled = 0  # steps the scheduler has scheduled so far
        self.waited_in_flight = 0  # demands that found their copy not yet landed

    def issue(self, source: torch.Tensor) -> AsyncCopy:
        with self.condition:
            copy = AsyncCopy(source, self.scheduled)
            if self.inline:
                copy.land()
                return copy
            self.pending.append(copy)
            self.condition.notify_all()
        return copy

    def step_scheduled(self) -> None:
        with self.condition:
            self.scheduled += 1
            self.condition.notify_all()

    def demand(self, copy: AsyncCopy) -> torch.Tensor:
        with self.condition:
            copy.demanded = True
            if not copy.landed.is_set():
                self.waited_in_flight += 1
            self.condition.notify_all()
        return copy.wait()

    def stop(self) -> None:
        with self.condition:
            self.pending.append(None)
            self.condition.notify_all()

    def run(self) -> None:
        while True:
            with self.condition:
                while not self.pending:
                    self.condition.wait()
                copy = self.pending.popleft()
            if copy is None:
                return
            when = (
                LAND_NOW
                if self.choices is None
                else self.choices.choose(self.actor, "copy_lands", (LAND_NOW, LAND_AFTER_SCHEDULE))
            )
            if when == LAND_AFTER_SCHEDULE:
                with self.condition:
                    while not copy.demanded and self.scheduled <= copy.scheduled_when_issued:
                        self.condition.wait()
            copy.land()


@dataclass
class SamplingMetadata:
    """The part of vLLM's ``SamplingMetadata`` the repair reads: one list per row, or none."""

    output_token_ids: list[list[int]]


class InputBatch:
    """Rows of the persistent batch; see the module doc."""

    def __init__(self, variant: str, copies: CopyThread | None = None) -> None:
        self.scan: Callable[[list[int]], tuple[int, int]] = SCANS[variant]
        self.copies = copies
        self.req_ids: list[str] = []
        self.req_output_token_ids: list[list[int]] = []
        self.req_id_to_index: dict[str, int] = {}
        self.prev_req_id_to_index: dict[str, int] | None = None
        self.sampled_token_ids_cpu: AsyncCopy | None = None
        self.sampling_metadata = SamplingMetadata([])
        self.copy_waits = 0  # how often the repair waited for a copy

    def add_request(self, request_id: str, output_token_ids: list[int]) -> int:
        """A new row aliasing the request's own list (vLLM: ``req_output_token_ids[i] = ...``)."""
        index = len(self.req_ids)
        self.req_ids.append(request_id)
        self.req_output_token_ids.append(output_token_ids)
        self.req_id_to_index[request_id] = index
        return index

    def remove_request(self, request_id: str) -> None:
        index = self.req_id_to_index.pop(request_id)
        del self.req_ids[index]
        del self.req_output_token_ids[index]
        self.req_id_to_index = {identifier: row for row, identifier in enumerate(self.req_ids)}

    def refresh_sampling_metadata(self, needs_output_ids: bool) -> None:
        """``_make_sampling_metadata``: the rows' lists when some row needs output ids, else none."""
        self.sampling_metadata = SamplingMetadata(list(self.req_output_token_ids) if needs_output_ids else [])

    def set_async_sampled_token_ids(self, copy: AsyncCopy) -> None:
        """Keep the step's copy for the next repair only when output ids are needed (vLLM)."""
        self.sampled_token_ids_cpu = copy if self.sampling_metadata.output_token_ids else None

    def update_async_output_token_ids(self) -> dict[str, RowRepair]:
        """vLLM's repair: every row with a previous row whose list ends with -1 gets that row's ids."""
        output_token_ids = self.sampling_metadata.output_token_ids
        repairs: dict[str, RowRepair] = {}
        if self.sampled_token_ids_cpu is None or not output_token_ids:
            return repairs
        assert self.prev_req_id_to_index is not None
        sampled: list[list[int]] | None = None
        for index, request_id in enumerate(self.req_ids):
            prev_index = self.prev_req_id_to_index.get(request_id)
            if prev_index is None:
                continue
            ids = output_token_ids[index]
            if not ids or ids[-1] != -1:
                continue
            if sampled is None:  # wait for the copy once, at the first row that needs it
                copy = self.sampled_token_ids_cpu
                host = copy.wait() if self.copies is None else self.copies.demand(copy)
                self.copy_waits += 1
                sampled = host.tolist()
            row = sampled[prev_index]
            if not row:
                continue
            repairs[request_id] = repair_row(ids, row, self.scan)
        return repairs
