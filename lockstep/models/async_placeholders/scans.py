"""The two placeholder scans of vLLM PR #42938, stated once as left folds over a token list.

``InputBatch.update_async_output_token_ids`` (vllm/v1/worker/gpu_input_batch.py) must find
``first_placeholder``, where the trailing run of -1 placeholders of a request's output list
begins. v0.21.0 asks ``list.index(-1)`` (a **forward** scan from the front); v0.22.0 walks back
from the end while the element before is -1 (a **backward** scan). Each scan here is a fold: a
set of accumulators, a ``step(accumulators, element, index)`` applied to every element from the
front, the index it returns and the number of list elements it reads (its cost).

The same ``Scan`` objects serve twice: the model's repair action unrolls ``step`` over the
positions of its bounded list (``unroll``), and the lemmas of ``lemmas.py`` fold the same
``step`` over lists of any length. Each step reads each accumulator at most once per branch, so
unrolling over ``n`` positions builds an expression of size O(n^2), not O(2^n).

- forward: ``found`` (a -1 was seen) and ``first`` (the index of the first -1 once found; until
  then the current index). Cost: ``first + 1`` elements (``list.index`` reads up to and
  including the first -1).
- backward: ``run_start``, the index after the last real token seen so far, so at the end it is
  where the trailing run of -1 begins (the length if the list ends with a real token). Cost:
  the run's length plus one more read, of the real token that stops the walk, when there is one
  (the ``while first_placeholder > 0 and ids[first_placeholder - 1] == -1`` loop).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from lockstep.spec.sorts import BOOL, INTEGER, Sort, Value
from lockstep.spec.terms import Term, TermLike, constant, if_then_else, lift

PLACEHOLDER = -1
"""The sentinel of a yet-unknown output token (real token ids are >= 0)."""

Accumulators = dict[str, Term]


@dataclass(frozen=True)
class Scan:
    """A scan as a left fold: where it says the trailing run starts, and what that costs."""

    name: str
    accumulators: Mapping[str, tuple[Sort, Value]]  # name -> (sort, initial value)
    step: Callable[[Accumulators, Term, Term], dict[str, Term]]  # (accumulators, element, index)
    result: Callable[[Accumulators, Term], Term]  # (final accumulators, length) -> first_placeholder
    cost: Callable[[Accumulators, Term], Term]  # (final accumulators, length) -> elements read

    def initial(self) -> Accumulators:
        return {name: constant(value, sort) for name, (sort, value) in self.accumulators.items()}


def _forward_step(accumulators: Accumulators, element: Term, index: Term) -> dict[str, Term]:
    found = accumulators["found"]
    return {"found": found | (element == PLACEHOLDER), "first": if_then_else(found, accumulators["first"], index)}


def _backward_step(accumulators: Accumulators, element: Term, index: Term) -> dict[str, Term]:
    return {"run_start": if_then_else(element == PLACEHOLDER, accumulators["run_start"], index + 1)}


FORWARD = Scan(
    "forward",
    {"found": (BOOL, False), "first": (INTEGER, 0)},
    _forward_step,
    result=lambda accumulators, length: accumulators["first"],
    cost=lambda accumulators, length: accumulators["first"] + 1,
)
"""v0.21.0: ``first_placeholder = req_output_token_ids.index(-1)``."""

BACKWARD = Scan(
    "backward",
    {"run_start": (INTEGER, 0)},
    _backward_step,
    result=lambda accumulators, length: accumulators["run_start"],
    cost=lambda accumulators, length: (
        (length - accumulators["run_start"]) + if_then_else(accumulators["run_start"] > 0, 1, 0)
    ),
)
"""v0.22.0 (PR #42938): walk back from ``len(ids)`` while the element before is -1."""


def unroll(scan: Scan, elements: Sequence[TermLike]) -> Accumulators:
    """The scan's accumulators after folding ``step`` over ``elements`` (front first)."""
    accumulators = scan.initial()
    for index, element in enumerate(elements):
        accumulators = scan.step(accumulators, lift(element), lift(index))
    return accumulators


def first_placeholder(scan: Scan, elements: Sequence[TermLike], length: TermLike) -> Term:
    """Where ``scan`` says the trailing run of -1 begins."""
    return scan.result(unroll(scan, elements), lift(length))


def scan_cost(scan: Scan, elements: Sequence[TermLike], length: TermLike) -> Term:
    """How many list elements ``scan`` reads."""
    return scan.cost(unroll(scan, elements), lift(length))
