"""One rank's V2 model runner for computed-tokens: ``RequestState``, the input batch, a tiny target model.

Mirrors ``vllm/v1/worker/gpu/model_runner.py`` and ``states.py`` as
``lockstep/models/computed_tokens/runner.py`` models them, on real torch tensors:

- ``RequestState``: ``num_computed_tokens`` (on the rank's device: the authoritative value),
  ``num_computed_tokens_np`` (the CPU mirror, a CPU tensor), ``num_computed_prefill_tokens`` and
  ``prefill_len`` (CPU), one slot per request.
- ``execute_model``: ``add_requests`` (new rows), ``update_requests`` (``post-fix``, v0.22.0: the
  mirror := the scheduler's value, then ``num_computed_prefill_tokens = min(mirror, prefill_len)``),
  ``prepare_inputs`` (positions and ``seq_lens`` from the device value; ``seq_lens_cpu_upper_bound
  = mirror + num_scheduled`` for real rows, 0 for the padded rows; ``max_seq_len`` over the padded
  batch; ``is_prefilling``), then this rank's stage of the target model.
- ``sample``: the last stage's logits, the greedy rejection sampler against the draft tokens,
  ``get_num_sampled_and_rejected`` (chunked-prefill rows sample nothing).
- ``postprocess``: ``post_update`` (device value += query_len - num_rejected); ``pre-fix``
  (v0.21.0) also advances the mirror and the prefill progress by ``num_scheduled``.

The tiny draft/target pair: the target is a seeded embedding of (position, request) through one
``tanh`` layer per pipeline stage and an LM head; the drafter proposes, for a row with ``k``
drafts and an acceptance count ``a`` taken from the choice source (point ``accepted``), the
target's own tokens at the first ``a`` positions and a different token at position ``a``. The
rejection sampler does not know ``a``: it compares drafts with the target's argmax and accepts the
longest equal prefix, so the count the runner acts on is computed from the tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from lockstep.impl.computed_tokens.scheduler import Bounds, StepRecord
from lockstep.models.computed_tokens.model import POST_FIX
from lockstep.spec.vocabulary import Vocabulary

VOCABULARY, HIDDEN = 32, 16
# The model's per-rank variables the runner observes (each named ``name[rank]`` by the vocabulary).
OBSERVED = (
    "runner.num_computed_tokens_np",
    "runner.num_computed_tokens",
    "runner.num_computed_prefill_tokens",
    "runner.prefill_len",
    "metadata.real",
    "metadata.seq_lens_cpu_upper_bound",
    "metadata.seq_lens",
    "metadata.max_seq_len",
    "metadata.is_prefilling",
)


class TinyTarget:
    """The target model, identical on every rank (seeded); each rank runs its own stage."""

    def __init__(self, bounds: Bounds, seed: int, device: torch.device) -> None:
        generator = torch.Generator().manual_seed(seed)
        positions = bounds.max_model_len + bounds.budget + bounds.drafts + 2
        self.device = device
        self.position_embedding = torch.randn(positions, HIDDEN, generator=generator).to(device)
        self.request_embedding = torch.randn(bounds.requests, HIDDEN, generator=generator).to(device)
        self.stages = [
            torch.randn(HIDDEN, HIDDEN, generator=generator).to(device) / HIDDEN**0.5 for _ in range(bounds.ranks)
        ]
        self.head = torch.randn(HIDDEN, VOCABULARY, generator=generator).to(device)

    def embed(self, positions: torch.Tensor, requests: torch.Tensor) -> torch.Tensor:
        return self.position_embedding[positions] + self.request_embedding[requests]

    def stage(self, rank: int, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(hidden @ self.stages[rank])

    def tokens(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.argmax(hidden @ self.head, dim=-1)


@dataclass
class Metadata:
    """The attention metadata of one step, in the model's row layout (request q is row q; padding after)."""

    real: list[bool]
    upper: list[int]  # seq_lens_cpu_upper_bound
    seq_lens: list[int]  # seq_lens on the device (copied to the host for the trace only)
    max_seq_len: int
    is_prefilling: list[bool]


@dataclass
class Executed:
    """What ``execute_model`` leaves for ``sample``: the step, its rows in batch order, the hidden states."""

    step: StepRecord
    order: list[int]  # request slot of each real row
    query_start: list[int]
    hidden: torch.Tensor


Choose = Callable[[str, list[str]], str]  # (point, options) -> chosen option


class ModelRunner:
    def __init__(
        self, variant: str, bounds: Bounds, rank: int, device: torch.device, seed: int, vocabulary: Vocabulary
    ) -> None:
        self.fixed = variant == POST_FIX
        self.bounds, self.rank, self.device = bounds, rank, device
        count = bounds.requests
        self.num_computed_tokens = torch.zeros(count, dtype=torch.int64, device=device)
        self.num_computed_tokens_np = torch.zeros(count, dtype=torch.int64)
        self.num_computed_prefill_tokens = torch.zeros(count, dtype=torch.int64)
        self.prefill_len = torch.zeros(count, dtype=torch.int64)
        self.target = TinyTarget(bounds, seed, device)
        self.last = rank == bounds.ranks - 1
        # the rank's observed entries, named through the model's vocabulary (``runner.prefill_len[r]``, ...)
        self.entry = {name: vocabulary.entry(name, rank) for name in OBSERVED}

    # ---------------------------------------------------------------------------- state
    def observed(self) -> dict[str, object]:
        entry = self.entry
        return {
            entry["runner.num_computed_tokens_np"]: self.num_computed_tokens_np.tolist(),
            entry["runner.num_computed_tokens"]: self.num_computed_tokens.tolist(),
            entry["runner.num_computed_prefill_tokens"]: self.num_computed_prefill_tokens.tolist(),
            entry["runner.prefill_len"]: self.prefill_len.tolist(),
        }

    def observed_metadata(self, metadata: Metadata) -> dict[str, object]:
        entry = self.entry
        return {
            entry["metadata.real"]: metadata.real,
            entry["metadata.seq_lens_cpu_upper_bound"]: metadata.upper,
            entry["metadata.seq_lens"]: metadata.seq_lens,
            entry["metadata.max_seq_len"]: metadata.max_seq_len,
            entry["metadata.is_prefilling"]: metadata.is_prefilling,
        }

    # ---------------------------------------------------------------------- execute_model
    def update_states(self, step: StepRecord) -> None:
        """add_requests, then update_requests (post-fix: refresh the mirror from the scheduler)."""
        for slot, row in enumerate(step.rows):
            if row.scheduled > 0 and row.new:  # RequestState.add_request
                self.prefill_len[slot] = self.bounds.prefill_len
                self.num_computed_tokens_np[slot] = row.computed
                self.num_computed_prefill_tokens[slot] = row.computed
                self.num_computed_tokens[slot] = row.computed  # staged write, applied before prepare_inputs
        if self.fixed:  # v0.22.0 update_requests (model_runner.py:736)
            for slot, row in enumerate(step.rows):
                if row.scheduled > 0:
                    self.num_computed_tokens_np[slot] = row.computed
            torch.minimum(self.num_computed_tokens_np, self.prefill_len, out=self.num_computed_prefill_tokens)

    def prepare_inputs(self, step: StepRecord) -> tuple[Metadata, list[int], torch.Tensor, torch.Tensor, list[int]]:
        """The input batch: metadata, row order, positions and request of every token, query starts."""
        order = [slot for slot, row in enumerate(step.rows) if row.scheduled > 0]
        num_reqs = len(order)
        padded = num_reqs + self.bounds.padded_rows
        index = torch.tensor(order, dtype=torch.int64)
        num_scheduled = torch.tensor([step.rows[slot].scheduled for slot in order], dtype=torch.int64)
        upper = torch.zeros(padded, dtype=torch.int64)
        upper[:num_reqs] = self.num_computed_tokens_np[index] + num_scheduled  # no device sync
        device_index, device_scheduled = index.to(self.device), num_scheduled.to(self.device)
        seq_lens = torch.zeros(padded, dtype=torch.int64, device=self.device)
        seq_lens[:num_reqs] = self.num_computed_tokens[device_index] + device_scheduled
        starts = [0]
        for count in num_scheduled.tolist():
            starts.append(starts[-1] + count)
        offsets = torch.arange(starts[-1], device=self.device) - torch.repeat_interleave(
            torch.tensor(starts[:-1], dtype=torch.int64, device=self.device), device_scheduled
        )
        positions = torch.repeat_interleave(self.num_computed_tokens[device_index], device_scheduled) + offsets
        requests = torch.repeat_interleave(device_index, device_scheduled)
        max_seq_len = int(upper.max()) if padded else 0  # FULL graphs: over the padded rows (0 there)
        prefilling = (self.num_computed_prefill_tokens < self.prefill_len).tolist()
        count = self.bounds.requests
        real, by_slot_upper, by_slot_seq = [False] * count, [0] * count, [0] * count
        device_lens = seq_lens.cpu().tolist()  # D2H for the trace only
        for row, slot in enumerate(order):
            real[slot], by_slot_upper[slot], by_slot_seq[slot] = True, int(upper[row]), int(device_lens[row])
        padding = [0] * self.bounds.padded_rows
        metadata = Metadata(
            real + [False] * self.bounds.padded_rows,
            by_slot_upper + [int(value) for value in upper[num_reqs:]],
            by_slot_seq + padding,
            max_seq_len,
            prefilling,
        )
        return metadata, order, positions, requests, starts

    def forward(self, positions: torch.Tensor, requests: torch.Tensor, received: torch.Tensor | None) -> torch.Tensor:
        """This rank's stage: the first embeds, the others take the previous stage's hidden states."""
        hidden = self.target.embed(positions, requests) if received is None else received
        return self.target.stage(self.rank, hidden)

    # ------------------------------------------------------------------------- sampling
    def sample(
        self, executed: Executed, choose: Choose
    ) -> tuple[list[int], list[int], list[list[int]], dict[str, int]]:
        """The last rank: num_sampled, num_rejected per request slot, the sampled ids, the ``accepted`` arguments."""
        bounds = self.bounds
        target = self.target.tokens(executed.hidden)
        count = bounds.requests
        names = ["accepted"] if count == 1 else [f"accepted_{slot}" for slot in range(count)]
        sampled, rejected = [0] * count, [0] * count
        tokens: list[list[int]] = [[] for _ in range(count)]
        arguments: dict[str, int] = {}
        rows = {slot: position for position, slot in enumerate(executed.order)}
        for slot in range(count):
            row = executed.step.rows[slot]
            drafts = row.drafts if row.scheduled > 0 else 0
            forced = int(choose(names[slot], [str(option) for option in range(drafts + 1)]))
            arguments[names[slot]] = forced
            if row.scheduled == 0:
                continue
            if int(self.num_computed_tokens[slot]) + row.scheduled < int(self.prefill_len[slot]):
                continue  # get_num_sampled_and_rejected: a chunked-prefill row samples nothing
            # logits_indices: the last 1 + k positions of the row (a row of fewer tokens than 1 + k, which
            # the early-drafts finding schedules, reads positions before it, clamped to the batch here)
            end = executed.query_start[rows[slot] + 1]
            indices = torch.clamp(torch.arange(end - drafts - 1, end, device=target.device), min=0)
            verified = target[indices]  # the target's token after each of those inputs
            accepted = self._accepted(self._propose(verified, forced), verified[:drafts])
            if accepted != forced:
                raise RuntimeError(
                    f"request {slot}: the rejection sampler accepted {accepted} drafts, the drafter aimed at {forced}"
                )
            sampled[slot], rejected[slot] = accepted + 1, drafts - accepted
            tokens[slot] = verified[: accepted + 1].tolist()
        return sampled, rejected, tokens, arguments

    @staticmethod
    def _propose(verified: torch.Tensor, accepted: int) -> torch.Tensor:
        """The drafter: the target's tokens at the first ``accepted`` positions, then a different one."""
        drafts = verified[:-1].clone()
        if accepted < len(drafts):
            drafts[accepted] = (drafts[accepted] + 1) % VOCABULARY
        return drafts

    @staticmethod
    def _accepted(drafts: torch.Tensor, target: torch.Tensor) -> int:
        """Greedy rejection sampling: the longest prefix of drafts equal to the target's tokens."""
        return int(torch.cumprod((drafts == target).to(torch.int64), dim=0).sum()) if len(drafts) else 0

    def postprocess(self, step: StepRecord, rejected: list[int]) -> None:
        """post_update on the device; pre-fix also the CPU mirror ("assume all scheduled accepted")."""
        scheduled = torch.tensor([row.scheduled for row in step.rows], dtype=torch.int64)
        self.num_computed_tokens += (scheduled - torch.tensor(rejected, dtype=torch.int64)).to(self.device)
        if not self.fixed:  # v0.21.0 postprocess (model_runner.py:950)
            self.num_computed_tokens_np += scheduled
            torch.minimum(
                self.num_computed_prefill_tokens + scheduled, self.prefill_len, out=self.num_computed_prefill_tokens
            )
