"""Tests for lockstep.checkers.vector.fused: the Triton kernels of ``bfs-gpu`` agree with ``bfs-vec``.

The kernels run in Triton's interpreter on CPU tensors, the same kernel source a GPU compiles. The
interpreter must be chosen before Triton is imported, so each check runs in a fresh process
(``kernels="triton"``, ``TRITON_INTERPRET=1``) that prints its results as JSON. (a) small pinned
instances of every protocol, pre- and post-fix: states, transitions, depth, verdicts and
counterexamples equal; (b) a chunk with a step out of a sort or a failing store goes back to the
array kernels and is reported alike; (c) generated code the reader does not know is refused by name;
(d) with symmetry, the fused ``canonical`` kernel searches as the array kernels do (a bounded
dp-pause search at 3 ranks); (e) the fingerprint kernel gives the backends' fingerprints, and the
``--compact`` hash table (``hashed.py``) answers as a Python set does, through its growth and for a
fingerprint of 0; the compact searches of (a) run on it and agree with ``bfs-vec --compact``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lockstep.checkers.vector.fused import fused_source
from lockstep.checkers.vector.values import Unsupported

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[1]
SMALL = [
    ("pp-broadcast", "pre-fix", "seed"),
    ("async-placeholders", "post-fix", "seed"),
    ("computed-tokens", "pre-fix", "seed"),
    ("cudagraph-pp", "post-fix", "seed"),
]

# run in the child: every check through VectorSearch with the torch backend on the CPU, and with bfs-vec
CHILD = """
import json, sys
from lockstep.checkers import Limits, check
from lockstep.checkers.vector.backend import NumpyBackend, TorchBackend
from lockstep.checkers.vector.search import VectorSearch
from lockstep.models import get_protocol
from lockstep.spec.semantics import ModelError
sys.path.insert(0, "tests")
from test_compiler import DECLARED, V, one_action_machine
from lockstep.spec.terms import lift

def described(result):
    return [
        result.stats.states, result.stats.transitions, result.stats.depth, result.verdict.value,
        [[item.name, item.verdict.value, item.detail,
          None if item.path is None else [[step.action, sorted(step.arguments.items())] for step in item.path.steps]]
         for item in result.properties],
    ]

def both(machine):
    search = VectorSearch(machine, TorchBackend("cpu"), engine="bfs-gpu", kernels="triton")
    compact = VectorSearch(machine, TorchBackend("cpu"), engine="bfs-gpu", compact=True, kernels="triton")
    outcome = {"fused": search.fused is not None, "hashed": type(compact.visited).__name__}
    runs = (
        ("gpu", search.run),
        ("vec", lambda: VectorSearch(machine, NumpyBackend(), engine="bfs-vec").run()),
        ("compact", compact.run),
        ("vec compact", lambda: VectorSearch(machine, NumpyBackend(), engine="bfs-vec", compact=True).run()),
    )
    for name, run in runs:
        try:
            outcome[name] = described(run())
        except ModelError as error:
            outcome[name] = ["model error", str(error)]
    return outcome

results = {}
for label in sys.argv[1:]:
    if label == "out-of-sort":
        base = {name: next(iter(sort.values())) for name, sort in DECLARED.values()}
        results[label] = both(one_action_machine({**base, "n": 3}, lift(True), "int", V["int"] + 1, lift(True)))
    elif label == "symmetry":
        machine = get_protocol("dp-pause").instance("post-fix", "seed", {}, ranks=3).machine()
        limits = Limits(max_states=30_000)
        search = VectorSearch(
            machine, TorchBackend("cpu"), engine="bfs-gpu", symmetry=True, limits=limits, kernels="triton"
        )
        fused = search.canonical == search.fused.canonical
        probe = VectorSearch(machine, TorchBackend("cpu"), engine="bfs-gpu", symmetry=True, kernels="triton")
        successors = probe.fused.expand(probe._initial()).states
        images, keys = probe.fused.canonical_keys(successors)
        agree = [
            images.tolist() == probe.kernels.canonical(successors).tolist(),
            keys.tolist() == TorchBackend("cpu").fingerprint(images).tolist(),
            int(successors.shape[1]),
        ]
        gpu, vec = search.run(), check(machine, "bfs-vec", symmetry=True, limits=limits)
        results[label] = {"fused": fused, "gpu": described(gpu), "vec": described(vec), "keys": agree}
    elif label == "failing-store":
        base = {name: next(iter(sort.values())) for name, sort in DECLARED.values()}
        update = V["table"].set(V["rank"] + 1, 0)
        results[label] = both(one_action_machine({**base, "rank": 2}, lift(True), "table", update, lift(True)))
    else:
        protocol, variant, name = label.split("/")
        results[label] = both(get_protocol(protocol).instance(variant, name, {}).machine())
print(json.dumps(results))
"""


def fused_runs(*labels: str) -> dict[str, Any]:
    environment = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    completed = subprocess.run(
        [sys.executable, "-c", CHILD, *labels], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=600
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    results: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return results


def test_the_fused_kernels_search_exactly_as_the_array_kernels() -> None:
    labels = ["/".join(item) for item in SMALL]
    for label, outcome in fused_runs(*labels).items():
        assert outcome["fused"], f"{label}: the fused kernels apply to every built-in model"
        assert outcome["gpu"] == outcome["vec"], label
        assert outcome["hashed"] == "HashedFingerprints", label  # --compact keeps a hash table where Triton is
        assert outcome["compact"] == outcome["vec compact"], label
        assert outcome["compact"][:4] == outcome["vec"][:4], label


def test_symmetry_runs_in_the_fused_canonical_kernel_as_in_the_array_kernels() -> None:
    outcome = fused_runs("symmetry")["symmetry"]
    assert outcome["fused"], "with symmetry, bfs-gpu canonicalises in the fused kernel"
    representatives, fingerprints, successors = outcome["keys"]
    assert successors > 0 and representatives, "the fused kernel's representatives are the array kernels'"
    assert fingerprints, "the fused kernel's fingerprints are the backends' (so dedup agrees everywhere)"
    assert outcome["gpu"] == outcome["vec"]
    assert outcome["gpu"][0] >= 30_000


def test_a_step_out_of_its_sort_and_a_failing_store_go_back_to_the_array_kernels() -> None:
    results = fused_runs("out-of-sort", "failing-store")
    leaving = results["out-of-sort"]
    assert leaving["fused"] and leaving["gpu"] == leaving["vec"]
    in_bounds = next(item for item in leaving["gpu"][4] if item[0] == "in_bounds")
    assert in_bounds[1] == "violated" and len(in_bounds[3]) == 1
    failing = results["failing-store"]
    assert failing["gpu"][0] == "model error" and "key 3 outside a map of 3 keys" in failing["gpu"][1]
    assert failing["gpu"] == failing["vec"]


def test_generated_code_the_reader_does_not_know_is_refused_by_name() -> None:
    with pytest.raises(Unsupported, match="fused kernels: unexpected generated code"):
        fused_source("def expand(W):\n    print(W)\n", 1, [[0]])
    with pytest.raises(Unsupported, match="no expand function"):
        fused_source("def other(W):\n    return W\n", 1, [[0]])


HASHED = """
import json
import numpy as np
import torch
from lockstep.checkers.vector import hashed
from lockstep.checkers.vector.backend import NumpyBackend, TorchBackend

generator = torch.Generator().manual_seed(3)
words = torch.randint(0, 2**62, (5, 700), dtype=torch.int64, generator=generator)
words[:, 3] = 0
wide = torch.randint(0, 2**62, (3, 900), dtype=torch.int64, generator=generator)[:, 100:800]  # a row stride of 900
same = [
    hashed.fingerprint(torch, array).tolist()
    == NumpyBackend().fingerprint(np.ascontiguousarray(array.numpy())).tolist()
    == TorchBackend("cpu").fingerprint(array).tolist()
    for array in (words, wide)
]
table = hashed.HashedFingerprints(TorchBackend("cpu"), 1, torch, first_bits=4)
keys = torch.unique(torch.randint(-2**63, 2**63 - 1, (3000,), dtype=torch.int64, generator=generator))
keys = torch.cat([torch.tensor([0]), keys])
stored, answers = set(), []
for start in range(0, len(keys), 400):
    batch = keys[start : start + 400]
    probe = torch.cat([batch, keys[: start // 2]])  # new keys, and some stored ones
    absent = table.absent(probe, None).tolist()
    answers.append(absent == [int(key) not in stored for key in probe.tolist()])
    table.add(batch, None)
    stored.update(batch.tolist())
print(json.dumps({
    "fingerprints": same, "answers": answers, "size": table.size, "bits": table.bits,
    "held": int((table.table != 0).sum()), "zero found": not table.absent(torch.tensor([0]), None).item(),
}))
"""


def test_the_fingerprint_kernel_and_the_hash_table_answer_as_the_reference() -> None:
    environment = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    completed = subprocess.run(
        [sys.executable, "-c", HASHED], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=600
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result["fingerprints"] == [True, True]
    assert result["answers"] and all(result["answers"])
    assert result["size"] == result["held"] == 3001
    assert result["bits"] == 13  # grown from 2**4 slots, never more than half full
    assert result["zero found"]
