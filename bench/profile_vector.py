"""Where a vectorised check spends its time: cProfile of one dp-pause post-fix check, top entries.

``python bench/profile_vector.py --engine bfs-gpu --ranks 3 [--symmetry] [--set K=V]``. The generated
kernels show as ``expand``, ``predicates`` and ``canonical`` (``<lockstep-vector ...>``); on a GPU,
time spent waiting for the device shows in the calls that read values back (``tolist``, ``item``)."""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

from lockstep.checkers import check
from lockstep.models import get_protocol
from lockstep.spec.protocol import parse_assignment


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--engine", default="bfs-vec", choices=["bfs-vec", "bfs-gpu"])
    parser.add_argument("--device", default=None)
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--symmetry", action="store_true")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--top", type=int, default=25)
    options = parser.parse_args()
    overrides = dict(parse_assignment(text) for text in options.set)
    instance = get_protocol("dp-pause").instance("post-fix", "seed", overrides, ranks=options.ranks)
    profile = cProfile.Profile()
    started = time.perf_counter()
    profile.enable()
    result = check(instance, options.engine, device=options.device, symmetry=options.symmetry)
    profile.disable()
    print(
        f"{result.stats.states:,} states in {time.perf_counter() - started:.2f} s ({options.engine}, symmetry "
        f"{options.symmetry})"
    )
    pstats.Stats(profile).sort_stats("tottime").print_stats(options.top)


if __name__ == "__main__":
    main()
