"""A computed-tokens rank process: join the groups, (rank 0) start the engine core, run the worker.

Every rank creates, in the same order, the ``pp`` group (the hidden states' send/recv between
neighbouring stages) and the ``pp_sampled`` group (``pp_broadcast`` of the sampled counts from
the last stage), gloo or NCCL with ``--backend nccl``, with the hang timeout; with one rank there
are none. Rank 0 listens for the workers and runs the engine core (the scheduler) in a thread; its
address reaches the other ranks over the default group; each rank connects and runs its worker
until the engine core shuts it down; the ranks then leave together through a barrier.
"""

from __future__ import annotations

import os

import torch

from lockstep.impl.computed_tokens.engine import EngineCore, Worker
from lockstep.impl.computed_tokens.parameters import bounds_of
from lockstep.impl.distributed import Groups, describe_torch, leave_together, share_object, shutdown
from lockstep.impl.process import open_process
from lockstep.impl.runtime import RunConfig, connect, listen


def run_rank(config: RunConfig, config_path: str, groups: Groups) -> int:
    torch.set_num_threads(1)
    describe_torch(config)
    bounds = bounds_of(config)
    if groups.world_size != bounds.ranks:
        raise RuntimeError(f"{groups.world_size} rank processes for {bounds.ranks} pipeline stages")
    if bounds.ranks > 1:
        backend = "nccl" if config.backend == "nccl" else "gloo"
        groups.create("pp", backend, runtime_only=True)  # the model has no communicators
        groups.create("pp_sampled", backend, runtime_only=True)
    actor = f"rank:{groups.rank}"
    recorder, status, choices = open_process(config, actor)
    core = None
    address = None
    if groups.rank == 0:
        listener = listen(os.environ.get("MASTER_ADDR", "127.0.0.1"))
        address = listener.address
        core = EngineCore(bounds, listener, recorder, status)
        core.start()
    address = share_object(address)
    connection = connect(tuple(address), actor)
    status.update("running")
    worker = Worker(config.variant, bounds, groups, connection, recorder, status, choices, config.seed)
    try:
        worker.run()
    except EOFError:
        if core is None:
            raise
    if core is not None:
        core.join(timeout=config.timeout)
        if core.error is not None:
            raise core.error
        status.count(steps=core.scheduler.steps)
    recorder.close()
    leave_together(status)
    status.update("done", steps=worker.steps if core is None else core.scheduler.steps)
    shutdown()
    return 0
