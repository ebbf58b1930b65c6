"""Profile one check in this process: ``python bench/profile_check.py ENGINE [--device D] [--symmetry]``.

Prints the wall time of a first (cold) and a second (warm) check of dp-pause post-fix at
``--ranks`` ranks, then cProfile's top functions of a third, by internal time and by cumulative time.
``--first``: profile the first check of the process instead (what a fresh ``lockstep check`` pays
once the on-disk caches are warm).
For finding where an engine's time goes (the figures are the profiler's, slower than a plain run).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

from lockstep.checkers import check
from lockstep.models import get_protocol


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("engine")
    parser.add_argument("--device", default=None)
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--symmetry", action="store_true")
    parser.add_argument("--compact", action="store_true")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--first", action="store_true", help="profile the process's first check")
    options = parser.parse_args()
    instance = get_protocol("dp-pause").instance("post-fix", "seed", overrides={"ranks": options.ranks})
    keywords = {"device": options.device} if options.device else {}

    def run() -> object:
        return check(instance, engine=options.engine, compact=options.compact, symmetry=options.symmetry, **keywords)

    for label in () if options.first else ("cold", "warm"):
        started = time.perf_counter()
        result = run()
        print(f"{label}: {time.perf_counter() - started:.3f} s, {result.stats}")
    profile = cProfile.Profile()
    started = time.perf_counter()
    profile.enable()
    run()
    profile.disable()
    print(f"profiled: {time.perf_counter() - started:.3f} s")
    statistics = pstats.Stats(profile)
    statistics.sort_stats("tottime").print_stats(options.top)
    statistics.sort_stats("cumulative").print_stats(options.top)


if __name__ == "__main__":
    main()
