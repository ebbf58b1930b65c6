"""Decisions the runtime computes with its own code, compared with the model's on every small input
(issue: the runtime is an independent implementation of the same reading of vLLM; where both
decide the same thing, they must decide it alike).

- dp-pause: ``ParallelConfig.sync_dp_state`` (the runtime's ``surface.py``, on the values its SUM
  all-reduce returns) against the model's ``sync_dp_state`` (evaluated through the reference
  semantics), for every rank count up to 8 and every reachable pair of sums.
- async-placeholders: the scans are compared in ``tests/test_runtime_async_placeholders.py``.
"""

from __future__ import annotations

import itertools

import pytest

from lockstep.impl.dp_pause.surface import DPGroup, ParallelConfig
from lockstep.models.dp_pause.engine import sync_dp_state
from lockstep.spec.evaluation import Environment, evaluate
from lockstep.spec.terms import lift


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
