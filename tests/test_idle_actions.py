"""Actions an instance's parameters turn off are expected, not warnings (issue 39).

The explicit engines record the actions no explored state enabled (``CheckResult.never_enabled``).
For a built-in protocol every action is enabled in some pinned instance (checked here), so one
never enabled in another instance is turned off by that instance's parameters or variant: the
report says so in a note (``check --json``: ``notes``), not a warning. An action a model file or an
overlay binds may be dead code, so it stays a warning.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lockstep.checkers import check
from lockstep.cli import main
from lockstep.cli.check import pinned_instances
from lockstep.models import PROTOCOLS

OVERLAY_WITH_A_DEAD_ACTION = '''"""computed-tokens post-fix with one more scheduler action whose guard is never true."""

from lockstep.models import get_protocol
from lockstep.spec.actions import action
from lockstep.spec.machine import Step
from lockstep.spec.overlay import Overlay

BASE = get_protocol("computed-tokens")
DEAD = Overlay(BASE, base="post-fix", name="dead")


@DEAD.add(like="update_from_output")
@action(actor="scheduler")
def never_fires(state):
    """A step nothing enables."""
    return Step(state.sizes.ranks < 0, {})


PROTOCOL = DEAD.protocol()
'''


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_every_action_of_a_builtin_protocol_is_enabled_in_some_pinned_instance(protocol: str) -> None:
    """What makes a never-enabled action of a built-in instance the instance's doing: some pinned
    instance of the same protocol enables it (instances are checked until every action has fired)."""
    instances = [instance for instance in pinned_instances() if instance.protocol.name == protocol]
    machines = [instance.machine() for instance in instances]
    waiting = {action.name for machine in machines for action in machine.actions}
    for machine in machines:
        if not waiting:
            break
        result = check(machine, "auto")
        waiting -= {action.name for action in machine.actions} - set(result.never_enabled)
    assert not waiting, f"{protocol}: no pinned instance enables {sorted(waiting)}"


def test_an_action_the_instances_parameters_turn_off_is_a_note(capsys: pytest.CaptureFixture[str]) -> None:
    """dp-pause's seed adds its one request before the coordinator's view can change, so the
    client's stats task never reads a publication there (test_dp_pause: coverage says so)."""
    main(["check", "dp-pause", "--engine", "bfs-vec", "--json", "--trace-out", "/dev/null"])
    document = json.loads(capsys.readouterr().out)
    assert not [warning for warning in document["warnings"] if "never enabled" in warning], document["warnings"]
    assert document["notes"] == [
        "not enabled in this instance (its parameters or variant turn it off): client_read_publication"
    ]
    main(["check", "dp-pause", "--engine", "bfs-vec"])
    captured = capsys.readouterr()
    output = captured.out + captured.err
    assert "warning:" not in output and "note: not enabled in this instance" in output


def test_a_search_that_stopped_claims_nothing_about_the_instance(capsys: pytest.CaptureFixture[str]) -> None:
    """Two levels of dp-pause see few actions: the note says the search did not cover the states,
    not that the instance's parameters turn the others off."""
    main(["check", "dp-pause", "--engine", "bfs-vec", "--max-depth", "2", "--json", "--trace-out", "/dev/null"])
    document = json.loads(capsys.readouterr().out)
    assert document["verdict"] in ("holds-within-bound", "inconclusive"), document["verdict"]
    assert len(document["notes"]) == 1 and document["notes"][0].startswith(
        "not enabled in the states explored (the search did not cover them all): "
    ), document["notes"]


def test_an_overlay_action_never_enabled_stays_a_warning(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    model = tmp_path / "dead.py"
    model.write_text(OVERLAY_WITH_A_DEAD_ACTION)
    main(["check", "--model-file", str(model), "--engine", "bfs", "--json"])
    document = json.loads(capsys.readouterr().out)
    assert "action never_fires was never enabled in the explored states" in document["warnings"]
    assert not any("never_fires" in note for note in document["notes"])
