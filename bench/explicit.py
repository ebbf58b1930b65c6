"""Explicit-engine throughput: states/s for dp-pause post-fix, interpreted vs compiled.

Run by hand (``python bench/explicit.py``) or on the device. Each configuration explores the
seed instance by BFS; ``--max-states`` caps the slow interpreted runs (a rate, not a full check).
Ratios are taken within one run: these machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import platform
import time

from lockstep.checkers import Limits, check
from lockstep.models import get_protocol


def measure(ranks: int, compiled: bool, max_states: int | None) -> tuple[int, float, str]:
    instance = get_protocol("dp-pause").instance("post-fix", ranks=ranks)
    started = time.perf_counter()
    result = check(instance, "bfs", compiled=compiled, limits=Limits(max_states=max_states))
    seconds = time.perf_counter() - started
    assert result.stats.states is not None
    return result.stats.states, seconds, result.verdict.value if result.stopped is None else f"partial ({result.stopped})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--interpreted-states", type=int, default=20_000, help="cap for interpreted runs")
    parser.add_argument("--compiled-states", type=int, default=None, help="cap for compiled runs (default: full check)")
    arguments = parser.parse_args()
    print(f"python {platform.python_version()} on {platform.machine()} ({platform.node()})")
    print(f"{'ranks':>5} {'engine':>11} {'states':>10} {'seconds':>9} {'states/s':>10}  verdict")
    for ranks in arguments.ranks:
        rates = {}
        for compiled in (False, True):
            cap = arguments.compiled_states if compiled else arguments.interpreted_states
            states, seconds, verdict = measure(ranks, compiled, cap)
            rates[compiled] = states / seconds
            label = "compiled" if compiled else "interpreted"
            print(f"{ranks:>5} {label:>11} {states:>10,} {seconds:>9.2f} {states / seconds:>10,.0f}  {verdict}")
        print(f"{ranks:>5} {'speed-up':>11} {rates[True] / rates[False]:>41.1f}x")


if __name__ == "__main__":
    main()
