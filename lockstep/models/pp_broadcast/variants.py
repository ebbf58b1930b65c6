"""The variants of pp-broadcast: vLLM v0.19.0 to v0.22.0, and two mutants of v0.20.0.

``sample_tokens`` (``worker.py``) tells them apart. The skip: whether a rank leaves out the
broadcast of a step (v0.20.0 on), and (``skip-whole-receive``) whether a skipping non-last rank
rebuilds its state. The guard: a rank whose ``execute_model`` left no ``execute_model_state`` takes
the receive path if ``use_async_scheduling and pp.world_size > 1`` (v0.19.0, v0.20.0; always true
in the model) or ``use_async_scheduling and not pp.is_last_rank`` (v0.21.0, v0.22.0), and returns
None otherwise. v0.22.0's receive path also advances ``num_tokens_no_spec`` per kept row, which the
model does not track: its verdicts equal v0.21.0's.
"""

from __future__ import annotations

from lockstep.spec.protocol import POST_FIX as POST_FIX  # vLLM v0.19.0, v0.20.0: the names, defined once in spec
from lockstep.spec.protocol import PRE_FIX as PRE_FIX
from lockstep.spec.terms import Term, TermLike, lift

SKIP_DISAGREE = "skip-disagree"  # the last rank skips when all rows are discarded, others when no row decodes
SKIP_WHOLE_RECEIVE = "skip-whole-receive"  # non-last ranks skip all of the receive on all-chunked steps
V0_21_0, V0_22_0 = "v0.21.0", "v0.22.0"  # the receive guard is ``not pp.is_last_rank``
LAST_RANK_GUARD = (V0_21_0, V0_22_0)


def receive_guard(variant: str, rank: Term, last: TermLike) -> Term:
    """The release's guard of the receive path in ``sample_tokens`` (``execute_model_state is None``)."""
    if variant in LAST_RANK_GUARD:
        return rank != last
    return lift(True)  # use_async_scheduling and get_pp_group().world_size > 1
