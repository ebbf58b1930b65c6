"""The collectives a DP rank's worker posts in one forward, as its model runner decides them.

Mirrors vLLM v0.33.0's V1 model runner (``vllm/v1/worker/gpu_model_runner.py``) and drafter
(``vllm/v1/spec_decode/llm_base_proposer.py``):

- ``GPUModelRunner.execute_model`` -> ``_determine_batch_execution_and_padding`` calls
  ``coordinate_batch_across_dp`` (``vllm/v1/worker/dp_utils.py``: one ``[4, dp_size]`` int32
  all-reduce on the DP group carrying the unpadded and padded token counts, the ubatching vote and
  the cudagraph mode), then the target model's forward posts its MoE layers' collectives on the EP
  group with the agreed ``num_tokens_across_dp``.
- ``sample_tokens``: if the batch fits the drafter (``_input_fits_in_drafter``: ``max_seq_len +
  num_spec_tokens <= effective_drafter_max_model_len``, a local decision) the drafter proposes
  (``SpecDecodeBaseProposer.propose``: ``_determine_batch_execution_and_padding`` -> all-reduce,
  a forward, then for ``num_speculative_tokens > 1`` another all-reduce and ``K - 1`` forwards).
  If it does not fit, v0.25.0 on (``if self.parallel_config.data_parallel_size > 1``: "Prevent hang
  when DP ranks disagree on input_fits_in_drafter") runs ``self.drafter.dummy_run(num_tokens=1)``,
  whose loop posts the same sequence (an all-reduce before forward passes 0 and 1, ``K`` forwards);
  v0.24.0 and earlier post nothing.
- ``Worker.execute_dummy_batch`` -> ``_dummy_run(uniform_decode_query_len, uniform_decode=True)``:
  the same all-reduce and target forward, then ``self.drafter.dummy_run(num_tokens, ...)``.

A ``MOE_TARGET`` or ``MOE_DRAFT`` op stands for the whole sequence of MoE collectives of one
forward (the target's L layers or the drafter's one): two ranks in different ones post different
sequences, which fail to line up at the latest where the shorter ends. Shapes: every MoE
collective's split sizes come from ``num_tokens_across_dp``, the all-reduce's result, the same on
every rank that took part in the same all-reduce, so the model names ops, not shapes.
"""

from __future__ import annotations

from lockstep.models.dp_step_coordination.state import Op, Phase, Sizes, State
from lockstep.spec.actions import action
from lockstep.spec.machine import Step
from lockstep.spec.sorts import SequenceSort
from lockstep.spec.terms import Term, TermLike, conjunction, if_then_else, sequence_of

TARGET = (Op.COORDINATE, Op.MOE_TARGET)
"""``_determine_batch_execution_and_padding``'s all-reduce, then the target model's forward."""


def drafter_ops(sizes: Sizes) -> tuple[TermLike, ...]:
    """One ``propose`` (or ``dummy_run``): the all-reduce and forward of pass 0, then for ``K > 1``
    the all-reduce of pass 1 and ``K - 1`` forwards. A dense drafter (an EAGLE head) posts no EP
    collectives in its forwards: only the all-reduces remain."""
    if not sizes.drafts:
        return ()
    forward: tuple[TermLike, ...] = (Op.MOE_DRAFT,) if sizes.moe_drafter else ()
    ops: tuple[TermLike, ...] = (Op.COORDINATE, *forward)
    if sizes.drafts > 1:
        ops += (Op.COORDINATE, *(forward * (sizes.drafts - 1)))
    return ops


def program(sort: SequenceSort, ops: tuple[TermLike, ...], sync: Term) -> Term:
    """The sequence ``ops``, then the unfinished-requests all-reduce where ``sync`` holds."""
    return if_then_else(sync, sequence_of(sort, *ops, Op.SYNC), sequence_of(sort, *ops))


@action(
    actor="rank:{rank}",
    mirrors="vllm/v1/worker/dp_utils.py coordinate_batch_across_dp -> _run_ar (dist.all_reduce); the MoE "
    "layers' all-to-alls in the model forward (set_forward_context num_tokens_across_dp); vllm/v1/engine/core.py "
    "DPEngineCoreProc._has_global_unfinished_reqs -> ParallelConfig.sync_dp_state (all_reduce)",
)
def post_collective(state: State, rank: Term) -> Step:
    """The rank posts the next collective of its iteration and blocks in it until every rank of
    the group has posted its op at that position."""
    head = state.program[rank].head()
    queues: dict[Term, TermLike] = {}
    for communicator, op, name in (
        (state.worker_dp, Op.COORDINATE, "coordinate"),
        (state.worker_ep, Op.MOE_TARGET, "moe_target"),
        (state.worker_ep, Op.MOE_DRAFT, "moe_draft"),
        (state.engine_dp, Op.SYNC, "sync"),
    ):
        payload = if_then_else(state.work[rank] > 0, 1, 0) if name == "sync" else None
        posted = communicator.post(rank, name, payload)[communicator.queue]
        queues[communicator.queue] = if_then_else(
            head == op, posted, queues.get(communicator.queue, communicator.queue)
        )
    return Step(
        conjunction(
            state.phase[rank] == Phase.STEPPING,
            ~state.program[rank].is_empty(),
            state.worker_dp.done(rank),
            state.worker_ep.done(rank),
            state.engine_dp.done(rank),
        ),
        {state.program: state.program.set(rank, state.program[rank].tail()), **queues},
    )
