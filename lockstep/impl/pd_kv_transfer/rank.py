"""A pd-kv-transfer rank process: rank 0 runs the prefill engine, rank 1 the decode engine.

Both ranks create the ``kv`` group (gloo, or NCCL with ``--backend nccl``: the block tensors then
live on each rank's GPU), the one D's reads pull P's blocks over. Rank 0 listens for rank 1 on
the loopback address (shared over the default group) and draws the abort split (how many of the
run's aborts P injects: choice point ``prefill_aborts``, fixed by a steering scenario), which
rank 1 learns over the default group. Each engine then runs to the end of the run; a completed
run's ranks leave together through a barrier. A failure an engine sees for real
(``engine.ProtocolFailure``) is written to the rank's log as one line naming it and ends the
rank with status 3; its peer, whose connection closes, ends with status 0 (the failure is not
its own).
"""

from __future__ import annotations

import os
import sys

import torch

from lockstep.impl.distributed import Groups, describe_torch, leave_together, share_object, shutdown
from lockstep.impl.pd_kv_transfer.blocks import BlockPool
from lockstep.impl.pd_kv_transfer.decode import DecodeEngine
from lockstep.impl.pd_kv_transfer.engine import COMPLETED, Engine, EngineParts, ProtocolFailure
from lockstep.impl.pd_kv_transfer.link import Link
from lockstep.impl.pd_kv_transfer.parameters import instance_parameters
from lockstep.impl.pd_kv_transfer.prefill import PrefillEngine
from lockstep.impl.pd_kv_transfer.reproduction import PREFILL, SPLIT
from lockstep.impl.pd_kv_transfer.scenario import steering_of
from lockstep.impl.process import open_process
from lockstep.impl.runtime import RunConfig, accept, connect, listen


def run_rank(config: RunConfig, config_path: str, groups: Groups) -> int:
    torch.set_num_threads(1)
    describe_torch(config)
    if groups.world_size != 2:
        raise RuntimeError(f"{groups.world_size} rank processes: pd-kv-transfer runs a prefill and a decode engine")
    backend = "nccl" if config.backend == "nccl" else "gloo"
    groups.create("kv", backend, runtime_only=True)  # the model has no communicators: D's reads of P's blocks
    device = groups.device if backend == "nccl" else torch.device("cpu")
    rank = groups.rank
    recorder, status, choices = open_process(config, f"rank:{rank}")
    parameters = instance_parameters(config)
    steering = steering_of(config.scenario)
    order = [int(who) for who in config.extra.get("order", [])]
    listener, address, split = None, None, 0
    if rank == PREFILL:
        listener = listen(os.environ.get("MASTER_ADDR", "127.0.0.1"))
        address = listener.address
        aborts = parameters["aborts"]
        if aborts:
            allowed = (
                [steering.prefill_aborts] if steering.prefill_aborts is not None and not order else range(aborts + 1)
            )
            split = int(choices.choose(f"rank:{rank}", SPLIT, [str(value) for value in allowed]))
    address, split = share_object((address, split))
    if listener is not None:
        connection = accept(listener, ["rank:1"])["rank:1"]
        listener.close()
    else:
        connection = connect(tuple(address), "rank:1")
    link = Link(connection, rank, order, status)
    pool = BlockPool(parameters["blocks"], device)
    group = groups.groups["kv"]
    parts = EngineParts(rank, parameters, link, recorder, status, choices, steering)
    engine: Engine
    if rank == PREFILL:
        engine = PrefillEngine(parts, pool, group, split)
    else:
        engine = DecodeEngine(parts, config.variant, pool, group, parameters["aborts"] - split)
    status.update("running")
    try:
        ended = engine.run()
    except ProtocolFailure as failure:
        recorder.close()
        link.close()
        status.update("failed", type(failure).__name__)
        sys.stderr.write(f"lockstep: pd-kv-transfer: {type(failure).__name__}: {failure}\n")
        sys.stderr.flush()
        return 3
    recorder.close()
    if ended != COMPLETED:  # the peer failed and said so (its log names the failure)
        link.close()
        status.update("done", steps=engine.steps)
        return 0
    leave_together(status)
    link.close()
    status.update("done", steps=engine.steps)
    shutdown()
    return 0
