"""A pp-broadcast rank process: join the groups, (rank 0) start the engine, run the worker.

Every rank creates, in the same order, the ``pp`` group (gloo, or NCCL with ``--backend nccl``:
vLLM's PP ``device_group``, carrying the intermediate tensors and the sampled-token broadcast)
and the ``pp_cpu`` group (gloo: the ``cpu_group`` carrying the transfers' metadata), each with
the hang timeout. Rank 0 starts the engine process (torch-free) and shares its address over the
default group; each rank connects to it. When the engine shuts the ranks down they leave
together (a barrier), so a rank stuck in the broadcast is a diagnosed hang, not a crash.
"""

from __future__ import annotations

import json
import subprocess

import torch

from lockstep.impl.distributed import Groups, describe_torch, leave_together, share_object, shutdown
from lockstep.impl.pp_broadcast.worker import Worker
from lockstep.impl.process import open_process
from lockstep.impl.runtime import RunConfig, connect
from lockstep.lifetime import child_environment, python_command


def start_engine(config_path: str) -> tuple[subprocess.Popen[str], tuple[str, int]]:
    engine = subprocess.Popen(
        python_command("lockstep.impl.pp_broadcast.engine", config_path),
        stdout=subprocess.PIPE,
        text=True,
        env=child_environment(),
    )
    assert engine.stdout is not None
    line = engine.stdout.readline().strip()
    if not line:
        raise RuntimeError(f"the engine process did not start (exit status {engine.wait()})")
    address = json.loads(line)
    return engine, (str(address[0]), int(address[1]))


def run_rank(config: RunConfig, config_path: str, groups: Groups) -> int:
    torch.set_num_threads(1)
    describe_torch(config)
    groups.create("pp", "nccl" if config.backend == "nccl" else "gloo")
    groups.create("pp_cpu", "gloo", runtime_only=True)  # metadata only: no model communicator
    actor = f"rank:{groups.rank}"
    recorder, status, _ = open_process(config, actor)
    engine = None
    address = None
    if groups.rank == 0:
        config.write(config_path)  # with the torch/device details for the engine's header
        engine, address = start_engine(config_path)
    address = share_object(address)
    connection = connect(tuple(address), actor)
    status.update("running")
    worker = Worker(config, groups, connection, recorder, status)
    worker.run()
    recorder.close()
    leave_together(status)
    status.update("done", steps=worker.steps, skipped=worker.skipped)
    code = 0 if engine is None else engine.wait()
    connection.close()
    shutdown()
    return code
