"""Refactors of the built-in models change nothing observable: every pinned instance × variant
declares the same variables, actions and properties and checks to the same state and transition
counts, verdicts and counterexample or witness action sequences as recorded in
``tests/fixtures/model_snapshot.json`` (regenerate with ``python tests/model_snapshot.py``)."""

from __future__ import annotations

import json

import pytest
from model_snapshot import FIXTURE, key_of, snapshot_of

from lockstep.cli.check import pinned_instances
from lockstep.models import PROTOCOLS

RECORDED: dict[str, object] = json.loads(FIXTURE.read_text())


def test_the_snapshot_covers_every_pinned_instance() -> None:
    assert sorted(RECORDED) == sorted(key_of(instance) for instance in pinned_instances())


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_each_model_is_as_recorded(protocol: str) -> None:
    for instance in pinned_instances([PROTOCOLS[protocol]]):
        # A JSON round trip so tuples and lists compare alike.
        assert json.loads(json.dumps(snapshot_of(instance))) == RECORDED[key_of(instance)], key_of(instance)
