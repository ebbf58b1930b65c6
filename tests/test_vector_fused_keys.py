"""Tests for ``fused_launch.source_keys``: the Triton source keys kept beside a generated module.

A Triton kernel's source key is part of its compiled binary's key in Triton's cache, and Triton
computes it again in every process by parsing the kernel's source. ``bfs-gpu`` keeps the keys of a
generated module beside it and gives them to its kernels in later processes. These tests hold that
(a) the keys given are exactly the ones Triton computes for the same module in a fresh process, for
every kernel; (b) a missing, unreadable or mismatched keys file gives nothing (Triton computes the
keys itself); (c) a key Triton has already computed in a process is never replaced. Each part runs in
a fresh process (the kernels' objects live in their module), through the generated module of a small
symmetric model (so a ``canonical`` kernel too); no GPU is needed (keys come from the source alone).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lockstep.cache import Store

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[1]

PREAMBLE = """
import json, sys
from pathlib import Path
from lockstep.checkers.vector import fused_launch
from lockstep.checkers.vector.backend import NumpyBackend
from lockstep.checkers.vector.kernels import compile_kernels
from lockstep.spec.layout import Layout
from lockstep.spec.machine import Machine, Step
from lockstep.spec.sorts import IndexSort, MapSort, integers
from lockstep.spec.terms import all_of

Rank = IndexSort("Rank", 3)
machine = Machine("ranks")
counters = machine.variable("counters", MapSort(Rank, integers(0, 2)), (0, 0, 0))
machine.add_action(
    "inc", lambda rank: Step(counters[rank] < 2, {counters: counters.set(rank, counters[rank] + 1)}),
    actor="rank:{rank}", rank=Rank,
)
machine.sometimes("all_two", all_of(Rank, lambda rank: counters[rank] == 2))
machine.declare_symmetric(Rank)
machine = machine.finish()
layout = Layout(machine)
arrays = compile_kernels(machine, layout, NumpyBackend().namespace(), True)
groups = {}
for tuple_id, (action, _) in enumerate(arrays.tuples):
    groups.setdefault(action, []).append(tuple_id)
fused = fused_launch.written(arrays.source, layout.words, list(groups.values()))
module = fused_launch.load(fused)
path = Path(module.__file__)
names = [*fused.kernels, "predicates", *(["canonical"] if fused.canonical else [])]
kernels = {name: getattr(module, name) for name in names}
"""


def _child(body: str, cache: Path) -> dict[str, object]:
    environment = {**os.environ, "LOCKSTEP_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    environment.pop("TRITON_INTERPRET", None)
    completed = subprocess.run(
        [sys.executable, "-c", PREAMBLE + body],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=environment,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert isinstance(result, dict)
    return result


TRITON_KEYS = """
print(json.dumps({"keys": {name: kernel.cache_key for name, kernel in kernels.items()}, "path": str(path)}))
"""

SAVE = """
fused_launch.save_source_keys(path, kernels)
print(json.dumps({"saved": sorted(kernels)}))
"""

GIVEN = """
known = fused_launch.source_keys(path, kernels)
print(json.dumps({"known": known, "given": {name: kernel.hash for name, kernel in kernels.items()},
                  "keys": {name: kernel.cache_key for name, kernel in kernels.items()}}))
"""

COMPUTED_FIRST = """
first = {name: kernel.cache_key for name, kernel in kernels.items()}
known = fused_launch.source_keys(path, kernels)
after = {name: kernel.cache_key for name, kernel in kernels.items()}
print(json.dumps({"known": known, "first": first, "after": after}))
"""


def _keys_file(path: Path) -> Path:
    files = list(path.parent.glob(path.name.partition(".")[0] + ".*.keys-*.json"))  # signed: STEM.MAC.keys-...
    assert len(files) == 1, files
    return files[0]


def test_saved_keys_are_the_keys_triton_computes_in_a_fresh_process(tmp_path: Path) -> None:
    reference = _child(TRITON_KEYS, tmp_path)
    keys = reference["keys"]
    assert isinstance(keys, dict) and len(keys) >= 3 and "canonical" in keys  # symmetry: canonical too
    assert _child(SAVE, tmp_path)["saved"] == sorted(keys)
    given = _child(GIVEN, tmp_path)
    assert given["known"] is True
    assert given["given"] == keys  # set before Triton computed anything
    assert given["keys"] == keys


def test_no_keys_or_bad_keys_give_nothing(tmp_path: Path) -> None:
    reference = _child(TRITON_KEYS, tmp_path)
    keys = reference["keys"]
    assert isinstance(keys, dict)
    module = Path(str(reference["path"]))
    nothing = _child(GIVEN, tmp_path)
    assert nothing["known"] is False
    assert set(nothing["given"].values()) == {None}  # type: ignore[union-attr]
    assert nothing["keys"] == keys
    _child(SAVE, tmp_path)
    keys_file = _keys_file(module)
    for text in ("{not json", "[1, 2]", json.dumps({"enabled": "x"}), json.dumps({name: 1 for name in keys})):
        keys_file.write_text(text)
        refused = _child(GIVEN, tmp_path)
        assert refused["known"] is False, text
        assert set(refused["given"].values()) == {None}, text  # type: ignore[union-attr]
        assert refused["keys"] == keys, text


def test_a_key_triton_computed_is_not_replaced(tmp_path: Path) -> None:
    reference = _child(TRITON_KEYS, tmp_path)
    keys = reference["keys"]
    assert isinstance(keys, dict)
    _child(SAVE, tmp_path)
    keys_file = _keys_file(Path(str(reference["path"])))
    stem, _, signed_suffix = keys_file.name.partition(".")
    keys_file.unlink()  # signed with other keys: the entry verifies, the keys are wrong
    Store("fused", tmp_path).write(
        stem, "." + signed_suffix.partition(".")[2], json.dumps({name: "0" * 64 for name in keys}).encode()
    )
    kept = _child(COMPUTED_FIRST, tmp_path)
    assert kept["known"] is True
    assert kept["first"] == keys
    assert kept["after"] == keys
