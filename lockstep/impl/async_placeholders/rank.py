"""The async-placeholders rank process: the last PP rank, with its engine core, runner and copy thread.

One process suffices: the protocol lives on the last pipeline rank's model runner and the
scheduler that feeds it. The process joins the default group (gloo; with ``--backend nccl`` the
sampled ids live on the rank's CUDA device and the host copy is a ``non_blocking`` one), opens its
trace (``rank-0.jsonl``, events of the actors ``scheduler`` and ``runner``) and runs the engine
until the tracked request has produced ``max_tokens`` outputs.
"""

from __future__ import annotations

import torch

from lockstep.impl.async_placeholders.engine import Engine
from lockstep.impl.async_placeholders.parameters import bounds_of
from lockstep.impl.distributed import Groups, describe_torch, shutdown
from lockstep.impl.process import open_process
from lockstep.impl.runtime import RunConfig


def run_rank(config: RunConfig, config_path: str, groups: Groups) -> int:
    torch.set_num_threads(1)
    describe_torch(config)
    actor = f"rank:{groups.rank}"
    recorder, status, choices = open_process(config, actor)
    status.update("running")
    engine = Engine(
        config.variant,
        bounds_of(config),
        int(config.extra.get("background", 2)),
        groups.device,
        recorder,
        status,
        choices,
    )
    engine.run()
    recorder.close()
    status.update("done", steps=engine.steps)
    shutdown()
    return 0
