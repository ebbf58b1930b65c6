"""The last PP rank's model runner of async-placeholders (vLLM ``GPUModelRunner``), one step in three parts.

- ``update_states`` (``_update_states``): a request the step does not schedule leaves the
  persistent batch (its state stays); a request that stays gets, first, one -1 per draft of its
  previous step (A2, "optimistically assume all accepted"), then its list trimmed to the
  scheduler's ``num_output_tokens`` (the trim only shortens); a request that is not in the batch
  is (re-)added with the last ``num_output_tokens`` of the scheduler's ``all_token_ids``. A
  (re)prefill restarts the device-side positions at the scheduler's real output count.
- ``sample`` (``_sample``): the sampling metadata takes every row's list when the step needs
  output ids; ``update_async_output_token_ids`` repairs the lists (the variant's scan); then the
  "model" and the rejection sampler run on the device: row r's ids are its next positions
  (token id = output position, so a misplaced token is visible), ``accepted`` of its drafts
  (asked of the choice source) plus the bonus token valid, -1 after.
- ``bookkeeping`` (``_bookkeeping_sync``, async branch): every non-discarded row appends one -1
  (A1), ``prev_req_id_to_index`` maps those rows, the sampled ids start their copy to the host
  (``batch.CopyThread``), registered for the next repair only if output ids were needed
  (``set_async_sampled_token_ids``); the step's output goes back to the scheduler.

``observed`` projects the tracked request's state on the model's runner variables.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from lockstep.impl.async_placeholders.batch import AsyncCopy, CopyThread, InputBatch
from lockstep.impl.async_placeholders.scans import PLACEHOLDER, RowRepair
from lockstep.impl.async_placeholders.scheduler import RUN, TRACKED, Step
from lockstep.impl.choices import ChoiceSource


@dataclass
class CachedRequestState:
    request_id: str
    output_token_ids: list[int] = field(default_factory=list)
    generated: int = 0  # device-side: output positions sampled so far
    prev_num_draft_len: int = 0


@dataclass
class Executed:
    """A step's output on its way to the scheduler (vLLM ``AsyncModelRunnerOutput``)."""

    step: Step
    rows: dict[str, int]  # non-discarded request -> its row of the sampled ids
    copy: AsyncCopy
    accepted: int  # the tracked request's accepted drafts (0 when it did not produce)


class ModelRunner:
    """The runner of one rank (see the module doc); ``device`` holds the sampled ids."""

    def __init__(
        self,
        variant: str,
        num_spec_tokens: int,
        device: torch.device,
        copies: CopyThread | None,
        choices: ChoiceSource | None,
        actor: str = "runner",
    ) -> None:
        self.copies = copies if copies is not None else CopyThread(None, actor, inline=True)
        self.batch = InputBatch(variant, self.copies if copies is not None else None)
        self.width = 1 + num_spec_tokens
        self.device, self.choices, self.actor = device, choices, actor
        self.requests: dict[str, CachedRequestState] = {}
        self.repair: RowRepair | None = None  # the tracked row's repair in this step
        self.repaired_rows = 0  # rows the last repair wrote
        self.sampled: torch.Tensor | None = None
        self.accepted: dict[str, int] = {}
        self.repair_seconds = 0.0  # wall time of the last update_async_output_token_ids (the benchmark reads it)

    # ------------------------------------------------------------------------- _update_states
    def update_states(self, step: Step) -> None:
        for entry in step.requests:
            state = self.requests.setdefault(entry.request_id, CachedRequestState(entry.request_id))
            in_batch = entry.request_id in self.batch.req_id_to_index
            if entry.kind != RUN:
                if in_batch:
                    self.batch.remove_request(entry.request_id)
                state.prev_num_draft_len = 0
                continue
            count = entry.num_output_tokens
            if in_batch:
                ids = state.output_token_ids
                if state.prev_num_draft_len > 0:  # A2: optimistic placeholders for the previous drafts
                    ids.extend([PLACEHOLDER] * state.prev_num_draft_len)
                if count < len(ids):  # the trim
                    del ids[count:]
            else:  # (re-)added: a new list from the scheduler's token ids, aliased by the new row
                every = entry.all_token_ids
                assert every is not None, f"{entry.request_id} is re-added without its token ids"
                state.output_token_ids = list(every[len(every) - count :]) if count else []
                self.batch.add_request(entry.request_id, state.output_token_ids)
            state.prev_num_draft_len = entry.drafts
            if entry.prefill:
                state.generated = entry.outputs

    # ---------------------------------------------------------------------------------- _sample
    def sample(self, step: Step) -> None:
        self.batch.refresh_sampling_metadata(step.history)
        started = time.perf_counter()
        repairs = self.batch.update_async_output_token_ids()
        self.repair_seconds = time.perf_counter() - started
        self.repaired_rows = len(repairs)
        self.repair = repairs.get(TRACKED)
        entries = {entry.request_id: entry for entry in step.requests}
        self.accepted = {}
        for request_id in self.batch.req_ids:
            drafts = entries[request_id].drafts
            accepted = 0
            if drafts and self.choices is not None:
                accepted = int(self.choices.choose(self.actor, "accepted", [str(count) for count in range(drafts + 1)]))
            self.accepted[request_id] = accepted
        rows = len(self.batch.req_ids)
        positions = torch.tensor(
            [self.requests[request_id].generated for request_id in self.batch.req_ids],
            dtype=torch.int64,
            device=self.device,
        ).reshape(rows, 1)
        accepted_counts = torch.tensor(
            [self.accepted[request_id] for request_id in self.batch.req_ids], dtype=torch.int64, device=self.device
        ).reshape(rows, 1)
        offsets = torch.arange(self.width, dtype=torch.int64, device=self.device).reshape(1, self.width)
        # The "model": the token at output position p is p. The rejection sampler keeps the
        # accepted drafts and the bonus token; -1 pads the rejected positions.
        self.sampled = torch.where(
            offsets <= accepted_counts,
            positions + offsets,
            torch.full((rows, self.width), PLACEHOLDER, dtype=torch.int64, device=self.device),
        )

    # ------------------------------------------------------------------------ _bookkeeping_sync
    def bookkeeping(self, step: Step) -> Executed:
        assert self.sampled is not None
        entries = {entry.request_id: entry for entry in step.requests}
        rows: dict[str, int] = {}
        for row, request_id in enumerate(self.batch.req_ids):
            if entries[request_id].chunk:  # a non-final prefill chunk: its row is discarded
                continue
            rows[request_id] = row
            state = self.requests[request_id]
            state.output_token_ids.append(PLACEHOLDER)  # A1
            state.generated += self.accepted[request_id] + 1
        self.batch.prev_req_id_to_index = rows
        copy = self.copies.issue(self.sampled)
        self.batch.set_async_sampled_token_ids(copy)
        self.sampled = None
        return Executed(step, rows, copy, self.accepted.get(TRACKED, 0) if TRACKED in rows else 0)

    # ---------------------------------------------------------------------------------- state
    def observed(self, capacity: int) -> dict[str, object]:
        """The tracked request's list and batch membership, as the model's runner variables."""
        state = self.requests.get(TRACKED)
        ids = [] if state is None else state.output_token_ids
        row = self.batch.req_id_to_index.get(TRACKED)
        aliased = row is None or (state is not None and self.batch.req_output_token_ids[row] is state.output_token_ids)
        return {
            "runner.output_token_ids": ids + [PLACEHOLDER] * (capacity - len(ids)),
            "runner.length": len(ids),
            "runner.in_batch": row is not None,
            "runner.batch_aliases_list": aliased,
            "runner.prev_num_draft_len": 0 if state is None else state.prev_num_draft_len,
        }

    def observed_repair(self) -> dict[str, object]:
        repair = self.repair
        if repair is None:
            return {
                "repair.done": False,
                "repair.first_placeholder": 0,
                "repair.written": 0,
                "repair.run_length": 0,
                "repair.scan_steps": 0,
            }
        return {
            "repair.done": True,
            "repair.first_placeholder": repair.first_placeholder,
            "repair.written": repair.written,
            "repair.run_length": repair.run_length,
            "repair.scan_steps": repair.scan_steps,
        }

    def observed_previous_row(self) -> dict[str, object]:
        rows = self.batch.prev_req_id_to_index or {}
        state = self.requests.get(TRACKED)
        produced = TRACKED in rows
        observed: dict[str, object] = {
            "runner.has_prev_row": produced,
            "runner.sampled_token_ids_cpu": self.batch.sampled_token_ids_cpu is not None,
        }
        if produced and state is not None:
            count = self.accepted.get(TRACKED, 0) + 1
            observed.update({"runner.prev_row_start": state.generated - count, "runner.prev_row_count": count})
        return observed
