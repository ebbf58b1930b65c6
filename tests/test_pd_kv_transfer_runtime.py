"""The reference runtime on pd-kv-transfer: a prefill and a decode engine in real rank processes.

D's reads pull P's KV block tensors over torch.distributed (gloo); the hand-off, the notifications
and the lease releases are messages between the processes. Post-fix runs complete and follow the
post-fix model; the default scenario kills D's EngineCore pre-fix (the v0.29.0 assert), and the
trace violates no_engine_assert; an untimely lease lets D read a block P freed, seen in the bytes;
a lost notification without a lease leaves P's block held for ever; a model counterexample is
reproduced for real, and test-runtime follows the model's goal paths. The block tags tell a
request's KV from another's and from a freed block; a pre-fix trace does not pass as post-fix.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from runtime_traces import counterexample, header_of, lockstep_cli, reproduce, validate_lines

from lockstep.impl.pd_kv_transfer.blocks import BlockPool, contents, holder
from lockstep.impl.pd_kv_transfer.reproduction import plan
from lockstep.models.pd_kv_transfer.model import PROTOCOL
from lockstep.models.pd_kv_transfer.state import NOBODY
from lockstep.testing import replay_traces

ROOT = Path(__file__).resolve().parent.parent
ACTIONS = {
    action.name
    for instance in PROTOCOL.instances
    for variant in PROTOCOL.variants
    for action in PROTOCOL.instance(variant.name, instance.name).machine().actions
}


def run(folder: Path, *arguments: str) -> tuple[int, dict[str, Any]]:
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "lockstep",
            "run",
            "pd-kv-transfer",
            "--hang-timeout",
            "30",
            "--json",
            "--trace-dir",
            str(folder),
            *arguments,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Traceback" not in completed.stderr, completed.stderr
    return completed.returncode, json.loads(completed.stdout)


def events_of(folder: Path) -> list[dict[str, Any]]:
    """Every event of both engines' trace files, each line checked against the JSON Schema."""
    found = []
    for path in sorted(folder.glob("*.jsonl")):
        assert {parameter.name for parameter in PROTOCOL.parameters} <= set(header_of(path)["parameters"])
        found.extend(validate_lines(path))
    assert all(event["action"] in ACTIONS for event in found)
    return found


def test_post_fix_transfers_complete_and_follow_the_model(tmp_path: Path) -> None:
    code, payload = run(tmp_path / "run", "--scenario", "seed")
    assert (code, payload["outcome"], payload["replay"]["verdict"]) == (0, "completed", "conforms")
    events = events_of(tmp_path / "run")
    reads = [event for event in events if event["action"] == "decode_read_done"]
    assert sorted(event["args"]["request"] for event in reads) == [0, 1] and all(event["args"]["ok"] for event in reads)
    actors = {event["actor"] for event in events}
    assert {"prefill-scheduler", "prefill-worker", "decode-scheduler", "decode-worker"} <= actors
    last_prefill = [event for event in events if event["actor"].startswith("prefill")][-1]
    assert last_prefill["observed"]["prefill.owner"] == [NOBODY]  # every P block freed at the end


def test_the_default_scenario_kills_ds_engine_core_pre_fix_and_completes_post_fix(tmp_path: Path) -> None:
    code, payload = run(tmp_path / "pre", "--variant", "pre-fix")
    assert code == 1 and payload["outcome"] == "runtime error"
    assert "EngineCoreDied" in payload["message"] and "assert req_id in self.requests" in payload["message"]
    assert (payload["replay"]["verdict"], payload["replay"]["property"]) == ("violated", "no_engine_assert")
    # the same trace is no post-fix run: the v0.30.0 worker never reports the failed notify-only read
    assert replay_traces(tmp_path / "pre", variant="post-fix", trust_header=True)["verdict"] == "diverges"
    code, payload = run(tmp_path / "post", "--variant", "post-fix")
    assert (code, payload["outcome"], payload["replay"]["verdict"]) == (0, "completed", "conforms")
    actions = [event["action"] for event in events_of(tmp_path / "post")]
    assert "decode_abort" in actions and "decode_notify_only" in actions and "prefill_lease_expires" in actions


def test_an_untimely_lease_lets_d_read_a_freed_block_seen_in_the_bytes(tmp_path: Path) -> None:
    code, payload = run(tmp_path / "run", "--scenario", "untimely-lease")
    assert code == 1 and "CorruptionDetected" in payload["message"] and "freed" in payload["message"]
    assert (payload["replay"]["verdict"], payload["replay"]["property"]) == ("violated", "no_foreign_read")


def test_a_lost_notification_without_a_lease_leaves_ps_block_held(tmp_path: Path) -> None:
    code, payload = run(tmp_path / "run", "--scenario", "lost-notification")
    assert code == 1 and "RunStuck" in payload["message"] and "P holds block 0 of request 0" in payload["message"]
    assert (payload["replay"]["verdict"], payload["replay"]["property"]) == ("violated", "no_block_leak")
    assert "lose_notification" in [event["action"] for event in events_of(tmp_path / "run")]


@pytest.mark.parametrize(
    "variant, instance, wanted",
    [("pre-fix", "abort-failed-cleanup", "no_engine_assert"), ("post-fix", "untimely-lease", "no_foreign_read")],
)
def test_a_model_counterexample_is_reproduced_in_its_order(
    tmp_path: Path, variant: str, instance: str, wanted: str
) -> None:
    path = counterexample(tmp_path, "pd-kv-transfer", "--variant", variant, "--instance", instance)
    steps = sum(1 for _ in path.open()) - 1
    code, result, stderr = reproduce(tmp_path, path, timeout=30)
    assert code == 1 and result["verdict"] == "reproduced", stderr
    assert result["replay"]["property"] == wanted
    assert result["replay"]["event"] == steps - 1  # the scripted order held: violated at the model's last step


def test_test_runtime_follows_every_goal_path_of_the_seed(tmp_path: Path) -> None:
    completed = lockstep_cli(
        "test-runtime",
        "pd-kv-transfer",
        "--variant",
        "post-fix",
        "--hang-timeout",
        "30",
        "--trace-dir",
        str(tmp_path / "runs"),
        "--json",
        cwd=tmp_path,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr
    summary = json.loads(completed.stdout)["summary"]
    assert summary["model_reached"] > 0
    assert summary["runtime_reached"] >= 0.9 * summary["model_reached"]


def test_block_tags_tell_own_kv_from_anothers_and_from_a_freed_block() -> None:
    pool = BlockPool(2, torch.device("cpu"))
    pool.allocate(0, 1)
    pool.write(0, 1)
    assert holder(pool.kv[0]) == (1, 1)
    pool.release(1)
    assert holder(pool.kv[0]) == (NOBODY, 1)
    pool.allocate(0, 0)
    pool.write(0, 0)
    assert holder(pool.kv[0]) == (0, 2)  # reused: another request, another generation
    torn = contents(0, 2, torch.device("cpu"))
    torn[3, 3] = contents(1, 2, torch.device("cpu"))[3, 3]
    with pytest.raises(ValueError, match="match no request"):
        holder(torn)
    with pytest.raises(RuntimeError, match="owns it"):
        pool.allocate(0, 1)


def test_a_plan_scripts_every_step_on_its_engine_in_order() -> None:
    header = {
        "instance": "abort",
        "parameters": {parameter.name: parameter.default for parameter in PROTOCOL.parameters} | {"aborts": 1},
    }
    events = [
        {"actor": "prefill-scheduler", "action": "prefill_schedule", "args": {"request": 0, "block": 0}},
        {"actor": "prefill-scheduler", "action": "prefill_finish", "args": {"request": 0}},
        {"actor": "decode-scheduler", "action": "decode_admit", "args": {"request": 0}},
        {"actor": "decode-worker", "action": "decode_notify_only", "args": {"request": 0, "ok": False}},
        {"actor": "network", "action": "lose_notification", "args": {"request": 0}},
    ]
    planned = plan(header, events)
    assert planned.extra["order"] == [0, 0, 1, 1, 0] and planned.scenario == "abort"
    assert [(choice.actor, choice.point, choice.chosen) for choice in planned.choices] == [
        ("rank:0", "prefill_aborts", "0"),
        ("rank:0", "action", "prefill_schedule request=0 block=0"),
        ("rank:0", "action", "prefill_finish request=0"),
        ("rank:1", "action", "decode_admit request=0"),
        ("rank:1", "action", "decode_notify_only request=0 ok=false"),
        ("rank:0", "action", "lose_notification request=0"),
    ]
    with pytest.raises(ValueError, match="no engine"):
        plan(header, [{"actor": "client", "action": "x", "args": {}}])
