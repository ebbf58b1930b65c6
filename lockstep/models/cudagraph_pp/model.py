"""cudagraph-pp: CUDA graphs with pipeline parallelism in the V2 model runner (vLLM PR #35162).

Mirrors vLLM **v0.18.0** (``pre-fix``) and **v0.19.0** (``post-fix``):
``vllm/v1/worker/gpu/cudagraph_utils.py`` (``BatchExecutionDescriptor``, ``_is_compatible``,
``CudaGraphManager._init_candidates``/``capture``/``dispatch``/``run_fullgraph``,
``ModelCudaGraphManager.capture`` and its ``create_forward_fn``), ``vllm/v1/worker/gpu/model_runner.py``
(``load_model``: the persistent ``intermediate_tensors``; ``capture_model``; ``_dummy_run``;
``execute_model``: the copy-in on non-first ranks) and ``vllm/v1/worker/gpu_worker.py``
(``Worker.execute_model``: wait on ``_pp_send_work``, ``irecv_tensor_dict`` into
``AsyncIntermediateTensors``, ``isend_tensor_dict``).

The story. A pipeline of ``ranks`` stages runs one forward per step; every stage but the first
receives the previous stage's intermediate tensors (hidden states, residual) and every stage
but the last sends its own. A CUDA graph replays the kernels it recorded, reading the *addresses*
it saw at capture. The worker's ``irecv`` allocates fresh tensors every step, so a graph captured
on a non-first stage must never be handed those: v0.19.0 allocates one persistent buffer per
non-first stage in ``load_model``, captures every graph with slices of it as inputs, and at run
time copies every key of the received tensors into it before the replay. v0.18.0 did not capture
at all once PP was on ("Pipeline parallel is currently eager-only"): correct, but no graph ever
runs on a non-first stage, which the ``sometimes`` property ``graph_replayed_on_non_first_rank``
reports as a violation (a witness that must exist and does not).

Capture (per rank, before the engine schedules anything): modes PIECEWISE then FULL, within a
mode descriptors by ``num_tokens`` descending; each descriptor is one ``capture`` step (the
warm-up run in mode NONE and the capture). A graph records its intermediate-input address
(``graph.input``) and the request count its dummy batch had (``graph.requests``). Runtime, per
step: the engine schedules a batch (tokens, requests, uniform decode or not); rank 0 dispatches
and runs its forward, then ``send``s; a non-first rank ``receive``s into a fresh tensor
(``FRESH_k`` for step k), ``prepare_inputs`` (dispatch, copy-in), ``forward`` (replay or eager),
and ``send``s unless it is the last. A stage's next step begins by waiting on its send handles.

The code, one module per part: the state (sizes, plan, sorts, variables) in ``state.py``, the
variants in ``variants.py``, ``capture`` in ``capture.py``, the engine's ``schedule`` and the
dispatch in ``engine.py``, the run-time actions of a stage in ``rank.py``, the properties in
``properties.py``; ``build`` below binds the actions in order.

Addresses are a finite sort of buffer identities (``Address``): the capture-time buffer, the
persistent buffer, the fresh receive tensor of step k, the manager's FULL output buffer, a
piecewise graph's own output, an eager output (a fresh allocation that ``record_stream`` keeps
alive until its send completes, so it is never overwritten while sent) and the first stage's
input buffers. Data are step numbers; -1 is the garbage a capture or dummy run leaves. The
initial state is after ``load_model`` (the persistent buffer exists, holding garbage).

Variants: ``pre-fix`` (v0.18.0, eager with PP), ``post-fix`` (v0.19.0), and mutants of v0.19.0
that the properties must catch: ``no-persistent-buffer`` (graphs captured on a capture-time
buffer, received tensors handed straight in: A1), ``no-copy-in`` (the persistent buffer without
the copy, as vLLM V1 had between #13353 and #13417: A2), ``missing-key`` (the sender's tensors
lack the residual: K1), ``full-adjustment`` (#35162's proposed num_reqs adjustment applied when
capturing FULL graphs: R1) and ``no-send-wait`` (a step does not first wait on its previous
isend: A3). The properties are protocols.md P5(d): A1, A2, A3, K1, S1, C1, D1, R1, each an
``always`` over what the last capture, receive and forward of each rank recorded.

Later releases: ``releases.py`` maps v0.18.0-v0.33.0 to the two released variants (every release from
v0.19.0 is ``post-fix``); ``docs/models/cudagraph-pp.md`` is the ledger of what each leaves out.

Faithfulness notes (read from the v0.18.0/v0.19.0 wheels; where they differ from protocols.md,
the source wins):
- The manager's output buffers are sized by the **first warm-up run of the first descriptor
  captured, PIECEWISE included**, not by the first FULL capture (protocols.md P5(a)/C1): the
  warm-up calls ``forward_fn(CUDAGraphMode.NONE)``, which takes the output-copy branch
  (``torch.empty_like`` on the first call) for every descriptor. The first descriptor captured
  is the largest overall, so C1 still holds; the model sizes the buffer at the first capture.
- ``dispatch`` returns NONE (eager) unless graphs were captured, so v0.18.0 with PP is eager on
  every rank. v0.18.0's eager path hands the received tensors straight to the model, and its
  ``_dummy_run`` allocates new intermediate tensors per call (the capture-time buffer).
- The request count a FULL graph is captured with is ``desc.num_reqs or min(num_tokens,
  max_num_reqs)``; the PR's proposed divisibility adjustment (``adjusted_num_reqs``) is not in
  v0.19.0 and appears here only as the ``full-adjustment`` mutant. ``prepare_inputs`` pads the
  runtime batch to ``desc.num_reqs`` rows, so a FULL graph must have been captured with exactly
  ``desc.num_reqs`` requests (R1).
- The DP sync of the descriptor is ``sync_cudagraph_and_dp_padding`` (``gpu/dp_utils.py``, called
  after ``dispatch`` in ``execute_model``); protocols.md's ``dispatch_cg_and_sync_dp`` is not a
  v0.19.0 function. ``InputBatch.make_dummy`` asserts ``0 < num_reqs <= num_tokens`` (D1).
- The second half of K1 (the manager's FULL output buffer has the model output's keys) holds by
  construction (``IntermediateTensors.empty_like`` of the model output) and is not a state here.
- Not modelled: DP (dispatch is then synced by ``sync_cudagraph_and_dp_padding``; with one DP
  rank every stage dispatches the same batch identically), dummy batches between steps (a DP
  rank's ``execute_dummy_batch`` does not wait the send handles, but in the order exec(N),
  sample(N) the non-last stage's ``sample_tokens`` has made its stream wait on ``pp_receive``'s
  broadcast, which completes only after the last stage consumed step N, so after isend(N); this holds up
  to v0.22.1 only: from v0.23.0 the ``PPHandler`` receive is asynchronous, see the ledger), sampling,
  TP all-gather of the sent slices, spec decode
  beyond ``decode_query_len``.
"""

from __future__ import annotations

from collections.abc import Mapping

from lockstep.models.cudagraph_pp import capture, engine, rank
from lockstep.models.cudagraph_pp.properties import add_properties
from lockstep.models.cudagraph_pp.releases import BISECTION
from lockstep.models.cudagraph_pp.sources import PROPERTY_SOURCES, sources
from lockstep.models.cudagraph_pp.state import GraphMode, Key, Phase, declare
from lockstep.models.cudagraph_pp.variants import (
    FULL_ADJUSTMENT,
    MISSING_KEY,
    MUTANTS,
    NO_COPY_IN,
    NO_PERSISTENT_BUFFER,
    NO_SEND_WAIT,
    POST_FIX,
    PRE_FIX,
    Variant,
)
from lockstep.spec.machine import Machine
from lockstep.spec.protocol import InstanceSpec, ParameterSpec, Protocol, VariantSpec
from lockstep.spec.sorts import BOOL

__all__ = [
    "FULL_ADJUSTMENT",
    "MISSING_KEY",
    "NO_COPY_IN",
    "NO_PERSISTENT_BUFFER",
    "NO_SEND_WAIT",
    "POST_FIX",
    "PRE_FIX",
    "PROTOCOL",
    "GraphMode",
    "Key",
    "Phase",
    "build",
]


def build(variant: str, parameters: Mapping[str, int]) -> Machine:
    """The cudagraph-pp machine for ``variant`` at the given parameter values."""
    flags = Variant(variant)
    machine = Machine(f"cudagraph-pp/{variant}")
    state = declare(machine, parameters, flags)
    if state.plan.order:  # v0.18.0 with PP captures nothing
        machine.add(capture.capture, state, flags, rank=state.Rank)
    machine.add(engine.schedule, state, tokens=state.BatchTokens, requests=state.BatchRequests, decode=BOOL)
    machine.add(rank.first_forward, state, flags)
    machine.add(rank.receive, state, flags, rank=state.Rank)
    machine.add(rank.prepare_inputs, state, flags, rank=state.Rank)
    machine.add(rank.forward, state, flags, rank=state.Rank)
    machine.add(rank.send, state, rank=state.Rank)
    add_properties(machine, state, flags)
    declared = {action.name for action in machine.actions}
    machine.mirror({name: text for name, text in sources(variant).items() if name in declared})
    machine.cite(PROPERTY_SOURCES)
    return machine


PROTOCOL = Protocol(
    name="cudagraph-pp",
    title="CUDA graphs with pipeline parallelism in the V2 model runner",
    change="vLLM PR #35162",
    variants=(
        VariantSpec(
            PRE_FIX, "V2 + PP is eager-only: capture_model returns early, no graph on any stage", "vLLM v0.18.0"
        ),
        VariantSpec(
            POST_FIX,
            "persistent intermediate-tensor buffer, captured as graph input, copied into each step",
            "vLLM v0.19.0",
        ),
        VariantSpec(
            NO_PERSISTENT_BUFFER,
            "mutant: graphs captured, received tensors handed straight to them (A1)",
            "v0.19.0 capture + v0.18.0 inputs",
        ),
        VariantSpec(
            NO_COPY_IN,
            "mutant: persistent buffer captured, received values never copied into it (A2)",
            "vLLM V1 #13353 before #13417",
        ),
        VariantSpec(
            MISSING_KEY, "mutant: the sender's tensors lack a key of the persistent buffer (K1)", "v0.19.0 + model"
        ),
        VariantSpec(
            FULL_ADJUSTMENT,
            "mutant: #35162's proposed num_reqs adjustment applied to FULL captures (R1)",
            "v0.19.0 + #35162 description",
        ),
        VariantSpec(
            NO_SEND_WAIT,
            "mutant: a step does not wait on the previous step's send handles (A3)",
            "v0.19.0 - gpu_worker _pp_send_work wait",
        ),
    ),
    parameters=(
        ParameterSpec("ranks", 2, "pipeline-parallel size", minimum=2, maximum=4),
        ParameterSpec("steps", 2, "scheduled steps", minimum=1, maximum=3),
        ParameterSpec(
            "largest_capture_size",
            3,
            "largest cudagraph capture size (sizes 1, 2, 4, ... and it)",
            minimum=1,
            maximum=8,
        ),
        ParameterSpec(
            "max_num_tokens",
            3,
            "max_num_batched_tokens: persistent buffer rows (default: the largest capture size)",
            minimum=1,
            maximum=8,
            derived=lambda values: values["largest_capture_size"],
        ),
        ParameterSpec("max_num_reqs", 2, "max_num_seqs", minimum=1, maximum=4),
        ParameterSpec("decode_query_len", 1, "1 + num_speculative_tokens", minimum=1, maximum=2),
        ParameterSpec(
            "cudagraph_mode", 0, "0 FULL, 1 FULL_AND_PIECEWISE, 2 PIECEWISE, 3 FULL_DECODE_ONLY", minimum=0, maximum=3
        ),
    ),
    instances=(
        InstanceSpec(
            "seed",
            "#35162: two stages, FULL graphs of 1..3 tokens with max_num_seqs 2 (FULL(3,2) does not divide), two steps",
            {},
            {PRE_FIX: "violated", POST_FIX: "holds", **{mutant: "violated" for mutant in MUTANTS}},
        ),
        InstanceSpec(
            "full-and-piecewise",
            "vLLM's default cudagraph_mode: PIECEWISE mixed graphs and FULL uniform-decode graphs",
            {"cudagraph_mode": 1},
            {
                PRE_FIX: "violated",
                POST_FIX: "holds",
                **{mutant: "violated" for mutant in MUTANTS},
                FULL_ADJUSTMENT: "holds",
            },
        ),
    ),
    build=build,
    rank_parameter="ranks",
    release_table=tuple((release, variant) for release, variant, _ in BISECTION),
)
