"""The swarm engine: random walks through the array kernels, counterexamples replayed and shortened.

Every pinned pre-fix violation of an ``always`` property is found by a swarm checking that
property alone, and its shortened path is confirmed here again through the reference interpreter
(the state it ends in violates the property, or is a deadlock the property forbids). A swarm never
says "holds": where nothing is violated the verdict is inconclusive, exit code 3.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from lockstep.checkers import check
from lockstep.checkers.engines import OptionError, options_for
from lockstep.checkers.result import EXIT_CODES, Path, Verdict
from lockstep.checkers.vector.backend import NumpyBackend
from lockstep.checkers.vector.native import compiler
from lockstep.checkers.vector.shortening import Goal, Move, Replayer, shorten
from lockstep.checkers.vector.swarm import DistinctEstimate, Swarm
from lockstep.cli.check import pinned_instances
from lockstep.models import get_protocol
from lockstep.spec.machine import IN_BOUNDS, NO_DEADLOCK, WELL_DEFINED, Machine, PropertyKind
from lockstep.spec.semantics import InterpretedSystem
from tests.model_snapshot import FIXTURE

SNAPSHOT = json.loads(FIXTURE.read_text())


def _pre_fix_violations() -> list[tuple[str, str]]:
    """(instance label, property) of every pre-fix violation of an ``always`` property that the
    model snapshot pins."""
    found = []
    for instance in pinned_instances():
        if instance.variant != "pre-fix":
            continue
        pinned_entry = SNAPSHOT.get(f"{instance.protocol.name}/pre-fix/{instance.name}")
        if pinned_entry is None:  # a model newer than the snapshot: covered once the snapshot pins it
            continue
        pinned = pinned_entry["result"]["properties"]
        kinds = {prop.name: prop.kind for prop in instance.machine().finish().properties}
        found.extend(
            (f"{instance.protocol.name}/{instance.name}", name)
            for name, entry in pinned.items()
            if entry["verdict"] == "violated" and kinds[name] is PropertyKind.ALWAYS
        )
    return found


def _confirm(machine: Machine, name: str, path: Path) -> None:
    """``path`` is a run of ``machine`` (each step one ``evaluate`` enables) ending where ``name`` is violated."""
    system = InterpretedSystem(machine)
    position = next(i for i, prop in enumerate(machine.properties) if prop.name == name)
    state = system.initial()
    assert state == path.initial
    for index, step in enumerate(path.steps):
        targets = [
            transition.target
            for transition in system.transitions(state)
            if machine.actions[transition.action].name == step.action
        ]
        assert step.state in targets, f"step {index} ({step.action}) is not a step of the model"
        state = step.state
    if name == IN_BOUNDS:
        return  # the last step left a sort: checked above as a transition of the model
    if not system.transitions(state) and (name == NO_DEADLOCK or machine.properties[position].at_deadlock):
        fine = system.is_final(state) if name == NO_DEADLOCK else system.holds_at_deadlock(position, state)
        assert not fine
        return
    assert name != WELL_DEFINED
    assert not system.holds(position, state)


@pytest.mark.parametrize(("label", "name"), _pre_fix_violations())
def test_every_pre_fix_violation_is_found(label: str, name: str) -> None:
    protocol, instance_name = label.split("/")
    machine = get_protocol(protocol).instance("pre-fix", instance_name).machine()
    options = options_for("swarm", properties=[name], walks=1_000_000, depth=200, seed=7)
    result = check(machine, "swarm", options)
    outcome = result.property_result(name)
    assert outcome.verdict is Verdict.VIOLATED
    assert outcome.path is not None
    _confirm(result.machine, name, outcome.path)
    assert result.exit_code == 1


def test_a_swarm_never_says_holds() -> None:
    machine = get_protocol("dp-pause").instance("post-fix", "seed").machine()
    result = check(machine, "swarm", options_for("swarm", walks=300, depth=30, seed=3))
    assert result.verdict is Verdict.INCONCLUSIVE and EXIT_CODES[result.verdict] == 3
    assert result.stats.walks == 300
    assert result.stats.depth == 30  # some walk of the 300 drew the bound 30 and ran that deep (no deadlock there)
    safety = [item for item in result.properties if item.kind is PropertyKind.ALWAYS]
    assert safety and all(item.verdict is Verdict.INCONCLUSIVE for item in safety)
    assert "no violation found in 300 walks of depth at most 30 (seed 3)" in safety[0].detail
    assert result.stats.distinct_estimate is not None and result.stats.distinct_estimate > 30


def test_a_seed_reproduces_the_walks() -> None:
    machine = get_protocol("dp-pause").instance("pre-fix", "seed").machine()
    runs = [check(machine, "swarm", options_for("swarm", walks=5000, depth=60, seed=seed)) for seed in (11, 11, 12)]
    paths = [
        [step.action for step in run.counterexample.path.steps]
        for run in runs
        if run.counterexample and run.counterexample.path
    ]
    assert len(paths) == 3
    assert runs[0].stats.transitions == runs[1].stats.transitions
    assert paths[0] == paths[1]
    assert runs[0].stats.distinct_estimate == runs[1].stats.distinct_estimate


def test_shortening_removes_detours() -> None:
    """A random run to a violation, longer than the shortest, is shortened by delta debugging to a
    1-minimal run (dropping any one step breaks it) that still violates the property."""
    machine = get_protocol("dp-pause").instance("pre-fix", "seed").machine().finish()
    system = InterpretedSystem(machine)
    position = next(i for i, prop in enumerate(machine.properties) if prop.name == "quiescent_during_rpc")
    replayer = Replayer(system, Goal(position))
    chooser = random.Random(5)
    walk: list[Move] = []
    while True:  # random runs from the start until one violates the property
        state, walk = system.initial(), []
        while system.holds(position, state) and len(walk) < 200:
            enabled = [t for t in system.transitions(state) if t.out_of_bounds is None]
            if not enabled:
                break
            taken = chooser.choice(enabled)
            walk.append((taken.action, taken.arguments))
            state = taken.target
        if not system.holds(position, state):
            break
    shortest = check(machine, "bfs", properties=["quiescent_during_rpc"]).property_result("quiescent_during_rpc")
    assert shortest.path is not None and len(walk) > shortest.path.length
    shortened = shorten(replayer, walk)
    assert replayer.run(shortened) is not None
    assert len(shortened) < len(walk)
    for index in range(len(shortened)):  # 1-minimal
        assert replayer.run(shortened[:index] + shortened[index + 1 :]) is None


def test_the_distinct_estimate_is_close() -> None:
    """HyperLogLog over fingerprints of known distinct counts: within 5% (its error is ~0.8%)."""
    backend = NumpyBackend()
    for count in (100, 20_000, 300_000):
        sketch = DistinctEstimate()
        words = np.arange(count, dtype=np.int64)[None, :]
        fingerprints = backend.fingerprint(words)
        sketch.add(fingerprints)
        sketch.add(fingerprints[: count // 2])  # repeats change nothing
        assert abs(sketch.estimate() - count) <= 0.05 * count


def test_swarm_options_are_checked() -> None:
    with pytest.raises(OptionError, match="walks"):
        options_for("swarm", walks=0)
    with pytest.raises(OptionError, match="seed"):
        options_for("bfs", seed=3)


def test_the_seed_bug_at_eight_ranks() -> None:
    """dp-pause's seed bug at 8 ranks (``large``: sync_interval 32, hang_bound 64), beyond what an
    exhaustive search of this machine reaches, is found and its shortened path confirmed."""
    machine = get_protocol("dp-pause").instance("pre-fix", "large").machine()
    result = check(machine, "swarm", options_for("swarm", walks=200_000, depth=200, seed=2))
    violated = result.counterexample
    assert violated is not None and violated.path is not None
    _confirm(result.machine, violated.name, violated.path)


@pytest.mark.skipif(compiler() is None, reason="no C compiler: the swarm runs the array kernels alone")
@pytest.mark.parametrize("variant", ["pre-fix", "post-fix"])
def test_the_c_loops_take_the_same_walks(variant: str) -> None:
    """The C spelling of the kernels gives the same successors in the same order: a seed takes the
    same walks (same steps, depth, sketch and counterexample) with either."""
    machine = get_protocol("dp-pause").instance(variant, "seed").machine()
    runs = [Swarm(machine, walks=3000, depth=60, seed=5, kernels=kernels).run() for kernels in ("arrays", "c")]
    assert runs[1].stats.transitions == runs[0].stats.transitions
    assert (runs[1].stats.depth, runs[1].stats.distinct_estimate) == (
        runs[0].stats.depth,
        runs[0].stats.distinct_estimate,
    )
    assert [item.verdict for item in runs[1].properties] == [item.verdict for item in runs[0].properties]
    paths = [[step.state for step in item.path.steps] if item.path else None for run in runs for item in run.properties]
    assert paths[: len(paths) // 2] == paths[len(paths) // 2 :]
