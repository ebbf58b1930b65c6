"""Tests for lockstep.checkers.vector.source_cache: generated kernels read back instead of generated.

A second compilation of an unchanged machine reads the entry (the generator is not called) and
gives the same source, tuples and results; a changed machine, parameter or symmetry flag gets
another key; a corrupt entry is removed with a note and written again; ``LOCKSTEP_CACHE=off`` turns it off.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lockstep.cache import CacheEntryRejected
from lockstep.checkers import check
from lockstep.checkers.vector import kernels, source_cache
from lockstep.checkers.vector.backend import NumpyBackend
from lockstep.models import get_protocol
from lockstep.spec.layout import Layout
from lockstep.spec.machine import Machine


def machine(ranks: int = 2, variant: str = "post-fix") -> Machine:
    return get_protocol("dp-pause").instance(variant, "seed", overrides={"ranks": ranks}).machine().finish()


def compiled(built: Machine, symmetry: bool = False) -> kernels.Kernels:
    return kernels.compile_kernels(built, Layout(built), NumpyBackend().namespace(), symmetry)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKSTEP_CACHE", str(tmp_path))


class _Refused(kernels._Builder):
    def __init__(self, *arguments: object) -> None:
        raise AssertionError("the generator ran although the entry was there")


def test_an_unchanged_machine_is_read_back_not_generated(monkeypatch: pytest.MonkeyPatch) -> None:
    built = machine(3)
    first = compiled(built, symmetry=True)
    compiled(machine(2))  # what the check below reads back
    monkeypatch.setattr(kernels, "_Builder", _Refused)
    second = compiled(machine(3), symmetry=True)  # built again: its bound variables have other names
    assert (second.source, second.tuples, second.skipped, second.permutations) == (
        first.source,
        first.tuples,
        first.skipped,
        first.permutations,
    )
    result = check(
        get_protocol("dp-pause").instance("post-fix", "seed", overrides={"ranks": 2}), "bfs-vec", kernels="arrays"
    )
    assert result.stats.states == 48_918  # the pinned count, from the kernels read back


def test_a_changed_machine_parameter_or_symmetry_gets_another_key() -> None:
    keys = {
        source_cache.key(machine(2), False),
        source_cache.key(machine(3), False),
        source_cache.key(machine(2, "pre-fix"), False),
        source_cache.key(machine(3), True),
    }
    assert len(keys) == 4  # and (below) one machine built twice has one key
    assert source_cache.key(machine(2), False) == source_cache.key(machine(2), False)


def test_a_corrupt_entry_is_removed_with_a_note_and_written_again(tmp_path: Path) -> None:
    built = machine()
    expected = compiled(built).source
    name = source_cache.key(built, False)
    (entry,) = (tmp_path / "kernels").glob(f"{name}.*.json")  # signed: NAME.MAC.json
    entry.write_text('{"key": "truncated", "source": ')
    with pytest.warns(CacheEntryRejected, match="signature does not verify"):
        assert source_cache.read(name) is None
    assert not entry.exists()
    assert compiled(built).source == expected
    assert source_cache.read(name) is not None


def test_the_cache_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKSTEP_CACHE", "off")
    compiled(machine())
    assert not (tmp_path / "kernels").exists()  # nothing kept in the cache folder between runs
