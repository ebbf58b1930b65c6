"""Z3 engines on dp-pause post-fix ``seed``: seconds per BMC depth and the depth reached in a time
budget per backend (Z3, CaDiCaL) with and without the partial-order reduction, and k-induction
time per property. Run by hand (``python bench/symbolic.py``) or on the
device; the figures are for one run of one machine (these machines are shared and noisy).

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

import z3

from lockstep.checkers.symbolic import BoundedModelChecker, Induction
from lockstep.checkers.symbolic.pdr import STAGES, PropertyDirectedReachability
from lockstep.models import get_protocol


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--budget", type=float, default=60.0, help="seconds for BMC")
    parser.add_argument("--max-depth", type=int, default=100)
    parser.add_argument("--solvers", nargs="+", default=["z3", "cadical"], choices=["z3", "cadical"])
    parser.add_argument("--reductions", nargs="+", default=["off", "on"], choices=["off", "on"])
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
    print(f"python {platform.python_version()}, z3 {z3.get_version_string()}, {platform.machine()} ({platform.node()})")
    print(f"dp-pause post-fix seed, {arguments.ranks} ranks")
    runs = {}
    for solver in arguments.solvers:
        for reduction in arguments.reductions:
            checker = BoundedModelChecker(
                machine, arguments.max_depth, timeout=arguments.budget, solver=solver, reduction=reduction == "on"
            )
            result = checker.run()
            label = f"{solver}, reduction {reduction}"
            runs[label] = checker.depth_seconds
            within, elapsed = -1, checker.setup_seconds  # the last depth whose queries ended within the budget
            for depth, seconds in enumerate(checker.depth_seconds):
                elapsed += seconds
                if elapsed <= arguments.budget:
                    within = depth
            pairs = "" if checker.reduction is None else f", {checker.reduction.size} ordered pairs commute"
            print(
                f"BMC {label}: depth {within} fully checked within {arguments.budget:.0f} s (setup "
                f"{checker.setup_seconds:.1f} s{pairs}; stopped at depth {result.stats.depth} after "
                f"{result.stats.seconds:.1f} s)"
            )
    labels = list(runs)
    print("depth  " + "  ".join(f"{label:>22}" for label in labels))
    for depth in range(max(len(seconds) for seconds in runs.values())):
        cells = [f"{runs[label][depth]:>21.2f}s" if depth < len(runs[label]) else f"{'':>22}" for label in labels]
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
    if not arguments.no_bmc_depth:
        deep = BoundedModelChecker(machine, arguments.max_depth, timeout=arguments.budget).run()
        print(f"  BMC (Z3, bit-vectors): depth {deep.stats.depth} fully checked in {arguments.budget:.0f} s")
    induction = Induction(machine, max_k=arguments.k, solver_timeout=arguments.induction_timeout).run()
    by_induction = {item.name: item.verdict.value for item in induction.properties}
    print(
        f"  {'property':<30} {'pdr':<20} {'seconds':>8} {'prover':<9} {'ABC s':>6} {'atoms':>6}  {'how':<44} "
        f"k-induction (k<={arguments.k})"
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
            f"{induction}"
        )


if __name__ == "__main__":
    main()
