"""Everything observable about the built-in models, as one JSON document: each pinned instance ×
variant's declared variables, actions and properties, and its check result (state and transition
counts, every property's verdict and the action sequence of its counterexample or witness).

Refactors of the models keep this snapshot identical (``tests/test_model_snapshot.py``). After a
change that is meant to alter a model, regenerate it and review the diff:

    python tests/model_snapshot.py > tests/fixtures/model_snapshot.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from lockstep.checkers import check
from lockstep.cli.check import pinned_instances
from lockstep.spec.protocol import Instance

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "model_snapshot.json"


def _structure(instance: Instance) -> dict[str, object]:
    machine = instance.machine()
    return {
        "variables": [
            [v.name, v.sort.name, repr(v.initial), v.description, v.monitor] for v in machine.variables.values()
        ],
        "actions": [
            [a.name, a.actor, [[p.name, p.sort.name] for p in a.parameters], len(a.guard), a.description, a.mirrors]
            for a in machine.actions
        ],
        "properties": [[p.name, p.kind.value, p.description] for p in machine.properties],
    }


def _result(instance: Instance) -> dict[str, object]:
    result = check(instance, engine="auto")  # bfs-vec where it applies: the same counts and paths as bfs, faster
    properties = {}
    for item in result.properties:
        path = None
        if item.path is not None:
            path = [
                [step.action, step.actor, {k: repr(v) for k, v in step.arguments.items()}] for step in item.path.steps
            ]
        properties[item.name] = {
            "verdict": item.verdict.value,
            "path": path,
            "loop_start": item.path.loop_start if item.path else None,
        }
    return {
        "verdict": result.verdict.value,
        "states": result.stats.states,
        "transitions": result.stats.transitions,
        "properties": properties,
    }


def snapshot_of(instance: Instance) -> dict[str, object]:
    return {"structure": _structure(instance), "result": _result(instance)}


def key_of(instance: Instance) -> str:
    return f"{instance.protocol.name}/{instance.variant}/{instance.name}"


def snapshot() -> dict[str, object]:
    return {key_of(instance): snapshot_of(instance) for instance in pinned_instances()}


if __name__ == "__main__":
    json.dump(snapshot(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
