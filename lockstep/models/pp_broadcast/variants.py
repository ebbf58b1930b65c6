"""The variants of pp-broadcast: vLLM v0.19.0 to v0.33.0 release by release, and two mutants of v0.20.0.

A variant is a vLLM release (or a mutant of one); a ``Release`` lists the switches its code has, each
the first release that has it (``releases.py`` maps every PyPI release to its variant and says what
else changed). Two model runners carry the sampled tokens across the PP boundary, and the parameter
``runner`` picks one (``model.py``):

- The V1 ``GPUModelRunner`` (``runner=1``, ``worker.py``): ``sample_tokens`` broadcasts on
  ``pp.device_group`` from the compute stream. The skip (v0.20.0 on): a rank leaves out the
  broadcast of a step whose rows are all non-final chunks (``skip-whole-receive``: a non-last rank
  then also skips rebuilding its state). The guard: a rank whose ``execute_model`` left no
  ``execute_model_state`` takes the receive path if ``use_async_scheduling and pp.world_size > 1``
  (v0.19.0, v0.20.0; always true in the model) or ``use_async_scheduling and not pp.is_last_rank``
  (v0.21.0 on), and returns otherwise. v0.22.0's receive also advances ``num_tokens_no_spec`` per kept
  row, which the model does not track. From v0.31.0 the config refuses the V1 runner with PP and async
  scheduling (only ``async_scheduling=0`` builds).
- The V2 ``GPUModelRunner`` (``runner=2``, ``handler.py``): up to v0.22.x ``pp_broadcast`` /
  ``pp_receive`` on every step, from the compute stream; from v0.23.0 the ``PPHandler``: a side
  stream, its own communicator, the skip where no row needs its sample, the received tokens applied
  ``pp_size`` steps later, and the scheduler's decode cadence. v0.30.0 and v0.33.0 change the width of
  the sampled tensor and the draft broadcast (speculative decoding, ``drafts`` > 0).
"""

from __future__ import annotations

from dataclasses import dataclass

from lockstep.spec.protocol import POST_FIX as POST_FIX  # vLLM v0.19.0, v0.20.0: the names, defined once in spec
from lockstep.spec.protocol import PRE_FIX as PRE_FIX
from lockstep.spec.terms import Term, TermLike, lift

SKIP_DISAGREE = "skip-disagree"  # the last rank skips when all rows are discarded, others when no row decodes
SKIP_WHOLE_RECEIVE = "skip-whole-receive"  # non-last ranks skip all of the receive on all-chunked steps
V0_21_0, V0_22_0 = "v0.21.0", "v0.22.0"  # V1: the receive guard is ``not pp.is_last_rank``
V0_23_0, V0_30_0, V0_31_0, V0_33_0 = "v0.23.0", "v0.30.0", "v0.31.0", "v0.33.0"  # V2: the PPHandler
MUTANTS = (SKIP_DISAGREE, SKIP_WHOLE_RECEIVE)


@dataclass(frozen=True)
class Release:
    """The pp-broadcast code a variant has, as switches (all off: vLLM v0.19.0)."""

    skips: bool = False  # V1, v0.20.0: no broadcast where _is_all_reqs_chunked_prefill()
    last_rank_guard: bool = False  # V1, v0.21.0: receive only `if use_async_scheduling and not pp.is_last_rank`
    refuses_v1_async: bool = False  # v0.31.0: config refuses the V1 runner with PP and async scheduling
    empty_output_on_failure: bool = False  # V1, v0.23.0: no execute_model_state → EMPTY_MODEL_RUNNER_OUTPUT, not None
    handler: bool = False  # V2, v0.23.0: PPHandler (side stream, pp_broadcast group, skip, ring, cadence)
    excludes_finishing_prefill: bool = False  # V2 need mask: no sample for a final chunk that ends the request
    pads_sampled: bool = False  # V2, v0.30.0-v0.32.0: broadcast() pads the sampled ids to max_sample_len
    broadcasts_drafts: bool = False  # V2, v0.30.0: the draft tokens follow the sampled ids to the other ranks
    sample_len_by_drafts: bool = False  # V2, v0.33.0: width 1 + k only when the step schedules drafts


_V1_LATER = dict(skips=True, last_rank_guard=True)
RELEASES: dict[str, Release] = {
    PRE_FIX: Release(),
    POST_FIX: Release(skips=True),
    SKIP_DISAGREE: Release(skips=True),
    SKIP_WHOLE_RECEIVE: Release(skips=True),
    V0_21_0: Release(**_V1_LATER),
    V0_22_0: Release(**_V1_LATER),
    V0_23_0: Release(**_V1_LATER, empty_output_on_failure=True, handler=True, excludes_finishing_prefill=True),
    V0_30_0: Release(
        **_V1_LATER, empty_output_on_failure=True, handler=True, pads_sampled=True, broadcasts_drafts=True
    ),
    V0_31_0: Release(
        **_V1_LATER,
        refuses_v1_async=True,
        empty_output_on_failure=True,
        handler=True,
        excludes_finishing_prefill=True,
        pads_sampled=True,
        broadcasts_drafts=True,
    ),
    V0_33_0: Release(
        **_V1_LATER,
        refuses_v1_async=True,
        empty_output_on_failure=True,
        handler=True,
        excludes_finishing_prefill=True,
        broadcasts_drafts=True,
        sample_len_by_drafts=True,
    ),
}


def release_of(variant: str) -> Release:
    """The switches of ``variant``."""
    return RELEASES[variant]


def receive_guard(variant: str, rank: Term, last: TermLike) -> Term:
    """The release's guard of the V1 receive path in ``sample_tokens`` (``execute_model_state is None``),
    with async scheduling (without it the guard is false in every release)."""
    if release_of(variant).last_rank_guard:
        return rank != last
    return lift(True)  # use_async_scheduling and get_pp_group().world_size > 1
