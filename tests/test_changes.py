"""Tests for ``lockstep changes``: from a vLLM diff (or tree) to the model actions it touches and their checks.

The vLLM side is a skeleton written here (class and method names as in vLLM's ``v1/engine/core.py``,
bodies of our own): a change shaped like the #36594 fix (PR #39366: ``pause_scheduler`` asks a new
``_pause_complete``, ``resume_scheduler`` gains a barrier, ``_handle_client_request`` drops a stale
START_DP_WAVE, ``_has_global_unfinished_reqs`` votes on the pause, a test-only ``barrier``) touches
dp-pause's pause, resume, start-wave and forward actions; with the tree, names are exact and the new
``_pause_complete`` is "not modelled, called by pause_scheduler"; ``--run`` runs the pinned checks of the
release's variant; a directory is read as a git checkout; bad input is exit 2 naming it.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lockstep.changes import changed_functions, mirrored_names
from lockstep.models import get_protocol

LOCKSTEP = Path(sys.executable).parent / "lockstep"
BEFORE = """class EngineCore:
    def add_request(self, request):
        self.scheduler.add_request(request)

    def pause_scheduler(self, mode):
        self.scheduler.set_pause_state(mode)
        if not self.has_work():
            return None
        return self.future()


class EngineCoreProc(EngineCore):
    def _handle_client_request(self, request_type, request):
        return self.dispatch(request_type, request)


class DPEngineCoreProc(EngineCoreProc):
    def resume_scheduler(self):
        super().resume_scheduler()
        self.wake_others()

    def _handle_client_request(self, request_type, request):
        if request_type == "START_DP_WAVE":
            self.engines_running = True
        return super()._handle_client_request(request_type, request)

    def _has_global_unfinished_reqs(self, local_unfinished):
        return self.vote(local_unfinished)
"""
AFTER = """class EngineCore:
    def add_request(self, request):
        self.scheduler.add_request(request)

    def pause_scheduler(self, mode):
        self.scheduler.set_pause_state(mode)
        if self._pause_complete():
            return None
        return self.future()

    def _pause_complete(self):
        return not self.has_work()


class EngineCoreProc(EngineCore):
    def _handle_client_request(self, request_type, request):
        return self.dispatch(request_type, request)


class DPEngineCoreProc(EngineCoreProc):
    def _pause_complete(self):
        self.pending_pause = True
        return False

    def resume_scheduler(self):
        super().resume_scheduler()
        self.ignore_start_dp_wave = False
        self.barrier_vote()

    def barrier(self):
        self.group_barrier()

    def _handle_client_request(self, request_type, request):
        if request_type == "START_DP_WAVE":
            if self.ignore_start_dp_wave:
                return None
            self.engines_running = True
        return super()._handle_client_request(request_type, request)

    def _has_global_unfinished_reqs(self, local_unfinished):
        unfinished, consensus = self.vote(local_unfinished, self.pending_pause)
        if consensus:
            self.ignore_start_dp_wave = True
        return unfinished
"""
CORE = "vllm/v1/engine/core.py"


def _diff() -> str:
    lines = difflib.unified_diff(
        BEFORE.splitlines(keepends=True), AFTER.splitlines(keepends=True), f"a/{CORE}", f"b/{CORE}", n=3
    )
    return "".join(lines)


@pytest.fixture
def change(tmp_path: Path) -> tuple[Path, Path]:
    """(the diff file, the tree after the change)."""
    tree = tmp_path / "tree"
    (tree / "vllm/v1/engine").mkdir(parents=True)
    (tree / CORE).write_text(AFTER)
    diff = tmp_path / "pause-fix.diff"
    diff.write_text(_diff())
    return diff, tree


def _changes(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LOCKSTEP), "changes", *arguments], capture_output=True, text=True, timeout=600)


def test_mirrored_names_are_the_code_names_of_an_actions_mirrors() -> None:
    mirrors = (
        "_handle_client_request(UTILITY) → EngineCoreProc.pause_scheduler → DPEngineCoreProc._pause_complete (v0.33.0)"
    )
    assert mirrored_names(mirrors) == [
        "_handle_client_request",
        "EngineCoreProc.pause_scheduler",
        "DPEngineCoreProc._pause_complete",
    ]


def test_the_tree_gives_exact_names_and_the_hunks_a_fallback(change: tuple[Path, Path]) -> None:
    diff, tree = change
    exact = [item.name for item in changed_functions(diff.read_text(), str(diff), tree)]
    assert exact == [
        "EngineCore.pause_scheduler",
        "EngineCore._pause_complete",
        "DPEngineCoreProc._pause_complete",
        "DPEngineCoreProc.resume_scheduler",
        "DPEngineCoreProc.barrier",
        "DPEngineCoreProc._handle_client_request",
        "DPEngineCoreProc._has_global_unfinished_reqs",
    ]
    hunks = {item.name for item in changed_functions(diff.read_text(), str(diff))}
    assert {"pause_scheduler", "resume_scheduler", "_has_global_unfinished_reqs"} <= {
        name.rpartition(".")[2] for name in hunks
    }


def test_the_pause_fix_names_dp_pauses_actions_and_what_no_action_mirrors(change: tuple[Path, Path]) -> None:
    diff, tree = change
    completed = _changes(str(diff), "--release", "0.20.0", "--source", str(tree), "--json")
    assert completed.returncode == 0, completed.stderr
    plan = json.loads(completed.stdout)
    touched_protocols = {entry["protocol"]: entry for entry in plan["protocols"] if entry["touched"]}
    # the DP-wide unfinished-requests sync is dp-step-coordination's too (its engine_dp communicator)
    assert set(touched_protocols) == {"dp-pause", "dp-step-coordination"}, set(touched_protocols)
    assert {item["function"]["name"] for item in touched_protocols["dp-step-coordination"]["touched"]} == {
        "DPEngineCoreProc._has_global_unfinished_reqs"
    }
    dp_pause = touched_protocols["dp-pause"]
    assert dp_pause["variant"] == "pre-fix"
    touched = {(item["action"], item["function"]["name"]) for item in dp_pause["touched"]}
    assert {
        ("handle_pause", "EngineCore.pause_scheduler"),
        ("handle_resume", "DPEngineCoreProc.resume_scheduler"),
        ("handle_start_wave", "DPEngineCoreProc._handle_client_request"),
        ("finish_forward", "DPEngineCoreProc._has_global_unfinished_reqs"),
    } <= touched
    pinned = {check["instance"]: check["pinned"] for check in dp_pause["checks"]}
    assert pinned["seed"] == "violated" and len(pinned) == len(
        [spec for spec in get_protocol("dp-pause").instances if "pre-fix" in spec.expected]
    )
    not_modelled = {(item["function"]["name"], item["caller"]) for item in plan["not_modelled"]}
    assert ("EngineCore._pause_complete", "EngineCore.pause_scheduler") in not_modelled
    assert [item["name"] for item in plan["not_mirrored"]] == ["DPEngineCoreProc.barrier"]


def test_run_checks_the_touched_protocols_pinned_instances(change: tuple[Path, Path], tmp_path: Path) -> None:
    diff, tree = change
    completed = _changes(str(diff), "--release", "0.20.0", "--source", str(tree), "--run", "--json")
    assert completed.returncode == 0, completed.stderr
    results = json.loads(completed.stdout)["results"]
    assert results and all(item["as_pinned"] for item in results)
    assert {item["protocol"] for item in results} == {"dp-pause", "dp-step-coordination"}
    assert {item["instance"] for item in results if item["protocol"] == "dp-pause"} >= {"seed", "double-resume"}
    human = _changes(str(diff), "--release", "0.21.0", "--source", str(tree))
    assert "dp-pause (variant v0.23.0)" in human.stdout + human.stderr  # 0.21.0's variant


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_git_checkout_is_read_as_its_uncommitted_change(tmp_path: Path) -> None:
    tree = tmp_path / "vllm-checkout"
    (tree / "vllm/v1/engine").mkdir(parents=True)
    (tree / CORE).write_text(BEFORE)

    def git(*words: str) -> None:
        subprocess.run(["git", "-C", str(tree), *words], check=True, capture_output=True)  # noqa: S603, S607

    git("init", "-q")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "empty")
    git("add", ".")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "before")
    (tree / CORE).write_text(AFTER)
    completed = _changes(str(tree), "--release", "0.20.0", "--json")
    assert completed.returncode == 0, completed.stderr
    names = {item["name"] for item in json.loads(completed.stdout)["functions"]}
    assert "DPEngineCoreProc._has_global_unfinished_reqs" in names


def test_a_release_no_model_covers_is_said(change: tuple[Path, Path]) -> None:
    diff, tree = change
    completed = _changes(str(diff), "--release", "0.34.0", "--source", str(tree), "--json")
    (dp_pause,) = [entry for entry in json.loads(completed.stdout)["protocols"] if entry["protocol"] == "dp-pause"]
    assert dp_pause["variant"] is None and "0.34.0 is not modelled; newest: v0.33.0" in dp_pause["note"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--release", "zero"], "is not a vLLM release"),
        (["--release", "0.20.0", "--source", "/nonexistent-tree"], "nonexistent-tree"),
    ],
)
def test_bad_input_is_exit_2_naming_it(change: tuple[Path, Path], arguments: list[str], message: str) -> None:
    diff, _ = change
    completed = _changes(str(diff), *arguments)
    assert completed.returncode == 2 and message in completed.stderr and "Traceback" not in completed.stderr


def test_a_file_that_is_no_diff_and_closed_stdin_are_exit_2(tmp_path: Path) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("just some text\n")
    completed = _changes(str(other), "--release", "0.20.0")
    assert completed.returncode == 2 and "notes.txt: not a unified diff" in completed.stderr
    empty = subprocess.run(
        [str(LOCKSTEP), "changes", "-", "--release", "0.20.0"], stdin=subprocess.DEVNULL, capture_output=True, text=True
    )
    assert empty.returncode == 2 and "<stdin> holds no change" in empty.stderr
    closed = subprocess.run(
        [str(LOCKSTEP), "changes", "-", "--release", "0.20.0"],
        capture_output=True,
        text=True,
        preexec_fn=lambda: os.close(0),  # noqa: PLW1509 - the child's stdin closed, as `<&-` does
    )
    assert closed.returncode == 2 and "standard input is closed" in closed.stderr, closed.stderr


@pytest.mark.parametrize(
    ("protocol", "release", "variant"),
    [
        ("dp-pause", "0.20.0", "pre-fix"),  # the model's release table (bisected release by release)
        ("dp-pause", "0.21.0", "v0.23.0"),
        ("dp-pause", "0.24.0", "v0.25.0"),
        ("dp-pause", "0.32.0+cpu", "v0.30.0"),
        ("dp-pause", "v0.33.1", "v0.33.0"),
        ("dp-pause", "0.34.0", None),
        ("dp-pause", "0.19.0", None),
        ("pp-broadcast", "0.19.0", "pre-fix"),  # the variants' release texts
        ("pp-broadcast", "0.20.1", "post-fix"),
        ("pp-broadcast", "0.22.2", "v0.22.0"),
        ("pp-broadcast", "0.23.0", "v0.23.0"),  # its release_table (releases.BISECTION) from v0.19.0 to v0.33.0
        ("pp-broadcast", "0.32.0", "v0.31.0"),
        ("pp-broadcast", "0.34.0", None),
        ("cudagraph-pp", "0.18.0", "pre-fix"),
    ],
)
def test_each_release_maps_to_the_variant_that_models_it(protocol: str, release: str, variant: str | None) -> None:
    found = get_protocol(protocol).release_variant(release)
    assert (found.name if found is not None else None) == variant
