"""The capture of a rank's CUDA graphs: ``capture``, one descriptor a step, before the engine schedules.

Mirrors ``vllm/v1/worker/gpu/model_runner.py`` (``capture_model``, ``_dummy_run``) and
``vllm/v1/worker/gpu/cudagraph_utils.py`` (``ModelCudaGraphManager.capture`` and its
``create_forward_fn``): modes PIECEWISE then FULL, within a mode descriptors by ``num_tokens``
descending; each descriptor is the warm-up run in mode NONE and the capture. A graph records its
intermediate-input address (``graph.input``) and the request count its dummy batch had
(``graph.requests``); the manager's output buffers are sized at the first capture (the faithfulness
notes of ``model.py`` say why). v0.18.0 with PP captures nothing: its machine has no ``capture``.
"""

from __future__ import annotations

from lockstep.models.cudagraph_pp.descriptors import adjusted_num_reqs
from lockstep.models.cudagraph_pp.state import Phase, State
from lockstep.models.cudagraph_pp.variants import FULL_ADJUSTMENT, Variant
from lockstep.spec.actions import action
from lockstep.spec.machine import Step
from lockstep.spec.terms import Term, if_then_else


@action(actor="rank:{rank}")
def capture(state: State, variant: Variant, rank: Term) -> Step:
    """ModelCudaGraphManager.capture, one descriptor: warm-up (mode NONE) and capture; non-first
    ranks take slices of the persistent buffer as inputs (the mutant: a capture-time buffer)."""
    index = state.captured[rank]
    chosen = state.capture_order[index]
    nominal = state.capture_requests_of[chosen]
    requests = adjusted_num_reqs(nominal, state.tokens_of[chosen]) if variant.name == FULL_ADJUSTMENT else nominal
    Address = state.Address
    recorded = if_then_else(
        rank == 0, Address.INPUT_BUFFERS, Address.PERSISTENT if variant.persistent_buffer else Address.CAPTURE_BUFFER
    )
    done = index + 1 == len(state.plan.order)
    graph_input, graph_requests, output_rows = state.graph_input, state.graph_requests, state.output_rows
    return Step(
        state.phase[rank] == Phase.CAPTURING,
        {
            graph_input: graph_input.set(rank, graph_input[rank].set(chosen, recorded)),
            graph_requests: graph_requests.set(rank, graph_requests[rank].set(chosen, requests)),
            output_rows: output_rows.set(
                rank, if_then_else(output_rows[rank] == 0, state.tokens_of[chosen], output_rows[rank])
            ),
            state.captured: state.captured.set(rank, index + 1),
            state.phase: state.phase.set(rank, if_then_else(done, Phase.IDLE, Phase.CAPTURING)),
        },
    )
