"""Print the shortest counterexamples of a protocol instance found by an explicit engine, step by
step (actor, action, arguments, mirrored source functions), and write them as JSONL traces.

``python bench/counterexample.py dp-pause --ranks 4 --engine bfs-gpu --out DIR`` (for runs on the
device, where the CLI's terminal rendering is not needed)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from lockstep.checkers import check
from lockstep.checkers.counterexample import write_counterexample
from lockstep.models import get_protocol
from lockstep.spec.protocol import parse_assignments


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("protocol")
    parser.add_argument("--variant", default="post-fix")
    parser.add_argument("--instance", default="seed")
    parser.add_argument("--ranks", type=int)
    parser.add_argument("--engine", default="bfs-vec")
    parser.add_argument("--device")
    parser.add_argument("--stop-at-first", action="store_true")
    parser.add_argument("--symmetry", action="store_true")
    parser.add_argument("--compact", action="store_true")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--out", type=Path, default=Path("lockstep-out"))
    options = parser.parse_args()
    overrides = parse_assignments(options.set)
    instance = get_protocol(options.protocol).instance(
        options.variant, options.instance, overrides, ranks=options.ranks
    )
    started = time.perf_counter()
    result = check(
        instance,
        options.engine,
        device=options.device,
        stop_at_first=options.stop_at_first,
        symmetry=options.symmetry,
        compact=options.compact,
    )
    print(
        f"{instance.label}: {result.verdict.value}, {result.stats.states:,} states, "
        f"{time.perf_counter() - started:.1f} s, stopped: {result.stopped}"
    )
    machine = result.machine
    for item in result.properties:
        print(
            f"  {item.name}: {item.verdict.value}"
            + (f" in {item.path.length} steps" if item.path else "")
            + (f" ({item.detail})" if item.detail else "")
        )
        if item.verdict.value != "violated" or item.path is None:
            continue
        for number, step in enumerate(item.path.steps, start=1):
            mirrors = machine.action_named(step.action).mirrors
            arguments = ", ".join(f"{name}={value}" for name, value in step.arguments.items())
            print(
                f"    {number:>3}. {step.actor:<12} {step.action}({arguments})" + (f"  [{mirrors}]" if mirrors else "")
            )
        options.out.mkdir(parents=True, exist_ok=True)
        file = options.out / f"{instance.protocol.name}-{instance.variant}-{instance.name}-{item.name}.jsonl"
        write_counterexample(
            file,
            machine,
            item.path,
            protocol=instance.protocol.name,
            variant=instance.variant,
            instance=instance.name,
            parameters=instance.parameters,
            property_name=item.name,
        )
        print(f"    trace: {file}")


if __name__ == "__main__":
    main()
