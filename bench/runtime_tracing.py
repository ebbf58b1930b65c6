"""Tracing overhead of the reference runtime, per protocol (post-fix, each protocol's default scenario, gloo).

For each protocol, untraced and traced runs (one JSONL file per process, every line handed to the
OS before the process goes on) alternate; the figure is (step time traced - untraced) / untraced,
where step time is the ranks' mean wall time per protocol step as each runtime counts it
(dp-pause: an engine step, the forward with its worker DP all-reduce, plus the engine all-reduce
on the boundary; the others: a scheduled step on a rank). Goal: at most 5 %. Step times on a
shared machine swing by tens of percent between runs, so ``--pairs`` pairs run in alternating
order, and the traced run also reports the time spent writing trace lines per step directly.
dp-pause runs scenario ``issue-36594`` (its default) at 2 ranks, pp-broadcast ``chunked-prefill``
(24 chunks), the others their first scenario, each with the largest settings ``LARGEST`` names (their steps are
otherwise a handful of microseconds
of protocol bookkeeping, which a trace line of tens of microseconds dwarfs).
Usage: ``python bench/runtime_tracing.py [--protocol NAME ...] [--seed S] [--pairs P]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from lockstep.impl.launcher import Outcome, launch
from lockstep.impl.protocols import RUNTIME_PROTOCOLS
from lockstep.impl.runtime import RunConfig

# The largest runs each runtime's settings allow (the model-sized bounds keep some runs short).
LARGEST = {
    "async-placeholders": {"max_tokens": 8, "background": 127, "interruptions": 8},
    "computed-tokens": {"requests": 3, "prefill_len": 8, "max_tokens": 8, "budget": 8},
    "cudagraph-pp": {"steps": 3, "hidden_size": 256},
    "pp-broadcast": {"chunks": 24},
}
SCENARIOS = {"pp-broadcast": "chunked-prefill"}  # else the protocol's first scenario


def one_run(protocol: str, traced: bool, seed: int) -> Outcome:
    known = RUNTIME_PROTOCOLS[protocol]
    settings = {name: setting.default for name, setting in known.settings.items()}
    settings.update(LARGEST.get(protocol, {}))
    with tempfile.TemporaryDirectory() as folder:
        config = RunConfig(
            protocol=protocol,
            variant="post-fix",
            scenario=SCENARIOS.get(protocol, known.scenarios[0]),
            ranks=known.default_ranks,
            seed=seed,
            timeout=20.0,
            trace_dir=str(Path(folder) / "traces") if traced else None,
            extra=settings,
        )
        if traced:
            Path(config.trace_dir or "").mkdir()
        outcome = launch(config)
        size = sum(path.stat().st_size for path in (Path(folder) / "traces").glob("*.jsonl")) if traced else 0
    if outcome.outcome != "completed":
        raise SystemExit(f"{protocol}: run did not complete: {outcome.outcome}: {outcome.message}")
    if not outcome.steps or not outcome.step_seconds:
        raise SystemExit(f"{protocol}: the runtime counts no step times (status counters steps/step_ns)")
    label = "traced  " if traced else "untraced"
    print(
        f"  {label}: {outcome.steps} steps, {outcome.events} events, {outcome.step_seconds * 1e6:9.1f} us/step, "
        f"run {outcome.seconds:.2f} s, trace bytes {size}"
    )
    return outcome


def measure(protocol: str, seed: int, pairs: int) -> float:
    print(f"{protocol}:")
    overheads = []
    for pair in range(pairs):
        order = [False, True] if pair % 2 == 0 else [True, False]
        results = {traced: one_run(protocol, traced, seed) for traced in order}
        untraced, traced = results[False].step_seconds, results[True].step_seconds
        overheads.append((traced - untraced) / untraced)
        direct = results[True].trace_seconds / results[True].steps
        print(
            f"  pair {pair + 1}: overhead {overheads[-1] * 100:+.1f} % of step time; in the traced run, writing trace "
            f"lines took {direct * 1e6:.1f} us per step = {direct / max(traced - direct, 1e-12) * 100:.1f} % of the "
            f"rest of a step"
        )
    median = statistics.median(overheads)
    print(f"  {protocol} tracing overhead: median of {len(overheads)} pairs {median * 100:+.1f} % (goal <= 5 %)")
    return median


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--protocol", nargs="*", default=sorted(RUNTIME_PROTOCOLS), help="protocols (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pairs", type=int, default=3, help="untraced/traced pairs, order alternating (default 3)")
    arguments = parser.parse_args()
    print(f"cores: {os.cpu_count()} (affinity {len(os.sched_getaffinity(0))})")
    results = {protocol: measure(protocol, arguments.seed, arguments.pairs) for protocol in arguments.protocol}
    print("summary (median overhead): " + ", ".join(f"{name} {value * 100:+.1f} %" for name, value in results.items()))


if __name__ == "__main__":
    main()
