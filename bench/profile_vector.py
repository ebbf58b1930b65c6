"""Where a vectorised check spends its time: cProfile of one dp-pause post-fix check, top entries.

``python bench/profile_vector.py --engine bfs-gpu --ranks 3 [--symmetry] [--set K=V]``. The generated
kernels show as ``expand``, ``predicates`` and ``canonical`` (``<lockstep-vector ...>``); on a GPU,
time spent waiting for the device shows in the calls that read values back (``tolist``, ``item``).
``--operations`` prints instead how many array operations each generated function holds (what a
GPU pays for in dispatch, whatever the frontier's size)."""

from __future__ import annotations

import argparse
import cProfile
import pstats
import re
import time

from lockstep.checkers import check
from lockstep.checkers.symmetry import SymmetryError
from lockstep.checkers.vector.backend import NumpyBackend
from lockstep.checkers.vector.kernels import compile_kernels
from lockstep.models import get_protocol
from lockstep.spec.layout import Layout
from lockstep.spec.protocol import parse_assignment

# a statement of generated code that runs an array operation: a temporary or a successor word assigned
_OPERATION = re.compile(r"^\s*(t\d+|P\d+\[\d+\]|P\d+|r\d+|image\d+|best) = ")


def operations(source: str, function: str) -> int:
    """The array operations in one generated function (its assignments; a line may hold several)."""
    body = source.split(f"def {function}(")[1].split("\ndef ")[0]
    return sum(1 for line in body.splitlines() if _OPERATION.match(line))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--engine", default="bfs-vec", choices=["bfs-vec", "bfs-gpu"])
    parser.add_argument("--device", default=None)
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--symmetry", action="store_true")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--operations", action="store_true", help="count the generated array operations")
    options = parser.parse_args()
    overrides = dict(parse_assignment(text) for text in options.set)
    instance = get_protocol("dp-pause").instance("post-fix", "seed", overrides, ranks=options.ranks)
    if options.operations:
        machine = instance.machine().finish()
        try:
            kernels = compile_kernels(machine, Layout(machine), NumpyBackend().namespace(), options.symmetry)
        except SymmetryError as error:
            parser.error(str(error))
        functions = ["expand", "predicates", "deadlocked", *(["canonical"] if options.symmetry else [])]
        counts = ", ".join(f"{name} {operations(kernels.source, name):,}" for name in functions)
        print(f"{len(kernels.tuples)} action tuples; array operations: {counts}")
        return
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
