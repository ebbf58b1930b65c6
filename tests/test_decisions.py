"""Decisions the runtime computes with its own code, compared with the model's on every small input
(issue: the runtime is an independent implementation of the same reading of vLLM; where both
decide the same thing, they must decide it alike).

- dp-pause: ``ParallelConfig.sync_dp_state`` (the runtime's ``surface.py``, on the values its SUM
  all-reduce returns) against the model's ``sync_dp_state`` (evaluated through the reference
  semantics), for every rank count up to 8 and every reachable pair of sums.
- async-placeholders: the scans are compared in ``tests/test_runtime_async_placeholders.py``.
- cudagraph-pp: the capture plan (candidates per capture size, capture order) and ``dispatch`` of
  every batch, the runtime's ``DescriptorPlan`` against the model's ``descriptors``, for every small
  size. (PR #35162's request-count adjustment exists only in the model's ``full-adjustment`` mutant
  and its lemma: the runtime does not implement that mutant, so there is no second copy to compare.)
"""

from __future__ import annotations

import itertools

import pytest

from lockstep.impl.cudagraph_pp.descriptors import MODES as RUNTIME_MODES
from lockstep.impl.cudagraph_pp.descriptors import DescriptorPlan
from lockstep.impl.dp_pause.surface import DPGroup, ParallelConfig
from lockstep.models.cudagraph_pp import descriptors as model_descriptors
from lockstep.models.dp_pause.engine import sync_dp_state
from lockstep.spec.evaluation import Environment, evaluate
from lockstep.spec.terms import DefinitionError, lift


class SummingGroup:
    """The engines' dp_group in one process: ``all_reduce`` SUMs the members' contributions (every
    member's [unfinished, pending_pause] given up front), as gloo's all-reduce would return them."""

    def __init__(self, contributions: list[list[int]]) -> None:
        self.contributions = contributions

    def all_reduce(self, op: str, values: list[int], reduce: str) -> list[int]:
        assert (op, reduce) == ("sync_sum", "sum")
        assert values in self.contributions  # the caller is one of the members
        return [sum(column) for column in zip(*self.contributions, strict=True)]


@pytest.mark.parametrize("size", range(1, 9))
def test_sync_dp_state_runtime_and_model_agree(size: int) -> None:
    # The decision reads only the two sums, so every (unfinished ranks, pausing ranks) pair is every input.
    for unfinished_sum, votes in itertools.product(range(size + 1), repeat=2):
        contributions = [[int(rank < unfinished_sum), int(rank < votes)] for rank in range(size)]
        group = DPGroup(SummingGroup(contributions), size)  # type: ignore[arg-type]
        unfinished, pending = bool(contributions[0][0]), bool(contributions[0][1])  # rank 0 calls it
        runtime = ParallelConfig.sync_dp_state(group, unfinished, pending)
        running, consensus = sync_dp_state(lift(unfinished_sum), lift(votes), size)
        model = (evaluate(running.expression, Environment({})), evaluate(consensus.expression, Environment({})))
        assert runtime == model, (size, unfinished_sum, votes)


# ------------------------------------------------------------------------------------------ cudagraph-pp
def _model_plan(
    mode: int, largest: int, max_num_tokens: int, max_num_reqs: int, decode_query_len: int
) -> tuple[list[str], dict[tuple[int, int, bool], str]] | None:
    """The model's capture order and dispatch table (labels), or None where it refuses the sizes."""
    try:
        sizes = model_descriptors.capture_sizes(min(largest, max_num_tokens), decode_query_len)
    except DefinitionError:
        return None
    by_size, order = model_descriptors.capture_plan(
        model_descriptors.MODE_NAMES[mode], sizes, max_num_reqs, decode_query_len
    )
    table = model_descriptors.dispatch_plan(by_size, max_num_tokens, max_num_reqs, decode_query_len)
    return [d.label for d in order], {batch: d.label for batch, d in table.items()}


def _runtime_plan(
    mode: int, largest: int, max_num_tokens: int, max_num_reqs: int, decode_query_len: int
) -> tuple[list[str], dict[tuple[int, int, bool], str]] | None:
    """The runtime's capture order and its dispatch of every batch the model tabulates."""
    try:
        plan = DescriptorPlan.build(mode, largest, max_num_tokens, max_num_reqs, decode_query_len)
    except ValueError:
        return None
    table: dict[tuple[int, int, bool], str] = {}
    for tokens in range(1, max_num_tokens + 1):
        for requests in range(1, min(tokens, max_num_reqs) + 1):
            for decode in (False, True):
                if decode and tokens != requests * decode_query_len:
                    continue
                chosen = plan.dispatch(tokens, requests, decode)
                if chosen is not None:
                    table[(tokens, requests, decode)] = chosen.label
    return [d.label for d in plan.order], table


@pytest.mark.parametrize("mode", sorted(RUNTIME_MODES))
def test_cudagraph_capture_plan_and_dispatch_agree(mode: int) -> None:
    """``CudaGraphManager._init_candidates``, the capture order and ``dispatch``: the runtime's
    ``DescriptorPlan`` against the model's ``descriptors`` (which the model turns into its constant
    tables), for every small size: capture sizes, batches of every token and request count, uniform
    decode or not. The mode numbers are the model's (``cudagraph_mode`` parameter)."""
    assert RUNTIME_MODES[mode] == model_descriptors.CUDAGRAPH_MODES[model_descriptors.MODE_NAMES[mode]]
    compared = 0
    for largest, max_num_tokens, max_num_reqs, decode_query_len in itertools.product(
        range(1, 9), range(1, 9), range(1, 5), range(1, 4)
    ):
        sizes = (mode, largest, max_num_tokens, max_num_reqs, decode_query_len)
        model, runtime = _model_plan(*sizes), _runtime_plan(*sizes)
        assert model == runtime, sizes
        compared += model is not None
    assert compared > 300  # most size combinations are valid, and each was compared
