"""Where ``bfs-gpu`` spends its time on a device: host time against device time, per level size.

``python bench/profile_gpu.py --ranks 3 [--set K=V] [--chunk N] [--kernels]``. Prints the engine's
wall time, how much of it the device was busy (CUDA events around every generated kernel call), the
number of kernel calls and of levels, and with ``--kernels`` the top device operations from
``torch.profiler`` (one profiled run, so keep the instance small); ``--phases`` times each phase of a
level (expansion, fingerprints, in-chunk dedup, the visited-set lookups and stores, the properties,
the rest) in a second run, synchronising the device around each (self time, nested phases
subtracted). A GPU that is busy a small part
of the wall time is bound by the host (Python and launch overhead per array operation), not by the
device's memory bandwidth."""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch

from lockstep.checkers import Limits, check
from lockstep.checkers.vector import search as search_module
from lockstep.models import get_protocol
from lockstep.spec.protocol import parse_assignments


class _Timed:
    """Wraps the generated kernels so every call is timed on the device with CUDA events."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any, Any, int]] = []

    def wrap(self, name: str, function: Any) -> Any:
        def timed(words: Any, *rest: Any) -> Any:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            result = function(words, *rest)
            end.record()
            self.events.append((name, start, end, int(words.shape[1])))
            return result

        return timed

    def summary(self) -> dict[str, tuple[int, float, int]]:
        torch.cuda.synchronize()
        totals: dict[str, tuple[int, float, int]] = {}
        for name, start, end, rows in self.events:
            calls, seconds, total_rows = totals.get(name, (0, 0.0, 0))
            totals[name] = (calls + 1, seconds + start.elapsed_time(end) / 1000, total_rows + rows)
        return totals


def options_compact_hashed() -> bool:
    """Whether Triton is there (the compact mode then keeps a hash table, ``hashed.py``)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


class _Phases:
    """Self time of the search's phases, each call bracketed by device synchronisations."""

    def __init__(self) -> None:
        self.totals: dict[str, list[float]] = {}  # name -> [calls, self seconds]
        self.stack: list[float] = []  # per open call: the time its children took

    def wrap(self, owner: Any, attribute: str, name: str) -> None:
        original = getattr(owner, attribute)
        phases = self

        def timed(*arguments: Any, **keywords: Any) -> Any:
            torch.cuda.synchronize()
            began = time.perf_counter()
            phases.stack.append(0.0)
            try:
                return original(*arguments, **keywords)
            finally:
                torch.cuda.synchronize()
                spent = time.perf_counter() - began
                children = phases.stack.pop()
                if phases.stack:
                    phases.stack[-1] += spent
                entry = phases.totals.setdefault(name, [0, 0.0])
                entry[0] += 1
                entry[1] += spent - children

        setattr(owner, attribute, timed)

    def install(self) -> None:
        from lockstep.checkers.vector import backend, fused_launch, visited

        self.wrap(search_module.VectorSearch, "__init__", "setup: the rest")
        self.wrap(search_module, "compile_kernels", "setup: array kernels generated")
        self.wrap(fused_launch, "fused_source", "setup: fused kernels written")
        self.wrap(fused_launch.FusedKernels, "__init__", "setup: fused kernels loaded (Triton's cache)")
        self.wrap(search_module.VectorSearch, "_result", "result: verdicts and counterexamples")
        self.wrap(search_module.VectorSearch, "_level", "level (the rest)")
        self.wrap(fused_launch.FusedKernels, "expand", "fused expand")
        self.wrap(fused_launch.FusedKernels, "predicates", "fused predicates")
        self.wrap(search_module.VectorSearch, "_from_fused", "deadlocks and discovery keys")
        self.wrap(backend.TorchBackend, "fingerprint", "fingerprints")
        self.wrap(fused_launch.FusedKernels, "fingerprint", "fingerprints")
        self.wrap(visited.VisitedSet, "distinct", "dedup within the chunk (sort)")
        self.wrap(visited.VisitedSet, "unique", "symmetry: dedup before canonicalising")
        self.wrap(fused_launch.FusedKernels, "canonical", "symmetry: canonical forms")
        self.wrap(visited.VisitedSet, "absent", "visited lookup")
        self.wrap(visited.VisitedSet, "add", "visited store")
        if options_compact_hashed():
            from lockstep.checkers.vector import hashed

            self.wrap(hashed.HashedFingerprints, "absent", "visited lookup")
            self.wrap(hashed.HashedFingerprints, "add", "visited store")
        self.wrap(search_module.VectorSearch, "_admit", "admit: order by discovery, gather, parents to host")
        self.wrap(search_module.VectorSearch, "_check_states", "properties: first violations")

    def report(self, wall: float) -> None:
        for name, (calls, seconds) in sorted(self.totals.items(), key=lambda item: -item[1][1]):
            print(f"  {name}: {int(calls)} calls, {seconds:.2f} s ({100 * seconds / wall:.0f}%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--chunk", type=int, default=None, help="frontier states per kernel call")
    parser.add_argument("--compact", action="store_true")
    parser.add_argument("--symmetry", action="store_true")
    parser.add_argument("--kernels", action="store_true", help="also print torch.profiler's top device operations")
    parser.add_argument("--dense", action="store_true", help="experiment: no branch around idle tuples' code")
    parser.add_argument("--phases", action="store_true", help="also time each phase of a level (a second run)")
    parser.add_argument("--compile", action="store_true", help="experiment: run the kernels through torch.compile")
    options = parser.parse_args()
    overrides = parse_assignments(options.set)
    if options.dense:
        from lockstep.checkers.vector import fused

        fused.SKIP_IDLE_TUPLES = False
    instance = get_protocol("dp-pause").instance("post-fix", "seed", overrides, ranks=options.ranks)
    timer = _Timed()
    original = search_module.compile_kernels

    def compile_timed(*arguments: Any, **keywords: Any) -> Any:
        kernels = original(*arguments, **keywords)
        if options.compile:
            kernels.expand = torch.compile(kernels.expand, dynamic=True)
            kernels.predicates = torch.compile(kernels.predicates, dynamic=True)
        kernels.expand = timer.wrap("expand", kernels.expand)
        kernels.predicates = timer.wrap("predicates", kernels.predicates)
        return kernels

    search_module.compile_kernels = compile_timed
    if options.chunk:
        from lockstep.checkers.vector.backend import TorchBackend

        original_init = TorchBackend.__init__

        def init(self: Any, device: str = "cuda") -> None:
            original_init(self, device)
            self.chunk = options.chunk

        TorchBackend.__init__ = init  # type: ignore[method-assign]
    began = time.perf_counter()  # a first, bounded search compiles the kernels (Triton's cache keeps them)
    check(
        instance,
        "bfs-gpu",
        device="cuda",
        symmetry=options.symmetry,
        compact=options.compact,
        limits=Limits(max_states=10_000),
    )
    print(f"warm-up (generating and compiling the kernels, 10k states): {time.perf_counter() - began:.2f} s")
    timer.events.clear()
    torch.cuda.synchronize()
    started = time.perf_counter()
    result = check(instance, "bfs-gpu", device="cuda", symmetry=options.symmetry, compact=options.compact)
    torch.cuda.synchronize()
    wall = time.perf_counter() - started
    states = result.stats.states
    print(f"{states:,} states, {result.stats.transitions:,} transitions, depth {result.stats.depth}, {wall:.2f} s wall")
    peak = torch.cuda.max_memory_allocated() / 2**30
    print(f"{states / wall / 1e6:.2f}M states/s; peak device memory {peak:.1f} GiB")
    search = result.stats.seconds or wall
    print(
        f"the search loop (the engine's own seconds, after the kernels are generated and loaded): {search:.2f} s, "
        f"{states / search / 1e6:.2f}M states/s; verdict {result.verdict.value}"
    )
    busy = 0.0
    for name, (calls, seconds, rows) in timer.summary().items():
        busy += seconds
        print(f"  {name}: {calls} calls, {rows:,} rows, {seconds:.2f} s between its first and last device event")
    print(f"  array kernels span {busy:.2f} s of {wall:.2f} s wall ({100 * busy / wall:.0f}%; 0 when fused)")
    if options.phases:
        phases = _Phases()
        phases.install()
        torch.cuda.synchronize()
        started = time.perf_counter()
        check(instance, "bfs-gpu", device="cuda", symmetry=options.symmetry, compact=options.compact)
        torch.cuda.synchronize()
        wall = time.perf_counter() - started
        print(f"phases (a second run, synchronised around each phase: {wall:.2f} s wall, the rest is outside them):")
        phases.report(wall)
    if options.kernels:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
            check(instance, "bfs-gpu", device="cuda", symmetry=options.symmetry, compact=options.compact)
        table = profiler.key_averages().table(sort_by="self_cuda_time_total", row_limit=25)
        print(table)
        events = profiler.key_averages()
        device_total = sum(event.self_device_time_total for event in events) / 1e6
        launches = sum(event.count for event in events if event.key.startswith("cuda") and "Launch" in event.key)
        print(f"device busy {device_total:.2f} s in total; {launches:,} kernel launches")


if __name__ == "__main__":
    main()
