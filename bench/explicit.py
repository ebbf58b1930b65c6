"""Explicit-state throughput: states/s and bytes per visited state for bfs, bfs-vec and bfs-gpu.

Run by hand (``python bench/explicit.py``) or on the device (``--engines bfs-gpu --device cuda``).
Each row checks dp-pause post-fix (``seed`` at ``--ranks``), with and without symmetry, and prints
the states, transitions, seconds, states/s, bytes per visited state and verdict. ``bfs`` runs are
capped by ``--bfs-max-states`` (a rate, not a full check, where the cap bites). Bytes per visited
state: for the vectorised engines, what their visited set and parent links keep per state (the
exact mode's words, or ``--compact``'s fingerprint); for ``bfs``, the growth of the peak resident
set over the run divided by the states; for ``bfs-gpu`` on CUDA also the peak GPU memory per state.
Each configuration runs in a fresh process, so one's memory does not hide another's.
Ratios are taken within one run: these machines are shared and noisy. The process's CPU seconds
(``cpu s``) are printed beside the wall-clock seconds: on a shared machine they vary less; for the
vectorised engines ``setup``/``search`` split the seconds into building the kernels (and, for
``bfs-gpu``, loading Triton's) and the search with its counterexamples and witnesses. With
``--repeat N`` each configuration runs N times (each in a fresh process) and the least seconds and
the least CPU seconds are shown; with ``--interleave`` (and ``--symmetry both``) the runs come in
pairs, without and with symmetry one after the other (which goes first alternating), and each pair's
ratio of seconds is printed with their median (for the vectorised engines also the ratio of the
search alone): the comparison a drifting machine distorts least. ``--warm`` (with ``--interleave``)
runs a configuration's pairs in one process after one untimed check of each: what is compared is
then the checks alone, without the start-up that every fresh process pays alike (importing torch,
loading Triton's kernels, CUDA's first launches), as in ``check --all`` or a test suite.
``--control`` (with ``--interleave``) adds a second run without symmetry to each pair and prints its
ratio to the first beside the others (with their medians and quartiles): two identical runs' spread,
against which the ratio with/without symmetry can be read on a noisy machine.
``--whole PROTOCOL/VARIANT/INSTANCE ...`` measures what a user waits for instead: per engine
(``--engines``, swarm included) and instance, the whole ``lockstep check`` process's wall-clock
seconds cold (``LOCKSTEP_CACHE`` a new empty folder: kernels generated and compiled) and warm (the
same folder, once runs between leave it unchanged), beside the engine's own seconds
(``stats.seconds``), and the phase profile of both: Python's start-up (``python -c pass``),
importing the CLI, building the model, the engine's phases (``Statistics.phases``: kernels
generated or read back, their C or Triton spelling compiled or loaded before the search, the
search, the counterexamples; ``auto`` kernels compile C in the background, inside the search; what
the engine does outside them, such as its lazy imports, is ``engine other``) and rendering the
report. The profile runs in a process of its own (``--profile-child``; cold in a second new cache
folder, warm in the filled one) whose wall-clock seconds less these phases are ``other``.
``--native on|off|both``: ``bfs-vec`` with its successor and
property loops compiled to C (the ``kernels`` option ``c``, the library compiled before the first level,
or loaded from the cache), or with the array kernels alone (``kernels`` ``arrays``); the engine
column then reads ``bfs-vec+c`` or ``bfs-vec``. The default leaves the engine's own choice.
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path


def measure(
    ranks: int, engine: str, symmetry: bool, options: argparse.Namespace, native: str | None = None
) -> dict[str, object]:
    from lockstep.checkers import Limits, check
    from lockstep.checkers.limits import resident_memory_bytes
    from lockstep.checkers.vector.backend import make_backend
    from lockstep.checkers.vector.search import VectorSearch
    from lockstep.models import get_protocol
    from lockstep.spec.protocol import parse_assignments

    kernels = {None: "auto", "1": "c", "0": "arrays"}[native]  # each configuration runs in a fresh process
    overrides = parse_assignments(options.set)
    instance = get_protocol("dp-pause").instance("post-fix", "seed", overrides, ranks=ranks)
    machine = instance.machine()
    limits = Limits(
        max_states=options.bfs_max_states if engine == "bfs" else options.max_states, timeout_seconds=options.timeout
    )
    gpu = engine == "bfs-gpu" and options.device.startswith("cuda")
    if gpu:
        import torch

        torch.cuda.reset_peak_memory_stats()
    before = resident_memory_bytes()
    started = time.perf_counter()
    processor = time.process_time()
    per_state: float | None = None
    setup: float | None = None
    if engine == "bfs":
        result = check(machine, "bfs", symmetry=symmetry, limits=limits)
    else:
        search = VectorSearch(
            machine,
            make_backend(engine, options.device),
            engine=engine,
            symmetry=symmetry,
            compact=options.compact,
            limits=limits,
            chunk=options.chunk,
            kernels=kernels,
        )
        setup = time.perf_counter() - started
        result = search.run()
        per_state = search.bytes_per_state
    seconds = time.perf_counter() - started
    cpu = time.process_time() - processor
    states = result.stats.states or 0
    if per_state is None:  # the peak of the resident set over the run (this process runs nothing else)
        per_state = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before, 0) / max(states, 1)
    row: dict[str, object] = {
        "ranks": ranks,
        "engine": f"{engine}+c" if engine == "bfs-vec" and native == "1" else engine,
        "symmetry": symmetry,
        "states": states,
        "transitions": result.stats.transitions or 0,
        "seconds": seconds,
        "setup": setup,
        "cpu": cpu,
        "rate": states / seconds if seconds else 0.0,
        "bytes": per_state,
        "verdict": result.verdict.value if result.stopped is None else f"partial ({result.stopped})",
    }
    if gpu:
        import torch

        row["gpu_bytes"] = torch.cuda.max_memory_allocated() / max(states, 1)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 3])
    parser.add_argument(
        "--engines", nargs="+", default=["bfs", "bfs-vec"], choices=["bfs", "bfs-vec", "bfs-gpu", "swarm"]
    )
    parser.add_argument("--symmetry", choices=["off", "on", "both"], default="both")
    parser.add_argument("--device", default="cuda", help="bfs-gpu's device (cuda or cpu)")
    parser.add_argument("--compact", action="store_true", help="the vectorised engines keep fingerprints only")
    parser.add_argument("--bfs-max-states", type=int, default=2_500_000, help="cap for the reference engine")
    parser.add_argument("--max-states", type=int, default=None, help="cap for the vectorised engines")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per configuration")
    parser.add_argument(
        "--chunk", type=int, default=None, help="frontier states per kernel call (default: the backend's)"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="a dp-pause parameter (repeatable)"
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs of each configuration: the least seconds and CPU seconds are shown"
    )
    parser.add_argument(
        "--native", choices=["on", "off", "both"], default=None, help="bfs-vec with or without its C loops"
    )
    parser.add_argument(
        "--interleave",
        action="store_true",
        help="--symmetry both: run the --repeat runs as pairs (off, on alternating first); print each pair's ratio",
    )
    parser.add_argument(
        "--warm",
        action="store_true",
        help="--interleave: all pairs in one process, after one untimed check of each configuration",
    )
    parser.add_argument(
        "--control",
        action="store_true",
        help="--interleave: a second run without symmetry in each pair (triples, the order rotating), and "
        "the ratios of the two runs without symmetry printed beside the others: how far two identical runs differ",
    )
    parser.add_argument(
        "--whole",
        nargs="+",
        metavar="PROTOCOL/VARIANT/INSTANCE",
        help="whole-process seconds, cold and warm, and their phase profile, per engine and instance",
    )
    parser.add_argument("--profile-child", nargs=3, metavar=("ENGINE", "INSTANCE", "CACHE"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.profile_child:
        print(json.dumps(profile(*options.profile_child)))
        return
    if options.whole:
        whole_processes(options.whole, options.engines)
        return
    if options.control and (not options.interleave or options.symmetry != "both"):
        parser.error("--control adds a run to each pair: add --interleave (and --symmetry both)")
    if options.warm and not options.interleave:
        parser.error("--warm compares pairs: add --interleave (and --symmetry both)")
    print(f"python {platform.python_version()} on {platform.machine()} ({platform.node()})", flush=True)
    if "bfs-gpu" in options.engines and options.device.startswith("cuda"):
        import torch

        print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    print(
        f"{'ranks':>5} {'engine':>9} {'sym':>4} {'states':>12} {'transitions':>13} {'seconds':>8} {'cpu s':>8} "
        f"{'states/s':>11} {'B/state':>8}  verdict",
        flush=True,
    )
    symmetries = {"off": [False], "on": [True], "both": [False, True]}[options.symmetry]
    natives = {None: [None], "on": ["1"], "off": ["0"], "both": ["0", "1"]}[options.native]
    for ranks in options.ranks:
        kept = [symmetry for symmetry in symmetries if not (symmetry and ranks < 3)]  # nothing to reduce at 2
        for engine, native in [(engine, native) for engine in options.engines for native in natives]:
            if native is not None and engine != "bfs-vec" and native == "1":
                continue  # the C loops are bfs-vec's
            if options.interleave and len(kept) == 2:
                rows = interleaved(ranks, engine, native, options)
                for symmetry in kept:
                    print_row(ranks, symmetry, [row for row in rows if row["symmetry"] == symmetry])
                print_pairs(rows)
                continue
            for symmetry in kept:
                print_row(
                    ranks, symmetry, [run(ranks, engine, symmetry, options, native) for _ in range(options.repeat)]
                )


# ------------------------------------------------------------------------- whole processes (--whole)
PHASES = (
    "start-up",
    "imports",
    "model",
    "kernels",
    "compiled_kernels",
    "search",
    "counterexample",
    "engine other",
    "report",
    "other",
)


def profile(engine: str, label: str, cache: str) -> dict[str, float]:
    """The phases of one ``lockstep check`` done in this fresh process as the command does it (the
    CLI's modules, the model, the engine, the rendered report), with ``LOCKSTEP_CACHE`` at ``cache``."""
    os.environ["LOCKSTEP_CACHE"] = cache
    started = time.perf_counter()
    from rich.console import Console

    import lockstep.cli.check
    import lockstep.cli.root  # noqa: F401 - what `lockstep check` imports before it checks
    from lockstep.checkers import check
    from lockstep.checkers.engines import options_for
    from lockstep.cli.report import render
    from lockstep.models import get_protocol

    imported = time.perf_counter()
    protocol, variant, name = label.split("/")
    instance = get_protocol(protocol).instance(variant, name)
    machine = instance.machine()
    built = time.perf_counter()
    fields = {"seed": 1} if engine == "swarm" else {}
    result = check(machine, engine, options_for(engine, **fields))
    checked = time.perf_counter()
    render(Console(file=io.StringIO(), width=140), result, label=instance.label, expected=None, trace_file=None)
    rendered = time.perf_counter()
    phases = dict(result.stats.phases)
    return {
        "imports": imported - started,
        "model": built - imported,
        **phases,
        "engine other": checked - built - sum(phases.values()),
        "report": rendered - checked,
        "engine seconds": result.stats.seconds,
        "states": float(result.stats.states or result.stats.transitions or 0),
        "in process": rendered - started,
    }


def wall(command: list[str], cache: str, folder: str) -> float:
    """The wall-clock seconds of ``command`` run to its end in ``folder`` with ``LOCKSTEP_CACHE`` at ``cache``."""
    started = time.perf_counter()
    subprocess.run(
        command,
        cwd=folder,
        env={**os.environ, "LOCKSTEP_CACHE": cache},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    return time.perf_counter() - started


def filled(command: list[str], cache: str, folder: str, most: int = 4) -> int:
    """Run ``command`` until a run leaves the cache as it found it (the C library of ``bfs-vec``'s
    ``auto`` kernels is compiled in the background and lands a run or two after the first); how many ran."""
    for count in range(1, most + 1):
        before = sorted(str(path) for path in Path(cache).rglob("*"))
        wall(command, cache, folder)
        if sorted(str(path) for path in Path(cache).rglob("*")) == before:
            return count
    return most


def whole_processes(labels: list[str], engines: list[str]) -> None:
    """Per engine and instance: ``lockstep check``'s whole process cold and warm, and the phase profile."""
    print(f"python {platform.python_version()} on {platform.machine()} ({platform.node()}), {os.cpu_count()} cores")
    lockstep = str(Path(sys.executable).parent / "lockstep")
    with tempfile.TemporaryDirectory() as folder:
        start_up = wall([sys.executable, "-c", "pass"], "off", folder)
        version = wall([lockstep, "--version"], "off", folder)
        print(f"python -c pass: {start_up:.3f} s; lockstep --version: {version:.3f} s")
        print(
            f"{'engine':>8} {'instance':<34} {'engine s':>8} {'cold s':>7} {'warm s':>7} {'states/s cold':>14} "
            f"{'states/s warm':>14}  phases cold | warm (s)"
        )
        for label in labels:
            for engine in engines:
                protocol, variant, name = label.split("/")
                command = [lockstep, "check", protocol, "--variant", variant, "--instance", name, "--engine", engine]
                command += ["--seed", "1"] if engine == "swarm" else []
                cache, profiled = tempfile.mkdtemp(dir=folder), tempfile.mkdtemp(dir=folder)
                cold = wall(command, cache, folder)
                fills = filled(command, cache, folder)
                warm = wall(command, cache, folder)
                script = [sys.executable, __file__, "--profile-child", engine, label]
                phases = []
                for kind in ("cold", "warm"):
                    began = time.perf_counter()
                    where = profiled if kind == "cold" else cache
                    output = subprocess.run([*script, where], capture_output=True, text=True, check=True).stdout
                    measured = {**json.loads(output), "start-up": start_up}
                    accounted = sum(measured.get(phase, 0.0) for phase in PHASES if phase != "other")
                    measured["other"] = time.perf_counter() - began - accounted  # the profile process's own rest
                    phases.append(measured)
                states = phases[1]["states"]
                split = "; ".join(
                    f"{phase} {phases[0].get(phase, 0.0):.2f} | {phases[1].get(phase, 0.0):.2f}"
                    for phase in PHASES
                    if phase in phases[0] or phase in ("start-up", "other")
                )
                print(
                    f"{engine:>8} {label:<34} {phases[1]['engine seconds']:>8.2f} {cold:>7.2f} {warm:>7.2f} "
                    f"{states / cold:>14,.0f} {states / warm:>14,.0f}  {split} ({fills} untimed runs filled the cache)",
                    flush=True,
                )


def run(ranks: int, engine: str, symmetry: bool, options: argparse.Namespace, native: str | None) -> dict[str, object]:
    """One measurement in a fresh process: its own memory, its own start-up."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as isolated:
        return isolated.submit(measure, ranks, engine, symmetry, options, native).result()


def interleaved(ranks: int, engine: str, native: str | None, options: argparse.Namespace) -> list[dict[str, object]]:
    """``--repeat`` pairs of runs without and with symmetry, alternating which goes first, so that a
    drift of the machine's speed falls on both alike; with ``--warm`` all in one process."""
    if options.warm:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as isolated:
            return isolated.submit(warm_pairs, ranks, engine, native, options).result()
    rows = []
    for pair in range(options.repeat):
        for symmetry, control in group_order(pair, options.control):
            rows.append({**run(ranks, engine, symmetry, options, native), "control": control})
    return rows


def group_order(pair: int, control: bool) -> list[tuple[bool, bool]]:
    """The (symmetry, control) runs of pair number ``pair``: without and with symmetry, which goes
    first alternating; with ``control`` a second run without symmetry too, the order rotating."""
    if not control:
        return [(False, False), (True, False)] if pair % 2 == 0 else [(True, False), (False, False)]
    runs = [(False, False), (True, False), (False, True)]
    return runs[pair % 3 :] + runs[: pair % 3]


def warm_pairs(ranks: int, engine: str, native: str | None, options: argparse.Namespace) -> list[dict[str, object]]:
    """The pairs of ``interleaved`` in this one process, after one untimed check of each configuration."""
    for symmetry in (False, True):
        measure(ranks, engine, symmetry, options, native)
    return [
        {**measure(ranks, engine, symmetry, options, native), "control": control}
        for pair in range(options.repeat)
        for symmetry, control in group_order(pair, options.control)
    ]


def print_pairs(rows: list[dict[str, object]]) -> None:
    """Per pair (consecutive runs), seconds with symmetry over seconds without, and their median; for
    the vectorised engines the same ratios of the search alone (the seconds after the set-up). With
    ``--control`` also the second run without symmetry over the first: the spread of identical runs."""
    size = 3 if any(row["control"] for row in rows) else 2
    groups = [rows[start : start + size] for start in range(0, len(rows), size)]

    def pick(group: list[dict[str, object]], symmetry: bool, control: bool) -> dict[str, object]:
        return next(row for row in group if row["symmetry"] == symmetry and row["control"] == control)

    phases = [("seconds", lambda row: float(row["seconds"]))]  # type: ignore[arg-type]
    if all(row["setup"] is not None for row in rows):
        phases.append(("search seconds", lambda row: float(row["seconds"]) - float(row["setup"])))  # type: ignore[arg-type]
    comparisons = [("with symmetry / without", True, False)]
    if size == 3:
        comparisons.append(("of the second run without symmetry / the first (control)", False, True))
    for label, value in phases:
        for name, symmetry, control in comparisons:
            ratios = [value(pick(group, symmetry, control)) / value(pick(group, False, False)) for group in groups]
            faster = sum(ratio <= 1.0 for ratio in ratios)
            listed = ", ".join(f"{ratio:.2f}" for ratio in ratios)
            quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
            print(
                f"      pairs, {label} {name}: {listed}; median {statistics.median(ratios):.2f}, quartiles "
                f"{quartiles[0]:.2f}-{quartiles[2]:.2f}, not slower in {faster} of {len(ratios)}",
                flush=True,
            )


def print_row(ranks: int, symmetry: bool, rows: list[dict[str, object]]) -> None:
    """The least seconds and the least CPU seconds of a configuration's runs."""
    row = dict(min(rows, key=lambda candidate: float(candidate["seconds"])))  # type: ignore[arg-type]
    row["cpu"] = min(float(candidate["cpu"]) for candidate in rows)  # type: ignore[arg-type]
    extra = f"  gpu {row['gpu_bytes']:.0f} B/state" if "gpu_bytes" in row else ""
    if row["setup"] is not None:
        setup = float(row["setup"])  # type: ignore[arg-type]
        extra += f"  setup {setup:.2f} s, search {float(row['seconds']) - setup:.2f} s"  # type: ignore[arg-type]
    print(
        f"{ranks:>5} {row['engine']:>9} {'on' if symmetry else 'off':>4} {row['states']:>12,} "
        f"{row['transitions']:>13,} "
        f"{row['seconds']:>8.2f} {row['cpu']:>8.2f} {row['rate']:>11,.0f} {row['bytes']:>8.1f}  "
        f"{row['verdict']}{extra}",
        flush=True,
    )


if __name__ == "__main__":
    main()
