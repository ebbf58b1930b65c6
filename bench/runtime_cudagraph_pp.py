"""cudagraph-pp in the reference runtime: every variant end to end, and the copy-in the fix adds.

Part 1 (end to end, ``lockstep.impl.launcher.launch``): each variant (v0.18.0 ``pre-fix``,
v0.19.0 ``post-fix``, the mutants ``no-persistent-buffer`` and ``no-copy-in``) runs ``--repeats``
times at ``--ranks`` stages (gloo, traced, ``steps=3``, hidden size ``--hidden``); per variant: the
ranks' mean wall time per step (p2p, copy-in, replay or eager forward, trace lines), the replay
verdict of the run's own traces against its model, and how many stage outputs equal the eager
reference. Part 2 (in process, the runtime's ``GraphManager`` on an ``EmulatedGraph``): per step
on a non-first stage, the copy of the received tensors into the persistent buffer (the fix's
cost) against the stage's replay, at ``--tokens`` rows. On CPU a replay is the eager kernels
plus the output copy (no launch overhead to save), so part 2 sizes the copy-in, not a speed-up.
Usage: ``python bench/runtime_cudagraph_pp.py [--ranks 2] [--repeats 3] [--hidden 16] [--tokens 8]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from lockstep.impl.cudagraph_pp.descriptors import BatchDescriptor
from lockstep.impl.cudagraph_pp.graphs import GraphManager
from lockstep.impl.cudagraph_pp.stages import KEYS, Pipeline
from lockstep.impl.launcher import launch
from lockstep.impl.runtime import RunConfig
from lockstep.testing import replay_traces

VARIANTS = ("pre-fix", "post-fix", "no-persistent-buffer", "no-copy-in")


def end_to_end(variant: str, ranks: int, seed: int, hidden: int) -> tuple[float, str, int, int]:
    with tempfile.TemporaryDirectory() as folder:
        traces = Path(folder) / "traces"
        config = RunConfig(
            protocol="cudagraph-pp",
            variant=variant,
            scenario="full-and-piecewise",
            ranks=ranks,
            seed=seed,
            timeout=20.0,
            trace_dir=str(traces),
            extra={"steps": 3, "hidden_size": hidden},
        )
        outcome = launch(config)
        if outcome.outcome != "completed":
            raise SystemExit(f"{variant}: {outcome.outcome}: {outcome.message}")
        replay = replay_traces(traces)
        verdict = replay["verdict"] + (f" {replay['property']}" if replay.get("property") else "")
        steps = [step for path in traces.glob("*.outputs.json") for step in json.loads(path.read_text())["steps"]]
    return outcome.step_seconds, verdict, sum(step["equal_to_eager"] for step in steps), len(steps)


def copy_in_cost(hidden: int, tokens: int, repeats: int = 2000) -> tuple[float, float]:
    """Microseconds per step: the copy-in of every key, and the FULL replay of the stage."""
    pipeline = Pipeline(0, 2, hidden, torch.device("cpu"))
    persistent = {key: torch.zeros(tokens, hidden) for key in KEYS}
    manager = GraphManager(1, pipeline, tokens, use_cuda_graphs=False)
    descriptor = BatchDescriptor("FULL", tokens, tokens)
    manager.capture(descriptor, {key: tensor[:tokens] for key, tensor in persistent.items()})
    received = {key: torch.randn(tokens, hidden) for key in KEYS}
    started = time.perf_counter()
    for _ in range(repeats):
        for key, tensor in persistent.items():
            tensor[:tokens].copy_(received[key][:tokens])
    copy = (time.perf_counter() - started) / repeats
    started = time.perf_counter()
    for _ in range(repeats):
        manager.run(descriptor, {})
    replay = (time.perf_counter() - started) / repeats
    return copy * 1e6, replay * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=8)
    arguments = parser.parse_args()
    torch.set_num_threads(1)
    print(f"cores: {os.cpu_count()}, torch {torch.__version__}")
    for variant in VARIANTS:
        runs = [end_to_end(variant, arguments.ranks, seed, arguments.hidden) for seed in range(arguments.repeats)]
        step = statistics.median(run[0] for run in runs)
        verdicts = sorted({run[1] for run in runs})
        equal, total = sum(run[2] for run in runs), sum(run[3] for run in runs)
        print(
            f"{variant:>21}: median {step * 1e3:6.2f} ms/step over {arguments.repeats} runs; replay: "
            f"{', '.join(verdicts)}; "
            f"outputs equal to eager: {equal}/{total}"
        )
    for hidden in (arguments.hidden, 256, 1024):
        copy, replay = copy_in_cost(hidden, arguments.tokens)
        print(
            f"hidden {hidden:5}, {arguments.tokens} tokens: copy-in {copy:7.2f} us/step, FULL replay {replay:8.2f} "
            f"us/step "
            f"({copy / replay * 100:.1f} % of the replay)"
        )


if __name__ == "__main__":
    main()
