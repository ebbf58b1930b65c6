"""A pipeline stage at run time: ``first_forward`` (rank 0), ``receive``, ``prepare_inputs``, ``forward``
and ``send``, and the buffers they read and write.

Mirrors ``vllm/v1/worker/gpu_worker.py`` (``Worker.execute_model``: wait on ``_pp_send_work``,
``irecv_tensor_dict`` into ``AsyncIntermediateTensors``, ``isend_tensor_dict``) and
``vllm/v1/worker/gpu/model_runner.py`` (``execute_model``: dispatch, the copy-in on non-first
ranks, ``CudaGraphManager.run_fullgraph`` or the model under ``set_forward_context``). Per step:
rank 0 dispatches and runs its forward, then ``send``s; a non-first rank ``receive``s into a fresh
tensor (``FRESH_k`` for step k), ``prepare_inputs`` (dispatch, copy-in), ``forward`` (replay or
eager), and ``send``s unless it is the last. A stage's next step begins by waiting on its send
handles. An eager output is a fresh allocation that ``record_stream`` keeps alive until its send
completes, so it is never overwritten while sent; a graph's output buffer is.
"""

from __future__ import annotations

from lockstep.models.cudagraph_pp.engine import dispatch, padded
from lockstep.models.cudagraph_pp.state import GraphMode, Key, Phase, State
from lockstep.models.cudagraph_pp.variants import MISSING_KEY, Variant
from lockstep.spec.actions import action
from lockstep.spec.machine import Step
from lockstep.spec.sorts import BOOL, MapSort
from lockstep.spec.terms import Term, TermLike, conjunction, if_then_else, lift, map_of


def output_address(state: State, chosen: Term) -> Term:
    """Where the forward of descriptor ``chosen`` writes its output."""
    mode, Address = state.mode_of[chosen], state.Address
    return if_then_else(
        mode == GraphMode.FULL,
        Address.MANAGER_OUTPUT,
        if_then_else(mode == GraphMode.PIECEWISE, Address.GRAPH_OUTPUT, Address.EAGER_OUTPUT),
    )


def write_output(state: State, rank: Term, chosen: Term, data: Term) -> dict[Term, Term]:
    """The forward writes its output; a pending isend reading the same buffer now sends this."""
    target = output_address(state, chosen)
    send_data = state.send_data
    clobbers = state.send_pending[rank] & (state.send_source[rank] == target) & (target != state.Address.EAGER_OUTPUT)
    return {
        state.output_data: state.output_data.set(rank, data),
        send_data: send_data.set(rank, if_then_else(clobbers, data, send_data[rank])),
    }


def waited(state: State, variant: Variant, rank: Term) -> Term:
    """Worker.execute_model first waits on the previous step's send handles."""
    return ~state.send_pending[rank] if variant.waits_on_sends else lift(True)


def data_at(state: State, rank: Term, where: Term, key: Term) -> Term:
    """The data at ``where`` for ``key`` on ``rank``."""
    received = (where == state.fresh[state.step[rank]]) & state.received_keys[rank][key]
    return if_then_else(
        where == state.Address.PERSISTENT,
        state.persistent[rank][key],
        if_then_else(received, state.received_data[rank], -1),
    )


@action(actor="rank:0")
def first_forward(state: State, variant: Variant) -> Step:
    """Rank 0's execute_model: wait on its sends, dispatch, forward from its input buffers."""
    at = state.step[0]
    chosen = dispatch(state, at)
    return Step(
        conjunction(state.phase[0] == Phase.IDLE, at < state.scheduled, waited(state, variant, lift(0))),
        {
            state.descriptor: state.descriptor.set(0, chosen),
            state.forward_step: state.forward_step.set(0, at),
            state.forward_descriptor: state.forward_descriptor.set(0, chosen),
            state.forward_given: state.forward_given.set(0, state.Address.INPUT_BUFFERS),
            state.phase: state.phase.set(0, Phase.OUTPUT_READY),
            **write_output(state, lift(0), chosen, at),
        },
    )


@action(actor="rank:{rank}")
def receive(state: State, variant: Variant, rank: Term) -> Step:
    """Worker.execute_model on a non-first rank: wait on its own sends, irecv_tensor_dict into a
    fresh tensor; the lazy wait of AsyncIntermediateTensors completes it (and the sender's isend)."""
    sender = state.previous[rank]
    at = state.step[rank]
    sent_keys = (True, variant.name != MISSING_KEY)  # (hidden_states, residual): the mutant sends no residual
    return Step(
        conjunction(
            rank >= 1,
            state.phase[rank] == Phase.IDLE,
            at < state.scheduled,
            waited(state, variant, rank),
            state.send_pending[sender],
            state.send_step[sender] == at,
        ),
        {
            state.received_keys: state.received_keys.set(rank, lift(sent_keys, MapSort(Key, BOOL))),
            state.received_data: state.received_data.set(rank, state.send_data[sender]),
            state.received_rows: state.received_rows.set(rank, state.send_rows[sender]),
            state.send_pending: state.send_pending.set(sender, False),
            state.phase: state.phase.set(rank, Phase.RECEIVED),
        },
    )


@action(actor="rank:{rank}")
def prepare_inputs(state: State, variant: Variant, rank: Term) -> Step:
    """Dispatch, then (v0.19.0) copy every key of the persistent buffer from the received
    tensors, rows [:num_tokens_after_padding]; a missing key is vLLM's KeyError (K1)."""
    persistent, received_keys = state.persistent, state.received_keys
    updates: dict[Term, TermLike] = {
        state.descriptor: state.descriptor.set(rank, dispatch(state, state.step[rank])),
        state.phase: state.phase.set(rank, Phase.INPUTS_READY),
    }
    if variant.copies_in:
        updates[persistent] = persistent.set(
            rank,
            map_of(
                Key,
                lambda key: if_then_else(received_keys[rank][key], state.received_data[rank], persistent[rank][key]),
                state.Data,
            ),
        )
    return Step((rank >= 1) & (state.phase[rank] == Phase.RECEIVED), updates)


@action(actor="rank:{rank}")
def forward(state: State, variant: Variant, rank: Term) -> Step:
    """The forward of a non-first rank: FULL replays (run_fullgraph), PIECEWISE replays each piece,
    NONE runs eagerly; a graph reads the address it recorded, eager the tensors it is given."""
    at = state.step[rank]
    chosen = state.descriptor[rank]
    given = state.Address.PERSISTENT if variant.persistent_buffer else state.fresh[at]
    source = if_then_else(state.mode_of[chosen] == GraphMode.NONE, given, state.graph_input[rank][chosen])
    data = map_of(Key, lambda key: data_at(state, rank, source, key), state.Data)
    last = state.sizes.last
    updates: dict[Term, TermLike] = {
        state.forward_step: state.forward_step.set(rank, at),
        state.forward_descriptor: state.forward_descriptor.set(rank, chosen),
        state.forward_given: state.forward_given.set(rank, given),
        state.forward_data: state.forward_data.set(rank, data),
        state.phase: state.phase.set(rank, if_then_else(rank == last, Phase.IDLE, Phase.OUTPUT_READY)),
        state.step: state.step.set(rank, if_then_else(rank == last, at + 1, at)),
        **write_output(state, rank, chosen, at),
    }
    return Step((rank >= 1) & (state.phase[rank] == Phase.INPUTS_READY), updates)


@action(actor="rank:{rank}")
def send(state: State, rank: Term) -> Step:
    """isend_tensor_dict of the forward's output (FULL: the manager's buffer [:num_tokens];
    PIECEWISE: the graph's own output; eager: a fresh tensor); the step ends."""
    at, chosen = state.step[rank], state.descriptor[rank]
    ready = state.phase[rank] == Phase.OUTPUT_READY
    return Step(
        conjunction(rank < state.sizes.last, ready, ~state.send_pending[rank]),
        {
            state.send_pending: state.send_pending.set(rank, True),
            state.send_step: state.send_step.set(rank, at),
            state.send_source: state.send_source.set(rank, output_address(state, chosen)),
            state.send_data: state.send_data.set(rank, state.output_data[rank]),
            state.send_rows: state.send_rows.set(rank, padded(state, chosen, at)),
            state.phase: state.phase.set(rank, Phase.IDLE),
            state.step: state.step.set(rank, at + 1),
        },
    )
