"""Replay throughput against JSON parsing, and replay memory against trace length.

Generates a long trace of a small cyclic model (ranks repeatedly all-reduce on one communicator;
a random walk, seeded), with the observed values a recorder would write and a per-communicator
clock that makes every line distinct. Then, each in a fresh process so peak memory is its own:
the rate of merely reading and parsing every line with the standard library's ``json`` (what the
reader uses), and the rate of the whole replay (read, validate, causal check, candidate sets,
properties), with the peak resident memory of each; replay is measured at two trace lengths to
show memory flat in length. Each rate is given on wall time and on the process's CPU time (on a
shared machine the CPU-time ratio is the steadier one).

    .venv/bin/python bench/replay.py [--events 1000000] [--short 100000]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lockstep.checkers import system_for
from lockstep.checkers.conformance.replay import Replayer, ReplayOptions
from lockstep.spec.collectives import Communicator, all_reduce_sum
from lockstep.spec.machine import Machine, Step
from lockstep.spec.sorts import IndexSort, MapSort, enum, integers
from lockstep.spec.terms import Term, all_of, if_then_else
from lockstep.traces.merge import open_traces

RANKS, MODULUS = 4, 8


def ring_machine() -> Machine:
    """Each rank posts a SUM all-reduce, waits for it, and counts its rounds modulo 8."""
    machine = Machine("bench-ring")
    machine.hang_bound = 64  # type: ignore[attr-defined]
    Rank = IndexSort("Rank", RANKS)
    Phase = enum("Phase", ["IDLE", "WAIT"])
    phase = machine.variable("phase", MapSort(Rank, Phase), tuple(0 for _ in range(RANKS)))
    counter = machine.variable("counter", MapSort(Rank, integers(0, MODULUS - 1)), tuple(0 for _ in range(RANKS)))
    ring = Communicator(machine, "ring", Rank, {"sum": all_reduce_sum()}, payload=integers(0, 1))

    @machine.action(actor="rank:{rank}", rank=Rank)
    def post(rank: Term) -> Step:
        return Step(phase[rank] == Phase.IDLE, {phase: phase.set(rank, Phase.WAIT), **ring.post(rank, "sum", 1)})

    @machine.action(actor="rank:{rank}", rank=Rank)
    def finish(rank: Term) -> Step:
        following = if_then_else(counter[rank] == MODULUS - 1, 0, counter[rank] + 1)
        return Step(
            (phase[rank] == Phase.WAIT) & ring.done(rank),
            {phase: phase.set(rank, Phase.IDLE), counter: counter.set(rank, following), **ring.consume(rank)},
        )

    machine.always("idle_ranks_wait_for_nothing", all_of(Rank, lambda r: (phase[r] == Phase.WAIT) | ring.done(r)))
    return machine.finish()


def generate(path: Path, events: int, seed: int = 7) -> None:
    machine = ring_machine()
    system = system_for(machine)
    chooser = random.Random(seed)
    state = system.initial()
    completed = 0
    header = {
        "format": "lockstep-trace",
        "version": 1,
        "protocol": "bench-ring",
        "variant": "only",
        "instance": "bench",
        "parameters": {"ranks": RANKS},
        "source": {"kind": "model"},
    }
    with open(path, "w", encoding="utf-8") as out:
        out.write(json.dumps(header, separators=(",", ":")) + "\n")
        for index in range(events):
            transition = chooser.choice(system.transitions(state))
            action = machine.actions[transition.action]
            arguments = {p.name: v for p, v in zip(action.parameters, transition.arguments)}
            event: dict[str, object] = {
                "index": index,
                "actor": action.actor_for(arguments),
                "action": action.name,
                "args": arguments,
            }
            if action.name == "post":
                event["observed"] = {f"phase[{arguments['rank']}]": "WAIT"}
            elif action.name == "finish":
                rank = arguments["rank"]
                event["observed"] = {f"counter[{rank}]": transition.target[1][rank]}  # type: ignore[index]
            else:
                completed += 1
            event["clock"] = {"ring": completed}
            out.write(json.dumps(event, separators=(",", ":")) + "\n")
            state = transition.target


def measure_parse(path: Path) -> dict[str, float]:
    decode = json.JSONDecoder().decode
    started, cpu = time.perf_counter(), time.process_time()
    count = 0
    with open(path, "rb") as file:
        for line in file:
            decode(line.decode("utf-8"))
            count += 1
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {
        "lines": count,
        "seconds": seconds,
        "rate": count / seconds,
        "cpu_rate": count / cpu,
        "peak_rss_mib": _peak_rss(),
    }


def measure_replay(path: Path) -> dict[str, float | str]:
    started, cpu = time.perf_counter(), time.process_time()
    replayer = Replayer(system_for(ring_machine()), ReplayOptions())
    for record in open_traces([path]).records():
        if not replayer.feed(record):
            break
    result = replayer.result()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {
        "events": result.events,
        "seconds": seconds,
        "rate": result.events / seconds,
        "cpu_rate": result.events / cpu,
        "verdict": result.verdict,
        "peak_rss_mib": _peak_rss(),
    }


def _peak_rss() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _child(mode: str, path: Path) -> dict[str, float | str]:
    output = subprocess.run(
        [sys.executable, __file__, "--measure", mode, str(path)], capture_output=True, text=True, check=True
    )
    loaded: dict[str, float | str] = json.loads(output.stdout)
    return loaded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--short", type=int, default=100_000, help="a shorter trace, to compare memory")
    parser.add_argument("--measure", nargs=2, metavar=("MODE", "FILE"), help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.measure:
        mode, file = arguments.measure
        print(json.dumps(measure_parse(Path(file)) if mode == "parse" else measure_replay(Path(file))))
        return
    with tempfile.TemporaryDirectory() as folder:
        long_trace, short_trace = Path(folder) / "long.jsonl", Path(folder) / "short.jsonl"
        started = time.perf_counter()
        generate(long_trace, arguments.events)
        generate(short_trace, arguments.short)
        print(
            f"generated {arguments.events:,} + {arguments.short:,} events in {time.perf_counter() - started:.1f} s "
            f"({long_trace.stat().st_size / 2**20:.0f} MiB long trace)"
        )
        parse = _child("parse", long_trace)
        replay_long = _child("replay", long_trace)
        replay_short = _child("replay", short_trace)
    print(
        f"parse  (json.loads): {parse['rate']:>10,.0f} lines/s   {parse['seconds']:.1f} s   peak RSS "
        f"{parse['peak_rss_mib']:.0f} MiB"
    )
    print(
        f"replay {arguments.events:>9,} events: {replay_long['rate']:>10,.0f} events/s  {replay_long['seconds']:.1f} "
        f"s   "
        f"peak RSS {replay_long['peak_rss_mib']:.0f} MiB   verdict {replay_long['verdict']}"
    )
    print(
        f"replay {arguments.short:>9,} events: {replay_short['rate']:>10,.0f} events/s  {replay_short['seconds']:.1f} "
        f"s   "
        f"peak RSS {replay_short['peak_rss_mib']:.0f} MiB   verdict {replay_short['verdict']}"
    )
    print(
        f"replay / parse: {float(replay_long['rate']) / float(parse['rate']):.0%} on wall time, "
        f"{float(replay_long['cpu_rate']) / float(parse['cpu_rate']):.0%} on CPU time "
        f"(replay {float(replay_long['cpu_rate']):,.0f} events/s, parse {float(parse['cpu_rate']):,.0f} lines/s)"
    )


if __name__ == "__main__":
    main()
