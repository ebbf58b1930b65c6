"""Tests for lockstep.checkers.vector.fused: the Triton kernels of ``bfs-gpu`` agree with ``bfs-vec``.

The kernels run in Triton's interpreter on CPU tensors, the same kernel source a GPU compiles. The
interpreter must be chosen before Triton is imported, so each check runs in a fresh process
(``LOCKSTEP_FUSED=1 TRITON_INTERPRET=1``) that prints its results as JSON. (a) small pinned
instances of every protocol, pre- and post-fix: states, transitions, depth, verdicts and
counterexamples equal; (b) a chunk with a step out of a sort or a failing store goes back to the
array kernels and is reported alike; (c) generated code the reader does not know is refused by name.
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
from lockstep.checkers import check
from lockstep.checkers.vector.backend import TorchBackend
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
    search = VectorSearch(machine, TorchBackend("cpu"), engine="bfs-gpu")
    outcome = {"fused": search.fused is not None}
    for name, run in (("gpu", search.run), ("vec", lambda: check(machine, "bfs-vec"))):
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
    environment = {**os.environ, "LOCKSTEP_FUSED": "1", "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
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
