"""The GPU kernels against the CPU kernels: ``bfs-gpu --device cuda`` must give exactly what
``bfs-vec`` gives (states, transitions, depth, verdicts, counterexample lengths) on every pinned
instance up to ``--max-states`` (and dp-pause at 3 ranks with symmetry), in the exact mode and with
``--compact`` (the GPU's hash table of fingerprints). Run on the device:
``python bench/vector_gpu_check.py``; prints one line per instance and exits 1 on a difference."""

from __future__ import annotations

import argparse
import sys
import time

from lockstep.checkers import CheckResult, Limits, check
from lockstep.cli.check import pinned_instances
from lockstep.models import get_protocol


def summary(result: CheckResult) -> tuple[object, ...]:
    verdicts = tuple(
        (item.name, item.verdict.value, item.path.length if item.path else None) for item in result.properties
    )
    return result.stats.states, result.stats.transitions, result.stats.depth, result.verdict.value, verdicts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-states", type=int, default=500_000)
    parser.add_argument(
        "--instances",
        nargs="*",
        default=["seed", "request-after-resume", "spec-decode", "pipeline", "full-and-piecewise", "decode-gap"],
        help="instance names (all: every pinned one)",
    )
    options = parser.parse_args()
    cases = [
        (instance, False)
        for instance in pinned_instances()
        if all(prop.kind.value != "leads-to" for prop in instance.machine().properties)
        and ("all" in options.instances or instance.name in options.instances)
    ]
    cases.append((get_protocol("dp-pause").instance("pre-fix", "seed", ranks=3), True))
    differences = 0
    for instance, symmetry in cases:
        cpu = check(instance, "bfs-vec", symmetry=symmetry, limits=Limits(max_states=options.max_states))
        if cpu.stopped is not None:
            continue
        started = time.perf_counter()
        gpu = check(instance, "bfs-gpu", device="cuda", symmetry=symmetry)
        seconds = time.perf_counter() - started
        compact = check(instance, "bfs-gpu", device="cuda", symmetry=symmetry, compact=True)  # the hash table
        same = summary(gpu) == summary(cpu) == summary(compact)
        differences += not same
        label = instance.label + (" --symmetry" if symmetry else "")
        shown = "" if same else f" (bfs-vec {summary(cpu)[:3]}, gpu {summary(gpu)[:3]}, compact {summary(compact)[:3]})"
        print(
            f"{'OK ' if same else 'BAD'} {label}: {cpu.stats.states:,} states, gpu {seconds:.2f} s" + shown,
            flush=True,
        )
    print(f"{differences} differences")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
