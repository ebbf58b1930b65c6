"""A cudagraph-pp rank process: one pipeline stage (rank 0 also hosts the engine's scheduler).

Every rank joins the default group (gloo), creates the ``pp`` group (gloo, or NCCL with
``--backend nccl``: the stage then lives on the rank's CUDA device and its graphs are real
``torch.cuda.CUDAGraph`` captures), opens its trace (``rank-N.jsonl``; rank 0's also holds the
``engine`` actor's ``schedule`` events) and runs its ``StageWorker``. The ranks leave together
(a barrier on the default group), and each writes its eager comparison next to its trace
(``rank-N.outputs.json``: per step, whether the output equals the eager reference).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from lockstep.impl.cudagraph_pp.worker import StageWorker
from lockstep.impl.distributed import Groups, describe_torch, leave_together, shutdown
from lockstep.impl.process import open_process
from lockstep.impl.runtime import RunConfig
from lockstep.traces.output import safe_name, write_atomically


def run_rank(config: RunConfig, config_path: str, groups: Groups) -> int:
    torch.set_num_threads(1)
    describe_torch(config)
    groups.create("pp", "nccl" if config.backend == "nccl" else "gloo", runtime_only=True)  # no model communicator
    actor = f"rank:{groups.rank}"
    recorder, status, choices = open_process(config, actor)
    status.update("running")
    worker = StageWorker(config, groups, recorder, status, choices)
    worker.run()
    recorder.close()
    write_comparisons(config, actor, worker)
    leave_together(status)
    status.update("done", steps=worker.steps)
    shutdown()
    return 0


def write_comparisons(config: RunConfig, actor: str, worker: StageWorker) -> None:
    """``<trace dir or run dir>/rank-N.outputs.json``: each step's output against the eager reference."""
    folder = Path(config.trace_dir or config.run_dir)
    record = {
        "actor": actor,
        "variant": config.variant,
        "scenario": config.scenario,
        "steps": worker.comparisons,
        "equal_to_eager": all(comparison["equal_to_eager"] for comparison in worker.comparisons),
    }
    write_atomically(
        folder / (safe_name(actor) + ".outputs.json"), lambda file: file.write(json.dumps(record, indent=1) + "\n")
    )
