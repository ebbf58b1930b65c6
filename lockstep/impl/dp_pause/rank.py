"""A dp-pause rank process: join the groups, (rank 0) start the coordinator and client, run the engine.

Every rank creates, in the same order, the engine-level ``engine_dp`` group (always gloo, as
vLLM's stateless DP group) and the worker-level ``worker_dp`` and ``worker_world`` groups (gloo,
or NCCL with ``--backend nccl``), each with the hang timeout. Rank 0 starts the coordinator and
client processes (torch-free) and sends their addresses to the other ranks over the default
group; each rank then connects to both. An instrumentation named by ``LOCKSTEP_INSTRUMENT``
is installed before the engine starts (``parameters.instrument``). When the client shuts the engines down, the ranks
leave
together (``leave_together``).
"""

from __future__ import annotations

import json
import subprocess
from multiprocessing.connection import Connection

from lockstep.impl.choices import ChoiceSource
from lockstep.impl.distributed import Groups, describe_torch, leave_together, share_object, shutdown
from lockstep.impl.dp_pause.engine import DPEngineCoreProc
from lockstep.impl.dp_pause.parameters import DpPauseConfig, instrument
from lockstep.impl.dp_pause.scenario import arrivals_for
from lockstep.impl.process import open_process
from lockstep.impl.runtime import Recorder, RunConfig, StatusBoard, connect
from lockstep.lifetime import child_environment, python_command


def start_helpers(config_path: str) -> tuple[list[subprocess.Popen[str]], tuple[str, int], tuple[str, int]]:
    """Start the coordinator, then the client; their addresses come as their first stdout line."""
    coordinator = subprocess.Popen(
        python_command("lockstep.impl.dp_pause.coordinator", config_path),
        stdout=subprocess.PIPE,
        text=True,
        env=child_environment(),
    )
    assert coordinator.stdout is not None
    coordinator_address = coordinator.stdout.readline().strip()
    if not coordinator_address:
        raise RuntimeError(f"the coordinator process did not start (exit status {coordinator.wait()})")
    client = subprocess.Popen(
        python_command("lockstep.impl.dp_pause.client", config_path, coordinator_address),
        stdout=subprocess.PIPE,
        text=True,
        env=child_environment(),
    )
    assert client.stdout is not None
    client_address = client.stdout.readline().strip()
    if not client_address:
        raise RuntimeError(f"the client process did not start (exit status {client.wait()})")
    first, second = json.loads(coordinator_address), json.loads(client_address)
    return [coordinator, client], (str(first[0]), int(first[1])), (str(second[0]), int(second[1]))


def run_rank(run: RunConfig, config_path: str, groups: Groups) -> int:
    config = DpPauseConfig.of(run)
    describe_torch(config)
    worker_backend = "nccl" if config.backend == "nccl" else "gloo"
    groups.create("engine_dp", "gloo")
    groups.create("worker_dp", worker_backend)
    groups.create("worker_world", worker_backend)
    actor = f"rank:{groups.rank}"
    recorder: Recorder
    status: StatusBoard
    choices: ChoiceSource
    recorder, status, choices = open_process(config, actor)
    helpers: list[subprocess.Popen[str]] = []
    addresses = None
    if groups.rank == 0:
        config.write(config_path)  # with the torch/device details for the helpers' headers
        helpers, coordinator_address, client_address = start_helpers(config_path)
        addresses = (coordinator_address, client_address)
    coordinator_address, client_address = share_object(addresses)
    coordinator: Connection = connect(tuple(coordinator_address), actor)
    client: Connection = connect(tuple(client_address), actor)
    status.update("running")
    instrument("engine")
    engine = DPEngineCoreProc(
        config,
        groups,
        client,
        coordinator,
        recorder,
        status,
        choices,
        arrivals_for(config.scenario, config.extra.get("schedule", {}).get(actor)),
    )
    engine.run_busy_loop()
    recorder.close()
    leave_together(status)
    status.update("done", steps=engine.steps)
    code = 0
    for helper in helpers:
        code = max(code, helper.wait())
    shutdown()
    return code
