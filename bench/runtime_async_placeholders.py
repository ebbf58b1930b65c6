"""The repair scan of async-placeholders at scale: v0.21.0's forward scan against v0.22.0's backward scan.

Issue 6's benchmark, through the reference runtime's own code path (``lockstep.impl.async_placeholders``:
the scheduler, the last-rank runner, ``InputBatch.update_async_output_token_ids`` and the scans of
``scans.py``; ``pipeline.Pipeline`` drives them in one thread with vLLM's batch-queue loop, untraced).
A batch of B = 128 requests, every list pre-filled with ``history`` real tokens (1k, 10k, 60k), then
steps of plain async decode with penalties (every row needs output ids), so every step's repair
replaces one -1 per row. Both variants run in the same process, step by step (the pre-fix pipeline,
then the post-fix one), until each has timed ``--steps`` repair steps (200); after every engine-loop
turn every request's list must be equal in both, else the run stops with an error. The figure per
step is the wall time of ``update_async_output_token_ids`` over all 128 rows (the copy had landed).
Usage: ``python bench/runtime_async_placeholders.py [--histories 1000,10000,60000] [--batch 128] [--steps 200]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics

import torch

from lockstep.impl.async_placeholders.pipeline import VLLM_LOOP, Pipeline, lists_equal
from lockstep.impl.async_placeholders.scheduler import ScenarioBounds
from lockstep.impl.choices import SeededChoices

VARIANTS = ("pre-fix", "post-fix")


def measure(history: int, batch: int, steps: int) -> dict[str, list[float]]:
    """Milliseconds of each timed repair step, per variant."""
    bounds = ScenarioBounds(
        max_tokens=history + steps + 16,
        num_spec_tokens=0,
        history_toggles=False,
        preemptions=False,
        chunked_prefill=False,
        kv_load_failures=0,
        interruptions=0,
    )
    prefix = list(range(history))
    pipelines = {variant: Pipeline(variant, bounds, batch - 1, SeededChoices(0), VLLM_LOOP) for variant in VARIANTS}
    for pipeline in pipelines.values():
        pipeline.prefill(prefix)
    times: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    turns = 0
    while min(len(values) for values in times.values()) < steps:
        done = [pipelines[variant].turn() for variant in VARIANTS]
        turns += 1
        if done[0] != done[1] or done[0] is None:
            raise SystemExit(f"history {history}: the variants took different turns at turn {turns}: {done}")
        if not lists_equal(*pipelines.values()):
            raise SystemExit(f"history {history}: the variants' lists differ after turn {turns}")
        if done[0] != "schedule":
            continue
        for variant, pipeline in pipelines.items():
            runner = pipeline.runner
            if runner.repaired_rows:
                if runner.repaired_rows != batch:
                    raise SystemExit(f"{variant}: the repair wrote {runner.repaired_rows} rows, not {batch}")
                times[variant].append(runner.repair_seconds * 1e3)
    length = len(pipelines["post-fix"].runner.requests["request-0"].output_token_ids)
    assert length >= history + steps, length
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--histories", default="1000,10000,60000")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=200)
    arguments = parser.parse_args()
    torch.set_num_threads(1)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores (shared, noisy), Python {platform.python_version()}, "
        f"torch {torch.__version__}; B = {arguments.batch}, {arguments.steps} repair steps per variant, "
        "lists equal after every turn"
    )
    print(
        f"{'history':>8} | {'pre-fix ms/step':>15} {'(median)':>9} | {'post-fix ms/step':>16} {'(median)':>9} | "
        f"{'ratio':>7} {'(median)':>9}"
    )
    for history in (int(text) for text in arguments.histories.split(",")):
        times = measure(history, arguments.batch, arguments.steps)
        before, after = (statistics.fmean(times[variant]) for variant in VARIANTS)
        medians = [statistics.median(times[variant]) for variant in VARIANTS]
        print(
            f"{history:>8} | {before:>15.3f} {medians[0]:>9.3f} | {after:>16.3f} {medians[1]:>9.3f} | "
            f"{before / after:>6.1f}x {medians[0] / medians[1]:>8.1f}x"
        )


if __name__ == "__main__":
    main()
