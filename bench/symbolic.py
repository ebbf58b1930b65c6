"""Z3 engines on dp-pause post-fix ``seed``: seconds per BMC depth and the depth reached in a time
budget per backend (Z3, CaDiCaL) x reduction (off, por, symmetry, both), and k-induction time per
property. Run by hand (``python bench/symbolic.py``); the figures are for one run of one machine
(these machines are shared and noisy, so compare configurations within one run). ``--clock cpu``
counts the budget in the process's CPU seconds instead of wall-clock seconds (each run may then
take up to ``--wall-limit`` seconds of wall clock), which a loaded shared machine distorts less.
The partial-order reduction's pair analysis runs cold (a fresh cache folder per run) unless
``--warm-cache``: then it is read from the user's cache (``analysis_cache``) when there.
``--per-goal-from D`` asks each property's goal in a query of its own from depth D on and prints
the CPU seconds of every query from there (which property a depth's time goes to).
``--split-no-hang`` asks ``no_hang`` as one property per communicator (which counter's queries
cost), and ``--skip P ...`` leaves properties out of the BMC runs.

``--pdr MODEL [MODEL ...]`` instead runs the pdr engine on each model's post-fix seed (dp-pause at
``--ranks``): per property its verdict, seconds, which prover settled it (Houdini, ABC's pdr on the
circuit, Spacer), the seconds ABC took (its run and lockstep's re-check), the invariant's size
(atoms), next to the k-induction verdict (k = 1..``--k``) for comparison; and the circuit's size
and the BMC depth reached in ``--budget`` seconds. ``--stages abc`` or ``--stages spacer`` runs one
prover alone. Prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import z3

from lockstep.checkers.result import CheckResult, Statistics
from lockstep.checkers.symbolic import BoundedModelChecker, Induction
from lockstep.checkers.symbolic.analysis_cache import default_cache_directory
from lockstep.checkers.symbolic.bmc import REDUCTIONS
from lockstep.checkers.symbolic.pdr import STAGES, PropertyDirectedReachability
from lockstep.models import get_protocol
from lockstep.spec.definitions import Property
from lockstep.spec.expressions import Variable
from lockstep.spec.machine import NO_HANG, Machine, PropertyKind
from lockstep.spec.sorts import IntSort
from lockstep.spec.terms import Term


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--budget", type=float, default=60.0, help="seconds for BMC")
    parser.add_argument("--max-depth", type=int, default=100)
    parser.add_argument("--solvers", nargs="+", default=["z3", "cadical"], choices=["z3", "cadical"])
    parser.add_argument("--reductions", nargs="+", default=list(REDUCTIONS), choices=REDUCTIONS)
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall", help="what the budget counts")
    parser.add_argument("--wall-limit", type=float, default=None, help="--clock cpu: wall seconds per run (3x budget)")
    parser.add_argument(
        "--cadical-options",
        nargs="+",
        default=["unsat", "default"],
        choices=["unsat", "default"],
        help="CaDiCaL configurations to compare: its --unsat options (the default) and its own defaults",
    )
    parser.add_argument("--per-goal-from", type=int, default=None, help="one query per goal from this depth on")
    parser.add_argument("--warm-cache", action="store_true", help="read the pair analysis from the user's cache")
    parser.add_argument(
        "--split-no-hang",
        action="store_true",
        help="ask no_hang as one property per communicator (its monitor counter below the bound): which one costs",
    )
    parser.add_argument("--skip", nargs="+", default=[], metavar="PROPERTY", help="BMC: leave these properties out")
    parser.add_argument("--k", type=int, default=2, help="k of the induction runs (0: no induction run)")
    parser.add_argument("--induction-timeout", type=float, default=60.0, help="seconds per induction query")
    parser.add_argument("--pdr", nargs="+", metavar="MODEL", help="run pdr on these models' post-fix seeds instead")
    parser.add_argument("--property-timeout", type=float, default=60.0, help="pdr: seconds of the provers per property")
    parser.add_argument("--stages", choices=["portfolio", "abc", "spacer"], default="portfolio", help="pdr: provers")
    parser.add_argument("--no-bmc-depth", action="store_true", help="pdr: skip the BMC-depth-in-budget figure")
    arguments = parser.parse_args()
    if arguments.pdr:
        for name in arguments.pdr:
            bench_pdr(name, arguments)
        return
    machine = get_protocol("dp-pause").instance("post-fix", ranks=arguments.ranks).machine()
    if arguments.split_no_hang:
        split_no_hang(machine)
    print(f"python {platform.python_version()}, z3 {z3.get_version_string()}, {platform.machine()} ({platform.node()})")
    print(f"dp-pause post-fix seed, {arguments.ranks} ranks")
    print_sizes(machine)
    print(f"budget {arguments.budget:.0f} s of {arguments.clock} clock")
    runs = {}
    for solver in arguments.solvers:
        for options in arguments.cadical_options if solver == "cadical" else ["-"]:
            for reduction in arguments.reductions:
                label = f"{solver}{'' if options == '-' else '/' + options}, {reduction}"
                sat_options = {} if options == "default" else None  # None: the engine's default (unsat)
                runs[label] = bench_bmc(machine, solver, reduction, arguments, sat_options, label)
    labels = list(runs)
    print(f"{arguments.clock} seconds per depth (depth 0 includes the setup)")
    print("depth  " + "  ".join(f"{label:>24}" for label in labels))
    for depth in range(max(len(seconds) for seconds in runs.values())):
        cells = [f"{runs[label][depth]:>23.2f}s" if depth < len(runs[label]) else f"{'':>24}" for label in labels]
        print(f"{depth:>5}  " + "  ".join(cells))
    if arguments.k == 0:
        return
    print(f"k-induction, k = {arguments.k} ({arguments.induction_timeout:.0f} s per query):")
    induction = Induction(machine, k=arguments.k, solver_timeout=arguments.induction_timeout)
    proved = induction.run()
    print(f"  base case (BMC to {arguments.k - 1} steps): {induction.base_seconds:.2f} s")
    for item in proved.properties:
        if item.name in induction.step_seconds:
            print(
                f"  {item.name:<28} {item.verdict.value:<14} {induction.step_seconds[item.name]:7.2f} s  {item.detail}"
            )


def split_no_hang(machine: Machine) -> None:
    """Replace ``no_hang`` (every communicator's monitor counter below ``hang_bound``) by one ``always``
    property per communicator, ``no_hang[name]`` (and, as ``no_hang``'s, a deadlock with its op
    pending): the same states violate one of them as violate ``no_hang``, and each is asked as a
    goal of its own (a diagnostic; the built machine is changed in place, so this is for the bench
    alone)."""
    position = next(index for index, prop in enumerate(machine.properties) if prop.name == NO_HANG)
    bound = machine.hang_bound
    assert bound is not None
    parts = []
    for communicator in machine.communicators:
        name = getattr(communicator, "name", None)
        if name is None:
            continue
        counter = Term(Variable(f"monitor.{NO_HANG}.{name}", IntSort(-1, bound)))
        at_deadlock = (~communicator.any_pending()).expression  # as no_hang's: nothing pending at a deadlock
        predicate = (counter < bound).expression
        parts.append(Property(f"{NO_HANG}[{name}]", PropertyKind.ALWAYS, predicate, name, at_deadlock))
    machine.properties[position : position + 1] = parts


def print_sizes(machine: Machine) -> None:
    """What one frame of the CNF unrolling costs: the template's clauses and variables."""
    from lockstep.checkers.symbolic.cnf import CadicalBackend
    from lockstep.checkers.symbolic.encoding import Encoding
    from lockstep.checkers.symbolic.unrolling import Template
    from lockstep.checkers.symbolic.values import bit_vectors

    encoding = Encoding(machine)
    with bit_vectors(encoding.integer_width()):
        started = time.monotonic()
        template = Template(encoding)
        translated = time.monotonic()
        backend = CadicalBackend(template, [])
        blasted = time.monotonic()
    frame_bits = len({key for frame, key in backend.named if frame == 0})
    print(
        f"{len(encoding.grounded)} grounded transitions, {frame_bits} bits per frame; template translated in "
        f"{translated - started:.1f} s, bit-blasted in {blasted - translated:.1f} s"
    )
    for name in ("step", "facts"):
        part = getattr(backend, name)
        print(f"  per frame, {name}: {len(part.clauses)} clauses over {part.count} variables")
    goals = {machine.properties[position].name: len(part.clauses) for position, part in backend.goals.items()}
    print(f"  per depth, goal clauses: {goals}")


def bench_bmc(
    machine: Machine,
    solver: str,
    reduction: str,
    arguments: argparse.Namespace,
    sat_options: dict[str, int] | None,
    label: str,
) -> list[float]:
    """One BMC run; prints the depth fully checked within the budget; returns the setup's and each
    depth's seconds on the chosen clock."""
    cpu = arguments.clock == "cpu"
    clock = time.process_time if cpu else time.monotonic
    wall = (arguments.wall_limit or 3 * arguments.budget) if cpu else arguments.budget
    marks = [clock()]

    def progress(_: Statistics) -> None:
        marks.append(clock())

    names = [prop.name for prop in machine.properties]
    unknown = sorted(set(arguments.skip) - set(names))
    if unknown:
        raise SystemExit(f"--skip: no property {', '.join(unknown)}; properties: {', '.join(names)}")
    only = frozenset(position for position, name in enumerate(names) if name not in arguments.skip)
    with tempfile.TemporaryDirectory() as scratch:
        cache = default_cache_directory() if arguments.warm_cache else Path(scratch)
        checker = BoundedModelChecker(
            machine,
            arguments.max_depth,
            timeout=wall,
            solver=solver,
            reduction=reduction,
            progress=progress,
            cache_directory=cache,
            sat_options=sat_options,
            separate_from=arguments.per_goal_from,
            only=only,
        )
        result = checker.run()
    marks.append(clock())  # the last depth (its queries, not followed by an unrolling step)
    seconds = [later - earlier for earlier, later in zip(marks, marks[1:])]  # [0]: the setup and depth 0
    within, elapsed = -1, 0.0  # the last depth whose queries ended within the budget
    for depth, spent in enumerate(seconds):
        elapsed += spent
        if elapsed <= arguments.budget and depth <= result.stats.depth:
            within = depth
    setup = checker.setup_seconds
    notes = []
    if checker.reduction is not None:
        analysis = checker.reduction
        source = "cached" if analysis.cached else f"{analysis.pairs_checked} queries, {analysis.mapped} mapped"
        notes.append(f"{analysis.size} commuting ordered pairs ({source}, {analysis.seconds:.1f} s wall)")
    if checker.symmetry is not None:
        notes.append(f"symmetry: {len(checker.symmetry.permutations)} permutations")
    if checker.symmetry_skipped:
        notes.append(f"symmetry skipped: {checker.symmetry_skipped}")
    print(
        f"BMC {label}: depth {within} fully checked within {arguments.budget:.0f} s "
        f"{arguments.clock} (setup {setup:.1f} s wall; {'; '.join(notes) or 'no reduction'}; stopped at depth "
        f"{result.stats.depth} after {result.stats.seconds:.1f} s wall)"
    )
    steps = _steps_checked(checker, result)
    print(f"  steps checked per property when the run stopped: {', '.join(f'{n} {v}' for n, v in steps.items())}")
    if arguments.per_goal_from is not None:
        print(f"  CPU seconds per query from depth {arguments.per_goal_from} (queries under 0.1 s left out):")
        for query in checker.queries:
            if query.depth >= arguments.per_goal_from and query.cpu_seconds >= 0.1:
                asked = ", ".join(query.properties)
                print(f"    depth {query.depth:>3}  {asked:<40} {query.answer:<8} {query.cpu_seconds:7.2f} s")
    return seconds


def bench_pdr(name: str, arguments: argparse.Namespace) -> None:
    parameters = {"ranks": arguments.ranks} if name == "dp-pause" else {}
    machine = get_protocol(name).instance("post-fix", **parameters).machine()
    print(f"python {platform.python_version()}, z3 {z3.get_version_string()}, {platform.machine()} ({platform.node()})")
    ranks = f", {arguments.ranks} ranks" if parameters else ""
    print(f"{name} post-fix seed{ranks}: pdr, {arguments.property_timeout:.0f} s per property")
    stages = {"portfolio": STAGES, "abc": (("abc", 1.0),), "spacer": (("integers", 0.25), ("integers", 0.75))}
    prover = PropertyDirectedReachability(
        machine, property_timeout=arguments.property_timeout, stages=stages[arguments.stages]
    )
    result = prover.run()
    print(f"  provers: {arguments.stages}; yosys-abc: {prover.abc_program or 'not installed'}")
    if prover.circuit is not None:
        circuit = prover.circuit
        print(
            f"  circuit: {circuit.latch_count} latches, {len(circuit.aig.gates)} AND gates, "
            f"{circuit.aig.inputs} inputs, built in {prover.circuit_seconds:.1f} s"
        )
    print(f"  BMC phase to depth {prover.bmc_depth}; Houdini {prover.houdini_seconds:.1f} s; ", end="")
    print(f"total {result.stats.seconds:.1f} s")
    bmc_steps: dict[str, str] = {}  # per property: the steps BMC checked it for in the budget, or its violation
    if not arguments.no_bmc_depth:
        checker = BoundedModelChecker(machine, arguments.max_depth, timeout=arguments.budget)
        deep = checker.run()
        print(f"  BMC (Z3, bit-vectors): depth {deep.stats.depth} fully checked in {arguments.budget:.0f} s")
        bmc_steps = _steps_checked(checker, deep)
    induction = Induction(machine, max_k=arguments.k, solver_timeout=arguments.induction_timeout).run()
    by_induction = {item.name: item.verdict.value for item in induction.properties}
    print(
        f"  {'property':<30} {'pdr':<20} {'seconds':>8} {'prover':<9} {'ABC s':>6} {'atoms':>6}  {'how':<44} "
        f"{'k-induction (k<=' + str(arguments.k) + ')':<18} BMC steps"
    )
    for item in result.properties:
        attempt = prover.attempts.get(item.name)
        seconds = f"{attempt.seconds:8.1f}" if attempt is not None else f"{'-':>8}"
        atoms = (
            f"{attempt.certificate.size:6d}" if attempt is not None and attempt.certificate is not None else f"{'-':>6}"
        )
        how = item.detail if item.path is None else f"{item.detail or 'BMC'}: length {item.path.length}"
        induction = by_induction.get(item.name, "-")
        who = attempt.prover if attempt is not None and attempt.prover else "-"
        abc_seconds = f"{attempt.abc_seconds:6.1f}" if attempt is not None and attempt.abc_seconds else f"{'-':>6}"
        print(
            f"  {item.name:<30} {item.verdict.value:<20} {seconds} {who:<9} {abc_seconds} {atoms}  {how[:44]:<44} "
            f"{induction:<18} {bmc_steps.get(item.name, '-')}"
        )


def _steps_checked(checker: BoundedModelChecker, result: CheckResult) -> dict[str, str]:
    """Per property of a BMC run: the steps it was checked for, or where its violation (witness) is."""
    names = [prop.name for prop in checker.machine.properties]
    found = {}
    for item in result.properties:
        if item.path is not None:
            found[item.name] = (
                f"{'witness' if item.kind is PropertyKind.SOMETIMES else 'violated'} at {item.path.length}"
            )
        else:
            steps = checker.steps_checked(names.index(item.name))
            found[item.name] = "-" if steps is None else f"{steps}"
    return found


if __name__ == "__main__":
    main()
