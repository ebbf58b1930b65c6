"""Tests for lockstep.checkers.vector: the compiled kernels agree with the reference engine.

(a) every pinned instance up to 500k states: ``bfs-vec`` and ``bfs-gpu --device cpu`` give exactly
the states, transitions, depth, verdicts and counterexample lengths of ``bfs``; (b) random
well-sorted guards, updates and invariants give the same search results, errors and out-of-sort
steps as the reference; (c) symmetry, ``--stop-at-first``, ``--compact`` and a fingerprint that
collides on purpose; (d) refusals and the automatic choice of engine.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from test_compiler import DECLARED, V, expressions, one_action_machine, states

from lockstep.checkers import CheckResult, Limits, check
from lockstep.checkers.vector.backend import NumpyBackend
from lockstep.checkers.vector.search import VectorSearch
from lockstep.cli.check import pinned_instances
from lockstep.models import get_protocol
from lockstep.spec.expressions import Constant, Operation, Operator
from lockstep.spec.machine import Machine, Step
from lockstep.spec.protocol import Instance, UsageError
from lockstep.spec.semantics import ModelError
from lockstep.spec.sorts import BOOL, IndexSort, MapSort, SequenceSort, Value, integers
from lockstep.spec.terms import Term, if_then_else, lift, map_of

LIMIT = 500_000  # bfs-vec and the torch kernels on the CPU, against bfs, on every pinned instance up to this


def summary(result: CheckResult) -> tuple[Any, ...]:
    stats = result.stats
    verdicts = tuple(
        (item.name, item.verdict.value, item.path.length if item.path else None) for item in result.properties
    )
    return stats.states, stats.transitions, stats.depth, result.verdict.value, result.stopped, verdicts


def paths(result: CheckResult) -> tuple[Any, ...]:
    """Every counterexample and witness, step by step, with the details: what only the same
    discovery order as the reference's gives."""
    return tuple(
        (
            item.name,
            item.detail,
            None
            if item.path is None
            else tuple((step.action, tuple(step.arguments.items())) for step in item.path.steps),
        )
        for item in result.properties
    )


def _checked_instances() -> list[Instance]:
    return [
        instance
        for instance in pinned_instances()
        if not any(prop.kind.value == "leads-to" for prop in instance.machine().properties)
    ]


INSTANCES = _checked_instances()
# the states each pinned instance has (tests/test_model_snapshot.py holds them to the model): an
# instance known to be larger than LIMIT is left to the slow tier at once, not after a 500k-state bfs
RECORDED = json.loads((Path(__file__).parent / "fixtures" / "model_snapshot.json").read_text(encoding="utf-8"))


def recorded_states(instance: Instance) -> int | None:
    entry = RECORDED.get(f"{instance.protocol.name}/{instance.variant}/{instance.name}")
    return None if entry is None else entry["result"].get("states")


@pytest.mark.parametrize("instance", INSTANCES, ids=[instance.label for instance in INSTANCES])
def test_vectorised_engines_equal_the_reference_on_every_pinned_instance(instance: Instance) -> None:
    recorded = recorded_states(instance)
    if recorded is not None and recorded > LIMIT:
        pytest.skip(f"{recorded:,} states, more than {LIMIT:,}: in the slow tier")
    reference = check(instance, "bfs", limits=Limits(max_states=LIMIT))
    if reference.stopped == "max-states":
        pytest.skip(f"more than {LIMIT:,} states: in the slow tier")
    vectorised = check(instance, "bfs-vec")
    assert summary(vectorised) == summary(reference)
    assert paths(vectorised) == paths(reference)  # the very same counterexamples, not only as short
    torch = check(instance, "bfs-gpu", device="cpu")
    assert summary(torch) == summary(reference) and paths(torch) == paths(reference)


@pytest.mark.slow
@pytest.mark.parametrize("instance", INSTANCES, ids=[instance.label for instance in INSTANCES])
def test_vectorised_engines_equal_the_reference_on_the_large_instances(instance: Instance) -> None:
    reference = check(instance, "bfs")
    assert summary(check(instance, "bfs-vec")) == summary(reference)
    assert summary(check(instance, "bfs-vec", compact=True)) == summary(reference)
    assert summary(check(instance, "bfs-gpu", device="cpu")) == summary(reference)


# --------------------------------------------------------------------------------- (b) random models
def outcome(machine: Machine, engine: str) -> tuple[str, object]:
    try:
        result = check(machine, engine, device="cpu" if engine == "bfs-gpu" else None)
        return ("result", (summary(result), paths(result)))
    except ModelError:
        return ("model error", None)


RANDOM_MODELS = (expressions("bool", 2), expressions(), expressions("bool", 2), states())


@settings(max_examples=150, deadline=None)
@given(*RANDOM_MODELS)
def test_random_guards_updates_and_invariants_search_alike(
    guard: tuple[str, Term], update: tuple[str, Term], invariant: tuple[str, Term], state: dict[str, Value]
) -> None:
    machine = one_action_machine(state, guard[1], update[0], update[1], invariant[1])
    assert outcome(machine, "bfs-vec") == outcome(machine, "bfs")


@settings(max_examples=25, deadline=None)
@given(*RANDOM_MODELS)
def test_random_models_search_alike_with_the_torch_kernels(
    guard: tuple[str, Term], update: tuple[str, Term], invariant: tuple[str, Term], state: dict[str, Value]
) -> None:
    machine = one_action_machine(state, guard[1], update[0], update[1], invariant[1])
    assert outcome(machine, "bfs-gpu") == outcome(machine, "bfs")


def test_a_step_out_of_its_sort_and_a_failing_store_are_reported_alike() -> None:
    base = {name: next(iter(sort.values())) for name, sort in DECLARED.values()}
    leaving = one_action_machine({**base, "n": 3}, lift(True), "int", V["int"] + 1, lift(True))
    for engine in ("bfs-vec", "bfs"):
        result = check(leaving, engine)
        in_bounds = result.property_result("in_bounds")
        assert in_bounds.verdict.value == "violated" and in_bounds.path is not None and in_bounds.path.length == 1
        assert "n" in in_bounds.detail
    failing = one_action_machine({**base, "rank": 2}, lift(True), "table", V["table"].set(V["rank"] + 1, 0), lift(True))
    for engine in ("bfs", "bfs-vec", "bfs-gpu"):  # the kernels hand a state where evaluate raises to bfs
        undefined = check(failing, engine, device="cpu" if engine == "bfs-gpu" else None).property_result(
            "well_defined"
        )
        assert undefined.verdict.value == "violated" and undefined.path is not None and undefined.path.length == 0
        assert re.search(r"action store.*key 3 outside a map of 3 keys", undefined.detail), undefined.detail


# ------------------------------------------------------------------------------------ (c) options
@pytest.mark.parametrize("variant", ["pre-fix", "post-fix"])
def test_symmetry_gives_the_reference_orbit_counts(variant: str) -> None:
    instance = get_protocol("dp-pause").instance(variant, overrides={"ranks": 3, "requests": 0})
    reference = check(instance, "bfs", symmetry=True)
    assert summary(check(instance, "bfs-vec", symmetry=True)) == summary(reference)
    assert summary(check(instance, "bfs-gpu", device="cpu", symmetry=True)) == summary(reference)
    plain = check(instance, "bfs-vec")
    assert (
        reference.stats.states is not None
        and plain.stats.states is not None
        and reference.stats.states < plain.stats.states
    )


def test_symmetric_paths_are_the_same_through_python_images_and_through_the_canonical_kernel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A path's representatives are taken image by image in Python up to ``TUPLE_PERMUTATIONS``
    permutations and by the numpy canonical kernel beyond: both give the same paths."""
    from lockstep.checkers.vector import paths

    instance = get_protocol("dp-pause").instance("pre-fix", "seed", overrides={"ranks": 3})

    def found(result: CheckResult) -> list[tuple[str, Any, Any]]:
        return [(item.name, item.verdict, item.path) for item in result.properties if item.path is not None]

    through_images = found(check(instance, "bfs-vec", symmetry=True))
    monkeypatch.setattr(paths, "TUPLE_PERMUTATIONS", 0)
    through_kernel = found(check(instance, "bfs-vec", symmetry=True))
    assert through_images == through_kernel
    assert any(verdict.value == "violated" and path.length > 5 for _, verdict, path in through_images)


def test_stop_at_first_stops_at_a_shortest_violation_in_every_explicit_engine() -> None:
    instance = get_protocol("dp-pause").instance("pre-fix", "seed")
    full = check(instance, "bfs")
    shortest = min(item.path.length for item in full.properties if item.verdict.value == "violated" and item.path)
    for engine in ("bfs", "bfs-vec"):
        result = check(instance, engine, stop_at_first=True)
        violated = [item for item in result.properties if item.verdict.value == "violated"]
        assert result.stopped == "first-violation" and result.exit_code == 1
        assert violated and all(item.path is not None and item.path.length == shortest for item in violated)
        assert (
            result.stats.states is not None
            and full.stats.states is not None
            and result.stats.states < full.stats.states
        )
    assert check(instance, "dfs", stop_at_first=True).stopped == "first-violation"


def test_stop_at_first_waits_for_a_violation_of_a_selected_property() -> None:
    # quiescent_during_rpc is violated in 17 steps, no_hang only in 20: selecting no_hang must not stop at 17
    instance = get_protocol("dp-pause").instance("pre-fix", "seed")
    for engine in ("bfs", "bfs-vec"):
        result = check(instance, engine, properties=["no_hang"], stop_at_first=True)
        (item,) = result.properties
        assert result.stopped == "first-violation" and item.verdict.value == "violated"
        assert item.path is not None and item.path.length == 20


def test_compact_mode_keeps_fingerprints_only_and_reports_the_omission_probability() -> None:
    instance = get_protocol("dp-pause").instance("post-fix", "seed")
    exact, compact = check(instance, "bfs-vec"), check(instance, "bfs-vec", compact=True)
    assert summary(compact) == summary(exact)
    assert any("fingerprints" in warning and "e-" in warning for warning in compact.warnings)
    search = VectorSearch(instance.machine(), NumpyBackend(), engine="bfs-vec", compact=True)
    search.run()
    assert search.bytes_per_state <= 16


@pytest.mark.parametrize("chunk", [None, 2], ids=["one-block", "blocks-of-16-states"])
def test_states_sharing_a_fingerprint_are_told_apart_in_the_exact_mode(chunk: int | None) -> None:
    class Colliding(NumpyBackend):
        def fingerprint(self, words: Any) -> Any:
            return words[0] % 7  # a deliberately weak fingerprint: many states share one

    backend = Colliding()
    if chunk is not None:
        backend.chunk = chunk  # the stored words then lie in many blocks of 8 chunks
    instance = get_protocol("async-placeholders").instance("pre-fix", "seed")
    # the array kernels: a cached C library (another run's) computes its own fingerprints
    search = VectorSearch(instance.machine(), backend, engine="bfs-vec", kernels="arrays")
    assert summary(search.run()) == summary(check(instance, "bfs"))
    assert search.visited.collisions
    assert len(search.visited.blocks) > 1 if chunk is not None else len(search.visited.blocks) == 1


# --------------------------------------------------------------------------- (d) refusals and choice
def test_leads_to_is_refused_with_a_pointer_to_bfs_and_auto_picks_bfs_for_it() -> None:
    instance = get_protocol("dp-pause").instance("post-fix", "fair-liveness")
    with pytest.raises(UsageError, match="engine bfs-vec cannot check .*leads-to.*bfs checks it"):
        check(instance, "bfs-vec")
    assert check(instance, "auto").engine == "bfs"
    safety = check(instance, "bfs-vec", properties=["quiescent_during_rpc"])
    assert [item.name for item in safety.properties] == ["quiescent_during_rpc"]


def test_auto_picks_the_vectorised_engine_and_options_of_other_engines_are_errors() -> None:
    instance = get_protocol("computed-tokens").instance("post-fix", "seed")
    assert check(instance, "auto").engine == "bfs-vec"
    assert check(instance, "auto", compiled=False).engine == "bfs"
    for options, message in (
        ({"engine": "bfs", "compact": True}, "compact applies"),
        ({"engine": "bfs-vec", "device": "cpu"}, "device applies"),
        ({"engine": "bfs-gpu", "device": "tpu"}, "device must be"),
        ({"engine": "bmc", "stop_at_first": True, "depth": 3}, "stop_at_first applies"),
        ({"engine": "dfs", "workers": 2}, "workers applies"),
    ):
        with pytest.raises(UsageError, match=message):
            check(instance, **options)


def test_a_model_with_sequences_of_nested_maps_runs_on_the_kernels() -> None:
    """A queue whose elements are maps keyed by an index sort, appended and popped by parameter."""
    Slot = IndexSort("Slot", 2)
    Value3 = integers(-1, 2)
    machine = Machine("nested")
    queue = machine.variable("queue", SequenceSort(MapSort(Slot, Value3), 2), ())
    total = machine.variable("total", integers(-4, 8), 0)

    @machine.action(actor="producer", slot=Slot, value=Value3)
    def push(slot: Term, value: Term) -> Step:
        cell = map_of(Slot, lambda key: if_then_else(key == slot, value, -1), Value3)
        return Step(queue.length() < 2, {queue: queue.append(cell)})

    @machine.action(actor="consumer", slot=Slot)
    def pop(slot: Term) -> Step:
        return Step(queue.length() > 0, {queue: queue.tail(), total: total + queue[0][slot]})

    machine.always("total_small", total < 6)
    finished = machine.finish()
    reference = check(finished, "bfs")
    assert reference.verdict.value == "violated"
    assert summary(check(finished, "bfs-vec")) == summary(reference)
    assert summary(check(finished, "bfs-gpu", device="cpu")) == summary(reference)


def test_a_construct_the_kernels_cannot_compile_is_named_and_auto_falls_back_to_bfs() -> None:
    machine = Machine("shapes")
    table = machine.variable("table", MapSort(IndexSort("Key", 2), integers(0, 1)), (0, 0))
    machine.add_action("flip", lambda: Step(table[0] == 0, {table: table.set(0, 1)}), actor="flipper")
    odd = Operation(
        Operator.EQUAL, (table.expression, Constant(0, integers(0, 1))), BOOL
    )  # a map compared with a number
    machine.always("odd", Term(odd))
    finished = machine.finish()
    with pytest.raises(UsageError, match=r"property odd: comparison of values of different shapes; use engine bfs"):
        check(finished, "bfs-vec")
    result = check(finished, "auto")
    assert result.engine == "bfs" and any("cannot compile" in warning for warning in result.warnings)
    assert summary(result) == summary(check(finished, "bfs"))


def test_running_out_of_memory_stops_the_search_cleanly() -> None:
    class Full(NumpyBackend):
        chunk = 256  # the visited set's blocks hold 8 chunks: 2048 states
        allocated = 0

        def empty_table(self, rows: int, columns: int) -> Any:
            self.allocated += rows
            if self.allocated > 2048:
                raise MemoryError("the machine is full")
            return super().empty_table(rows, columns)

    instance = get_protocol("dp-pause").instance("post-fix", "seed")
    result = VectorSearch(instance.machine(), Full(), engine="bfs-vec").run()
    assert result.stopped == "max-memory" and result.exit_code == 3
    assert result.stats.states is not None and 1024 <= result.stats.states < 48918
