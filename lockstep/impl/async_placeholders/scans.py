"""The two placeholder scans of vLLM PR #42938 on real Python lists, and the repair that uses them.

``InputBatch.update_async_output_token_ids`` (vllm/v1/worker/gpu_input_batch.py) must find
``first_placeholder``, where the trailing run of -1 placeholders of a request's output list
begins:

- v0.21.0 (``pre-fix``): ``req_output_token_ids.index(-1)``, a **forward** scan from the front
  (``list.index`` reads up to and including the first -1: ``first + 1`` elements);
- v0.22.0 (``post-fix``): walk back from ``len(ids)`` while the element before is -1, a
  **backward** scan (the run, plus the real token that stops the walk when there is one).

``repair_row`` is the body of that method's loop for one row: ``num_sampled`` valid ids of the
previous step's row (a prefix; -1 pads the rejected positions), ``k = min(num_sampled,
num_placeholders)``, write them at ``first_placeholder`` and truncate there. Each scan also
returns how many list elements it read, which the runtime records as the model's
``repair.scan_steps`` (``lockstep.models.async_placeholders.scans`` states the same costs as
folds). Pure Python: the runtime's rank and the benchmark both call these.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lockstep.models import POST_FIX, PRE_FIX

PLACEHOLDER = -1


def forward_first_placeholder(ids: list[int]) -> tuple[int, int]:
    """v0.21.0: ``ids.index(-1)``; (index, elements read). ``ids`` ends with -1."""
    first = ids.index(PLACEHOLDER)
    return first, first + 1


def backward_first_placeholder(ids: list[int]) -> tuple[int, int]:
    """v0.22.0: walk back over the trailing -1 run; (index, elements read). ``ids`` ends with -1."""
    first = len(ids)
    reads = 0
    while first > 0:
        reads += 1
        if ids[first - 1] != PLACEHOLDER:
            break
        first -= 1
    return first, reads


SCANS: dict[str, Callable[[list[int]], tuple[int, int]]] = {
    PRE_FIX: forward_first_placeholder,
    POST_FIX: backward_first_placeholder,
}


@dataclass(frozen=True)
class RowRepair:
    """What the repair of one row did: where the run began, its length, ids written, elements read."""

    first_placeholder: int
    run_length: int
    written: int
    scan_steps: int


def valid_count(row: list[int]) -> int:
    """The valid ids of a sampled row: all of them, or those before the first -1."""
    return len(row) if row[-1] != PLACEHOLDER else row.index(PLACEHOLDER)


def repair_row(ids: list[int], row: list[int], scan: Callable[[list[int]], tuple[int, int]]) -> RowRepair:
    """Replace the trailing -1 run of ``ids`` (in place) by the first valid ids of ``row``."""
    first, reads = scan(ids)
    run = len(ids) - first
    written = min(valid_count(row), run)
    ids[first:] = row[:written]
    return RowRepair(first, run, written, reads)
