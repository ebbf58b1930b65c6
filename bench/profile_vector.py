"""Where a vectorised check spends its time: cProfile of one dp-pause post-fix check, top entries.

``python bench/profile_vector.py --engine bfs-gpu --ranks 3 [--symmetry] [--set K=V]``. The generated
kernels show as ``expand``, ``predicates`` and ``canonical`` (``<lockstep-vector ...>``); on a GPU,
time spent waiting for the device shows in the calls that read values back (``tolist``, ``item``).
``--operations`` prints instead how many array operations each generated function holds (what a
GPU pays for in dispatch, whatever the frontier's size). ``--parts [--compact]`` prints instead the
CPU seconds of each part of one run (the kernels, deduplication, the visited set, fingerprints,
compiling), each timed with ``time.process_time`` around it, without cProfile's overhead."""

from __future__ import annotations

import argparse
import collections
import cProfile
import pstats
import re
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from lockstep.checkers import check
from lockstep.checkers.symmetry import SymmetryError
from lockstep.checkers.vector.backend import NumpyBackend, make_backend
from lockstep.checkers.vector.kernels import compile_kernels
from lockstep.checkers.vector.search import VectorSearch
from lockstep.models import get_protocol
from lockstep.spec.layout import Layout
from lockstep.spec.machine import Machine
from lockstep.spec.protocol import parse_assignments

# a statement of generated code that runs an array operation: a temporary or a successor word assigned
_OPERATION = re.compile(r"^\s*(t\d+|P\d+\[\d+\]|P\d+|r\d+|image\d+|best) = ")


def operations(source: str, function: str) -> int:
    """The array operations in one generated function (its assignments; a line may hold several)."""
    body = source.split(f"def {function}(")[1].split("\ndef ")[0]
    return sum(1 for line in body.splitlines() if _OPERATION.match(line))


def parts(machine: Machine, options: argparse.Namespace) -> None:
    """Print the CPU seconds of each part of one vectorised run."""
    spent: dict[str, float] = collections.defaultdict(float)
    calls: list[tuple[int, float]] = []  # the expand kernel's (frontier rows, CPU seconds) per call

    def timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*arguments: Any, **keywords: Any) -> Any:
            started = time.process_time()
            try:
                return function(*arguments, **keywords)
            finally:
                spent[name] += time.process_time() - started

        return wrapper

    started = time.process_time()
    backend = make_backend(options.engine, options.device)
    search = VectorSearch(
        machine,
        backend,
        engine=options.engine,
        symmetry=options.symmetry,
        compact=options.compact,
    )
    spent["compiling the kernels"] = time.process_time() - started
    kernels, visited = search.kernels, search.visited
    expand = kernels.expand

    def measured(frontier: Any) -> Any:
        started = time.process_time()
        try:
            return expand(frontier)
        finally:
            calls.append((int(frontier.shape[1]), time.process_time() - started))
            spent["expand kernel"] += calls[-1][1]

    kernels.expand = measured
    kernels.predicates = timed("property kernel", kernels.predicates)
    if kernels.canonical is not None:
        kernels.canonical = timed("canonical kernel", kernels.canonical)
    visited.distinct = timed("deduplicating a chunk's successors", visited.distinct)  # type: ignore[method-assign]
    visited.absent = timed("visited look-ups", visited.absent)  # type: ignore[method-assign]
    visited.add = timed("visited inserts", visited.add)  # type: ignore[method-assign]
    backend.fingerprint = timed("fingerprints", backend.fingerprint)  # type: ignore[method-assign]
    search._result = timed("rebuilding and confirming paths", search._result)  # type: ignore[method-assign]
    result = search.run()
    total = time.process_time() - started
    print(f"{result.stats.states:,} states, {total:.2f} s of CPU ({options.engine}, compact {options.compact})")
    for name, seconds in sorted(spent.items(), key=lambda item: -item[1]):
        print(f"  {name:40} {seconds:6.2f} s")
    print(f"  {'the rest (concatenating, gathering, loop)':40} {total - sum(spent.values()):6.2f} s")
    rows = np.array([count for count, _ in calls], dtype=float)
    durations = np.array([second for _, second in calls])
    (per_call, per_row), *_ = np.linalg.lstsq(np.stack([np.ones_like(rows), rows], axis=1), durations, rcond=None)
    print(
        f"expand, fitted over its {len(calls)} calls: {per_call * 1e3:.2f} ms a call ({per_call * len(calls):.2f} s "
        f"in all) + {per_row * 1e6:.3f} us a frontier row ({per_row * rows.sum():.2f} s in all)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--engine", default="bfs-vec", choices=["bfs-vec", "bfs-gpu"])
    parser.add_argument("--device", default=None)
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--symmetry", action="store_true")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--operations", action="store_true", help="count the generated array operations")
    parser.add_argument("--parts", action="store_true", help="CPU seconds of each part of one run")
    parser.add_argument("--compact", action="store_true", help="with --parts: fingerprints only")
    options = parser.parse_args()
    overrides = parse_assignments(options.set)
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
    if options.parts:
        parts(instance.machine(), options)
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
