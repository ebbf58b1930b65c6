"""cudagraph-pp in the reference runtime: pipeline stages with CUDA graphs (emulated on CPU),
persistent intermediate buffers and real p2p, mirroring ``lockstep/models/cudagraph_pp/model.py``
(vLLM v0.18.0 pre-fix: eager with PP; v0.19.0 post-fix: persistent buffers and the copy-in; the
mutants ``no-persistent-buffer`` and ``no-copy-in``). ``descriptors`` (the descriptor plan and
dispatch), ``stages`` (the tiny seeded model and its eager reference), ``graphs``
(``EmulatedGraph``, ``CudaGraph``, the graph manager), ``p2p`` (traced isend/irecv with Work
handles), ``worker`` (capture, the engine's schedule, the steps), ``parameters`` (trace header),
``rank``. ``RUNTIME`` registers it with ``lockstep.impl.protocols``; this module imports no torch.

On CPU (gloo, the default) graphs are ``EmulatedGraph``: CUDA graph address capture emulated on
CPU (the replay reads whatever the captured tensors hold then). With ``--backend nccl`` each
stage runs on its rank's CUDA device, p2p goes over NCCL and the graphs are real
``torch.cuda.CUDAGraph`` captures behind the same interface. ``tests/test_cudagraph_cuda.py``
runs every stage's ``CudaGraph`` captures and replays on one GPU in one process (docs/performance.md
says where it ran); the multi-rank NCCL run needs two GPUs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lockstep.impl.protocols import RuntimeProtocol, Setting
from lockstep.models.cudagraph_pp.variants import NO_COPY_IN, NO_PERSISTENT_BUFFER, POST_FIX, PRE_FIX

if TYPE_CHECKING:
    from lockstep.impl.runtime import RunConfig

SCENARIOS = {"seed": 0, "full-and-piecewise": 1, "piecewise": 2, "full-decode-only": 3}  # -> cudagraph_mode


def _problem(config: RunConfig) -> str | None:
    from lockstep.impl.cudagraph_pp.parameters import scenario_parameters

    values = scenario_parameters(config)
    largest, multiple = min(values["largest_capture_size"], values["max_num_tokens"]), values["decode_query_len"]
    if multiple > largest:
        return f"decode_query_len {multiple} exceeds the largest capture size {largest}: no size to capture"
    return None


RUNTIME = RuntimeProtocol(
    name="cudagraph-pp",
    package="lockstep.impl.cudagraph_pp",
    variants=(PRE_FIX, POST_FIX, NO_PERSISTENT_BUFFER, NO_COPY_IN),
    scenarios=tuple(SCENARIOS),
    ranks=(2, 4),
    default_ranks=2,
    validate=_problem,
    settings={
        "steps": Setting(2, 1, 3, "scheduled steps (the model's bound is 3)"),
        "largest_capture_size": Setting(3, 1, 8, "largest cudagraph capture size (sizes 1, 2, 4, ... and it)"),
        "max_num_tokens": Setting(
            0, 0, 8, "max_num_batched_tokens: persistent buffer rows (0: the largest capture size)"
        ),
        "max_num_reqs": Setting(2, 1, 4, "max_num_seqs"),
        "decode_query_len": Setting(1, 1, 2, "1 + num_speculative_tokens"),
        "hidden_size": Setting(16, 1, 256, "hidden size of the tiny model"),
    },
    summary="PP stages with CUDA graphs (emulated on CPU), persistent intermediate buffers, copy-in and real p2p",
    reproduction="lockstep.impl.cudagraph_pp.reproduction",
    choice_actors=("engine",),  # rank 0 draws the engine's schedule
)
