"""Model fuzzing: examples-to-failure, time per example, counterexample lengths, large instances.

For every registered protocol whose ``seed`` instance pins its pre-fix variant ``violated``:
fuzz it with the default settings (100 steps per example) under ``--seeds`` Hypothesis seeds
and print the median (and range) of the number of the first failing example, the generation
time per example, and the lengths of the first failing run and of its BFS re-minimisation next
to the shortest counterexample of exhaustive BFS. Shrinking does not change which example fails
first, so these runs skip it; ``--shrink-seeds`` full runs (shrinking on) of dp-pause then show
what the shrinker and the BFS re-minimisation each give, and how long they take. A property
whose pre-fix violation is a missing ``sometimes`` witness cannot be found by fuzzing (it needs
every state); such protocols are listed as such. Then the post-fix ``seed`` instances: time per
example over ``--post-examples`` examples (nothing should be found). Then dp-pause ``large``
(8 ranks, sync_interval 32): examples-to-failure of pre-fix at several step counts, and how
many steps a uniformly random run of post-fix takes to reach the end of the scenario (the steps
per example needed to reach the RPC and resume phases), and how many fuzzing runs reach it.

    .venv/bin/python bench/fuzz.py [--seeds 10] [--shrink-seeds 3] [--large-seeds 5] [--sections seeds shrink post-fix
    large]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from lockstep.checkers import Verdict, check
from lockstep.checkers.fuzz import FuzzOutcome, fuzz
from lockstep.models import PROTOCOLS
from lockstep.spec.compiler import CompiledSystem
from lockstep.spec.machine import PropertyKind
from lockstep.spec.protocol import Instance


def median_range(values: list[int]) -> str:
    return f"median {statistics.median(values):g} (min {min(values)}, max {max(values)})" if values else "none"


def examples_to_failure(instance: Instance, seeds: int, *, steps: int, cap: int) -> None:
    found: list[int] = []
    first_lengths: list[int] = []
    lengths: list[int] = []
    per_example: list[float] = []
    missed = 0
    for seed in range(seeds):
        result = fuzz(instance, seed=seed, steps=steps, examples=cap, shrink=False)
        if result.outcome is FuzzOutcome.VIOLATED and result.examples_to_failure is not None:
            assert result.first_failing is not None and result.path is not None
            found.append(result.examples_to_failure)
            first_lengths.append(result.first_failing.length)
            lengths.append(result.path.length)
        else:
            missed += 1
        per_example.append(result.seconds_per_example)
    missing = f", not found in {cap} examples under {missed} seed(s)" if missed else ""
    print(f"  {steps} steps/example: examples to failure {median_range(found)} over {seeds} seeds{missing}")
    print(
        f"    time per example {statistics.median(per_example) * 1000:.1f} ms (median); first failing run "
        f"{median_range(first_lengths)} steps; BFS-re-minimised {median_range(lengths)} steps"
    )


def seeds_section(arguments: argparse.Namespace) -> None:
    print(f"== pre-fix seed instances: default settings, {arguments.seeds} Hypothesis seeds (shrinking off)")
    for name, protocol in PROTOCOLS.items():
        spec = protocol.instance_spec(protocol.default_instance)
        if spec.expected.get("pre-fix") != "violated":
            continue
        instance = protocol.instance("pre-fix")
        exhaustive = check(instance, engine="bfs")
        safety = [
            item
            for item in exhaustive.properties
            if item.verdict is Verdict.VIOLATED and item.kind is PropertyKind.ALWAYS
        ]
        shortest = min((item.path.length for item in safety if item.path is not None), default=None)
        print(
            f"{name}: exhaustive BFS {exhaustive.stats.states:,} states, shortest safety counterexample {shortest} "
            f"({', '.join(sorted({item.name for item in safety})) or 'none'})"
        )
        if not safety:
            missing = [item.name for item in exhaustive.properties if item.verdict is Verdict.VIOLATED]
            print(f"  pre-fix violates only {', '.join(missing)} (a missing witness or liveness): not a fuzzing target")
            continue
        examples_to_failure(instance, arguments.seeds, steps=100, cap=arguments.cap)


def shrink_section(arguments: argparse.Namespace) -> None:
    print(f"== dp-pause pre-fix seed with shrinking (default settings), {arguments.shrink_seeds} seeds")
    instance = PROTOCOLS["dp-pause"].instance("pre-fix")
    for seed in range(arguments.shrink_seeds):
        result = fuzz(instance, seed=seed)
        assert result.first_failing is not None and result.shrunk is not None and result.path is not None
        shrink_seconds = result.seconds - result.generate_seconds
        print(
            f"  seed {seed}: example {result.examples_to_failure}, {result.runs} runs in all; lengths: first failing "
            f"{result.first_failing.length}, shrunk {result.shrunk.length}, BFS {result.path.length}; "
            f"{result.generate_seconds:.2f} s to find, {shrink_seconds:.2f} s to shrink and minimise"
            + (f" ({result.stopped})" if result.stopped else "")
        )


def post_fix_section(arguments: argparse.Namespace) -> None:
    print(f"== post-fix seed instances: {arguments.post_examples} examples of 100 steps (seed 0)")
    for name, protocol in PROTOCOLS.items():
        if protocol.instance_spec(protocol.default_instance).expected.get(protocol.default_variant) != "holds":
            continue
        result = fuzz(protocol.instance(), seed=0, examples=arguments.post_examples)
        print(
            f"  {name}: {result.outcome.value}, {result.runs} runs, {result.steps_run:,} model steps, "
            f"{result.seconds:.2f} s, {result.seconds / max(result.runs, 1) * 1000:.1f} ms/example, "
            f"{result.steps_run / max(result.seconds, 1e-9):,.0f} model steps/s"
        )


def random_run_lengths(instance: Instance, runs: int, limit: int) -> list[int]:
    """Steps a uniformly random run takes to reach a state with no enabled action (capped)."""
    system = CompiledSystem(instance.machine())
    chooser = random.Random(0)
    lengths = []
    for _ in range(runs):
        state, steps = system.initial(), 0
        while steps < limit:
            transitions = [t for t in system.transitions(state) if t.out_of_bounds is None]
            if not transitions:
                break
            state = chooser.choice(transitions).target
            steps += 1
        lengths.append(steps)
    return lengths


def large_section(arguments: argparse.Namespace) -> None:
    protocol = PROTOCOLS["dp-pause"]
    pre, post = protocol.instance("pre-fix", "large"), protocol.instance("post-fix", "large")
    started = time.monotonic()
    machine = post.machine()
    CompiledSystem(machine)
    print(f"== dp-pause large {dict(pre.parameters)}: builds and compiles in {time.monotonic() - started:.2f} s")
    lengths = random_run_lengths(post, 20, 20_000)
    print(f"  post-fix: a uniformly random run reaches its end in {median_range(lengths)} steps (20 runs)")
    for steps in arguments.large_steps:
        examples_to_failure(pre, arguments.large_seeds, steps=steps, cap=arguments.large_cap)
    for steps in (100, 1300):
        result = fuzz(post, seed=0, examples=50, steps=steps)
        print(
            f"  post-fix, 50 examples of {steps} steps: {result.outcome.value}, {result.completed} of {result.runs} "
            f"runs reached "
            f"the end, {result.steps_run / max(result.runs, 1):.0f} model steps/run, "
            f"{result.seconds / max(result.runs, 1) * 1000:.1f} ms/run"
        )


SECTIONS = {"seeds": seeds_section, "shrink": shrink_section, "post-fix": post_fix_section, "large": large_section}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--cap", type=int, default=2000, help="examples per seed before giving up")
    parser.add_argument("--shrink-seeds", type=int, default=3)
    parser.add_argument("--post-examples", type=int, default=200)
    parser.add_argument("--large-seeds", type=int, default=5)
    parser.add_argument("--large-cap", type=int, default=1000)
    parser.add_argument("--large-steps", type=int, nargs="+", default=[100, 200])
    parser.add_argument(
        "--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS), help="which figures (default: all)"
    )
    arguments = parser.parse_args()
    for name in arguments.sections:
        SECTIONS[name](arguments)


if __name__ == "__main__":
    main()
