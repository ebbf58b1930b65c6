"""docs/checking-a-change.md, executed: a vLLM patch from its diff to a counterexample; and overlays.

The diff and the overlay are the document's own blocks. ``lockstep changes`` names dp-pause's
``handle_pause`` for the diff; the release holds ``no_hang`` and the overlay violates it, with the
overlay's steps marked in the counterexample; ``replay --model-file`` replays that counterexample
against the overlay. Overlays on their own: a replacement or ``like`` that names no action is a
definition error listing the base's actions; an added action and a property take effect.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lockstep.checkers import Verdict, check
from lockstep.models import get_protocol
from lockstep.models.dp_pause import engine
from lockstep.spec.actions import action
from lockstep.spec.machine import Step
from lockstep.spec.overlay import Overlay
from lockstep.spec.terms import DefinitionError

DOC = Path(__file__).resolve().parent.parent / "docs" / "checking-a-change.md"
LOCKSTEP = Path(sys.executable).parent / "lockstep"


def _block(language: str) -> str:
    blocks: list[str] = re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), re.S)
    return blocks[0]


def _lockstep(folder: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LOCKSTEP), *arguments], cwd=folder, capture_output=True, text=True, timeout=600)


def test_the_documented_patch_goes_from_diff_to_counterexample(tmp_path: Path) -> None:
    (tmp_path / "no-kick-start.diff").write_text(_block("diff"))
    (tmp_path / "no_kick_start.py").write_text(_block("python"))
    touched = _lockstep(tmp_path, "changes", "no-kick-start.diff", "--release", "0.32.0", "--json")
    assert touched.returncode == 0, touched.stderr
    (dp_pause,) = [entry for entry in json.loads(touched.stdout)["protocols"] if entry["touched"]]
    assert dp_pause["variant"] == "v0.30.0"
    assert {item["action"] for item in dp_pause["touched"]} == {"handle_pause"}
    base = _lockstep(tmp_path, "check", "dp-pause", "--variant", "v0.30.0", "--property", "no_hang", "--json")
    assert base.returncode == 0 and json.loads(base.stdout)["verdict"] == "holds", base.stderr
    patched = _lockstep(tmp_path, "check", "--model-file", "no_kick_start.py", "--property", "no_hang")
    assert patched.returncode == 1, patched.stderr
    text = patched.stdout + patched.stderr
    assert "counterexample: no_hang (25 steps)" in text and "overlay no-kick-start:" in text
    trace = tmp_path / "lockstep-out" / "dp-pause-no-kick-start-seed.jsonl"
    replayed = _lockstep(tmp_path, "replay", "--model-file", "no_kick_start.py", str(trace), "--json")
    assert json.loads(replayed.stdout)["verdict"] == "violated", replayed.stderr
    refused = _lockstep(tmp_path, "replay", str(trace))  # the overlay's variant is no built-in one
    assert refused.returncode == 2 and "no variant 'no-kick-start'" in refused.stderr


def _quiet_pause(model, variant, rank):  # type: ignore[no-untyped-def]
    return engine.handle_pause(model, variant, rank)


def test_an_overlay_naming_no_action_of_its_base_lists_the_base_actions() -> None:
    overlay = Overlay(get_protocol("dp-pause"), base="post-fix", name="typo")
    overlay.replace(action(actor="rank:{rank}", name="handle_pauze")(_quiet_pause))
    with pytest.raises(
        DefinitionError, match="replaces 'handle_pauze', which dp-pause post-fix does not bind.*handle_pause"
    ):
        overlay.protocol().instance("typo").machine()
    other = Overlay(get_protocol("dp-pause"), base="post-fix", name="typo-like")
    other.add(like="handle_pauze")(action(actor="rank:{rank}", name="extra")(_quiet_pause))
    with pytest.raises(DefinitionError, match="adds 'extra' like 'handle_pauze'"):
        other.protocol().instance("typo-like").machine()
    with pytest.raises(DefinitionError, match="already has a variant"):
        Overlay(get_protocol("dp-pause"), base="post-fix", name="pre-fix")


def test_an_added_action_and_property_take_effect() -> None:
    """A second handler of the pause message, bound like handle_pause (same state, variant and rank
    sort), that takes the message and does nothing else: the client then waits for ever."""
    overlay = Overlay(get_protocol("dp-pause"), base="post-fix", name="drop-pause")

    @overlay.add(like="handle_pause")
    @action(actor="rank:{rank}", mirrors="a handler that drops the pause")
    def drop_pause(model, variant, rank):  # type: ignore[no-untyped-def]
        step = engine.handle_pause(model, variant, rank)
        return Step(step.guard, engine.consume(model, rank))

    @overlay.property
    def never_two_replies(machine, model):  # type: ignore[no-untyped-def]
        machine.always("replies_bounded", model.replies <= 2, "at most two replies are pending")

    instance = overlay.protocol().instance("drop-pause")
    machine = instance.machine()
    assert [a.name for a in machine.actions].index("drop_pause") == [a.name for a in machine.actions].index(
        "handle_pause"
    ) + 1
    assert machine.action_named("drop_pause").mirrors == "overlay drop-pause: a handler that drops the pause"
    result = check(instance, "bfs-vec")
    assert result.property_result("replies_bounded").verdict is Verdict.HOLDS
    assert result.property_result("no_deadlock").verdict is Verdict.VIOLATED
    assert (
        check(get_protocol("dp-pause").instance("post-fix"), "bfs-vec").property_result("no_deadlock").verdict
        is Verdict.HOLDS
    )
