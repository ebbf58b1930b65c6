"""ABC's ``pdr`` per property of one model instance, in parallel, plain and then strengthened.

Stage 1: every safety property's circuit as it is (one ``yosys-abc`` process per property, up to
``--workers`` at once, ``--seconds`` each); each "proved" is read back and re-checked with Z3
(``invariants.verify``). Stage 2: the properties still open, under the lemmas stage 1 and Houdini
proved (``strengthening.Strengthening``: the bad output masked, or with ``--stutter`` the steps
gated too; ``--domain`` assumes the sort domains), each "proved" re-checked conjoined with every
lemma. Per property it prints the answer, seconds, the frame ``pdr`` reached and its clauses per
frame (``pdr -v``'s last line), and the circuit's size before and after ABC's ``&scorr``; for a
``sometimes`` property ``--bmc`` adds ABC's ``bmc3`` (the frames it cleared, or the witness's
length). Figures for one run of one machine; asserts nothing. Example (the README's, on the
16-CPU device machine): ``python bench/pdr_strengthening.py dp-pause --ranks 2 --seconds 480
--workers 16 --bmc``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from lockstep.checkers.symbolic import abc
from lockstep.checkers.symbolic.circuit import Circuit
from lockstep.checkers.symbolic.encoding import Encoding
from lockstep.checkers.symbolic.houdini import candidates, inductive_subset
from lockstep.checkers.symbolic.invariants import certificate, verify
from lockstep.checkers.symbolic.strengthening import Lemma, Strengthening
from lockstep.checkers.symbolic.values import bit_vectors
from lockstep.models import get_protocol
from lockstep.spec.machine import PropertyKind


def run_abc(program: str, aiger: bytes, script: str, seconds: float) -> tuple[str, float]:
    """ABC's whole output for ``read_aiger circuit.aig; <script>``, and the seconds it took."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="lockstep-bench-") as folder:
        (Path(folder) / "circuit.aig").write_bytes(aiger)
        try:
            completed = subprocess.run(
                [program, "-c", f"read_aiger circuit.aig; {script}"],
                cwd=folder,
                capture_output=True,
                text=True,
                timeout=seconds + 30,
                check=False,
            )
            output = completed.stdout + completed.stderr
        except subprocess.TimeoutExpired:
            output = "killed"
    return output, time.monotonic() - started


def sizes(program: str, aiger: bytes) -> str:
    output, _ = run_abc(program, aiger, "strash; scleanup; print_stats; &get; &scorr; &put; scleanup; print_stats", 120)
    counts = re.findall(r"lat\s*=\s*(\d+)\s+and\s*=\s*(\d+)", output)
    return " -> ".join(f"{latches} latches {gates} ands" for latches, gates in counts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("protocol")
    parser.add_argument("--ranks", type=int)
    parser.add_argument("--variant", default="post-fix")
    parser.add_argument("--seconds", type=float, default=60.0, help="ABC's pdr -T per property and stage")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--stutter", action="store_true", help="stage 2: states violating a lemma take no step")
    parser.add_argument("--domain", action="store_true", help="stage 2: assume the sort domains too")
    parser.add_argument("--bmc", action="store_true", help="also ABC's bmc3 on each sometimes property")
    arguments = parser.parse_args()
    program = abc.binary()
    if program is None:
        raise SystemExit("yosys-abc is not installed (pip install 'lockstep[proofs]')")
    instance = get_protocol(arguments.protocol).instance(arguments.variant, None, {}, arguments.ranks)
    machine = instance.machine()
    encoding = Encoding(machine)
    properties = [
        position for position, prop in enumerate(machine.properties) if prop.kind is not PropertyKind.LEADS_TO
    ]
    plain = Circuit(encoding)
    print(f"{instance.label}: {plain.latch_count} latches, {len(plain.aig.gates)} AND gates, {plain.aig.inputs} inputs")
    for position in properties:
        print(f"  {machine.properties[position].name}: {sizes(program, plain.aiger(position))} (&scorr)")
    proved: dict[int, tuple[abc.AbcAnswer, float]] = {}

    def attempt(circuit: Circuit, position: int) -> tuple[int, abc.AbcAnswer]:
        return position, abc.prove(program, circuit.aiger(position), arguments.seconds)

    print(f"stage 1: plain circuits, pdr -T {arguments.seconds:.0f}, {arguments.workers} at once")
    with ThreadPoolExecutor(arguments.workers) as pool:
        outcomes = list(pool.map(lambda position: attempt(plain, position), properties))
    for position, answer in outcomes:
        name = machine.properties[position].name
        note = ""
        if answer.answer == "safe":
            with bit_vectors(None):
                invariant = plain.invariant(answer.cubes, answer.columns)
                rejected = verify(encoding, position, invariant, timeout=120)
                note = (
                    rejected or f"re-checked, {certificate(encoding, invariant).size} atoms, {len(answer.cubes)} cubes"
                )
            if rejected is None:
                proved[position] = (answer, answer.seconds)
        if answer.answer == "unsafe" and machine.properties[position].kind is PropertyKind.SOMETIMES:
            note = "a witness (not replayed here)"
        print(f"  {name}: {answer.answer} in {answer.seconds:.1f} s; {note or answer.reason}")
    strengthening = Strengthening(encoding, domain=arguments.domain, stutter=arguments.stutter)
    with bit_vectors(None):
        survivors = inductive_subset(encoding, candidates(encoding, frozenset(properties)))
    with bit_vectors(encoding.integer_width()):
        bits = candidates(encoding, frozenset(properties))
    for label, formula in survivors.items():
        strengthening.assume_predicate(f"Houdini: {label}", formula, bits[label])
    for position, (answer, _) in proved.items():
        with bit_vectors(None):
            formula = plain.invariant(answer.cubes, answer.columns)
        blocked = (tuple(answer.cubes), tuple(answer.columns))
        strengthening.assume(Lemma(machine.properties[position].name, formula, blocked=blocked))
    open_ = [position for position in properties if position not in proved]
    circuit = strengthening.circuit()
    print(
        f"stage 2: {len(strengthening.lemmas)} lemmas (Houdini: {', '.join(survivors) or 'none'}; "
        f"proved: {', '.join(machine.properties[p].name for p in proved) or 'none'}), "
        f"{'stutter' if arguments.stutter else 'bad masked'}{', domain' if arguments.domain else ''}; "
        f"{len(circuit.aig.gates)} AND gates"
    )
    with ThreadPoolExecutor(arguments.workers) as pool:
        results = list(
            pool.map(lambda position: (position, strengthening.prove(program, position, arguments.seconds)), open_)
        )
    for position, outcome in results:
        name = machine.properties[position].name
        if outcome.invariant is not None:
            with bit_vectors(None):
                size = certificate(encoding, outcome.invariant).size
            note = f"re-checked with {len(strengthening.lemmas)} lemmas, {size} atoms"
        else:
            note = outcome.rejected or outcome.answer.reason
        print(f"  {name}: {outcome.answer.answer} in {outcome.seconds:.1f} s; {note}")
    if arguments.bmc:
        for position in properties:
            if machine.properties[position].kind is PropertyKind.SOMETIMES:
                script = f"bmc3 -T {int(arguments.seconds)}"
                output, seconds = run_abc(program, plain.aiger(position), script, arguments.seconds)
                last = [line for line in output.splitlines() if "asserted" in line or "frames" in line]
                print(f"  bmc3 {machine.properties[position].name}: {last[-1].strip() if last else output[-200:]}")
                print(f"    ({seconds:.1f} s)")


if __name__ == "__main__":
    main()
