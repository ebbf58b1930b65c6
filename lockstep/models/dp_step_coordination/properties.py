"""The properties of dp-step-coordination, each with the source lines it comes from, and the final states.

- ``no_collective_mismatch`` (built in): no two ranks of a group block in different collectives at
  the same position. vLLM's groups (``get_dp_group()``, the EP group, the engine ``dp_group``) are
  NCCL or gloo communicators that match ops by order only: ``dp_utils.py`` ``_run_ar`` and every
  MoE all-to-all assume every rank posts the same op at the same position.
- ``no_hang`` (built in): every posted collective completes within ``hang_bound`` steps, and no
  state without an enabled step has one pending (a rank waiting in one group while its peer waits
  in another is such a state).
- ``no_stuck_request``: where nothing can move any more, no rank still has work (a request of a
  rank that left the loop, or of a wave that ended under it, is never served).
- witnesses: ``dummy_step`` (a rank with nothing to run steps with a dummy batch so its peers'
  collectives complete: ``run_busy_loop``'s ``execute_dummy_batch``), ``all_ranks_finish``
  (every request served, the wave over on every rank) and, where batches may be overlong,
  ``drafter_skipped`` (a rank's batch did not fit the drafter: ``sample_tokens`` took the branch
  the variants differ in).

No assert of ``_determine_batch_execution_and_padding``/``coordinate_batch_across_dp`` depends on
anything but the all-reduce's own result, which every rank of one all-reduce shares; the model
has no engine assert to reach (see docs/models/dp-step-coordination.md).
"""

from __future__ import annotations

from lockstep.models.dp_step_coordination.state import Phase, State
from lockstep.spec.machine import Machine, Source
from lockstep.spec.terms import Term, all_of, conjunction


def _idle(state: State, rank: Term) -> Term:
    """The rank's wave is over: at its loop head, not running, nothing to run."""
    return conjunction(state.phase[rank] == Phase.LOOP, ~state.engines_running[rank], state.work[rank] == 0)


_CORE = "vllm/v1/engine/core.py"
_RUNNER = "vllm/v1/worker/gpu_model_runner.py"


def set_final(machine: Machine, state: State) -> None:
    """A run ends when the wave is over on every rank (requests not yet added would start a new
    wave through the coordinator: dp-pause's model)."""
    machine.set_final(all_of(state.Rank, lambda rank: _idle(state, rank)))


def add_properties(machine: Machine, state: State) -> None:
    """``no_stuck_request`` and the witnesses (the collective properties are built in)."""
    machine.always(
        "no_stuck_request",
        True,
        "no rank keeps unserved work where nothing can move",
        at_deadlock=all_of(state.Rank, lambda rank: state.work[rank] == 0),
        source=Source("0.33.0", _CORE, 2514, "DPEngineCoreProc.run_busy_loop", "code", 2517),
    )
    machine.sometimes(
        "dummy_step",
        state.dummy_ran,
        "a rank runs a dummy batch so its peers' collectives complete",
        source=Source("0.33.0", _CORE, 2503, "DPEngineCoreProc.run_busy_loop", "comment", 2507),
    )
    machine.sometimes(
        "all_ranks_finish",
        conjunction(state.requests_left == 0, all_of(state.Rank, lambda rank: _idle(state, rank))),
        "every request is served and the wave ends on every rank",
        source=Source("0.33.0", _CORE, 2535, "DPEngineCoreProc.run_busy_loop", "comment", 2537),
    )
    if state.sizes.overlong and state.sizes.drafts:
        machine.sometimes(
            "drafter_skipped",
            state.draft_skipped,
            "a rank's batch does not fit the drafter (_input_fits_in_drafter is false)",
            source=Source("0.33.0", _RUNNER, 4390, "GPUModelRunner.sample_tokens", "comment", 4392),
        )
