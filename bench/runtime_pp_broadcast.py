"""Chunked-prefill throughput of the pp-broadcast runtime, post-fix over pre-fix, in one run.

Scenario ``chunked-prefill``: one long prompt in ``--chunks`` chunks of about ``--chunk-tokens``
tokens on P stage processes (gloo on CPU, ``torch.set_num_threads(1)`` each; ``--layers`` dense
layers of ``--hidden`` per stage, so the forward dominates a step). Throughput is prompt tokens
over the engine's time from the first schedule to the last reply. Pre-fix, rank 0 waits in the
broadcast of every chunk until the last stage has sampled it, so the chunks pass one stage at a
time; post-fix the stages overlap, up to P-fold when every stage has a core of its own. The
figure is printed beside the core count (``os.cpu_count`` and the affinity mask), since a
machine with fewer free cores than P + 1 processes cannot show the overlap. Runs alternate
pre/post ``--repeats`` times (same seed, so the same chunk sizes); the median ratio is reported.
Usage: ``python bench/runtime_pp_broadcast.py [--ranks 2 3 4] [--chunks 24] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics

from lockstep.impl.launcher import launch
from lockstep.impl.runtime import RunConfig, read_statuses


def throughput(variant: str, ranks: int, arguments: argparse.Namespace) -> float:
    """Prompt tokens per second of one untraced run."""
    extra = {
        "chunks": arguments.chunks,
        "chunk_tokens": arguments.chunk_tokens,
        "hidden": arguments.hidden,
        "layers": arguments.layers,
        "decodes": 0,
    }
    config = RunConfig(
        protocol="pp-broadcast",
        variant=variant,
        scenario="chunked-prefill",
        ranks=ranks,
        seed=arguments.seed,
        timeout=60.0,
        extra=extra,
    )
    outcome = launch(config, deadline=600.0, keep_run_dir=True)
    try:
        if outcome.outcome != "completed":
            raise SystemExit(f"{variant} at P={ranks} did not complete: {outcome.outcome}: {outcome.message}")
        engine = read_statuses(config.run_dir)["engine"]
    finally:
        shutil.rmtree(config.run_dir, ignore_errors=True)
    return float(engine["prompt_tokens"]) / (int(engine["elapsed_ns"]) / 1e9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2], help="pipeline stages P (default 2)")
    parser.add_argument("--chunks", type=int, default=24)
    parser.add_argument("--chunk-tokens", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4, help="layers per stage")
    parser.add_argument("--repeats", type=int, default=3, help="pre/post pairs, order alternating")
    parser.add_argument("--seed", type=int, default=0)
    arguments = parser.parse_args()
    cores, affinity = os.cpu_count(), len(os.sched_getaffinity(0))
    load = os.getloadavg()[0]
    for ranks in arguments.ranks:
        ratios, rates = [], {"pre-fix": [], "post-fix": []}  # type: ignore[var-annotated]
        for repeat in range(arguments.repeats):
            order = ["pre-fix", "post-fix"] if repeat % 2 == 0 else ["post-fix", "pre-fix"]
            measured = {variant: throughput(variant, ranks, arguments) for variant in order}
            for variant, rate in measured.items():
                rates[variant].append(rate)
            ratios.append(measured["post-fix"] / measured["pre-fix"])
            print(
                f"P={ranks} pair {repeat + 1}: pre-fix {measured['pre-fix']:.0f} tok/s, "
                f"post-fix {measured['post-fix']:.0f} tok/s, ratio {ratios[-1]:.2f}x",
                flush=True,
            )
        print(
            f"P={ranks}: chunked-prefill throughput post-fix/pre-fix {statistics.median(ratios):.2f}x "
            f"(median of {len(ratios)}; pre-fix {statistics.median(rates['pre-fix']):.0f} tok/s, post-fix "
            f"{statistics.median(rates['post-fix']):.0f} tok/s) on {cores} cores (affinity {affinity}, "
            f"load average {load:.1f} at start), {arguments.chunks} chunks of ~{arguments.chunk_tokens} tokens, "
            f"hidden {arguments.hidden}, {arguments.layers} layers per stage",
            flush=True,
        )


if __name__ == "__main__":
    main()
