"""Tests for lockstep.checkers.vector.native_sets: the C set loops decide what numpy's sorts decide.

Compiled on their own (the header and ``SETS_SOURCE``), they are held to numpy on random input
(Hypothesis): ``first_occurrences`` gives the index of each distinct key's (or, with words, each
distinct state's) first occurrence, also when different states share a key and across calls that
reuse and grow the table; ``locate`` gives ``searchsorted``'s hits; ``merge`` gives the stable sort
of the two runs, indices included. The searches that use them are compared with the array kernels
in ``test_vector_native.py``.
"""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockstep.checkers.vector import native
from lockstep.checkers.vector.native_sets import SETS_SOURCE, NativeSets

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")

keys = st.lists(st.integers(-(1 << 63), (1 << 63) - 1) | st.integers(-3, 3), max_size=300)


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> NativeSets:
    folder: Path = tmp_path_factory.mktemp("sets")
    source, library = folder / "sets.c", folder / "sets.so"
    source.write_text(native._HEADER + SETS_SOURCE)
    subprocess.run([str(native.compiler()), *native._FLAGS, "-o", str(library), str(source)], check=True)  # noqa: S603
    return NativeSets(ctypes.CDLL(str(library)))


def first_indices(rows: np.ndarray) -> list[int]:
    """numpy's answer: the first index of every distinct row, ascending."""
    _, first = np.unique(rows, axis=0, return_index=True)
    return sorted(first.tolist())


@settings(max_examples=100, deadline=None)
@given(keys)
def test_first_occurrences_of_keys(sets: NativeSets, values: list[int]) -> None:
    array = np.array(values, dtype=np.int64)
    assert sets.first_occurrences(array, None).tolist() == first_indices(array[:, None])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), max_size=200))
def test_first_occurrences_of_states_sharing_keys(sets: NativeSets, rows: list[tuple[int, int]]) -> None:
    states = np.array(rows, dtype=np.int64).reshape(-1, 2).T.copy()
    weak = (states[0] + states[1]) % 3 if len(rows) else np.zeros(0, dtype=np.int64)  # different states, one key
    found = sets.first_occurrences(weak, states).tolist()
    assert found == first_indices(states.T)
    assert sets.first_occurrences(weak, None).tolist() == first_indices(weak[:, None])  # keys alone: fewer


def test_first_occurrences_across_calls_and_a_grown_table(sets: NativeSets) -> None:
    generator = np.random.default_rng(7)
    for size in (10, 100_000, 50, 300_000, 5):
        values = generator.integers(0, size // 2 + 2, size=size)
        assert sets.first_occurrences(values, None).tolist() == first_indices(values[:, None])
    assert len(sets.table) >= 2 * 300_000


@settings(max_examples=100, deadline=None)
@given(keys, keys)
def test_locate_finds_what_searchsorted_finds(sets: NativeSets, run: list[int], looked_up: list[int]) -> None:
    sorted_run = np.sort(np.array(run, dtype=np.int64))
    queries = np.sort(np.array(looked_up, dtype=np.int64))
    positions = sets.locate(sorted_run, queries)
    starts = np.searchsorted(sorted_run, queries).tolist()
    ordered = sorted_run.tolist()
    expected = [at if at < len(ordered) and ordered[at] == key else -1 for at, key in zip(starts, queries.tolist())]
    assert positions.tolist() == expected


@settings(max_examples=100, deadline=None)
@given(keys, keys, st.booleans())
def test_merge_is_the_stable_sort_of_the_two_runs(
    sets: NativeSets, older: list[int], newer: list[int], indexed: bool
) -> None:
    first, second = np.sort(np.array(older, dtype=np.int64)), np.sort(np.array(newer, dtype=np.int64))
    first_indices_ = np.arange(len(first), dtype=np.int64) if indexed else None
    second_indices = np.arange(len(first), len(first) + len(second), dtype=np.int64) if indexed else None
    merged, indices = sets.merge(first, first_indices_, second, second_indices)
    both = np.concatenate([first, second])
    order = np.argsort(both, kind="stable")
    assert merged.tolist() == both[order].tolist()
    assert (indices is None) == (not indexed)
    if indices is not None:
        assert indices.tolist() == order.tolist()
