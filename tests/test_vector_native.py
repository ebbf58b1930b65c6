"""Tests for lockstep.checkers.vector.native: the C successor loop agrees with the array kernels.

(a) every pinned instance up to 200k states: ``bfs-vec`` with the native kernels compiled before
the first level (``kernels="c"``) gives exactly the states, transitions, depth, verdicts and
counterexamples of the array kernels alone (``kernels="arrays"``), with and without
``--compact``; (b) random guards, updates and invariants (negative operands of ``//`` and ``%``,
booleans and integers mixed) search alike; (c) the spelling of the operators whose C meaning
differs from numpy's; (d) no compiler, or a failing one, leaves the array kernels in charge, and
small searches never start the compiler.
"""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from test_compiler import one_action_machine
from test_vector import INSTANCES, RANDOM_MODELS, paths, recorded_states, summary

from lockstep.cache import Store
from lockstep.checkers import CheckResult
from lockstep.checkers.vector import native
from lockstep.checkers.vector.backend import NumpyBackend
from lockstep.checkers.vector.search import VectorSearch
from lockstep.models import get_protocol
from lockstep.spec.machine import Machine
from lockstep.spec.protocol import Instance
from lockstep.spec.semantics import ModelError
from lockstep.spec.sorts import Value
from lockstep.spec.terms import Term

LIMIT = 200_000

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKSTEP_CACHE", str(tmp_path_factory.getbasetemp() / "native-cache"))


def native_run(
    machine: Machine,
    monkeypatch: pytest.MonkeyPatch,
    compact: bool = False,
    symmetry: bool = False,
    sets_used: bool = False,
) -> CheckResult:
    """A ``bfs-vec`` search with the native kernels loaded before the first level (asserted);
    ``sets_used``: assert that the set loops (and, with symmetry, the C ``canonical``) were used."""
    search = VectorSearch(machine, NumpyBackend(), engine="bfs-vec", compact=compact, symmetry=symmetry, kernels="c")
    assert search.native is not None and search.native.function is not None
    result = search.run()
    if sets_used:
        assert search.visited.native is not None and search.visited.native is search.native.sets
        assert (search.native.canonical_function is not None) == symmetry
    return result


def arrays_run(
    machine: Machine | Instance, monkeypatch: pytest.MonkeyPatch, compact: bool = False, symmetry: bool = False
) -> CheckResult:
    if isinstance(machine, Instance):
        machine = machine.machine()
    # (the search itself, not check(): check hands a state where evaluate raises to bfs)
    search = VectorSearch(
        machine, NumpyBackend(), engine="bfs-vec", compact=compact, symmetry=symmetry, kernels="arrays"
    )
    assert search.native is None
    return search.run()


@pytest.mark.parametrize("instance", INSTANCES, ids=[instance.label for instance in INSTANCES])
def test_native_kernels_equal_the_array_kernels_on_every_pinned_instance(
    instance: Instance, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = recorded_states(instance)
    if recorded is None or recorded > LIMIT:
        pytest.skip(f"{recorded} states: not recorded, or more than {LIMIT:,}")
    for compact in (False, True):
        expected = arrays_run(instance, monkeypatch, compact)
        found = native_run(instance.machine(), monkeypatch, compact, sets_used=(recorded or 0) > 100)
        assert summary(found) == summary(expected)
        assert paths(found) == paths(expected)


@pytest.mark.parametrize("variant", ["pre-fix", "post-fix"])
def test_with_symmetry_the_native_loops_search_as_the_array_kernels(
    variant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    instance = get_protocol("dp-pause").instance(variant, overrides={"ranks": 3, "requests": 0})
    for compact in (False, True):
        expected = arrays_run(instance, monkeypatch, compact, symmetry=True)
        found = native_run(instance.machine(), monkeypatch, compact, symmetry=True, sets_used=True)
        assert summary(found) == summary(expected)
        assert paths(found) == paths(expected)


def outcome(machine: Machine, monkeypatch: pytest.MonkeyPatch, use_native: bool) -> tuple[str, object]:
    try:
        result = native_run(machine, monkeypatch) if use_native else arrays_run(machine, monkeypatch)
        return ("result", (summary(result), paths(result)))
    except ModelError:
        return ("model error", None)


@settings(max_examples=40, deadline=None)
@given(*RANDOM_MODELS)
def test_random_guards_updates_and_invariants_search_alike(
    guard: tuple[str, Term], update: tuple[str, Term], invariant: tuple[str, Term], state: dict[str, Value]
) -> None:
    machine = one_action_machine(state, guard[1], update[0], update[1], invariant[1])
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert outcome(machine, monkeypatch, True) == outcome(machine, monkeypatch, False)


def _evaluate(expression: str, **values: int) -> int:
    """Compile one spelled expression of the generated code and evaluate it in C."""
    import ast

    spelling = native._Spelling()
    for name in values:
        spelling.boolean[name] = name.startswith("flag")
    body = spelling.expression(ast.parse(expression, mode="eval").body)
    parameters = ", ".join(f"i64 {name}" for name in values) or "void"
    stem = Store("native").folder() / f"expression_{abs(hash((expression, tuple(values))))}"
    stem.with_suffix(".c").write_text(f"{native._HEADER}\ni64 value({parameters}) {{ return (i64)({body}); }}\n")
    command = [str(native.compiler()), *native._FLAGS, "-o", str(stem.with_suffix(".so")), str(stem.with_suffix(".c"))]
    subprocess.run(command, check=True)  # noqa: S603 - the test's own source
    function = ctypes.CDLL(str(stem.with_suffix(".so"))).value
    function.argtypes = [ctypes.c_int64] * len(values)
    function.restype = ctypes.c_int64
    return int(function(*values.values()))


@pytest.mark.parametrize(
    ("expression", "values"),
    [
        ("x // y", {"x": -7, "y": 2}),
        ("x % y", {"x": -7, "y": 2}),
        ("x % y", {"x": 7, "y": -2}),
        ("x // y", {"x": 7, "y": 0}),
        ("~x", {"x": 5}),
        ("~flag", {"flag": 1}),
        ("_where(flag, x, -x)", {"flag": 0, "x": 3}),
        ("x >> 63", {"x": -5}),
        ("x << 62", {"x": 3}),
        ("_minimum(x, _maximum(x, -2))", {"x": -9}),
    ],
)
def test_operators_keep_numpys_meaning(expression: str, values: dict[str, int]) -> None:
    arrays = {
        name: np.array([value], dtype=bool if name.startswith("flag") else np.int64) for name, value in values.items()
    }
    namespace = {"_where": np.where, "_minimum": np.minimum, "_maximum": np.maximum, **arrays}
    with np.errstate(all="ignore"):
        expected = int(np.asarray(eval(expression, namespace)).astype(np.int64)[0])  # noqa: S307 - the test's own literal
    assert _evaluate(expression, **values) == expected


def test_without_a_compiler_or_with_a_failing_one_the_array_kernels_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv("CC", raising=False)
    assert native.compiler() is None
    monkeypatch.setenv("CC", "false")  # a compiler that fails
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    instance = INSTANCES[0]
    search = VectorSearch(instance.machine(), NumpyBackend(), engine="bfs-vec", kernels="c")
    assert search.native is not None and search.native.failed and search.native.function is None
    assert summary(search.run()) == summary(arrays_run(instance, monkeypatch))


def test_a_small_search_never_starts_the_compiler(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LOCKSTEP_CACHE", str(tmp_path))  # nothing compiled before
    instance = INSTANCES[0]
    search = VectorSearch(instance.machine(), NumpyBackend(), engine="bfs-vec")
    result = search.run()
    assert result.stats.states is not None and result.stats.states < native.THRESHOLD
    assert search.native is not None and search.native.building is None and search.native.function is None


def test_a_compile_started_in_the_background_installs_its_library_for_the_next_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LOCKSTEP_CACHE", str(tmp_path))
    machine = next(instance for instance in INSTANCES if (recorded_states(instance) or 0) > 2 * native.THRESHOLD)
    search = VectorSearch(machine.machine(), NumpyBackend(), engine="bfs-vec")
    expected = summary(search.run())
    assert search.native is not None and search.native.building is not None  # started once past the threshold
    assert search.native.building.wait() == 0
    assert sorted(path.suffix for path in (tmp_path / "native").iterdir()) == [".so"]  # no source or partial file left
    again = VectorSearch(machine.machine(), NumpyBackend(), engine="bfs-vec")
    assert again.native is not None and again.native.function is not None  # loaded at once
    assert summary(again.run()) == expected
